"""What is built on the development cluster: its lifecycle (:class:`DevCluster`) with its
certificates and kubeconfig files, the standalone server and its command line, the demo,
test tooling and pytest fixtures, and the same handles on a real control plane."""
