"""How Go prints JSON values, for messages and keys that must match a real API server.

A real kube-apiserver builds some texts with ``fmt`` verbs (``%v``, ``%#v``, ``%T``,
``%q``) applied to decoded JSON, and serializes list keys with Go's JSON encoder. Clients
and tests compare those texts byte for byte, so the Go formats are reproduced here.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

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

_SHORT_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    '"': '\\"',
    "\\": "\\\\",
}


def _digits(f: float) -> tuple[str, int]:
    """Shortest round-trip digits of ``abs(f)`` and the decimal point position."""
    _, digits, exponent = Decimal(repr(abs(f))).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    point = len(digits) + exponent
    return text, point


def _format_e(neg: bool, digits: str, point: int) -> str:
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    exp = point - 1
    return f"{'-' if neg else ''}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"


def _format_f(neg: bool, digits: str, point: int) -> str:
    if point <= 0:
        text = "0." + "0" * -point + digits
    elif point >= len(digits):
        text = digits + "0" * (point - len(digits))
    else:
        text = digits[:point] + "." + digits[point:]
    return ("-" if neg else "") + text


def go_float(f: float) -> str:
    """``%v`` of a float64 (strconv 'g', shortest): ``0.31``, ``1e+06``, ``123456``."""
    if f != f:
        return "NaN"
    if f in (float("inf"), float("-inf")):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0:
        return "-0" if str(f).startswith("-") else "0"
    digits, point = _digits(f)
    exp = point - 1
    # With the shortest representation Go switches to an exponent from 1e+06 on.
    if exp < -4 or exp >= 6:
        return _format_e(f < 0, digits, point)
    return _format_f(f < 0, digits, point)


def go_json_float(f: float) -> str:
    """A float64 as encoding/json writes it (exponent only below 1e-6 or from 1e21)."""
    if f == 0:
        return "-0" if str(f).startswith("-") else "0"
    digits, point = _digits(f)
    if 1e-6 <= abs(f) < 1e21:
        return _format_f(f < 0, digits, point)
    text = _format_e(f < 0, digits, point)
    # encoding/json trims a leading zero of a negative exponent: 1e-07 -> 1e-7.
    mantissa, _, exp = text.partition("e")
    return f"{mantissa}e{exp[0]}{exp[1:].lstrip('0') or '0'}"


def go_quote(s: str) -> str:
    """``%q`` (strconv.Quote) of a string."""
    out = ['"']
    for ch in s:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


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
