"""Server-side apply (``application/apply-patch+yaml``), as a real API server does it.

The applied configuration is merged over the live object; the applier then owns exactly
the fields of its configuration. Fields it applied last time and leaves out now are removed
unless another manager owns them too. Changing a field another manager owns is a conflict
(409) unless ``force`` moves the field; applying an equal value shares it instead.

On ``/status`` only the configuration's ``.status`` counts; on the main resource of a kind
with a status subresource, ``.status`` does not. Either way the rest of the configuration
still has to convert to the schema's types, or the apply fails with a bare 500.
"""

from __future__ import annotations

from typing import Any

from ..common import status
from ..common.go_text import go_json
from ..common.resources import ResourceType
from ..common.status import ApiError, Cause
from .fieldmanager import (
    APPLY,
    STRIPPED,
    UPDATE,
    Managed,
    ManagerKey,
    VersionedSet,
    decode_managed_fields,
    record_update,
    without_managed_fields,
    write_managed_fields,
)
from .fieldsets import FieldSet, path_string
from .typed import TypeRef, root_type, typed_errors
from .typedfields import ensure_named_fields_are_members, to_field_set
from .typedops import Comparison, compare, json_copy, json_equal, merge, remove_items

__all__ = ["LAST_APPLIED", "server_side_apply", "take_over"]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_MAX_ANNOTATIONS_BYTES = 256 * 1024
# Kept from the live object: the caller owns identity and concurrency fields.
_IDENTITY = ("resourceVersion", "uid", "generation", "creationTimestamp")


def _gvk(obj: dict[str, Any]) -> tuple[str, str, str]:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str):
        api_version = ""
    parts = api_version.split("/") if api_version else []
    if len(parts) > 2:
        return "", "", ""
    group, version = (parts[0], parts[1]) if len(parts) == 2 else ("", "".join(parts))
    return group, version, kind if isinstance(kind, str) else ""


def _describe(config: dict[str, Any]) -> str:
    """``rec/tj-rec; trainer.kubeflow.org/v1alpha1, Kind=TrainJob`` from the config."""
    meta = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    ns, name = meta.get("namespace") or "", meta.get("name") or ""
    group, version, kind = _gvk(config)
    return f"{ns}/{name}; {group}/{version}, Kind={kind}"


def _check_config(config: dict[str, Any], resource: ResourceType, t: TypeRef) -> FieldSet:
    """The paths ``config`` sets, once it is known to be an apply configuration of this
    kind that converts to the schema's types."""
    group, version, kind = _gvk(config)
    if (group, version, kind) != (resource.group, resource.version, resource.kind):
        raise status.bad_request(f"invalid object type: {group}/{version}, Kind={kind}")
    meta = config.get("metadata")
    if isinstance(meta, dict) and meta.get("managedFields") is not None:
        raise status.bad_request("metadata.managedFields must be nil")
    if resource.schema is not None:
        problem = typed_errors(config, t)
        if problem:
            raise status.internal(
                f"failed to create typed patch object ({_describe(config)}): {problem}"
            )
    return to_field_set(config, t)


def _owned_part(fields: FieldSet, subresource: str | None, has_status: bool) -> FieldSet:
    """The part of an applied field set the request may own."""
    if subresource == "status":
        status = fields.children.get("f:status")
        return FieldSet(fields.members & {"f:status"}, {"f:status": status} if status else None)
    if has_status:
        return fields.recursive_difference(FieldSet.of(("f:status",)))
    return fields


def _reset(
    live: dict[str, Any], new: dict[str, Any], subresource: str | None, has_status: bool
) -> dict[str, Any]:
    """What the write may change of ``new``: the status only, or all but the status."""
    if subresource == "status":
        out = {k: v for k, v in live.items() if k != "status"}
        if "status" in new:
            out["status"] = new["status"]
        return out
    if has_status:
        out = {k: v for k, v in new.items() if k != "status"}
        if "status" in live:
            out["status"] = live["status"]
        return out
    return new


def _prune(merged: Any, managed: Managed, last: FieldSet, applied: FieldSet, t: TypeRef) -> Any:
    """Remove what the applier owned before and owns no longer, unless someone else owns it.

    Three passes, as structured-merge-diff does them: remove everything applied last time,
    put back what any manager owns now, then only really remove what was applied last time
    (so fields nobody owns stay).
    """

    def named(fs: FieldSet) -> FieldSet:
        return ensure_named_fields_are_members(fs, t)

    last_e = named(last)
    owned = FieldSet()
    for versioned in managed.sets.values():
        owned = owned.union(versioned.fields)
    merged_e = named(to_field_set(merged, t))
    first = remove_items(merged, last_e, t)
    first_e = named(to_field_set(first, t))
    second = remove_items(merged, merged_e.difference(first_e.union(named(owned))), t)
    second_e = named(to_field_set(second, t))
    return remove_items(merged, merged_e.difference(second_e).intersection(last_e), t)


