"""What the server keeps of the objects it caches (pure): only the fields it reads.

A watch cache holding whole objects pays for every label, annotation, spec and
managedFields entry of every TrainJob and pod in the cluster (the heap of typical ones,
measured: docs/scaling.md); the server reads a handful of fields. Views keep those, in
the objects' own shape, so code reading a view reads it as it would the whole object.
Namespace and name strings are interned: the same TrainJob's key then costs one copy
across the caches, the writer and the exporter.

One departure from the objects' shape, for size: a TrainJob view's
``status.trainerStatus.metrics`` is a tuple of (name, value) pairs instead of a list of
{name, value} objects (a two-key dict is several times the size of a pair, for every
metric of every cached TrainJob), and ``status.conditions`` a tuple of (type,
status) pairs, without the reasons, messages and times. Entries that are not an object
with a string name and value (type and status) are left out: nothing could export them.
"""

from __future__ import annotations

import sys
from typing import Any

from .resources import Obj

# Read by the cache (identity and ordering) and by the pod checks (deletion).
_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


def _shared(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value


def _metadata(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return {}
    kept = {field: meta[field] for field in _METADATA if field in meta}
    for field in ("name", "namespace"):
        if field in kept:
            kept[field] = _shared(kept[field])
    return kept


def trainjob_view(obj: Obj) -> Obj:
    """A TrainJob as the server needs it: identity, resourceVersion, deletion,
    ``status.trainerStatus`` (what the writer orders updates by and the exporter exports)
    and the state the exporter exports: ``spec.runtimeRef`` kind and name,
    ``status.conditions`` type and status.
    """
    view: Obj = {"metadata": _metadata(obj)}
    spec = obj.get("spec")
    ref = spec.get("runtimeRef") if isinstance(spec, dict) else None
    if isinstance(ref, dict):
        kept = {field: _shared(ref[field]) for field in ("kind", "name") if field in ref}
        view["spec"] = {"runtimeRef": kept}
    status = obj.get("status")
    if not isinstance(status, dict):
        return view
    held: Obj = {}
    if isinstance(status.get("conditions"), list):
        conditions = condition_pairs(status["conditions"])
        if conditions:
            held["conditions"] = conditions
    if "trainerStatus" in status:
        trainer = status["trainerStatus"]
        if isinstance(trainer, dict) and isinstance(trainer.get("metrics"), list):
            trainer = dict(trainer)  # at the source's size; {**trainer} allocates twice the room
            trainer["metrics"] = metric_pairs(trainer["metrics"])
        held["trainerStatus"] = trainer
    if held:
        view["status"] = held
    return view


def written_view(obj: Obj) -> Obj:
    """What the writer remembers of its own writes until the watch shows them: what it
    orders the next update by (resourceVersion and ``lastUpdatedTime``), no metrics."""
    view: Obj = {"metadata": _metadata(obj)}
    status = obj.get("status")
    trainer = status.get("trainerStatus") if isinstance(status, dict) else None
    if isinstance(trainer, dict) and "lastUpdatedTime" in trainer:
        view["status"] = {"trainerStatus": {"lastUpdatedTime": trainer["lastUpdatedTime"]}}
    return view


def metric_pairs(items: list[Any]) -> tuple[tuple[str, str], ...]:
    """``trainerStatus.metrics`` as (name, value) pairs, in order, names interned (they
    repeat across TrainJobs: "loss", "accuracy"); entries without a string name and a
    string value are left out."""
    pairs = []
    for item in items:
        if isinstance(item, dict):
            name, value = item.get("name"), item.get("value")
            if isinstance(name, str) and isinstance(value, str):
                pairs.append((sys.intern(name), value))
    return tuple(pairs)


def condition_pairs(items: list[Any]) -> tuple[tuple[str, str], ...]:
    """``status.conditions`` as (type, status) pairs, in order, interned (a handful of
    types and three statuses, repeated on every TrainJob); entries without a string type
    and a string status are left out."""
    pairs = []
    for item in items:
        if isinstance(item, dict):
            kind, value = item.get("type"), item.get("status")
            if isinstance(kind, str) and isinstance(value, str):
                pairs.append((sys.intern(kind), sys.intern(value)))
    return tuple(pairs)


def keep_controller(obj: Obj, meta: dict[str, Any]) -> None:
    """Keeps, in ``meta``, the controller entry of ``obj``'s ownerReferences (kind, name,
    uid): the link of an owner chain."""
    refs = (obj.get("metadata") or {}).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            kept = {field: _shared(ref[field]) for field in ("kind", "name", "uid") if field in ref}
            meta["ownerReferences"] = [{**kept, "controller": True}]
            return


def owned_view(obj: Obj) -> Obj:
    """A Job or JobSet as the owner chain needs it: identity and its controller."""
    meta = _metadata(obj)
    keep_controller(obj, meta)
    return {"metadata": meta}


def pod_view(obj: Obj, labels: tuple[str, ...]) -> Obj:
    """A pod as the token checks need it: identity, deletion, its controller and the
    ``labels`` named."""
    meta = _metadata(obj)
    keep_controller(obj, meta)
    held = (obj.get("metadata") or {}).get("labels")
    if isinstance(held, dict):
        # Interned: the keys are the same for every pod, the values (TrainJob names)
        # shared by a TrainJob's pods and its own view.
        meta["labels"] = {sys.intern(key): _shared(held[key]) for key in labels if key in held}
    return {"metadata": meta}
