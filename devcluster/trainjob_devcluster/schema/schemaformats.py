"""Field-error wording, Go renderings of JSON values, and the known string formats.

A real API server words a cause as apimachinery's field.Error does, prints bad values
with Go's ``%v``/``%q``/``%#v`` on decoded JSON (int64, float64, string, bool, map,
slice), and checks ``format:`` with kube-openapi's strfmt registry. Clients and tests
compare the resulting messages byte for byte, so all three are reproduced here rather
than approximated with Python's own renderings.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
import re
from collections.abc import Callable
from typing import Any

from ..common.go_text import go_float, go_quote, go_sharp_v

REQUIRED = "FieldValueRequired"
NOT_SUPPORTED = "FieldValueNotSupported"
TOO_LONG = "FieldValueTooLong"
TOO_MANY = "FieldValueTooMany"
TYPE_INVALID = "FieldValueTypeInvalid"
INVALID = "FieldValueInvalid"
DUPLICATE = "FieldValueDuplicate"
FORBIDDEN = "FieldValueForbidden"

# Errors that stop x-kubernetes-validations from running (apiextensions' hasBlockingErr).
BLOCKING_REASONS = frozenset({NOT_SUPPORTED, REQUIRED, TOO_LONG, TOO_MANY, TYPE_INVALID})

_WORDS = {
    REQUIRED: "Required value",
    NOT_SUPPORTED: "Unsupported value",
    TOO_LONG: "Too long",
    TOO_MANY: "Too many",
    TYPE_INVALID: "Invalid value",
    INVALID: "Invalid value",
    DUPLICATE: "Duplicate value",
    FORBIDDEN: "Forbidden",
}
_NO_VALUE = frozenset({REQUIRED, FORBIDDEN, TOO_LONG})


def field_message(reason: str, value: Any, detail: str, *, show_value: bool = True) -> str:
    """A cause message as field.Error.ErrorBody renders it: ``Type[: value][: detail]``."""
    text = _WORDS.get(reason, "Invalid value")
    if show_value and reason not in _NO_VALUE:
        text += ": " + go_value(value)
    return f"{text}: {detail}" if detail else text


def go_value(value: Any) -> str:
    """A bad value as field.Error prints it (the ``<v>`` of ``Invalid value: <v>``)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return go_quote(value)
    return go_sharp_v(value)


# -- formats (kube-openapi strfmt) ----------------------------------------------------
# Go's ``$`` only matches at the very end, hence ``\Z``; ``[0-9]`` because Python's ``\d``
# also matches non-ASCII digits.

_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})\Z")
_TIME = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|[+-][0-9]{2}:[0-9]{2})\Z")
_UUID = {
    "uuid": r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\Z",
    "uuid3": r"[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}\Z",
    "uuid4": r"[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}\Z",
    "uuid5": r"[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}\Z",
}


def is_date(text: str) -> bool:
    """RFC 3339 full-date, as Go's time.Parse("2006-01-02") accepts it."""
    match = _DATE.match(text)
    if match is None:
        return False
    try:
        datetime.date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        return False
    return True


def is_date_time(text: str) -> bool:
    """strfmt.IsDateTime, quirks included (split on any "t", any separator before fractions)."""
    if len(text) < 4:
        return False
    parts = text.lower().split("t")
    if len(parts) < 2 or not is_date(parts[0]):
        return False
    match = _TIME.match(parts[1])
    if match is None:
        return False
    return match[1] <= "23" and match[2] <= "59" and match[3] <= "59"


def parse_date_time(text: str) -> datetime.datetime | None:
    """The instant of an RFC 3339 date-time (what CEL sees as a timestamp), or None."""
    try:
        stamp = datetime.datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=datetime.UTC)


def _is_byte(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _is_ip(text: str, marker: str) -> bool:
    # strfmt takes any address net.ParseIP accepts and tells the families apart by text.
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return marker in text


def _is_cidr(text: str) -> bool:
    if "/" not in text:
        return False
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True


def _uuid_check(pattern: str) -> Callable[[str], bool]:
    compiled = re.compile(pattern, re.IGNORECASE)
    return lambda text: compiled.match(text) is not None


# Formats without an entry (hostname, email, uri, mac, duration, ...) are accepted as is.
FORMAT_CHECKS: dict[str, Callable[[str], bool]] = {
    "date": is_date,
    "date-time": is_date_time,
    "datetime": is_date_time,
    "byte": _is_byte,
    "ipv4": lambda text: _is_ip(text, "."),
    "ipv6": lambda text: _is_ip(text, ":"),
    "cidr": _is_cidr,
    **{name: _uuid_check(pattern) for name, pattern in _UUID.items()},
}
