"""What reaches the training pods: the injector's plan for a pod and the CA ConfigMap
distributed to their namespaces."""
