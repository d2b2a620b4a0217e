"""How a write turns a request body into the object to store (pure).

The rules are the API server's registry strategies: writes to the main resource never
change ``.status`` of a type with a status subresource, writes to ``/status`` change
nothing but ``.status``, system metadata is the server's, ``generation`` moves only
when something outside metadata and status changes.
"""

from __future__ import annotations

import copy
import datetime as dt
import uuid
from typing import Any

from ..common.resources import ResourceType

Obj = dict[str, Any]

# Metadata the server owns: a client's values for these are ignored on every write.
SYSTEM_METADATA = (
    "uid",
    "creationTimestamp",
    "resourceVersion",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
)


def rfc3339(now: float) -> str:
    """Seconds precision, UTC, ``Z``: the metav1.Time wire form."""
    return dt.datetime.fromtimestamp(int(now), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _has_status(resource: ResourceType) -> bool:
    return "status" in resource.subresources


def _tracks_generation(resource: ResourceType, obj: Obj) -> bool:
    return not resource.builtin or "spec" in obj


def _spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def initial_status(resource: ResourceType) -> Obj | None:
    """What ``.status`` a new object starts with (no kubelet: pods stay Pending)."""
    if resource.plural == "pods" and resource.builtin:
        return {"phase": "Pending", "qosClass": "BestEffort"}
    if resource.plural == "namespaces" and resource.builtin:
        return {"phase": "Active"}
    return None


def for_create(resource: ResourceType, body: Obj, namespace: str, now: float) -> Obj:
    """The object a POST stores: identity and timestamps set, status as the server says."""
    obj = copy.deepcopy(body)
    obj["apiVersion"] = resource.group_version
    obj["kind"] = resource.kind
    meta = obj.setdefault("metadata", {})
    for key in SYSTEM_METADATA:
        meta.pop(key, None)
    if resource.namespaced:
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = rfc3339(now)
    if _tracks_generation(resource, obj):
        meta["generation"] = 1
    if _has_status(resource) or resource.plural == "namespaces":
        obj.pop("status", None)
        status = initial_status(resource)
        if status is not None:
            obj["status"] = status
    if resource.plural == "pods" and resource.builtin:
        spec = obj.setdefault("spec", {})
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
    if resource.plural == "namespaces" and resource.builtin:
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
    return obj


def for_main_update(resource: ResourceType, old: Obj, new: Obj) -> Obj:
    """The object a write to the main resource stores, given the object it computed."""
    obj = copy.deepcopy(new)
    obj["apiVersion"] = resource.group_version
    obj["kind"] = resource.kind
    meta = obj.setdefault("metadata", {})
    old_meta = old["metadata"]
    for key in SYSTEM_METADATA:
        if key in old_meta:
            meta[key] = old_meta[key]
        else:
            meta.pop(key, None)
    meta["name"] = old_meta["name"]
    if "namespace" in old_meta:
        meta["namespace"] = old_meta["namespace"]
    if _has_status(resource):
        if "status" in old:
            obj["status"] = copy.deepcopy(old["status"])
        else:
            obj.pop("status", None)
    if "generation" in old_meta and _spec_part(obj) != _spec_part(old):
        meta["generation"] = old_meta["generation"] + 1
    return obj


def for_status_update(old: Obj, new: Obj) -> Obj:
    """The object a write to ``/status`` stores: the old object with the new status (and
    the new object's managedFields, if it has them)."""
    obj = copy.deepcopy({k: v for k, v in old.items() if k != "status"})
    if "managedFields" in new.get("metadata", {}):
        obj["metadata"]["managedFields"] = copy.deepcopy(new["metadata"]["managedFields"])
    if "status" in new:
        obj["status"] = copy.deepcopy(new["status"])
    return obj


def _without_bookkeeping(obj: Obj) -> Obj:
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k != "resourceVersion"}
    if "managedFields" in meta:
        meta["managedFields"] = [
            {k: v for k, v in entry.items() if k != "time"} for entry in meta["managedFields"]
        ]
    return {**obj, "metadata": meta}


def unchanged(old: Obj, new: Obj) -> bool:
    """A write that changes nothing but managedFields times is not stored (no new
    resourceVersion, no watch event), as on a real server."""
    return _without_bookkeeping(old) == _without_bookkeeping(new)


def random_suffix() -> str:
    """Five characters from the alphabet the API server uses for generateName."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    raw = uuid.uuid4().int
    return "".join(alphabet[(raw >> (5 * i)) % len(alphabet)] for i in range(5))


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value


def json_equal(a: Any, b: Any) -> bool:
    """Deep equality of JSON values where ``true`` is not ``1`` but ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)
