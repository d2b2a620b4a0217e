"""How Go prints JSON values, for messages and keys that must match a real API server.

A real kube-apiserver builds some texts with ``fmt`` verbs (``%v``, ``%#v``, ``%T``,
``%q``) applied to decoded JSON, and serializes list keys with Go's JSON encoder. Clients
and tests compare those texts byte for byte, so the Go formats are reproduced here, on
the server's ``%q`` and float digits (``trainjob_status_server.gofmt``).
"""

from __future__ import annotations

import json
from typing import Any

from trainjob_status_server.gofmt import (
    exponent_form,
    fixed_form,
    go_float,
    go_quote,
    shortest_digits,
)

__all__ = [
    "go_float",
    "go_json",
    "go_json_float",
    "go_quote",
    "go_sharp_v",
    "go_type",
    "go_v",
    "go_value_string",
]


def go_json_float(f: float) -> str:
    """A float64 as encoding/json writes it (exponent only below 1e-6 or from 1e21)."""
    if f == 0:
        return "-0" if str(f).startswith("-") else "0"
    digits, point = shortest_digits(f)
    if 1e-6 <= abs(f) < 1e21:
        return fixed_form(f < 0, digits, point)
    text = exponent_form(f < 0, digits, point)
    # encoding/json trims a leading zero of a negative exponent: 1e-07 -> 1e-7.
    mantissa, _, exp = text.partition("e")
    return f"{mantissa}e{exp[0]}{exp[1:].lstrip('0') or '0'}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def go_v(value: Any) -> str:
    """``%v`` of a decoded JSON value (``map[a:1]``, ``[x y]``, ``<nil>``)."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if _is_int(value):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "[" + " ".join(go_v(v) for v in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_v(value[k])}" for k in sorted(value)) + "]"
    return str(value)


def go_sharp_v(value: Any) -> str:
    """``%#v`` of a decoded JSON value held in an ``interface{}``."""
    if value is None:
        return "interface {}(nil)"
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(go_sharp_v(v) for v in value) + "}"
    if isinstance(value, dict):
        inner = ", ".join(f"{go_quote(k)}:{go_sharp_v(value[k])}" for k in sorted(value))
        return "map[string]interface {}{" + inner + "}"
    return go_v(value)


def go_type(value: Any) -> str:
    """``%T`` of a decoded JSON value, as the API server's JSON decoder types it."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if _is_int(value):
        return "int64" if -(2**63) <= value < 2**63 else "float64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "[]interface {}"
    return "map[string]interface {}"


def go_value_string(value: Any) -> str:
    """How structured-merge-diff prints a key value in a field path: ``"Ready"``, ``80``."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, list):
        return "[" + ", ".join(go_value_string(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={go_value_string(value[k])}" for k in sorted(value)) + "}"
    return go_v(value)


def _go_json_string(s: str) -> str:
    text = json.dumps(s, ensure_ascii=False)
    # encoding/json escapes HTML-significant characters and the JS line separators.
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(raw, escaped)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def go_json(value: Any) -> str:
    """Compact JSON as Go's encoding/json writes a decoded value: map keys sorted."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if _is_int(value):
        return str(value)
    if isinstance(value, float):
        return go_json_float(value)
    if isinstance(value, str):
        return _go_json_string(value)
    if isinstance(value, list):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    if isinstance(value, dict):
        items = (f"{_go_json_string(k)}:{go_json(value[k])}" for k in sorted(value))
        return "{" + ",".join(items) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")
