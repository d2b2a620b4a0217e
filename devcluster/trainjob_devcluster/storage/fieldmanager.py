"""managedFields bookkeeping: who set which field, for every write to an object.

Each managedFields entry is one manager's field set, identified by (manager, operation,
subresource) and, for ``Update`` entries, the apiVersion written. A write that is not an
apply (create, PUT, merge/JSON/strategic patch) is an ``Update``: the fields it added or
changed become the writer's and leave every other manager; removed fields leave every set.
Identity fields (name, namespace, uid, resourceVersion, ...) are never recorded.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..common.go_text import go_json, go_quote
from .fieldsets import FieldSet
from .typed import TypeRef, root_type
from .typedops import compare

__all__ = [
    "APPLY",
    "STRIPPED",
    "UPDATE",
    "Managed",
    "ManagerKey",
    "VersionedSet",
    "decode_managed_fields",
    "encode_managed_fields",
    "manager_from_user_agent",
    "record_update",
    "track_update",
    "without_managed_fields",
    "write_managed_fields",
]

APPLY = "Apply"
UPDATE = "Update"
MAX_MANAGER_BYTES = 128

# Paths no manager ever owns: set by the server, or naming the object rather than its state.
STRIPPED = FieldSet.of(
    ("f:apiVersion",),
    ("f:kind",),
    ("f:metadata",),
    *(
        ("f:metadata", f"f:{name}")
        for name in (
            "name",
            "namespace",
            "creationTimestamp",
            "selfLink",
            "uid",
            "clusterName",
            "generation",
            "managedFields",
            "resourceVersion",
        )
    ),
)


def manager_from_user_agent(user_agent: str | None) -> str:
    """The default manager name: the User-Agent up to its first ``/``, printable runes
    only, cut at 128 bytes (``Python-urllib/3.11`` -> ``Python-urllib``)."""
    prefix = (user_agent or "").split("/", 1)[0]
    out: list[str] = []
    size = 0
    for ch in prefix:
        if not ch.isprintable():
            continue
        size += len(ch.encode())
        if size > MAX_MANAGER_BYTES:
            break
        out.append(ch)
    return "".join(out)


class ManagerKey(NamedTuple):
    """Who an entry belongs to. Appliers are one entry whatever apiVersion they used."""

    manager: str
    operation: str
    api_version: str = ""
    subresource: str = ""

    def identifier(self) -> str:
        """The JSON a real server keys entries by (and sorts conflicting managers by)."""
        parts = [f'"manager":{go_json(self.manager)}', f'"operation":{go_json(self.operation)}']
        if self.api_version:
            parts.append(f'"apiVersion":{go_json(self.api_version)}')
        if self.subresource:
            parts.append(f'"subresource":{go_json(self.subresource)}')
        return "{" + ",".join(parts) + "}"

    def describe(self) -> str:
        """As conflict messages name a manager: ``"x" with subresource "status"``."""
        text = go_quote(self.manager)
        if self.subresource:
            text += f" with subresource {go_quote(self.subresource)}"
        if self.operation == UPDATE:
            text += f" using {self.api_version}"
        return text


@dataclass
class VersionedSet:
    fields: FieldSet
    api_version: str
    applied: bool


@dataclass
class Managed:
    sets: dict[ManagerKey, VersionedSet] = field(default_factory=dict)
    times: dict[ManagerKey, str] = field(default_factory=dict)

    def drop(self, key: ManagerKey) -> None:
        self.sets.pop(key, None)
        self.times.pop(key, None)


def _decode_entry(i: int, entry: Any) -> tuple[ManagerKey, FieldSet, str, str | None]:
    if not isinstance(entry, dict):
        raise ValueError(f"managed fields entry {i} is not an object")
    operation = entry.get("operation")
    if operation not in (APPLY, UPDATE):
        raise ValueError("operation must be `Apply` or `Update`")
    api_version = entry.get("apiVersion")
    if not isinstance(api_version, str) or not api_version:
        raise ValueError("apiVersion must not be empty")
    if entry.get("fieldsType") != "FieldsV1":
        raise ValueError(f"invalid fieldsType in managed fields entry {i}")
    fields = FieldSet.from_fields_v1(entry.get("fieldsV1") or {})
    manager, subresource = entry.get("manager", ""), entry.get("subresource", "")
    if not isinstance(manager, str) or not isinstance(subresource, str):
        raise ValueError(f"managed fields entry {i} has a non-string manager")
    key = ManagerKey(manager, operation, api_version if operation == UPDATE else "", subresource)
    when = entry.get("time")
    return key, fields, api_version, when if isinstance(when, str) else None


def decode_managed_fields(entries: Any) -> Managed:
    """Parse ``metadata.managedFields``; ValueError for anything a real server refuses."""
    managed = Managed()
    if entries is None:
        return managed
    if not isinstance(entries, list):
        raise ValueError("managedFields must be a list")
    for i, entry in enumerate(entries):
        key, fields, api_version, when = _decode_entry(i, entry)
        managed.sets[key] = VersionedSet(fields, api_version, key.operation == APPLY)
        if when is not None:
            managed.times[key] = when
        else:
            managed.times.pop(key, None)
    return managed


def _entry(key: ManagerKey, versioned: VersionedSet, when: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "apiVersion": versioned.api_version,
        "fieldsType": "FieldsV1",
        "fieldsV1": versioned.fields.to_fields_v1(),
        "manager": key.manager,
        "operation": key.operation,
    }
    if key.subresource:
        entry["subresource"] = key.subresource
    if when is not None:
        entry["time"] = when
    return entry


def _seconds(when: str | None) -> float:
    if not when:
        return 0
    try:
        return dt.datetime.fromisoformat(when).timestamp()
    except ValueError:
        return 0


def encode_managed_fields(managed: Managed) -> list[dict[str, Any]]:
    """The wire form, ordered as a real server orders it: Apply entries before Update
    entries, then by time, manager, apiVersion and subresource."""
    times = managed.times
    entries = [_entry(key, versioned, times.get(key)) for key, versioned in managed.sets.items()]
    entries.sort(
        key=lambda e: (
            e["operation"],
            _seconds(e.get("time")),
            e["manager"],
            e["apiVersion"],
            e.get("subresource", ""),
        )
    )
    return entries


def without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy of ``obj`` whose metadata has no managedFields."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return dict(obj)
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def write_managed_fields(obj: dict[str, Any], managed: Managed) -> None:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    entries = encode_managed_fields(managed)
    if entries:
        meta["managedFields"] = entries
    else:
        meta.pop("managedFields", None)


def record_update(
    managed: Managed, live: Any, new: Any, key: ManagerKey, now: str, t: TypeRef
) -> None:
    """Account for an Update-type write of ``new`` over ``live`` by ``key``'s manager."""
    diff = compare(live, new, t)
    changed = diff.modified.union(diff.added)
    for other, versioned in list(managed.sets.items()):
        kept = versioned.fields.difference(changed).difference(diff.removed)
        if kept.empty():
            managed.drop(other)
        else:
            versioned.fields = kept
    mine = changed.difference(diff.removed).difference(STRIPPED)
    if mine.empty():
        # Nothing of the writer's own: no entry, and an existing entry keeps its time.
        return
    previous = managed.sets.get(key)
    if previous is not None:
        mine = mine.union(previous.fields)
    managed.sets[key] = VersionedSet(mine, key.api_version, False)
    managed.times[key] = now


