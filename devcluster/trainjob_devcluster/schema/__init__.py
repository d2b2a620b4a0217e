"""Validation of custom resources against their CRD's OpenAPI schema: structure, formats,
value checks and x-kubernetes-validations (CEL) rules, with a real API server's messages."""
