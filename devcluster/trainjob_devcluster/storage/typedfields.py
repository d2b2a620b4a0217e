"""The field sets of typed values: which paths an applied configuration sets (the
FieldsV1 its managedFields entry records), and whether it converts to its type at all.

These follow structured-merge-diff, as typedops does: an empty map or a null is owned as
a whole, a struct is owned through its leaves, map keys and list items by their keys.
"""

from __future__ import annotations

from typing import Any

from .fieldsets import FieldSet
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

__all__ = [
    "ensure_named_fields_are_members",
    "fits",
    "fitted_field_set",
    "index_items",
    "to_field_set",
]


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
    if type(t) is Scalar:
        node.members.add(pe)
        return
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


def fitted_field_set(value: Any, t: TypeRef) -> FieldSet | None:
    """``to_field_set(value, t)`` when ``typed_errors(value, t)`` finds nothing, else None:
    both walks in one, as every apply needs both."""
    atom = resolve(t, value)
    out = FieldSet()
    if _owned_whole(atom):
        return out if fits(value, t) else None
    return out if _fit_fill(value, atom, out) else None


def _fit_add(value: Any, t: TypeRef, node: FieldSet, pe: str) -> bool:
    if type(t) is Scalar:
        if type(value) not in t.plain and not fits(value, t):
            return False
        node.members.add(pe)
        return True
    atom = resolve(t, value)
    if _owned_whole(atom):
        if not fits(value, t):
            return False
        node.members.add(pe)
        return True
    child = FieldSet.new()
    if not _fit_fill(value, atom, child):
        return False
    if child.members or child.children:
        node.children[pe] = child
    return True


def _fit_fill(value: Any, atom: Atom, node: FieldSet) -> bool:
    """_fill for a map or associative list atom, False where ``fits`` would be."""
    if value is None:
        return True
    if isinstance(atom, ListType):
        if not isinstance(value, list):
            return False
        seen: set[str] = set()
        for item in value:
            try:
                pe = item_pe(atom, item)
            except ValueError:
                return False
            if pe in seen or not _fit_add(item, atom.element, node, pe):
                return False
            seen.add(pe)
            node.members.add(pe)
        return True
    if not isinstance(value, dict) or not isinstance(atom, MapType):
        return False
    return _fit_map(value, atom, node)


def _fit_map(value: dict[str, Any], atom: MapType, node: FieldSet) -> bool:
    fields, extra = atom.fields, atom.element
    members = node.members
    for key, item in value.items():
        child = fields.get(key) or extra
        if child is None:
            return False
        pe = "f:" + key
        if type(child) is Scalar:
            # A scalar is owned itself (and a map or {} does not fit one).
            if type(item) not in child.plain and not fits(item, child):
                return False
            members.add(pe)
            continue
        if type(child) is MapType and type(item) is dict and not child.atomic:
            sub = FieldSet.new()
            if not _fit_map(item, child, sub):
                return False
            if sub.members or sub.children:
                node.children[pe] = sub
        elif not _fit_add(item, child, node, pe):
            return False
        if item is None or item == {} or key not in fields:
            members.add(pe)
    return True


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


def fits(value: Any, t: TypeRef) -> bool:
    """Whether typed_errors finds nothing: the same walk without building paths or
    messages, as nearly every configuration fits."""
    atom = resolve(t, value) if type(t) is Deduced else t
    if type(atom) is Scalar:
        if value is None or type(value) in atom.plain:
            return True
        kind = atom.kind
        if kind == "string":
            return isinstance(value, str)
        if kind == "numeric":
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind == "boolean":
            return isinstance(value, bool)
        return not isinstance(value, (dict, list))
    if value is None:
        return True
    if isinstance(atom, MapType):
        if not isinstance(value, dict):
            return False
        fields, extra = atom.fields, atom.element
        for key, item in value.items():
            child = fields.get(key) or extra
            if child is None:
                return False
            if type(child) is Scalar and type(item) in child.plain:
                continue
            if not fits(item, child):
                return False
        return True
    if not isinstance(value, list) or not isinstance(atom, ListType):
        return False
    element = atom.element
    if not atom.associative:
        return all(fits(item, element) for item in value)
    seen: set[str] = set()
    for item in value:
        try:
            pe = item_pe(atom, item)
        except ValueError:
            return False
        if pe in seen or not fits(item, element):
            return False
        seen.add(pe)
    return True
