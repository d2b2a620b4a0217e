"""Go's ``%q`` of a string, ``%v`` of a float64 and kubectl's ages, for texts that must
read as a real API server's or kubectl's byte for byte (validation errors quote bad
values with the first two; ``kubectl trainjob`` and the development cluster's tables show
ages and ETAs with the third).

The validation messages are compared with kube-apiserver's own answers on the real
control plane (``tests/server/test_validation.py``).
"""

from __future__ import annotations

import math
from bisect import bisect_right

__all__ = [
    "exponent_form",
    "fixed_form",
    "go_float",
    "go_prints",
    "go_quote",
    "human_duration",
    "shortest_digits",
]

_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


# Where Go's unicode tables (Unicode 15.0.0 in Go 1.21 to 1.26, so in kube-apiserver) and
# Python's (14.0.0 in 3.11, 15.0.0 in 3.12, 15.1.0 in 3.13) disagree on what prints: the
# graphic characters Unicode 15.0 added, and those 15.1 added. Each range is inclusive.
_ADDED_IN_15_0 = (
    (0x0CF3, 0x0CF3),
    (0x0ECE, 0x0ECE),
    (0x10EFD, 0x10EFF),
    (0x1123F, 0x11241),
    (0x11B00, 0x11B09),
    (0x11F00, 0x11F10),
    (0x11F12, 0x11F3A),
    (0x11F3E, 0x11F59),
    (0x1342F, 0x1342F),
    (0x13440, 0x13455),
    (0x1B132, 0x1B132),
    (0x1B155, 0x1B155),
    (0x1D2C0, 0x1D2D3),
    (0x1DF25, 0x1DF2A),
    (0x1E030, 0x1E06D),
    (0x1E08F, 0x1E08F),
    (0x1E4D0, 0x1E4F9),
    (0x1F6DC, 0x1F6DC),
    (0x1F774, 0x1F776),
    (0x1F77B, 0x1F77F),
    (0x1F7D9, 0x1F7D9),
    (0x1FA75, 0x1FA77),
    (0x1FA87, 0x1FA88),
    (0x1FAAD, 0x1FAAF),
    (0x1FABB, 0x1FABD),
    (0x1FABF, 0x1FABF),
    (0x1FACE, 0x1FACF),
    (0x1FADA, 0x1FADB),
    (0x1FAE8, 0x1FAE8),
    (0x1FAF7, 0x1FAF8),
    (0x2B739, 0x2B739),
    (0x31350, 0x323AF),
)
_ADDED_IN_15_1 = ((0x2FFC, 0x2FFF), (0x31EF, 0x31EF), (0x2EBF0, 0x2EE5D))


def _within(code: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    at = bisect_right(ranges, (code, 0x110000)) - 1
    return at >= 0 and ranges[at][0] <= code <= ranges[at][1]


def go_prints(ch: str) -> bool:
    """Go's ``strconv.IsPrint``: letters, marks, numbers, punctuation, symbols and the
    ASCII space (Python's ``isprintable``), by Go's Unicode version, not Python's."""
    code = ord(ch)
    if _within(code, _ADDED_IN_15_0):
        return True
    if _within(code, _ADDED_IN_15_1):
        return False
    return ch.isprintable()


def go_quote(text: str) -> str:
    """``%q`` (strconv.Quote) of a string."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif go_prints(ch):
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


def human_duration(seconds: float) -> str:
    """A duration as kubectl prints ages (apimachinery's ``duration.HumanDuration``):
    45s, 5m30s, 3h, 2d4h, 1y30d."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m{whole % 60}s" if whole % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"
