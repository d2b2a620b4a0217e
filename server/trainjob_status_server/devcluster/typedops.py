"""Walks over typed values: field sets, merge, compare and removal.

These follow structured-merge-diff, the library a real API server runs for managedFields
and server-side apply, because its details are visible to clients: which paths an apply
owns (an empty map or a null is owned as a whole), the order a merged map list comes out
in, and which nodes count as added (a map or list that did not exist, so FieldsV1 shows a
``"."`` for it) or removed.

Stored values may not match their type (the caller validates later); such mismatches are
treated as a plain leaf replaced whole rather than as errors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .fieldsets import FieldSet, Path, field_pe
from .typed import DEDUCED, ListType, MapType, Scalar, TypeRef, item_pe, resolve

__all__ = [
    "MISSING",
    "Comparison",
    "compare",
    "ensure_named_fields_are_members",
    "json_copy",
    "json_equal",
    "merge",
    "remove_items",
    "to_field_set",
]


class _Absent(Enum):
    MISSING = "missing"


MISSING = _Absent.MISSING


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value (much cheaper than copy.deepcopy on large objects)."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value


def json_equal(a: Any, b: Any) -> bool:
    """Deep equality of JSON values where ``true`` is not ``1`` but ``1`` is ``1.0``."""
    if a is b:
        # Merged objects share untouched subtrees with their inputs.
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
    """Path elements of a list's items in order, or None when an item has no key."""
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


# -- field sets -------------------------------------------------------------------------


def to_field_set(value: Any, t: TypeRef) -> FieldSet:
    """The paths an applied configuration sets."""
    out = FieldSet()
    _to_set(value, t, (), out)
    return out


def _to_set(value: Any, t: TypeRef, path: Path, out: FieldSet) -> None:
    atom = resolve(t, value)
    if isinstance(atom, Scalar):
        out.insert(path)
    elif isinstance(atom, ListType):
        if not atom.associative:
            out.insert(path)
            return
        indexed = _index(atom, value) if isinstance(value, list) else None
        for pe, item in (indexed[1] if indexed else {}).items():
            _to_set(item, atom.element, (*path, pe), out)
            out.insert((*path, pe))
    elif atom.atomic:
        out.insert(path)
    elif isinstance(value, dict):
        for key, item in value.items():
            child = (*path, field_pe(key))
            _to_set(item, _child_type(atom, key), child, out)
            # A struct field is owned through its leaves, unless it is null or an empty
            # map; map keys (labels, deduced objects) are always owned themselves.
            if item is None or item == {} or key not in atom.fields:
                out.insert(child)


def ensure_named_fields_are_members(fs: FieldSet, t: TypeRef) -> FieldSet:
    """``fs`` plus every struct field that has paths under it, as a member itself."""
    atom = resolve(t, {})
    members = set(fs.members)
    children: dict[str, FieldSet] = {}
    for pe, child in fs.children.items():
        child_type: TypeRef = DEDUCED
        if pe.startswith("f:") and isinstance(atom, MapType):
            child_type = _child_type(atom, pe[2:])
            if pe[2:] in atom.fields:
                members.add(pe)
        elif pe.startswith("k:") and isinstance(atom, ListType):
            child_type = atom.element
        children[pe] = ensure_named_fields_are_members(child, child_type)
    return FieldSet(members, children)


# -- merge and compare ------------------------------------------------------------------


@dataclass
class Comparison:
    added: FieldSet = field(default_factory=FieldSet)
    modified: FieldSet = field(default_factory=FieldSet)
    removed: FieldSet = field(default_factory=FieldSet)

    def same(self) -> bool:
        return self.added.empty() and self.modified.empty() and self.removed.empty()


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
    # Two empty (or null) sides are a leaf too, which keeps {} apart from null.
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
            (*path, field_pe(key)),
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

    # Items only on the left keep their place; shared items follow the right side's order
    # and items new on the right come where the right side has them.
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


def _keep_right(lhs: Any, rhs: Any, path: Path) -> Any:
    return lhs if rhs is MISSING else rhs


def _no_hook(lhs: Any, rhs: Any, path: Path) -> None:
    return None


def merge(lhs: Any, rhs: Any, t: TypeRef) -> Any:
    """``rhs`` merged over ``lhs``: maps and map lists merge, everything else is replaced."""
    return _walk(lhs, rhs, t, (), _keep_right, _no_hook)


def compare(lhs: Any, rhs: Any, t: TypeRef) -> Comparison:
    """Which paths ``rhs`` added, modified and removed relative to ``lhs``."""
    result = Comparison()

    def leaf(left: Any, right: Any, path: Path) -> Any:
        if left is MISSING:
            result.added.insert(path)
        elif right is MISSING:
            result.removed.insert(path)
        elif not json_equal(left, right):
            result.modified.insert(path)
        return MISSING

    def hook(left: Any, right: Any, path: Path) -> None:
        if left is MISSING:
            result.added.insert(path)
        elif right is MISSING:
            result.removed.insert(path)

    _walk(lhs, rhs, t, (), leaf, hook)
    return result


# -- removal ----------------------------------------------------------------------------


def remove_items(value: Any, fs: FieldSet, t: TypeRef) -> Any:
    """``value`` without the members of ``fs`` (each removed with everything under it).

    A map or list emptied this way stays, empty: an apply that drops every field it owned
    under ``trainerStatus`` leaves ``trainerStatus: {}``.
    """
    atom = resolve(t, value)
    if isinstance(atom, MapType):
        if not isinstance(value, dict) or atom.atomic:
            return value
        out: dict[str, Any] = {}
        for key, item in value.items():
            pe = field_pe(key)
            if pe in fs.members:
                continue
            sub = fs.children.get(pe)
            out[key] = remove_items(item, sub, _child_type(atom, key)) if sub else item
        return out
    if isinstance(atom, ListType) and atom.associative and isinstance(value, list):
        kept: list[Any] = []
        for item in value:
            try:
                pe = item_pe(atom, item)
            except ValueError:
                kept.append(item)
                continue
            if pe in fs.members:
                continue
            sub = fs.children.get(pe)
            kept.append(remove_items(item, sub, atom.element) if sub else item)
        return kept
    return value
