"""The fresh read path: each TrainJob's newest accepted update, served from memory as an
aggregated API through the Kubernetes API server."""