def _is_reset(entries: Any) -> bool:
    return isinstance(entries, list) and entries in ([], [{}])


def _decode_or_empty(obj: dict[str, Any] | None) -> Managed:
    try:
        return decode_managed_fields(((obj or {}).get("metadata") or {}).get("managedFields"))
    except ValueError:
        return Managed()


def _live_or_new(old: dict[str, Any] | None, new: dict[str, Any], subresource: bool) -> Managed:
    """The managedFields an update starts from: the request's own, so clients can edit or
    (with ``[]`` or ``[{}]``) reset them, unless missing or invalid, or on a subresource."""
    if subresource:
        return _decode_or_empty(old)
    meta = new.get("metadata") or {}
    if "managedFields" in meta and _is_reset(meta["managedFields"]):
        return Managed()
    try:
        sent = decode_managed_fields(meta.get("managedFields"))
    except ValueError:
        sent = Managed()
    return sent if sent.sets else _decode_or_empty(old)


def track_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    *,
    manager: str,
    subresource: str | None,
    api_version: str,
    now: str,
    schema: dict[str, Any] | None,
) -> None:
    """Set ``new["metadata"]["managedFields"]`` for an Update-type write.

    ``old`` is the stored object (None on create) and ``new`` the object as it will be
    stored: defaults applied and, for the main resource, ``.status`` reset (or, for
    ``/status``, everything but ``.status``), since fields a write could not change are
    not the writer's.
    """
    managed = _live_or_new(old, new, subresource is not None)
    uid = ((old or {}).get("metadata") or {}).get("uid")
    # An existing object nobody tracks stays untracked until something applies to it.
    if managed.sets or old is None or not uid:
        key = ManagerKey(manager, UPDATE, api_version, subresource or "")
        live = without_managed_fields(old) if old is not None else {}
        record_update(managed, live, without_managed_fields(new), key, now, root_type(schema))
    write_managed_fields(new, managed)
