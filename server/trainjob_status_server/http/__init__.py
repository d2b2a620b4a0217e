"""HTTP: the listeners and their connection limits, the serving port's routes, the status
endpoint, the pod injector's webhook, the secure-metrics guard, and the plumbing they
share (request handling, parser, content codings, the responses)."""