def _conflict_error(conflicts: dict[ManagerKey, FieldSet]) -> ApiError:
    keys = sorted(conflicts, key=ManagerKey.identifier)
    pairs = [(key, path) for key in keys for path in conflicts[key].paths()]
    causes = [
        Cause("FieldManagerConflict", f"conflict with {key.describe()}", path_string(path))
        for key, path in pairs
    ]
    if len(pairs) == 1:
        key, path = pairs[0]
        message = (
            f"Apply failed with 1 conflict: conflict with {key.describe()}: {path_string(path)}"
        )
    else:
        lines: list[str] = []
        for key in keys:
            lines.append(f"conflicts with {key.describe()}:")
            lines.extend(f"- {path_string(path)}" for path in conflicts[key].paths())
        message = f"Apply failed with {len(pairs)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, {"causes": [c.to_json() for c in causes]})


def take_over(managed: Managed, key: ManagerKey, diff: Comparison, *, force: bool) -> None:
    """Settle what the applier ``key`` changed (``diff``) with every other manager: a
    conflict (409) where another one owns a changed field, unless ``force`` moves it.
    Changed and removed fields leave every other set; a set left empty is dropped."""
    changed = diff.modified.union(diff.added)
    conflicts: dict[ManagerKey, FieldSet] = {}
    for other, versioned in managed.sets.items():
        if other == key:
            continue
        clash = versioned.fields.intersection(changed)
        if not clash.empty():
            conflicts[other] = clash
    if conflicts and not force:
        raise _conflict_error(conflicts)
    for other, versioned in list(managed.sets.items()):
        if other == key:
            continue
        versioned.fields = versioned.fields.difference(changed).difference(diff.removed)
        if versioned.fields.empty():
            managed.drop(other)


def _sync_last_applied(out: dict[str, Any], config: dict[str, Any]) -> None:
    """kubectl's own server-side applies keep a client-side apply annotation current."""
    meta = out.get("metadata") or {}
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict) or LAST_APPLIED not in annotations:
        return
    # The map may be the live object's own.
    annotations = meta["annotations"] = dict(annotations)
    recorded = json_copy(config)
    sent = (recorded.get("metadata") or {}).get("annotations")
    if isinstance(sent, dict):
        sent.pop(LAST_APPLIED, None)
    annotations[LAST_APPLIED] = go_json(recorded) + "\n"
    size = sum(len(k.encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > _MAX_ANNOTATIONS_BYTES:
        del annotations[LAST_APPLIED]


def server_side_apply(
    live: dict[str, Any] | None,
    config: dict[str, Any],
    *,
    manager: str,
    subresource: str | None,
    force: bool,
    resource: ResourceType,
    now: str,
) -> dict[str, Any]:
    """The object after ``manager`` applies ``config`` over ``live`` (None: a create).

    Returns a new object whose ``metadata.managedFields`` account for the apply; only
    its top level and its metadata are its own, the values below may be parts of
    ``live`` or ``config`` (neither is changed). Raises ApiError: 400 for a config of
    another kind or with managedFields, 500 for a config that does not fit the schema,
    409 for conflicts. resourceVersion, uid, generation and creationTimestamp stay the
    live object's; preconditions, defaulting and validation are the caller's.
    """
    t = root_type(resource.schema)
    config_fields = _check_config(config, resource, t)
    has_status = "status" in resource.subresources
    base = without_managed_fields(live) if live is not None else {}
    try:
        managed = decode_managed_fields(((live or {}).get("metadata") or {}).get("managedFields"))
    except ValueError:
        managed = Managed()
    if live is not None and not managed.sets:
        # An untracked object: what it holds so far is attributed to one Update entry, so
        # changing it conflicts like changing anyone else's fields.
        first = ManagerKey("before-first-apply", UPDATE, resource.group_version, subresource or "")
        record_update(managed, {}, base, first, now, t)

    key = ManagerKey(manager, APPLY, "", subresource or "")
    last = managed.sets.get(key)
    merged = merge(base, config, t)
    applied = _owned_part(config_fields, subresource, has_status)
    managed.sets[key] = VersionedSet(applied, resource.group_version, True)
    if last is not None and not last.fields.empty():
        merged = _prune(merged, managed, last.fields, applied, t)
    result = _reset(base, merged, subresource, has_status)
    take_over(managed, key, compare(base, result, t), force=force)
    # The entry's time moves only when the apply changed the object (before the status or
    # spec of the config was set aside), as a real server decides it: a new manager whose
    # apply changes nothing gets an entry without a time.
    if not json_equal(merged, base):
        managed.times[key] = now
    mine = managed.sets[key].fields.difference(STRIPPED)
    if mine.empty():
        managed.drop(key)
    else:
        managed.sets[key].fields = mine

    out = dict(result)
    meta = out["metadata"] = dict(out.get("metadata") or {})
    if live is not None:
        live_meta = live.get("metadata") or {}
        for name in _IDENTITY:
            if name in live_meta:
                meta[name] = live_meta[name]
            else:
                meta.pop(name, None)
    if manager == "kubectl" and subresource is None:
        _sync_last_applied(out, config)
    write_managed_fields(out, managed)
    return out
