"""One compiled node of a structural schema and the OpenAPI checks of a value against it.

The checks, their order and their wording are those of the go-openapi validator that
kube-apiserver runs on custom resources (k8s.io/kube-openapi/pkg/validation/validate):
per node the type, string, format, number, array, enum and object validators run in that
order, and each failure is later turned into a field error the way apiextensions does it.
Values are what Python's json module decodes (int, float, str, bool, None, list, dict),
which has the same int/float split as the API server's decoder.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from ..common.go_text import go_float, go_quote
from ..common.status import Cause
from .schemaformats import (
    FORMAT_CHECKS,
    INVALID,
    NOT_SUPPORTED,
    REQUIRED,
    TOO_LONG,
    TOO_MANY,
    TYPE_INVALID,
    field_message,
)

__all__ = ["INT_RANGES", "Fault", "Node", "fault_cause", "same"]

INT_RANGES = {
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
    "": (-(2**63), 2**63 - 1),  # any other format: int64
}
_FLOAT32_MAX = 3.4028234663852886e38
_JSON_INT_LIMIT = 2.0**53


class Fault(NamedTuple):
    """One go-openapi result: ``name`` is the message path, ``plain`` marks a bare error.

    Plain errors (the "Checked value ..." range errors) are not go-openapi Validation
    errors, so the API server reports them on the validation root with value ``""``.
    """

    reason: str
    name: str
    value: Any
    detail: str
    plain: bool = False


def fault_cause(fault: Fault, root: str | None) -> Cause:
    """The cause apiextensions makes of a go-openapi fault under the field path ``root``."""
    name = fault.name.removeprefix(".")
    field = root or "<nil>"
    if name and not fault.plain:
        field = f"{root}.{name}" if root else name
    return Cause(fault.reason, field_message(fault.reason, fault.value, fault.detail), field)


def same(a: Any, b: Any) -> bool:
    """Go's reflect.DeepEqual on decoded JSON: unlike ``==``, 1, 1.0 and True all differ."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b) or a != b:
        return False
    if kind is dict:
        return all(same(v, b[k]) for k, v in a.items())
    if kind is list:
        return all(map(same, a, b))
    return True


def _json_type(value: Any) -> tuple[str, str]:
    """The (type, format) go-openapi infers for a decoded value."""
    kind = type(value)
    if kind is str:
        return "string", ""
    if kind is bool:
        return "boolean", ""
    if kind is int:
        return "integer", "int64"
    if kind is float:
        return "number", "float64"
    if kind is list:
        return "array", ""
    return "object", ""


