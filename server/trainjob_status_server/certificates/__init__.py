"""The serving certificate: the bootstrap of its CA and pair, the decisions it makes, and
the TLS context that reloads them."""
