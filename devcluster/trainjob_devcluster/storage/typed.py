"""The type model server-side apply works with, built from a CRD's openAPIV3Schema.

A real API server converts the CRD schema into a structured-merge-diff schema: structs
(objects with properties), maps (additionalProperties, preserve-unknown-fields), lists that
are atomic, sets or maps keyed by x-kubernetes-list-map-keys, and scalars. Values with no
declared type are "deduced" from the value itself: maps merge key by key, lists are atomic.
``metadata`` is always typed as ObjectMeta, whatever the CRD says about it.

``typed_errors`` reproduces the conversion errors an apply answers with a bare 500.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..common.go_text import go_sharp_v, go_type, go_v
from .fieldsets import index_pe, key_pe, pe_string, value_pe

__all__ = [
    "DEDUCED",
    "Atom",
    "Deduced",
    "ListType",
    "MapType",
    "Scalar",
    "TypeRef",
    "child_type",
    "item_pe",
    "object_meta",
    "resolve",
    "root_type",
    "typed_errors",
]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Scalar:
    kind: str  # "numeric", "string", "boolean" or "untyped"


@dataclass(frozen=True, eq=False)
class MapType:
    """A struct (``fields``), a map (``element``) or both (preserve-unknown-fields)."""

    fields: Mapping[str, TypeRef] = field(default_factory=lambda: _EMPTY)
    element: TypeRef | None = None
    atomic: bool = False


@dataclass(frozen=True, eq=False)
class ListType:
    """Atomic unless ``associative``; associative lists with ``keys`` are map lists."""

    element: TypeRef
    associative: bool = False
    keys: tuple[str, ...] = ()
    key_defaults: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True)
class Deduced:
    """A value typed by what it is. ``atomic`` maps are replaced whole, others merge."""

    atomic: bool = False


TypeRef = Scalar | MapType | ListType | Deduced
Atom = Scalar | MapType | ListType


DEDUCED = Deduced(atomic=False)
_UNTYPED = Deduced(atomic=True)
_UNTYPED_SCALAR = Scalar("untyped")
_STRING = Scalar("string")
_NUMERIC = Scalar("numeric")
_BOOLEAN = Scalar("boolean")
_DEDUCED_MAP = MapType(element=DEDUCED)
_UNTYPED_MAP = MapType(element=_UNTYPED, atomic=True)
_UNTYPED_LIST = ListType(element=_UNTYPED)


def child_type(atom: MapType, key: str) -> TypeRef:
    """The type of a map's entry ``key``."""
    return atom.fields.get(key) or atom.element or DEDUCED


def resolve(t: TypeRef, value: Any) -> Atom:
    """The atom a value is handled as. A null deduced value counts as a map, as in Go."""
    if not isinstance(t, Deduced):
        return t
    if isinstance(value, list):
        return _UNTYPED_LIST
    if isinstance(value, dict) or value is None:
        return _UNTYPED_MAP if t.atomic else _DEDUCED_MAP
    return _UNTYPED_SCALAR


def _struct(fields: Mapping[str, TypeRef]) -> MapType:
    return MapType(fields=MappingProxyType(dict(fields)))


def object_meta() -> MapType:
    """metav1.ObjectMeta as the published OpenAPI describes it."""
    owner_ref = _struct(
        {
            "apiVersion": _STRING,
            "kind": _STRING,
            "name": _STRING,
            "uid": _STRING,
            "controller": _BOOLEAN,
            "blockOwnerDeletion": _BOOLEAN,
        }
    )
    managed_entry = _struct(
        {
            "manager": _STRING,
            "operation": _STRING,
            "apiVersion": _STRING,
            "time": _UNTYPED_SCALAR,
            "fieldsType": _STRING,
            "fieldsV1": DEDUCED,
            "subresource": _STRING,
        }
    )
    strings = MapType(element=_STRING)
    return _struct(
        {
            "name": _STRING,
            "generateName": _STRING,
            "namespace": _STRING,
            "selfLink": _STRING,
            "uid": _STRING,
            "resourceVersion": _STRING,
            "generation": _NUMERIC,
            "creationTimestamp": _UNTYPED_SCALAR,
            "deletionTimestamp": _UNTYPED_SCALAR,
            "deletionGracePeriodSeconds": _NUMERIC,
            "labels": strings,
            "annotations": strings,
            "ownerReferences": ListType(owner_ref, associative=True, keys=("uid",)),
            "finalizers": ListType(_STRING, associative=True),
            "managedFields": ListType(managed_entry),
        }
    )


def _primitive(typ: str, fmt: str) -> Scalar:
    if typ in ("integer", "number"):
        return _NUMERIC
    if typ == "boolean":
        return _BOOLEAN
    # Only plain strings (and base64 "byte") are typed; date-time and every other format
    # are untyped scalars, so a number there is left for validation to reject.
    if typ == "string" and fmt in ("", "byte"):
        return _STRING
    return _UNTYPED_SCALAR


def _from_openapi(s: Mapping[str, Any], preserve: bool) -> TypeRef:
    # preserve-unknown-fields opts in every descendant as well.
    preserve = preserve or s.get("x-kubernetes-preserve-unknown-fields") is True
    if s.get("x-kubernetes-int-or-string") is True:
        return _UNTYPED_SCALAR
    typ = s.get("type", "")
    if typ == "object":
        return _object(s, preserve)
    if typ == "array":
        return _array(s, preserve)
    if typ:
        return _primitive(typ, s.get("format", ""))
    return DEDUCED


