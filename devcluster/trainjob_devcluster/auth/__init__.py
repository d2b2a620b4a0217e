"""Who may do what: bearer tokens (static, service account, TokenRequest), TokenReview,
SubjectAccessReview and RBAC, and mutating admission webhooks."""
