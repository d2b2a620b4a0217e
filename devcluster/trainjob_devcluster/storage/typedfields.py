"""The field sets of typed values: which paths an applied configuration sets (the
FieldsV1 its managedFields entry records).

These follow structured-merge-diff, as typedops does: an empty map or a null is owned as
a whole, a struct is owned through its leaves, map keys and list items by their keys.
"""

from __future__ import annotations

from typing import Any

from .fieldsets import FieldSet
from .typed import (
    DEDUCED,
    Atom,
    ListType,
    MapType,
    Scalar,
    TypeRef,
    child_type,
    item_pe,
    resolve,
)

__all__ = ["ensure_named_fields_are_members", "index_items", "to_field_set"]


def index_items(atom: ListType, items: list[Any]) -> tuple[list[str], dict[str, Any]] | None:
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


def to_field_set(value: Any, t: TypeRef) -> FieldSet:
    """The paths an applied configuration sets."""
    out = FieldSet()
    atom = resolve(t, value)
    if not _owned_whole(atom):
        _fill(value, atom, out)
    return out


def _owned_whole(atom: Atom) -> bool:
    if isinstance(atom, MapType):
        return atom.atomic
    return isinstance(atom, Scalar) or not atom.associative


def _add(value: Any, t: TypeRef, node: FieldSet, pe: str) -> None:
    """Add the paths ``value`` sets under ``node``'s element ``pe``."""
    atom = resolve(t, value)
    if _owned_whole(atom):
        node.members.add(pe)
        return
    child = FieldSet()
    _fill(value, atom, child)
    if child.members or child.children:
        node.children[pe] = child


def _fill(value: Any, atom: Atom, node: FieldSet) -> None:
    """Add the paths below a map or associative list to ``node`` (the value's own)."""
    if isinstance(atom, ListType):
        indexed = index_items(atom, value) if isinstance(value, list) else None
        for pe, item in (indexed[1] if indexed else {}).items():
            _add(item, atom.element, node, pe)
            node.members.add(pe)
    elif isinstance(atom, MapType) and isinstance(value, dict):
        fields = atom.fields
        for key, item in value.items():
            pe = "f:" + key
            _add(item, fields.get(key) or atom.element or DEDUCED, node, pe)
            # A struct field is owned through its leaves, unless it is null or an empty
            # map; map keys (labels, deduced objects) are always owned themselves.
            if item is None or item == {} or key not in fields:
                node.members.add(pe)


def ensure_named_fields_are_members(fs: FieldSet, t: TypeRef) -> FieldSet:
    """``fs`` plus every struct field that has paths under it, as a member itself."""
    atom = resolve(t, {})
    members = set(fs.members)
    children: dict[str, FieldSet] = {}
    for pe, child in fs.children.items():
        below: TypeRef = DEDUCED
        if pe.startswith("f:") and isinstance(atom, MapType):
            below = child_type(atom, pe[2:])
            if pe[2:] in atom.fields:
                members.add(pe)
        elif pe.startswith("k:") and isinstance(atom, ListType):
            below = atom.element
        children[pe] = ensure_named_fields_are_members(child, below)
    return FieldSet(members, children)