def _object(s: Mapping[str, Any], preserve: bool) -> MapType:
    props = s.get("properties") or {}
    fields = {name: _from_openapi(sub, preserve) for name, sub in props.items()}
    extra = s.get("additionalProperties")
    element: TypeRef | None
    if isinstance(extra, dict):
        element = _from_openapi(extra, preserve)
    elif extra is True or (extra is None and (preserve or not props)):
        element = DEDUCED
    else:
        element = None
    atomic = s.get("x-kubernetes-map-type") == "atomic"
    return MapType(MappingProxyType(fields), element, atomic)


def _array(s: Mapping[str, Any], preserve: bool) -> ListType:
    items = s.get("items")
    element = _from_openapi(items, preserve) if isinstance(items, dict) else _UNTYPED
    kind = s.get("x-kubernetes-list-type")
    if kind == "map":
        keys = tuple(s.get("x-kubernetes-list-map-keys") or ())
        props = (items or {}).get("properties") or {}
        defaults = {k: props[k]["default"] for k in keys if "default" in props.get(k, {})}
        return ListType(element, True, keys, MappingProxyType(defaults))
    return ListType(element, associative=kind == "set")


_ROOT_TYPES: dict[int, tuple[Mapping[str, Any], TypeRef]] = {}


def root_type(schema: Mapping[str, Any] | None) -> TypeRef:
    """The type of a whole object: the CRD schema, or deduced for built-in kinds.

    Built once per schema document (kept alive here, so its id stays its own)."""
    if schema is None:
        return DEDUCED
    known = _ROOT_TYPES.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    built = _build_root_type(schema)
    _ROOT_TYPES[id(schema)] = (schema, built)
    return built


def _build_root_type(schema: Mapping[str, Any]) -> TypeRef:
    root = _object(schema, False)
    fields = dict(root.fields)
    fields.setdefault("apiVersion", _STRING)
    fields.setdefault("kind", _STRING)
    fields["metadata"] = object_meta()
    return MapType(MappingProxyType(fields), root.element, root.atomic)


def item_pe(t: ListType, item: Any) -> str:
    """The path element of an associative list's item; ValueError says why there is none."""
    if not t.keys:
        if isinstance(item, dict):
            raise ValueError("associative list without keys has an element that's a map type")
        if isinstance(item, list):
            raise ValueError("associative list without keys has an element that's a list type")
        return value_pe(item)
    if item is None:
        raise ValueError("associative list with keys may not have a null element")
    if not isinstance(item, dict):
        raise ValueError("associative list with keys may not have non-map elements")
    keys: dict[str, Any] = {}
    for name in t.keys:
        if name in item:
            keys[name] = item[name]
        elif name in t.key_defaults:
            keys[name] = t.key_defaults[name]
        else:
            raise ValueError(
                f'associative list with keys has an element that omits key field "{name}" '
                "(and doesn't have default value)"
            )
    return key_pe(keys)


def _scalar_error(t: Scalar, value: Any) -> str | None:
    if value is None:
        return None
    is_scalar = not isinstance(value, dict | list)
    if t.kind == "numeric" and (isinstance(value, bool) or not isinstance(value, int | float)):
        return f"expected numeric (int or float), got {go_type(value)}"
    if t.kind == "string" and not isinstance(value, str):
        return f"expected string, got &value.valueUnstructured{{Value:{go_sharp_v(value)}}}"
    if t.kind == "boolean" and not isinstance(value, bool):
        return f"expected boolean, got &{{{go_v(value)}}}"
    if t.kind == "untyped" and not is_scalar:
        return f"expected any scalar, got &{{{go_v(value)}}}"
    return None


def _at(path: str, message: str) -> str:
    return f"{path}: {message}" if path else message


def _check(value: Any, t: TypeRef, path: str, errors: list[str]) -> None:
    atom = resolve(t, value)
    if isinstance(atom, Scalar):
        message = _scalar_error(atom, value)
        if message:
            errors.append(_at(path, message))
        return
    if value is None:
        return
    if isinstance(atom, ListType):
        if not isinstance(value, list):
            errors.append(_at(path, f"expected list, got &{{{go_v(value)}}}"))
            return
        seen: set[str] = set()
        for i, item in enumerate(value):
            pe = index_pe(i)
            if atom.associative:
                try:
                    pe = item_pe(atom, item)
                except ValueError as exc:
                    # Without a key there is no path to report deeper errors under.
                    errors.append(_at(path, f"element {i}: {exc}"))
                    return
                if pe in seen:
                    errors.append(_at(path, f"duplicate entries for key {pe_string(pe)}"))
                seen.add(pe)
            _check(item, atom.element, path + pe_string(pe), errors)
        return
    if not isinstance(value, dict):
        errors.append(_at(path, f"expected map, got &{{{go_v(value)}}}"))
        return
    for key in sorted(value):
        child = atom.fields.get(key) or atom.element
        if child is None:
            # Go stops looking at a map after its first undeclared field.
            errors.append(_at(f"{path}.{key}", "field not declared in schema"))
            return
        _check(value[key], child, f"{path}.{key}", errors)


def typed_errors(value: Any, t: TypeRef) -> str | None:
    """Why ``value`` cannot be converted to type ``t``, worded as Go words it, or None."""
    errors: list[str] = []
    _check(value, t, "", errors)
    if not errors:
        return None
    if len(errors) == 1:
        return errors[0]
    return "\n".join(["errors:", *("  " + e for e in errors)])
