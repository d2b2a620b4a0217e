"""The devcluster's write-path algorithms as they were before their fast paths: one
generic walk for merge and compare, field sets built path by path, in-place pruning and
defaulting that visit every value, a plain JSON equality. The fast paths are tested
against these on the same inputs (test_fastpaths); keep them simple, not fast.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from trainjob_devcluster.schema.schemanode import Node
from trainjob_devcluster.storage.typed import (
    DEDUCED,
    ListType,
    MapType,
    Scalar,
    TypeRef,
    item_pe,
    resolve,
)

Path = tuple[str, ...]
MISSING = object()
_META_FIELDS = frozenset({"apiVersion", "kind", "metadata"})


def json_equal(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _child_type(atom: MapType, key: str) -> TypeRef:
    return atom.fields.get(key) or atom.element or DEDUCED


def _index(atom: ListType, items: list[Any]) -> tuple[list[str], dict[str, Any]] | None:
    order: list[str] = []
    found: dict[str, Any] = {}
    for item in items:
        try:
            pe = item_pe(atom, item)
        except ValueError:
            return None
        if pe not in found:
            order.append(pe)
            found[pe] = item
    return order, found


def field_paths(value: Any, t: TypeRef) -> set[Path]:
    """The paths an applied configuration sets (to_field_set), as a set of paths."""
    out: set[Path] = set()
    _to_set(value, t, (), out)
    out.discard(())
    return out


def _to_set(value: Any, t: TypeRef, path: Path, out: set[Path]) -> None:
    atom = resolve(t, value)
    if isinstance(atom, Scalar):
        out.add(path)
    elif isinstance(atom, ListType):
        if not atom.associative:
            out.add(path)
            return
        indexed = _index(atom, value) if isinstance(value, list) else None
        for pe, item in (indexed[1] if indexed else {}).items():
            _to_set(item, atom.element, (*path, pe), out)
            out.add((*path, pe))
    elif atom.atomic:
        out.add(path)
    elif isinstance(value, dict):
        for key, item in value.items():
            child = (*path, "f:" + key)
            _to_set(item, _child_type(atom, key), child, out)
            if item is None or item == {} or key not in atom.fields:
                out.add(child)


Leaf = Callable[[Any, Any, Path], Any]
Hook = Callable[[Any, Any, Path], None]


def _same_shape(atom: Any, value: Any) -> bool:
    if value is MISSING or value is None:
        return True
    if isinstance(atom, ListType):
        return isinstance(value, list)
    if isinstance(atom, MapType):
        return isinstance(value, dict)
    return not isinstance(value, dict | list)


def _filled(value: Any) -> bool:
    return isinstance(value, dict | list) and len(value) > 0


def _walk(lhs: Any, rhs: Any, t: TypeRef, path: Path, leaf: Leaf, hook: Hook) -> Any:
    atom = resolve(t, lhs if rhs is MISSING else rhs)
    if isinstance(atom, Scalar) or not (_same_shape(atom, lhs) and _same_shape(atom, rhs)):
        return leaf(lhs, rhs, path)
    if atom.atomic if isinstance(atom, MapType) else not atom.associative:
        return leaf(lhs, rhs, path)
    if not _filled(lhs) and not _filled(rhs):
        return leaf(lhs, rhs, path)
    if isinstance(atom, MapType):
        out: Any = _walk_map(lhs, rhs, atom, path, leaf, hook)
    else:
        out = _walk_list(lhs, rhs, atom, path, leaf, hook)
        if out is None:
            return leaf(lhs, rhs, path)
    hook(lhs, rhs, path)
    return out


def _walk_map(lhs: Any, rhs: Any, atom: MapType, path: Path, leaf: Leaf, hook: Hook) -> Any:
    left = lhs if isinstance(lhs, dict) else {}
    right = rhs if isinstance(rhs, dict) else {}
    out: dict[str, Any] = {}
    for key in [*left, *(k for k in right if k not in left)]:
        merged = _walk(
            left.get(key, MISSING),
            right.get(key, MISSING),
            _child_type(atom, key),
            (*path, "f:" + key),
            leaf,
            hook,
        )
        if merged is not MISSING:
            out[key] = merged
    return out


def _walk_list(
    lhs: Any, rhs: Any, atom: ListType, path: Path, leaf: Leaf, hook: Hook
) -> list[Any] | None:
    left = _index(atom, lhs if isinstance(lhs, list) else [])
    right = _index(atom, rhs if isinstance(rhs, list) else [])
    if left is None or right is None:
        return None
    lpes, lfound = left
    rpes, rfound = right
    out: list[Any] = []

    def take(pe: str) -> None:
        merged = _walk(
            lfound.get(pe, MISSING), rfound.get(pe, MISSING), atom.element, (*path, pe), leaf, hook
        )
        if merged is not MISSING:
            out.append(merged)

    shared = [pe for pe in rpes if pe in lfound]
    next_shared = shared.pop(0) if shared else None
    done: set[str] = set()
    li = ri = 0
    while li < len(lpes) or ri < len(rpes):
        if li < len(lpes) and ri < len(rpes):
            pe = lpes[li]
            if pe == rpes[ri]:
                done.add(pe)
                take(pe)
                li, ri = li + 1, ri + 1
                next_shared = shared.pop(0) if shared else None
                continue
            if pe in rfound and next_shared is not None and next_shared != pe:
                li += 1
                continue
        if li < len(lpes):
            pe = lpes[li]
            if pe not in rfound:
                take(pe)
                li += 1
                continue
            if pe in done:
                li += 1
                continue
        if ri < len(rpes):
            pe = rpes[ri]
            done.add(pe)
            take(pe)
            ri += 1
            if next_shared == pe:
                next_shared = shared.pop(0) if shared else None
    return out


def merge(lhs: Any, rhs: Any, t: TypeRef) -> Any:
    return _walk(lhs, rhs, t, (), lambda a, b, _p: a if b is MISSING else b, lambda *_: None)


def compare(lhs: Any, rhs: Any, t: TypeRef) -> tuple[set[Path], set[Path], set[Path]]:
    """(added, modified, removed) paths."""
    added: set[Path] = set()
    modified: set[Path] = set()
    removed: set[Path] = set()

    def leaf(left: Any, right: Any, path: Path) -> Any:
        if left is MISSING:
            added.add(path)
        elif right is MISSING:
            removed.add(path)
        elif not json_equal(left, right):
            modified.add(path)
        return MISSING

    def hook(left: Any, right: Any, path: Path) -> None:
        if left is MISSING:
            added.add(path)
        elif right is MISSING:
            removed.add(path)

    _walk(lhs, rhs, t, (), leaf, hook)
    for found in (added, modified, removed):
        found.discard(())
    return added, modified, removed


# -- pruning and defaulting, in place -------------------------------------------------


def default(value: Any, node: Node) -> None:
    kind = type(value)
    if kind is dict:
        props, extra = node.properties, node.additional
        for key in [k for k, v in value.items() if v is None]:
            prop = props.get(key) or extra
            if prop is not None and not prop.nullable:
                if prop.has_default:
                    value[key] = copy.deepcopy(prop.default)
                else:
                    del value[key]
        for key, prop in props.items():
            if prop.has_default and key not in value:
                value[key] = copy.deepcopy(prop.default)
        for key, item in value.items():
            prop = props.get(key) or extra
            if prop is not None:
                default(item, prop)
    elif kind is list and node.items is not None:
        items = node.items
        for i, item in enumerate(value):
            if item is None and not items.nullable and items.has_default:
                value[i] = item = copy.deepcopy(items.default)
            default(item, items)


def prune(value: Any, node: Node, path: str, removed: list[str], *, resource: bool) -> None:
    kind = type(value)
    if kind is dict:
        for key in list(value):
            if resource and key in _META_FIELDS:
                continue
            sub = f"{path}.{key}" if path else key
            prop = node.properties.get(key) or node.additional
            if prop is not None:
                prune(value[key], prop, sub, removed, resource=prop.embedded)
            elif not node.preserve_unknown:
                removed.append(sub)
                del value[key]
    elif kind is list and node.items is not None:
        for i, item in enumerate(value):
            prune(item, node.items, f"{path}[{i}]", removed, resource=node.items.embedded)


def _without_bookkeeping(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k != "resourceVersion"}
    if "managedFields" in meta:
        meta["managedFields"] = [
            {k: v for k, v in entry.items() if k != "time"} for entry in meta["managedFields"]
        ]
    return {**obj, "metadata": meta}


def unchanged(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return _without_bookkeeping(old) == _without_bookkeeping(new)
