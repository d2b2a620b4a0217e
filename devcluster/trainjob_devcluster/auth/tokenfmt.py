"""How Go prints the values inside the token APIs' error messages (tokens.py helpers).

The authentication errors embed Go's ``%q`` of strings and string slices, aggregated
error lists and JSON decoding errors; clients and tests compare those texts, so they
are rebuilt here byte for byte (for the inputs the development cluster can produce).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Sequence
from typing import Any

from ..common.go_text import go_quote
from ..common.status import ApiError, bad_request


def go_quote_list(values: Sequence[str]) -> str:
    """Go's ``%q`` of a ``[]string``: ``["a" "b"]``, space separated."""
    return "[" + " ".join(go_quote(v) for v in values) + "]"


def aggregate(messages: Iterable[str]) -> str:
    """``utilerrors.NewAggregate(...).Error()``: one message bare, several bracketed.

    Duplicates are printed once, as the Go aggregate does.
    """
    unique = list(dict.fromkeys(messages))
    if len(unique) == 1:
        return unique[0]
    return "[" + ", ".join(unique) + "]"


def format_rfc3339(epoch: float) -> str:
    """metav1.Time on the wire: UTC, whole seconds, ``Z`` suffix."""
    moment = datetime.datetime.fromtimestamp(math.floor(epoch), tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: object) -> float | None:
    """Epoch seconds of an RFC 3339 timestamp, or None when it is not one."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return moment.timestamp()


def _json_kind(value: Any, numeric_target: bool) -> str:
    """The ``Value`` of Go's UnmarshalTypeError for a decoded JSON value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        # Go names the literal only when a number failed to fit a numeric field.
        return f"number {value!r}" if numeric_target else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def cannot_unmarshal(kind: str, value: Any, struct: str, field: str, go_type: str) -> ApiError:
    """The 400 a real server answers when a body field has the wrong JSON type.

    ``kind`` is the object kind (``TokenRequest``); ``struct`` the Go struct holding
    the field and ``field`` its full JSON path, as encoding/json reports them.
    """
    numeric = go_type in {"int64", "int32"}
    return bad_request(
        f'{kind} in version "v1" cannot be handled as a {kind}: json: cannot unmarshal '
        f"{_json_kind(value, numeric)} into Go struct field {struct}.{field} of type {go_type}"
    )


def string_field(kind: str, obj: dict[str, Any], key: str, struct: str, path: str) -> str:
    """A string member of a decoded object; JSON null and absence both read as ``""``."""
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise cannot_unmarshal(kind, value, struct, path, "string")
    return value


def string_list_field(
    kind: str, obj: dict[str, Any], key: str, struct: str, path: str
) -> list[str] | None:
    """A ``[]string`` member; None when absent or null."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise cannot_unmarshal(kind, value, struct, path, "[]string")
    for item in value:
        if not isinstance(item, str):
            raise cannot_unmarshal(kind, item, struct, path, "string")
    return list(value)


def object_field(
    kind: str, obj: dict[str, Any], key: str, struct: str, path: str, go_type: str
) -> dict[str, Any] | None:
    """A nested object member; None when absent or null."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise cannot_unmarshal(kind, value, struct, path, go_type)
    return value
