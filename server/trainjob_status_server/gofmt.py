"""Go's ``%q`` of a string and ``%v`` of a float64, for messages that must read as a real
API server's byte for byte (its validation errors quote bad values with them).

The one implementation in the project: the development cluster builds its other Go
renderings (``%#v``, encoding/json floats) on these.
"""

from __future__ import annotations

import math

__all__ = ["exponent_form", "fixed_form", "go_float", "go_quote", "shortest_digits"]

_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def go_quote(text: str) -> str:
    """``%q`` (strconv.Quote) of a string."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch.isprintable():
            # Python's printable set is Go's unicode.IsPrint: L, M, N, P, S and ASCII space.
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def shortest_digits(value: float) -> tuple[str, int]:
    """The shortest round-trip digits of ``abs(value)`` (non-zero, finite), without
    leading or trailing zeros, and where the decimal point falls in them: (``"31"``, 0)
    for 0.31, (``"1"``, 7) for 1e6. repr has the same digits as strconv; only the layout
    differs."""
    mantissa, _, exp_text = repr(abs(value)).partition("e")
    whole, _, frac = mantissa.partition(".")
    raw = whole + frac
    digits = raw.lstrip("0")
    point = len(whole) + (int(exp_text) if exp_text else 0) - (len(raw) - len(digits))
    return digits.rstrip("0"), point


def exponent_form(negative: bool, digits: str, point: int) -> str:
    """``digits`` with the point at ``point`` as strconv's ``%e`` writes it: ``1.5e+06``."""
    exp = point - 1
    head = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{'-' if negative else ''}{head}e{'-' if exp < 0 else '+'}{abs(exp):02d}"


def fixed_form(negative: bool, digits: str, point: int) -> str:
    """``digits`` with the point at ``point`` as strconv's ``%f`` writes it: ``0.0031``."""
    sign = "-" if negative else ""
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def go_float(value: float) -> str:
    """``%v`` of a float64 (strconv 'g', shortest): ``0.31``, ``1e+06``, ``123456``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    digits, point = shortest_digits(value)
    # With the shortest precision strconv switches to %e when exp < -4 or exp >= 6.
    if not -4 <= point - 1 < 6:
        return exponent_form(value < 0, digits, point)
    return fixed_form(value < 0, digits, point)
