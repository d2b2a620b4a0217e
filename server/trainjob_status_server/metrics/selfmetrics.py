"""The server's own metrics (prefix ``trainjob_status_``): names and labels are a contract
with dashboards and alerts, so they live here, once. Process metrics come with the default
registry.
"""

from __future__ import annotations

import platform

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

from .. import __version__
from .requeststats import RequestStats

# A Gauge set to 1 rather than an Info: the same gauge family in both exposition formats
# (OpenMetrics types an Info "info").
BUILD_INFO = Gauge(
    "trainjob_status_build_info",
    "1, labelled with the server's version and the Python version it runs on.",
    ["version", "python"],
)
BUILD_INFO.labels(__version__, platform.python_version()).set(1)

# trainjob_status_requests{code} and trainjob_status_request_duration_seconds: a Counter
# and a Histogram on the page, added to without locks (requeststats.py).
REQUEST_STATS = RequestStats(
    "trainjob_status_requests",
    "Status posts answered, by HTTP code.",
    "trainjob_status_request_duration_seconds",
    "Time from a post's arrival to its answer.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
REGISTRY.register(REQUEST_STATS)
AUTH_FAILURES = Counter(
    "trainjob_status_auth_failures", "Posts refused by authentication, by reason.", ["reason"]
)
RATE_LIMITED = Counter(
    "trainjob_status_rate_limited", "Posts refused by the per-service-account rate limit."
)
API_WRITES = Counter(
    "trainjob_status_api_writes",
    "Status writes to the Kubernetes API, by result.",
    ["result"],
)
API_WRITE_DURATION = Histogram(
    "trainjob_status_api_write_duration_seconds", "Duration of one status write to the API."
)
UPDATES_COALESCED = Counter(
    "trainjob_status_updates_coalesced", "Accepted updates replaced by a newer one before write."
)
DROP_REASONS = ("stale", "not_found", "invalid", "shutdown")
UPDATES_DROPPED = Counter(
    "trainjob_status_updates_dropped",
    "Accepted updates never written, by reason: stale (not newer than the stored status),"
    " not_found (the TrainJob is gone), invalid (the API server refused it), shutdown"
    " (still pending when the drain deadline passed).",
    ["reason"],
)
for _reason in DROP_REASONS:
    UPDATES_DROPPED.labels(_reason)  # every series exists from the start, at 0
PEER_DIRECTIONS = ("given", "taken", "kept")
PEER_UPDATES = Counter(
    "trainjob_status_peer_updates",
    "Accepted updates that went between replicas: given (to the replica that owns the"
    " TrainJob, or at shutdown to one that stays, and taken there), taken (from another"
    " replica, to write here) and kept (its owner could not take it: written here).",
    ["direction"],
)
for _direction in PEER_DIRECTIONS:
    PEER_UPDATES.labels(_direction)
PENDING_WRITES = Gauge("trainjob_status_pending_writes", "TrainJobs with an update to write.")
POD_BINDING_MODE = Gauge(
    "trainjob_status_pod_binding_mode",
    "1 for the way a post's pod is bound to its TrainJob now: ownership (the pod's Job,"
    " JobSet and TrainJob by uid), labels (the jobset-name label alone, where Jobs or"
    " JobSets have been refused to us for a sustained period), or undecided (not listed"
    " yet, or refused for less: a chain the caches do not show is answered 503); 0 for"
    " the others.",
    ["mode"],
)
WRITE_FRESHNESS = Histogram(
    "trainjob_status_write_freshness_seconds",
    "Time from a post's acceptance to its update being written.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
)
# By the class the writer served an update in (status/priority.py): final, progress,
# routine. Over budget the classes' freshness differs by design, so each has its own.
WRITE_CLASSES = ("final", "progress", "routine")
PENDING_BY_CLASS = Gauge(
    "trainjob_status_pending_writes_by_class",
    "TrainJobs waiting for their turn to be written, by the class of their update: final"
    " (reaches 100% or first after Complete/Failed/Suspended), progress (progress changed),"
    " routine (the rest).",
    ["class"],
)
WRITE_FRESHNESS_BY_CLASS = Histogram(
    "trainjob_status_write_freshness_by_class_seconds",
    "Time from a post's acceptance to its update being written, by the class it was"
    " written in (final, progress, routine).",
    ["class"],
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600),
)
for _class in WRITE_CLASSES:
    PENDING_BY_CLASS.labels(_class)
    WRITE_FRESHNESS_BY_CLASS.labels(_class)
WRITE_DEMAND = Gauge(
    "trainjob_status_write_demand_per_second",
    "Status writes the last minute's posts needed (one per TrainJob per"
    " --min-write-interval at most), per second.",
)
WRITE_BUDGET_EXCEEDED = Gauge(
    "trainjob_status_write_budget_exceeded",
    "1 while the last minute's write demand exceeded --kube-api-qps, else 0.",
)
ADVISED_QPS = Gauge(
    "trainjob_status_advised_kube_api_qps",
    "The --kube-api-qps that the last minute's demand needs for --target-freshness"
    " (docs/scaling.md's model); 0 while --target-freshness is unset.",
)
METRIC_VALUES_SKIPPED = Counter(
    "trainjob_status_metric_values_skipped", "Metric values not exported: not a finite number."
)
EXPORTED_SERIES_DROPPED = Counter(
    "trainjob_status_exported_series_dropped", "Series not exported: over --max-exported-series."
)
CACHE_OBJECTS = Gauge(
    "trainjob_status_cache_objects", "Objects held by a list+watch cache.", ["resource"]
)
INJECTIONS = Counter(
    "trainjob_status_injections", "Pods seen by the injector webhook, by result.", ["result"]
)
NAME_REFUSALS = ("characters", "limit")
METRIC_NAMES_REFUSED = Counter(
    "trainjob_status_metric_names_refused",
    "Metric names a TrainJob reported and trainjob_metric does not export, counted once per"
    " TrainJob while it keeps reporting them, by reason: characters (a control character,"
    " line separator or unpaired surrogate, which the formats cannot escape), limit (the"
    " TrainJob already exported --max-metric-names-per-trainjob distinct names).",
    ["reason"],
)
for _reason in NAME_REFUSALS:
    METRIC_NAMES_REFUSED.labels(_reason)
CONNECTIONS_REFUSED = Counter(
    "trainjob_status_connections_refused",
    "Connections closed on arrival, by listener (serving, metrics, probes) and reason:"
    " max_connections (no free slot, none fresh or idle to close) or max_connections_per_ip"
    " (the source address holds --max-connections-per-ip, none of them fresh or idle).",
    ["listener", "reason"],
)
CONNECTIONS_CLOSED = Counter(
    "trainjob_status_connections_closed",
    "Open connections the server closed, by listener and reason: header_timeout (the first"
    " request's headers not in within --first-request-timeout, a later one's within"
    " --read-timeout), write_timeout (answers unread for --write-timeout), fresh_evicted (no"
    " first request's headers yet, closed to make room for a new one), idle_evicted (idle"
    " keep-alive closed to make room for a new one).",
    ["listener", "reason"],
)
