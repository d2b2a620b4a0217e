"""Walks over typed values: merge, compare and removal.

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
from .typed import Atom, ListType, MapType, Scalar, TypeRef, child_type, item_pe, resolve
from .typedfields import index_items

__all__ = [
    "MISSING",
    "Comparison",
    "compare",
    "json_copy",
    "json_equal",
    "merge",
    "remove_items",
]


class _Absent(Enum):
    MISSING = "missing"


MISSING = _Absent.MISSING


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


# -- merge and compare ------------------------------------------------------------------


@dataclass
class Comparison:
    added: FieldSet = field(default_factory=FieldSet)
    modified: FieldSet = field(default_factory=FieldSet)
    removed: FieldSet = field(default_factory=FieldSet)


def _same_shape(atom: Atom, value: Any) -> bool:
    if value is MISSING or value is None:
        return True
    if isinstance(atom, ListType):
        return isinstance(value, list)
    if isinstance(atom, MapType):
        return isinstance(value, dict)
    return not isinstance(value, (dict, list))


def _filled(value: Any) -> bool:
    return isinstance(value, (dict, list)) and len(value) > 0


def _is_leaf(atom: Atom, lhs: Any, rhs: Any) -> bool:
    """Whether the walk treats this node whole; otherwise it is a filled map or map list."""
    if isinstance(atom, Scalar) or not (_same_shape(atom, lhs) and _same_shape(atom, rhs)):
        return True
    # Two empty (or null) sides are a leaf too, which keeps {} apart from null.
    if atom.atomic if isinstance(atom, MapType) else not atom.associative:
        return True
    return not _filled(lhs) and not _filled(rhs)


# What the walk does with a node it treats whole (MISSING on a side that lacks it), and
# with a map or list once it has walked what is below it.
Leaf = Callable[[Any, Any, Path], Any]
Hook = Callable[[Any, Any, Path], None]


def _walk(lhs: Any, rhs: Any, t: TypeRef, path: Path, leaf: Leaf, hook: Hook) -> Any:
    """One walk over both values for merge and compare: maps key by key, associative
    lists item by item, everything else handed to ``leaf`` whole."""
    atom = resolve(t, lhs if rhs is MISSING else rhs)
    if _is_leaf(atom, lhs, rhs):
        return leaf(lhs, rhs, path)
    if isinstance(atom, MapType):
        out: Any = _walk_map(lhs, rhs, atom, path, leaf, hook)
    else:
        assert isinstance(atom, ListType)
        out = _walk_list(lhs, rhs, atom, path, leaf, hook)
        if out is None:  # an item without a key: the list is a leaf
            return leaf(lhs, rhs, path)
    hook(lhs, rhs, path)
    return out


def _walk_map(
    lhs: Any, rhs: Any, atom: MapType, path: Path, leaf: Leaf, hook: Hook
) -> dict[str, Any]:
    left = lhs if isinstance(lhs, dict) else {}
    right = rhs if isinstance(rhs, dict) else {}
    out: dict[str, Any] = {}
    for key in [*left, *(k for k in right if k not in left)]:
        walked = _walk(
            left.get(key, MISSING),
            right.get(key, MISSING),
            child_type(atom, key),
            (*path, "f:" + key),
            leaf,
            hook,
        )
        if walked is not MISSING:
            out[key] = walked
    return out


def _walk_list(
    lhs: Any, rhs: Any, atom: ListType, path: Path, leaf: Leaf, hook: Hook
) -> list[Any] | None:
    left = index_items(atom, lhs if isinstance(lhs, list) else [])
    right = index_items(atom, rhs if isinstance(rhs, list) else [])
    if left is None or right is None:
        return None
    lpes, lfound = left
    rpes, rfound = right
    out: list[Any] = []

    def take(pe: str) -> None:
        walked = _walk(
            lfound.get(pe, MISSING), rfound.get(pe, MISSING), atom.element, (*path, pe), leaf, hook
        )
        if walked is not MISSING:
            out.append(walked)

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


def merge(lhs: Any, rhs: Any, t: TypeRef) -> Any:
    """``rhs`` merged over ``lhs``: maps and map lists merge, everything else is replaced.

    Parts of the result may be parts of ``lhs`` or ``rhs`` themselves, not copies."""

    def leaf(left: Any, right: Any, _path: Path) -> Any:
        return left if right is MISSING else right

    return _walk(lhs, rhs, t, (), leaf, lambda *_: None)


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
        # A map or list that one side lacks is added or removed as a whole, too.
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
            out[key] = remove_items(item, sub, child_type(atom, key)) if sub else item
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
