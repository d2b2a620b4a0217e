"""What every layer of the development cluster shares: metav1.Status answers, the resource
types it serves, fault injection and Go's text renderings."""
