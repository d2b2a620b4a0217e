"""The status path behind the endpoint: the payload rules, the coalescing rules and the
writer of accepted updates."""
