"""Kubernetes I/O: the API client (timeouts, request budget, typed errors) and the
list+watch cache the server reads TrainJobs and pods from."""

from .backoff import Backoff
from .cache import Listener, WatchCache
from .client import APPLY_PATCH, FIELD_MANAGER, KubeClient, ObjectList, WatchEvent
from .errors import KubeConfigError, KubeError, KubeUnavailable
from .ratelimit import TokenBucket
from .resources import PODS, TRAINJOBS, Key, Obj, Resource
from .store import CacheEvent

__all__ = [
    "APPLY_PATCH",
    "FIELD_MANAGER",
    "PODS",
    "TRAINJOBS",
    "Backoff",
    "CacheEvent",
    "Key",
    "KubeClient",
    "KubeConfigError",
    "KubeError",
    "KubeUnavailable",
    "Listener",
    "Obj",
    "ObjectList",
    "Resource",
    "TokenBucket",
    "WatchCache",
    "WatchEvent",
]
