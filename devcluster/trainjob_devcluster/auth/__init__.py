"""Who may do what: bearer tokens (static, service account, TokenRequest), TokenReview,
SubjectAccessReview and RBAC, mutating admission webhooks, the cluster's certificates and
kubeconfig files."""
