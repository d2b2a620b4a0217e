"""How Go prints values, for messages and keys that must match a real API server byte
for byte.

A real kube-apiserver builds some texts with ``fmt`` verbs (``%v``, ``%#v``, ``%T``,
``%q``) applied to decoded JSON and serializes list keys with Go's JSON encoder. The
development cluster keeps its own renderings rather than the status server's: it is the
reference the server's messages are compared with in tests, so a mistake in one shows as
a difference instead of agreeing with itself.
"""

from __future__ import annotations

import json
import math
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

# strconv.Quote's one-letter escapes; other unprintable runes get \x, \u or \U.
_NAMED_ESCAPES = {
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


def _quoted_rune(ch: str) -> str:
    escaped = _NAMED_ESCAPES.get(ch)
    if escaped is not None:
        return escaped
    # str.isprintable is Go's unicode.IsPrint: letters, marks, numbers, punctuation,
    # symbols and the ASCII space; every other separator and control is escaped.
    if ch.isprintable():
        return ch
    code = ord(ch)
    if code < 0x80:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def go_quote(text: str) -> str:
    """``%q`` (strconv.Quote) of a string: ``"a\\"b\\n"``."""
    if text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'  # the common case, nothing to escape
    return '"' + "".join(map(_quoted_rune, text)) + '"'


def _shortest(value: float) -> tuple[str, int]:
    """The shortest digits that read back as ``abs(value)`` (finite, non-zero), as Go's
    strconv finds them (Python's repr finds the same ones), and the decimal exponent of
    the first: ("31", -1) for 0.31, ("1", 6) for 1e6."""
    _, digits, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    return text, exponent + len(text) - 1


def _scientific(negative: bool, digits: str, exponent: int, width: int) -> str:
    """strconv's ``%e`` of the digits; ``width`` is the exponent's least number of digits
    (two for fmt, one for encoding/json's negative exponents)."""
    mantissa = digits[:1] + ("." + digits[1:] if len(digits) > 1 else "")
    sign = "-" if exponent < 0 else "+"
    return f"{'-' if negative else ''}{mantissa}e{sign}{abs(exponent):0{width}d}"


def _positional(negative: bool, digits: str, exponent: int) -> str:
    """strconv's ``%f`` of the digits, with no more decimals than they need."""
    text = format(Decimal(f"{digits}e{exponent - len(digits) + 1}"), "f")
    return ("-" if negative else "") + text


def go_float(value: float) -> str:
    """``%v`` of a float64: ``0.31``, ``123456``, ``1e+06``, ``1e-05``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "-Inf" if value < 0 else "+Inf"
    negative = math.copysign(1.0, value) < 0
    if value == 0:
        return "-0" if negative else "0"
    digits, exponent = _shortest(value)
    # The shortest %g writes %e from an exponent of 6 (not the digits' count) or below -4.
    if exponent < -4 or exponent >= 6:
        return _scientific(negative, digits, exponent, 2)
    return _positional(negative, digits, exponent)


def go_json_float(f: float) -> str:
    """A float64 as encoding/json writes it: positional from 1e-6 up to 1e21, ``1e-7`` and
    ``1e+21`` outside (a negative exponent loses its leading zero)."""
    negative = math.copysign(1.0, f) < 0
    if f == 0:
        return "-0" if negative else "0"
    digits, exponent = _shortest(f)
    if 1e-6 <= abs(f) < 1e21:
        return _positional(negative, digits, exponent)
    return _scientific(negative, digits, exponent, 1 if exponent < 0 else 2)


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


# -- encoding/json's syntax errors -------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise json.JSONDecodeError("Expecting value", name, 0)


def _quoted_byte(ch: str) -> str:
    """The offending byte as Go's JSON scanner quotes it: ``'}'``, ``'\\n'``."""
    if ch in "'\"":
        return "'\\''" if ch == "'" else "'\"'"
    return "'" + go_quote(ch)[1:-1] + "'"


def _innermost(text: str, pos: int) -> str:
    """The kind of container open at ``pos`` (``{`` or ``[``), strings skipped."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in text[:pos]:
        if in_string:
            escaped = not escaped and ch == "\\"
            in_string = escaped or ch != '"'
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]" and stack:
            stack.pop()
    return stack[-1] if stack else ""


def _syntax_error(text: str, pos: int, msg: str) -> str:
    if pos >= len(text.rstrip()) or msg.startswith("Unterminated string"):
        return "unexpected end of JSON input"
    ch = text[pos]
    if msg.startswith("Expecting property name"):
        where = "looking for beginning of object key string"
    elif msg.startswith("Expecting ':'"):
        where = "after object key"
    elif msg.startswith("Expecting ','"):
        inside = _innermost(text, pos)
        where = "after object key:value pair" if inside == "{" else "after array element"
    elif msg.startswith("Invalid control character"):
        where = "in string literal"
    elif msg.startswith("Invalid \\escape"):
        ch, where = text[pos + 1 : pos + 2], "in string escape code"
    elif msg.startswith("Extra data"):
        where = "after top-level value"
    else:
        where = "looking for beginning of value"
    return f"invalid character {_quoted_byte(ch)} {where}"


def go_json_loads(data: bytes) -> Any:
    """``data`` decoded as Go's encoding/json decodes it (invalid UTF-8 replaced, no NaN
    or Infinity); ValueError with Go's syntax error message when it is not JSON."""
    try:
        return json.loads(data.decode("utf-8", errors="replace"), parse_constant=_reject_constant)
    except json.JSONDecodeError:
        pass
    # Again with one character per byte: Go's scanner reads bytes, and names the first
    # byte of a character it does not expect.
    text = data.decode("latin-1")
    try:
        json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        pos = exc.pos if exc.doc == text else text.find(exc.doc)  # NaN, Infinity
        raise ValueError(_syntax_error(text, pos, exc.msg)) from None
    raise ValueError("invalid character in string literal")  # not reached: same syntax
