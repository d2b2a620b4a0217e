"""Prometheus: the gauges exported from the TrainJob cache, their series and names, and the
server's own metrics."""