class Node:
    """A schema node compiled once: constraints read from the dict into attributes."""

    # One attribute per constraint, read once from the schema dict.
    # fmt: off
    __slots__ = (
        "additional", "default", "embedded", "enum", "enum_detail", "excl_max", "excl_min",
        "format", "format_check", "has_default", "int_or_string", "items", "list_keys",
        "list_type", "max_items", "max_length", "max_props", "maximum", "min_items",
        "min_length", "min_props", "minimum", "multiple_of", "nullable", "pattern",
        "pattern_re", "preserve_unknown", "properties", "raw", "required", "rules", "type",
    )
    # fmt: on

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.type: str | None = raw.get("type")
        self.int_or_string = bool(raw.get("x-kubernetes-int-or-string"))
        self.format: str = raw.get("format", "")
        self.format_check: Callable[[str], bool] | None = FORMAT_CHECKS.get(self.format)
        self.nullable = bool(raw.get("nullable"))
        self.minimum: float | None = raw.get("minimum")
        self.maximum: float | None = raw.get("maximum")
        self.excl_min = bool(raw.get("exclusiveMinimum"))
        self.excl_max = bool(raw.get("exclusiveMaximum"))
        self.multiple_of: float | None = raw.get("multipleOf")
        self.min_length: int | None = raw.get("minLength")
        self.max_length: int | None = raw.get("maxLength")
        self.pattern: str | None = raw.get("pattern")
        self.pattern_re = re.compile(self.pattern) if self.pattern else None
        self.min_items: int | None = raw.get("minItems")
        self.max_items: int | None = raw.get("maxItems")
        self.min_props: int | None = raw.get("minProperties")
        self.max_props: int | None = raw.get("maxProperties")
        self.required: tuple[str, ...] = tuple(raw.get("required", ()))
        enum = raw.get("enum")
        self.enum: tuple[Any, ...] | None = tuple(enum) if enum is not None else None
        self.enum_detail = _supported_values(self.enum or ())
        self.properties: dict[str, Node] = {
            k: Node(v) for k, v in (raw.get("properties") or {}).items()
        }
        extra = raw.get("additionalProperties")
        self.additional: Node | None = Node(extra) if isinstance(extra, dict) else None
        items = raw.get("items")
        self.items: Node | None = Node(items) if isinstance(items, dict) else None
        self.preserve_unknown = bool(raw.get("x-kubernetes-preserve-unknown-fields"))
        self.embedded = bool(raw.get("x-kubernetes-embedded-resource"))
        self.has_default = "default" in raw
        self.default: Any = raw.get("default")
        self.list_type: str | None = raw.get("x-kubernetes-list-type")
        self.list_keys: tuple[str, ...] = tuple(raw.get("x-kubernetes-list-map-keys", ()))
        # The compiled x-kubernetes-validations rules, filled in by the owner
        # (StructuralSchema).
        self.rules: list[Any] = []

    def children(self) -> list[Node]:
        out = list(self.properties.values())
        if self.additional is not None:
            out.append(self.additional)
        if self.items is not None:
            out.append(self.items)
        return out

    def map_key(self, item: Any) -> tuple[Any, ...] | None:
        """The x-kubernetes-list-map-keys of one map-list item (None if not an object)."""
        if type(item) is not dict:
            return None
        return tuple(_freeze_scalar(item.get(k)) for k in self.list_keys)

    # -- OpenAPI value validation -------------------------------------------------------

    def check(self, value: Any, path: str, old: Any, has_old: bool, out: list[Fault]) -> None:
        """Append the faults of ``value`` (message path ``path``) to ``out``.

        With ``has_old``, a value deep-equal to ``old`` is not checked at all: the API
        server's ratcheting drops every error found on an unchanged value.
        """
        if has_old and same(value, old):
            return
        if value is None:
            if self.type and not self.nullable:
                out.append(Fault(TYPE_INVALID, path, "null", _type_msg(path, self.type, "null")))
            if self.enum is not None:
                self._check_enum(value, path, out)
            return
        kind = type(value)
        if self.type is not None:
            self._check_type(value, path, out)
        elif self.int_or_string:
            self._check_int_or_string(value, path, out)
        if kind is str:
            self._check_string(value, path, out)
        elif kind is int or kind is float:
            self._check_number(value, path, out)
        elif kind is list:
            self._check_array(value, path, old, has_old, out)
        if self.enum is not None:
            self._check_enum(value, path, out)
        if kind is dict:
            self._check_object(value, path, old, has_old, out)

    def _check_type(self, value: Any, path: str, out: list[Fault]) -> None:
        want = self.type
        got, got_format = _json_type(value)
        if got == want:
            return
        kind = type(value)
        float_int = (
            kind is float
            and want == "integer"
            and value.is_integer()
            and abs(value) <= _JSON_INT_LIMIT
        )
        int_float = kind is int and want == "number"
        fmt = self.format
        if kind is not str and kind is not list and fmt:
            if not (got_format == fmt or float_int or int_float):
                out.append(Fault(TYPE_INVALID, path, got_format, _type_msg(path, fmt, got_format)))
                return
        elif fmt and want not in ("number", "integer"):
            # go-openapi waves through any string or array for a formatted non-numeric
            # schema; the format validator then only looks at strings.
            return
        if not (float_int or int_float):
            out.append(Fault(TYPE_INVALID, path, got, _type_msg(path, str(want), got)))

    def _check_int_or_string(self, value: Any, path: str, out: list[Fault]) -> None:
        kind = type(value)
        if kind is str or kind is int or (kind is float and value.is_integer()):
            return
        got = _json_type(value)[0]
        # The anyOf [integer, string] failure: a bare composite error, then the first branch's.
        out.append(
            Fault(INVALID, path, "", f"{path} must validate at least one schema (anyOf)", True)
        )
        out.append(Fault(TYPE_INVALID, path, got, _type_msg(path, "integer", got)))

    def _check_string(self, value: str, path: str, out: list[Fault]) -> None:
        # go-openapi's string validator stops at its first failure.
        if self.max_length is not None and len(value) > self.max_length:
            detail = f"may not be more than {self.max_length} bytes"
            out.append(Fault(TOO_LONG, path, value, detail))
        elif self.min_length is not None and len(value) < self.min_length:
            detail = f"{path} in body should be at least {self.min_length} chars long"
            out.append(Fault(INVALID, path, value, detail))
        elif self.pattern_re is not None and self.pattern_re.search(value) is None:
            detail = f"{path} in body should match '{self.pattern}'"
            out.append(Fault(INVALID, path, value, detail))
        if self.format_check is not None and not self.format_check(value):
            detail = f"{path} in body must be of type {self.format}: {go_quote(value)}"
            out.append(Fault(TYPE_INVALID, path, value, detail))

    def _check_number(self, value: float, path: str, out: list[Fault]) -> None:
        if not self._in_format_range(value):
            typ = self.type or ""
            how = f"{typ} with format {self.format}" if self.format else typ
            out.append(
                Fault(INVALID, path, "", f"Checked value must be of type {how} in {path}", True)
            )
        # go-openapi merges these three in this order (not the order it computes them).
        if self.multiple_of is not None and not _is_multiple(value, self.multiple_of):
            detail = f"{path} in body should be a multiple of {go_float(float(self.multiple_of))}"
            out.append(Fault(INVALID, path, value, detail))
        low = self.minimum
        if low is not None and (value <= low if self.excl_min else value < low):
            how = "greater than" if self.excl_min else "greater than or equal to"
            out.append(
                Fault(
                    INVALID, path, value, f"{path} in body should be {how} {go_float(float(low))}"
                )
            )
        high = self.maximum
        if high is not None and (value >= high if self.excl_max else value > high):
            how = "less than" if self.excl_max else "less than or equal to"
            out.append(
                Fault(
                    INVALID, path, value, f"{path} in body should be {how} {go_float(float(high))}"
                )
            )

    def _in_format_range(self, value: float) -> bool:
        """go-openapi's IsValueValidAgainstRange: does the value fit the declared format?"""
        if self.type == "integer":
            if type(value) is float:
                if not value.is_integer():
                    return False
                value = int(value)
            low, high = INT_RANGES.get(self.format, INT_RANGES[""])
            return low <= value <= high
        if self.format in ("float", "float32"):
            return abs(value) <= _FLOAT32_MAX
        return True

    def _check_array(
        self, value: list[Any], path: str, old: Any, has_old: bool, out: list[Fault]
    ) -> None:
        items = self.items
        if items is not None:
            olds = old if has_old and type(old) is list else None
            by_key = (
                {self.map_key(o): o for o in olds}
                if olds is not None and self.list_type == "map"
                else None
            )
            for i, item in enumerate(value):
                sub = f"{path}[{i}]"
                if by_key is not None:
                    found = by_key.get(self.map_key(item), _MISSING)
                    items.check(item, sub, found, found is not _MISSING, out)
                elif olds is not None and self.list_type == "set":
                    if not any(same(item, o) for o in olds):
                        items.check(item, sub, None, False, out)
                else:
                    items.check(item, sub, None, False, out)
        size = len(value)
        if self.min_items is not None and size < self.min_items:
            detail = f"{path} in body should have at least {self.min_items} items"
            out.append(Fault(INVALID, path, size, detail))
        if self.max_items is not None and size > self.max_items:
            out.append(Fault(TOO_MANY, path, size, f"must have at most {self.max_items} items"))

    def _check_enum(self, value: Any, path: str, out: list[Fault]) -> None:
        assert self.enum is not None
        if any(_enum_match(value, allowed) for allowed in self.enum):
            return
        out.append(Fault(NOT_SUPPORTED, path, value, self.enum_detail))

    def _check_object(
        self, value: dict[str, Any], path: str, old: Any, has_old: bool, out: list[Fault]
    ) -> None:
        count = len(value)
        # go-openapi returns at once on a property-count failure: nothing below is checked.
        if self.min_props is not None and count < self.min_props:
            detail = f"{path} in body should have at least {self.min_props} properties"
            out.append(Fault(INVALID, path, count, detail))
            return
        if self.max_props is not None and count > self.max_props:
            out.append(Fault(TOO_MANY, path, count, f"must have at most {self.max_props} items"))
            return
        olds = old if has_old and type(old) is dict else None
        props = self.properties
        extra = self.additional
        for key, item in value.items():
            node = props.get(key)
            if node is not None:
                sub = f"{path}.{key}" if path else key
            elif extra is not None:
                # go-openapi joins additionalProperties paths with a dot even at the root.
                node, sub = extra, f"{path}.{key}"
            else:
                continue
            if olds is not None and key in olds:
                node.check(item, sub, olds[key], True, out)
            else:
                node.check(item, sub, None, False, out)
        for key in self.required:
            if key not in value:
                out.append(Fault(REQUIRED, f"{path}.{key}", None, ""))


class _Missing:
    """Marks "no correlated old value" where None is a legal JSON value."""


_MISSING = _Missing()


def _freeze_scalar(value: Any) -> Any:
    # Map-list keys are scalars; tag non-strings so 1, 1.0 and True stay distinct keys.
    return value if type(value) is str else (type(value).__name__, value)


def _supported_values(enum: tuple[Any, ...]) -> str:
    # apiextensions prints non-string enum values as JSON, then quotes every one.
    shown = [v if isinstance(v, str) else json.dumps(v, separators=(",", ":")) for v in enum]
    return "supported values: " + ", ".join(go_quote(v) for v in shown)


def _type_msg(path: str, want: str, got: str) -> str:
    return f"{path} in body must be of type {want}: {go_quote(got)}"


def _is_multiple(value: float, factor: float) -> bool:
    if factor == 0:
        return True
    quotient = value / factor
    return math.isfinite(quotient) and abs(quotient - round(quotient)) < 1e-9


def _enum_match(value: Any, allowed: Any) -> bool:
    if type(value) is bool or type(allowed) is bool:
        return type(value) is type(allowed) and value == allowed
    if isinstance(value, int | float) and isinstance(allowed, int | float):
        return bool(value == allowed)
    return same(value, allowed)
