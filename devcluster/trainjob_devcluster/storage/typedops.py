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

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .fieldsets import FieldSet, Path, field_pe
from .typed import (
    DEDUCED,
    Atom,
    Deduced,
    ListType,
    MapType,
    Scalar,
    TypeRef,
    child_type,
    item_pe,
    resolve,
)
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
    if a != b:
        # Equal JSON values are equal in Python (which also takes true for 1): a cheap no.
        return False
    return _json_equal(a, b)


def _json_equal(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


# -- merge and compare ------------------------------------------------------------------


@dataclass
class Comparison:
    added: FieldSet = field(default_factory=FieldSet.new)
    modified: FieldSet = field(default_factory=FieldSet.new)
    removed: FieldSet = field(default_factory=FieldSet.new)

    def same(self) -> bool:
        return self.added.empty() and self.modified.empty() and self.removed.empty()


def _same_shape(atom: Any, value: Any) -> bool:
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


def _merge(lhs: Any, rhs: Any, t: TypeRef) -> Any:
    if rhs is MISSING:
        if not t.assoc_below:
            # Rebuilding would give an equal value: hand back the very same one.
            return lhs
        atom = resolve(t, lhs)
    else:
        if lhs is MISSING and not t.assoc_below:
            return rhs
        atom = resolve(t, rhs) if isinstance(t, Deduced) else t
    if type(atom) is MapType and type(lhs) is dict and type(rhs) is dict:
        # The usual node: two maps to merge key by key (unless atomic or both empty).
        if atom.atomic or not (lhs or rhs):
            return rhs
        return _merge_map(lhs, rhs, atom)
    if _is_leaf(atom, lhs, rhs):
        return lhs if rhs is MISSING else rhs
    if isinstance(atom, MapType):
        return _merge_map(
            lhs if isinstance(lhs, dict) else {}, rhs if isinstance(rhs, dict) else {}, atom
        )
    merged = _merge_list(lhs, rhs, atom) if isinstance(atom, ListType) else None
    if merged is None:
        return lhs if rhs is MISSING else rhs
    return merged


def _merge_map(left: dict[str, Any], right: dict[str, Any], atom: MapType) -> dict[str, Any]:
    fields, element = atom.fields, atom.element or DEDUCED
    out: dict[str, Any] = {}
    for key, item in left.items():
        other = right.get(key, MISSING)
        child = fields.get(key) or element
        if other is MISSING:
            out[key] = _merge(item, other, child) if child.assoc_below else item
        elif type(child) is Scalar:
            out[key] = other
        else:
            out[key] = _merge(item, other, child)
    if not left.keys() >= right.keys():
        for key, item in right.items():
            if key not in left:
                child = fields.get(key) or element
                out[key] = _merge(MISSING, item, child) if child.assoc_below else item
    return out


def _merge_list(lhs: Any, rhs: Any, atom: ListType) -> list[Any] | None:
    left = index_items(atom, lhs if isinstance(lhs, list) else [])
    right = index_items(atom, rhs if isinstance(rhs, list) else [])
    if left is None or right is None:
        return None
    lpes, lfound = left
    rpes, rfound = right
    out: list[Any] = []

    def take(pe: str) -> None:
        out.append(_merge(lfound.get(pe, MISSING), rfound.get(pe, MISSING), atom.element))

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
    return _merge(lhs, rhs, t)


def compare(lhs: Any, rhs: Any, t: TypeRef) -> Comparison:
    """Which paths ``rhs`` added, modified and removed relative to ``lhs``."""
    result = Comparison()
    if lhs is not rhs:
        _compare(lhs, rhs, t, (), result)
    return result


def _compare(lhs: Any, rhs: Any, t: TypeRef, path: Path, result: Comparison) -> None:
    atom = resolve(t, lhs if rhs is MISSING else rhs) if isinstance(t, Deduced) else t
    if type(atom) is MapType and type(lhs) is dict and type(rhs) is dict:
        # The usual node: two maps compared key by key (unless atomic or both empty).
        if atom.atomic or not (lhs or rhs):
            _compare_leaf(lhs, rhs, path, result)
        else:
            _compare_map(lhs, rhs, atom, path, result)
        return
    if _is_leaf(atom, lhs, rhs):
        _compare_leaf(lhs, rhs, path, result)
        return
    if isinstance(atom, MapType):
        left = lhs if isinstance(lhs, dict) else {}
        right = rhs if isinstance(rhs, dict) else {}
        _compare_map(left, right, atom, path, result)
    elif isinstance(atom, ListType):
        left_index = index_items(atom, lhs if isinstance(lhs, list) else [])
        right_index = index_items(atom, rhs if isinstance(rhs, list) else [])
        if left_index is None or right_index is None:
            _compare_leaf(lhs, rhs, path, result)
            return
        lfound, rfound = left_index[1], right_index[1]
        for pe, item in lfound.items():
            other = rfound.get(pe, MISSING)
            if item is not other:
                _compare(item, other, atom.element, (*path, pe), result)
        for pe, item in rfound.items():
            if pe not in lfound:
                _compare(MISSING, item, atom.element, (*path, pe), result)
    if lhs is MISSING:
        result.added.insert(path)
    elif rhs is MISSING:
        result.removed.insert(path)


def _compare_map(
    left: dict[str, Any], right: dict[str, Any], atom: MapType, path: Path, result: Comparison
) -> None:
    fields, element = atom.fields, atom.element or DEDUCED
    for key, item in left.items():
        other = right.get(key, MISSING)
        # Updated objects share untouched subtrees with the old one: equal.
        if item is not other:
            child = fields.get(key) or element
            if type(child) is not Scalar:
                _compare(item, other, child, (*path, "f:" + key), result)
            elif other is MISSING:
                result.removed.insert((*path, "f:" + key))
            elif not json_equal(item, other):
                result.modified.insert((*path, "f:" + key))
    if not left.keys() >= right.keys():
        for key, item in right.items():
            if key not in left:
                child = fields.get(key) or element
                _compare(MISSING, item, child, (*path, "f:" + key), result)


def _compare_leaf(lhs: Any, rhs: Any, path: Path, result: Comparison) -> None:
    if lhs is MISSING:
        result.added.insert(path)
    elif rhs is MISSING:
        result.removed.insert(path)
    elif not json_equal(lhs, rhs):
        result.modified.insert(path)


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
