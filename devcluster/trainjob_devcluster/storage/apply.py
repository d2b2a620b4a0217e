"""Apply (``application/apply-patch+yaml``), cut to what our server and the demo need.

The applied configuration is merged over the live object (maps field by field, lists
and scalars whole) and its manager then owns exactly the fields it applied, recorded in
one ``managedFields`` entry per (manager, subresource). A field the manager applied last
time and leaves out now is removed, unless another manager owns it.

Unlike a real API server: lists are atomic (no list-map keys), every apply behaves as
``force=true`` (a field another manager owned moves to the applier instead of a 409
conflict), and nothing checks the configuration against the CRD's types. Applies to
``/status`` take only the configuration's ``.status``; applies to the main resource of a
kind with a status subresource leave ``.status`` alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .objects import Obj, json_copy, json_equal

__all__ = ["APPLY", "apply"]

APPLY = "Apply"
Path = tuple[str, ...]
# The server's own metadata, never owned by a manager (as on a real server).
_NOT_OWNED = {("apiVersion",), ("kind",)} | {
    ("metadata", name)
    for name in (
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
    )
}


def _leaves(value: Any, prefix: Path = ()) -> Iterable[Path]:
    """The paths of the fields ``value`` sets: lists, scalars and empty maps are leaves."""
    if isinstance(value, dict) and value:
        for key, child in value.items():
            if child is not None:
                yield from _leaves(child, (*prefix, key))
    elif prefix:
        yield prefix


def _decode(fields: Any, prefix: Path = ()) -> set[Path]:
    """The paths of a ``fieldsV1`` set (``f:`` members; other keys end the path)."""
    named = {k[2:]: v for k, v in fields.items() if k.startswith("f:")} if fields else {}
    if not named:
        return {prefix} if prefix else set()
    out: set[Path] = set()
    for key, child in named.items():
        out |= _decode(child if isinstance(child, dict) else {}, (*prefix, key))
    return out


def _encode(paths: Iterable[Path]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return root


def _get(obj: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _remove(obj: Obj, path: Path) -> None:
    parent = _get(obj, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1], None)


def _merge(live: Obj, config: Obj) -> None:
    """``config`` merged into ``live`` in place; a null in the configuration sets nothing."""
    for key, value in config.items():
        if value is None:
            continue
        if isinstance(value, dict) and isinstance(live.get(key), dict):
            _merge(live[key], value)
        else:
            live[key] = json_copy(value)


def _overlaps(a: Path, b: Path) -> bool:
    return a[: len(b)] == b or b[: len(a)] == a


def _key(entry: dict[str, Any]) -> tuple[Any, Any, Any]:
    return entry.get("manager"), entry.get("operation"), entry.get("subresource", "")


def _scope(config: Obj, subresource: str | None, has_status: bool) -> Obj:
    """The part of the configuration this request may write."""
    if subresource == "status":
        return {"status": config["status"]} if "status" in config else {}
    if has_status:
        return {k: v for k, v in config.items() if k != "status"}
    return config


def apply(
    live: Obj | None,
    config: Obj,
    *,
    manager: str,
    subresource: str | None,
    has_status: bool,
    api_version: str,
    now: str,
) -> Obj:
    """The object after ``manager`` applies ``config`` over ``live`` (None: a create),
    with its ``metadata.managedFields`` updated. Neither argument is changed; identity,
    preconditions and what the write may touch outside the configuration are the
    caller's."""
    out: Obj = json_copy(live) if live is not None else {}
    meta = out.setdefault("metadata", {})
    entries: list[dict[str, Any]] = meta.get("managedFields") or []
    sub = subresource or ""
    key = (manager, APPLY, sub)
    mine = next((e for e in entries if _key(e) == key), None)
    others = [e for e in entries if e is not mine]
    scoped = _scope(config, subresource, has_status)
    applied = {p for p in _leaves(scoped) if p not in _NOT_OWNED}
    owned_by_others = set().union(*(_decode(e.get("fieldsV1")) for e in others))

    before = json_copy(out)
    last = _decode(mine.get("fieldsV1")) if mine else set()
    kept_paths = applied | owned_by_others
    for path in sorted(last - applied, key=len, reverse=True):
        # Kept while someone owns it or a field below it (an empty map owns no children).
        if not any(q[: len(path)] == path for q in kept_paths):
            _remove(out, path)
    _merge(out, scoped)

    # Force: a field another manager owned and this apply changed is the applier's now.
    changed = [p for p in applied if not json_equal(_get(before, p), _get(out, p))]
    kept: list[dict[str, Any]] = []
    place = len(entries)
    for entry in entries:
        if entry is mine:
            place = len(kept)
            continue
        paths = _decode(entry.get("fieldsV1"))
        left = {p for p in paths if not any(_overlaps(p, c) for c in changed)}
        if left:
            kept.append(entry if left == paths else {**entry, "fieldsV1": _encode(left)})
    if applied:
        # The entry keeps its place; its time moves only when the apply changed something.
        when = now if mine is None or not json_equal(before, out) else mine.get("time", now)
        entry = {
            "manager": manager,
            "operation": APPLY,
            "apiVersion": api_version,
            "time": when,
            "fieldsType": "FieldsV1",
            "fieldsV1": _encode(applied),
        }
        if sub:
            entry["subresource"] = sub
        kept.insert(place, entry)
    out["metadata"]["managedFields"] = kept
    if not kept:
        del out["metadata"]["managedFields"]
    return out
