"""HTTP: the listeners and their connection limits, the status endpoint, the pod
injector's webhook, the secure-metrics guard, and the plumbing they share (middleware,
parser, content codings, the answers)."""
