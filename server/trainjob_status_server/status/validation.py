"""A status post's ``trainerStatus``, parsed and checked exactly as the TrainJob CRD does.

Pure: no I/O, no clock (the receive time is passed in). The rules are those of the CRD's
``status.trainerStatus`` schema and its ``x-kubernetes-validations`` rule, checked in
straight-line code; the causes, their order and wording, and the overall message are the
ones a real kube-apiserver answers (recorded from v1.36). The tests compare this module
with the real API server's answers on generated objects.

Three outcomes besides success:

``PayloadError`` (422 ``Invalid payload: <detail>``)
    The body is not a JSON object, or a field we read has the wrong JSON type. A wrong
    JSON type is what the API server's server-side apply cannot even convert to the
    schema's types (it answers a bare 500 before validating): ``trainerStatus`` or a
    metric that is not an object, ``metrics`` that is not an array, a ``name``, ``value``
    or ``lastUpdatedTime`` that is not a string, an integer field that is not a number
    (strings and booleans included). Such a body is refused whole, whatever else is wrong
    with it; the detail names the first such field in the body, its expected and its
    actual JSON type.
``ValidationFailed`` (422 Invalid, the API server's own message and causes)
    Every value of the right JSON type that the CRD refuses, all of them at once. Any JSON
    number is the right type for an integer field (apply converts it, validation judges
    it): ``40.5`` gets the three causes the API server gives, while a whole number
    written as a float (``5.0``, ``1e2``, ``-0.0``) passes, as it does there, and is
    written as the integer. go-openapi's type check even takes a float within a relative
    1e-9 of an integer for one, so ``40.00000000001`` gets the int32 range cause only.
    Also two rules of our own, worded as field errors on
    ``status.trainerStatus.lastUpdatedTime`` and run where the CRD's CEL rules run (not
    after a blocking error): a time more than 5 minutes after the post was received
    (a clock that far off is broken, and the stamp is what users read), and a time
    outside years 1..9999 UTC (which the API server accepts, e.g. year 0000, but no
    ordering can use). And one stricter reading of the ``date-time`` format, answered as
    the API server answers a string that is not one (below).
``None``
    Nothing to write: no ``trainerStatus`` or ``"trainerStatus": null``.

Decisions, each as the API server or Kubeflow Trainer's status server behaves unless said otherwise:

- ``null`` is an absent field at every level (the API server drops nulls from
  non-nullable fields before validating; Kubeflow Trainer's Go structs decode them as unset). So
  a missing or null ``lastUpdatedTime`` is stamped with the receive time (the CRD's rule
  requires one), and a null metric ``name`` is "Required value".
- Unknown fields are ignored at every level (the API server prunes them). Field names are
  case-sensitive, as the API server's are.
- Numbers decode as the API server's decoder does: an integer within int64 is an
  integer, any other number a float64. So 2**63 fails as the float 9.223372036854776e+18
  does there. A number too large for a float64 (``1e400``) in a field we read is a
  PayloadError (the API server cannot decode such a body at all). ``NaN`` and
  ``Infinity`` are not JSON: a PayloadError wherever they appear.
- The body must be UTF-8 (no BOM) and a JSON object; duplicate keys are allowed, the
  last one wins (as in Go's encoding/json, which Kubeflow Trainer's status server uses).
  Invalid UTF-8, and an unpaired surrogate escape (``"\\ud800"``) in a string we keep,
  are PayloadErrors: Kubeflow Trainer's status server would replace them with U+FFFD and
  write text the client never sent.
- Causes follow the order of the keys in the body (and ``name``/``value`` inside a
  metric), then each metric's missing required fields, then ``maxItems``. The API server
  walks the schema's properties in Go map order, so a recorded answer only pins one order
  (the body's, in the recordings); the body's order is the one that is stable.
- ``lastUpdatedTime`` is accepted when it is an RFC 3339 date-time (section 5.6: ``T``
  or ``t``, a ``.`` before the fraction digits, ``Z``/``z`` or an offset within
  ``±23:59``, nothing after it) that kube-openapi's ``strfmt.IsDateTime`` also accepts
  (no leap second, a real calendar day). ``IsDateTime``, which the API server runs for
  the CRD's ``format: date-time``, takes more: any ``±NN:NN`` offset (``+99:99``), any
  character before the fraction digits (``,5``, ``x5``), anything after a second ``t``
  (``Ztrailing``: it splits the lowered text on ``t``). Those are refused here with the
  message the API server gives a string that is no date-time (``FieldValueTypeInvalid``
  and the "not checked" cause): what such a client meant cannot be known (Go's
  ``time.Parse``, and so ``metav1.Time``, which Kubeflow Trainer's Go types use for this
  field, refuse ``+99:99`` and trailing text), and a reading that follows
  ``IsDateTime``'s pattern would store them days off (``+99:99``) or cut short
  (``Ztrailing``). An accepted time is written in UTC as
  ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``: the instant the client sent (fraction digits past
  microseconds dropped), the form Go's RFC 3339 writes for a UTC time, so readers in any
  language agree on it.
"""

from __future__ import annotations

import json
import json.encoder
import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from trainjob_status.contract import GROUP, KIND, MAX_METRIC_CHARS, MAX_METRICS

from ..failures import Failure
from ..go_text import go_float, go_quote

__all__ = [
    "GROUP",
    "KIND",
    "MAX_AHEAD",
    "Cause",
    "Metric",
    "PayloadError",
    "TrainerStatus",
    "ValidationFailed",
    "decode_payload",
    "format_time",
    "parse_trainer_status",
]

# How far after its receive time a post's lastUpdatedTime may lie (clock skew allowance).
MAX_AHEAD = timedelta(minutes=5)
_AHEAD_DETAIL = (
    f"must not be more than {MAX_AHEAD.seconds // 60} minutes after the time the server received it"
)

# metav1.CauseType values.
INVALID = "FieldValueInvalid"
TYPE_INVALID = "FieldValueTypeInvalid"
REQUIRED = "FieldValueRequired"
TOO_LONG = "FieldValueTooLong"
TOO_MANY = "FieldValueTooMany"
# Causes that keep the API server from running the CEL rules (apiextensions'
# hasBlockingErr); it says so in one extra cause instead.
_BLOCKING = frozenset({REQUIRED, TOO_LONG, TOO_MANY, TYPE_INVALID})

_MAX_STRING = MAX_METRIC_CHARS
_MAX_METRICS = MAX_METRICS
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
# go-openapi's type check takes a float64 within [-(2**53 - 1), 2**53 - 1] as an integer
# if it is one, or within a relative 1e-9 of one (swag/conv.IsFloat64AJSONInteger).
_FLOAT_INT_MAX = float(2**53 - 1)
_FLOAT_INT_EPSILON = 1e-9


class PayloadError(Failure):
    """The body does not decode, or a field has the wrong JSON type (422 Invalid payload)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"Invalid payload: {detail}")
        self.detail = detail

    @property
    def message(self) -> str:
        return f"Invalid payload: {self.detail}"


@dataclass(frozen=True, slots=True)
class Cause:
    """One ``details.causes`` entry (metav1.StatusCause; ``type`` is its JSON ``reason``)."""

    type: str
    message: str
    field: str

    def to_json(self) -> dict[str, str]:
        return {"reason": self.type, "message": self.message, "field": self.field}


NOT_CHECKED = Cause(
    INVALID,
    "Invalid value: null: some validation rules were not checked because the object was "
    "invalid; correct the existing errors to complete validation",
    "<nil>",
)


class ValidationFailed(Failure):
    """What the CRD refuses: the API server's 422 for TrainJob ``name``, all causes in order."""

    group = GROUP
    kind = KIND

    def __init__(self, name: str, causes: Sequence[Cause]) -> None:
        self.name = name
        self.causes = tuple(causes)
        parts = [f"{c.field}: {c.message}" for c in self.causes]
        joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
        self.message = f"{KIND}.{GROUP} {go_quote(name)} is invalid: {joined}"
        super().__init__(self.message)


class Metric(NamedTuple):
    """One metric. A NamedTuple, not a dataclass: a post may carry 256 of them, and a
    tuple is cheaper to build than a dataclass instance."""

    name: str
    value: str


@dataclass(frozen=True, slots=True)
class TrainerStatus:
    """A valid update; ``None`` fields are left out of the written object."""

    progress_percentage: int | None
    estimated_remaining_seconds: int | None
    metrics: tuple[Metric, ...] | None  # in the post's order, names interned
    last_updated_time: datetime  # aware, UTC

    def to_json(self) -> dict[str, Any]:
        """The ``trainerStatus`` object as a dict: what ``encoded`` writes as JSON (and what
        the post is answered with)."""
        out: dict[str, Any] = {}
        if self.progress_percentage is not None:
            out["progressPercentage"] = self.progress_percentage
        if self.estimated_remaining_seconds is not None:
            out["estimatedRemainingSeconds"] = self.estimated_remaining_seconds
        if self.metrics is not None:
            out["metrics"] = [{"name": name, "value": value} for name, value in self.metrics]
        out["lastUpdatedTime"] = format_time(self.last_updated_time)
        return out

    def encoded(self, received: datetime) -> EncodedStatus:
        """The update as it waits for its write; ``received`` is when the server received
        the post that carries it.

        Its JSON is ``to_json()`` byte for byte as ``json.dumps`` writes it with the
        separators ``(",", ":")``, but written from the fields around the json module's
        own string encoder: ``json.dumps(self.to_json())`` (a dict per metric through
        the general encoder) takes longer than all of the post's checks, and twice as
        long as this."""
        fields = []
        if self.progress_percentage is not None:
            fields.append(f'"progressPercentage":{self.progress_percentage:d}')
        if self.estimated_remaining_seconds is not None:
            fields.append(f'"estimatedRemainingSeconds":{self.estimated_remaining_seconds:d}')
        if self.metrics is not None:
            items = ",".join(
                f'{{"name":{_json_string(name)},"value":{_json_string(value)}}}'
                for name, value in self.metrics
            )
            fields.append(f'"metrics":[{items}]')
        fields.append(f'"lastUpdatedTime":"{format_time(self.last_updated_time)}"')
        text = "{" + ",".join(fields) + "}"
        return EncodedStatus(
            self.last_updated_time, text.encode(), received, self.progress_percentage
        )


@dataclass(frozen=True, slots=True)
class EncodedStatus:
    """A valid update as the writer holds it: its ``lastUpdatedTime`` and receive time
    (what updates are ordered by: ``coalescing.ordering_time``) and its ``trainerStatus``
    object as compact JSON. A TrainJob's update can wait for its write for as long as the
    API budget makes it, one per TrainJob: as JSON it takes a fraction of the parsed
    form's memory (measured per pending update: docs/measurements/ingest-runs.md,
    "Runs 4 and 5")."""

    last_updated_time: datetime  # aware, UTC
    json: bytes  # to_json() as compact JSON: what the write applies and the post is answered with
    received: datetime  # aware
    progress: int | None = None  # its progressPercentage: what the write order reads

    def trainer_status(self) -> dict[str, Any]:
        """The ``trainerStatus`` object, decoded from ``json``: what its write applies."""
        result: dict[str, Any] = json.loads(self.json)
        return result


# A JSON string literal as json.dumps writes it by default (ASCII, escapes included): the
# json module's own encoder for strings, in C where the interpreter has it.
_json_string: Callable[[str], str] = json.encoder.encode_basestring_ascii


def format_time(stamp: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``; microseconds only when there are any."""
    if stamp.tzinfo is not UTC:  # astimezone would return a UTC time as it is
        stamp = stamp.astimezone(UTC)
    return stamp.isoformat()[:-6] + "Z"  # isoformat of a UTC time ends in "+00:00"


# -- decoding -------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise PayloadError(f"body is not valid JSON: {name} is not a JSON value")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def decode_payload(raw: bytes) -> dict[str, Any]:
    """The JSON object of a request body (PayloadError for anything else)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PayloadError(f"body is not valid UTF-8 (byte {exc.start})") from None
    payload = _whole_value(text)
    if payload is _NOT_WHOLE:  # decode again, for its exact error
        try:
            payload = _DECODER.decode(text)
        except json.JSONDecodeError as exc:
            if text.startswith("\ufeff"):
                raise PayloadError("body starts with a byte order mark") from None
            raise PayloadError(f"body is not valid JSON: {exc}") from None
        except (ValueError, RecursionError) as exc:  # integers past 4300 digits, deep nesting
            raise PayloadError(f"body cannot be decoded: {exc}") from None
    if type(payload) is not dict:
        raise PayloadError(f"body must be a JSON object, got {_json_type(payload)}")
    return payload


_NOT_WHOLE = object()


def _whole_value(text: str) -> Any:
    """What ``_DECODER.decode(text)`` returns when ``text`` is one JSON value from its
    first character to its last (as JSON libraries write it), without decode's two scans
    for whitespace; ``_NOT_WHOLE`` for any other text, and any that fails to decode.

    The scanner runs as many Python frames deep as under decode (decode_payload,
    _whole_value, raw_decode here; decode_payload, decode, raw_decode there): Python 3.11
    counts frames and nesting levels against one recursion limit, so a deeply nested body
    fails, or decodes, as it does there.
    """
    try:
        value, end = _DECODER.raw_decode(text)
    except (ValueError, RecursionError):
        return _NOT_WHOLE
    return value if end == len(text) else _NOT_WHOLE


# -- parsing and validation -----------------------------------------------------------


def parse_trainer_status(
    payload: dict[str, Any], *, trainjob: str, received: datetime
) -> TrainerStatus | None:
    """The update a decoded body asks for, or None if it asks for none.

    ``payload`` is what ``decode_payload`` returns (JSON's types only). ``received``
    (aware) stamps a missing ``lastUpdatedTime`` and bounds a given one. Raises
    PayloadError for a wrong JSON type, ValidationFailed (named for ``trainjob``) with
    every cause for what the CRD, or our time rules, refuse. The fields are checked in
    the body's order of keys: that order is the order of the causes.
    """
    status = payload.get("trainerStatus")
    if status is None:
        return None
    if type(status) is not dict:
        raise PayloadError(_type_detail("trainerStatus", "an object", status))
    progress: int | None = None
    remaining: int | None = None
    metrics: tuple[Metric, ...] | None = None
    stamp: datetime | None = None
    stamp_text: str | None = None
    causes: list[Cause] = []
    for key, value in status.items():
        if value is None:
            continue
        if key == "progressPercentage":
            progress = _integer(value, key, 100, causes)
        elif key == "estimatedRemainingSeconds":
            remaining = _integer(value, key, None, causes)
        elif key == "metrics":
            metrics = _metrics(value, causes)
        elif key == "lastUpdatedTime":
            if type(value) is not str:
                raise PayloadError(_type_detail("trainerStatus.lastUpdatedTime", "a string", value))
            stamp_text = value
            stamp = _date_time(value, causes)
    if causes and any(c.type in _BLOCKING for c in causes):
        # The CEL rule (and our time rules) would not run: one cause says so instead.
        causes.append(NOT_CHECKED)
        raise ValidationFailed(trainjob, causes)
    if stamp_text is not None and (refusal := _cel_time_refusal(stamp_text)) is not None:
        # The CRD's CEL rule cannot read the time: its one cause, none of ours.
        causes.append(refusal)
        raise ValidationFailed(trainjob, causes)
    if stamp_text is None:
        stamp = received.astimezone(UTC)
    elif stamp is None:
        causes.append(_time_cause(stamp_text, "must be between 0001-01-01 and 9999-12-31 UTC"))
    elif stamp > received + MAX_AHEAD:
        causes.append(_time_cause(stamp_text, f"{_AHEAD_DETAIL} ({format_time(received)})"))
    if causes or stamp is None:
        raise ValidationFailed(trainjob, causes)
    return TrainerStatus(progress, remaining, metrics, stamp)


def _integer(value: Any, key: str, maximum: int | None, causes: list[Cause]) -> int | None:
    """An int32 field (minimum 0, optional maximum), checked as go-openapi checks it."""
    kind = type(value)
    if kind is int:
        number: int = value
        if 0 <= number <= (_I32_MAX if maximum is None else maximum):
            return number
        if not _I64_MIN <= number <= _I64_MAX:
            # The API server decodes an integer past int64 as a float64.
            return _float_integer(_to_float(number, key), key, maximum, causes)
        if not _I32_MIN <= number <= _I32_MAX:
            causes.append(_range_cause(key))
        _bounds(number, str(number), key, maximum, causes)
        return number
    if kind is float:
        return _float_integer(value, key, maximum, causes)
    raise PayloadError(_type_detail(f"trainerStatus.{key}", "an integer", value))


def _float_integer(value: float, key: str, maximum: int | None, causes: list[Cause]) -> int | None:
    if not math.isfinite(value):
        raise PayloadError(f"trainerStatus.{key}: number is out of range")
    whole = value.is_integer()
    if not _json_integer(value):
        causes.append(
            Cause(
                TYPE_INVALID,
                f'Invalid value: "float64": trainerStatus.{key} in body must be of type '
                'int32: "float64"',
                f"status.trainerStatus.{key}",
            )
        )
    if not whole or not _I32_MIN <= value <= _I32_MAX:
        causes.append(_range_cause(key))
    _bounds(value, go_float(value), key, maximum, causes)
    return int(value) if whole else None


def _json_integer(value: float) -> bool:
    """Whether go-openapi's type check takes the float64 ``value`` for an integer."""
    if abs(value) > _FLOAT_INT_MAX:
        return False
    rounded = round(value)
    if value == rounded:
        return True
    return rounded != 0 and abs(value - rounded) < _FLOAT_INT_EPSILON * abs(rounded)


def _to_float(value: int, key: str) -> float:
    try:
        return float(value)
    except OverflowError:
        raise PayloadError(f"trainerStatus.{key}: number is out of range") from None


def _range_cause(key: str) -> Cause:
    # Not a go-openapi validation error: reported on the validation root, value "".
    return Cause(
        INVALID,
        'Invalid value: "": Checked value must be of type integer with format int32 in '
        f"trainerStatus.{key}",
        "status",
    )


def _bounds(value: float, shown: str, key: str, maximum: int | None, causes: list[Cause]) -> None:
    if value < 0:
        how = "greater than or equal to 0"
    elif maximum is not None and value > maximum:
        how = f"less than or equal to {maximum}"
    else:
        return
    causes.append(
        Cause(
            INVALID,
            f"Invalid value: {shown}: trainerStatus.{key} in body should be {how}",
            f"status.trainerStatus.{key}",
        )
    )


def _metrics(value: Any, causes: list[Cause]) -> tuple[Metric, ...]:
    if type(value) is not list:
        raise PayloadError(_type_detail("trainerStatus.metrics", "an array", value))
    out: list[Metric] = []
    for index, item in enumerate(value):
        if type(item) is not dict:
            raise PayloadError(_type_detail(f"trainerStatus.metrics[{index}]", "an object", item))
        # Most metrics are a name and a value of 1 to 64 ASCII characters: taken in one
        # test (such a metric has no cause, so the order of its keys does not matter).
        # Any other is walked key by key, for its causes in the order of its keys.
        name = item.get("name")
        text = item.get("value")
        if (
            type(name) is str
            and type(text) is str
            and 0 < len(name) <= _MAX_STRING
            and 0 < len(text) <= _MAX_STRING
            and name.isascii()
            and text.isascii()
        ):
            out.append(Metric(sys.intern(name), text))
            continue
        metric = _metric(item, index, causes)
        if metric is not None:
            out.append(metric)
    if len(value) > _MAX_METRICS:
        causes.append(
            Cause(
                TOO_MANY,
                f"Too many: {len(value)}: must have at most {_MAX_METRICS} items",
                "status.trainerStatus.metrics",
            )
        )
    return tuple(out)


def _metric(item: dict[str, Any], index: int, causes: list[Cause]) -> Metric | None:
    found: dict[str, str] = {}
    for key, text in item.items():
        if (key != "name" and key != "value") or text is None:
            continue
        if type(text) is not str:
            raise PayloadError(_type_detail(_metric_path(index, key), "a string", text))
        if not text.isascii():
            _check_encodable(text, index, key)
        size = len(text)  # go-openapi counts characters, whatever the message says
        if size > _MAX_STRING:
            causes.append(
                Cause(
                    TOO_LONG,
                    f"Too long: may not be more than {_MAX_STRING} bytes",
                    "status." + _metric_path(index, key),
                )
            )
        elif size == 0:
            path = _metric_path(index, key)
            causes.append(
                Cause(
                    INVALID,
                    f'Invalid value: "": {path} in body should be at least 1 chars long',
                    "status." + path,
                )
            )
        found[key] = text
    if len(found) == 2:
        return Metric(sys.intern(found["name"]), found["value"])
    for key in ("name", "value"):
        if key not in found:
            causes.append(Cause(REQUIRED, "Required value", "status." + _metric_path(index, key)))
    return None


def _metric_path(index: int, key: str) -> str:
    return f"trainerStatus.metrics[{index}].{key}"


def _check_encodable(text: str, index: int, key: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        detail = "string holds an unpaired UTF-16 surrogate"
        raise PayloadError(f"{_metric_path(index, key)}: {detail}") from None


# RFC 3339's date-time where strfmt.IsDateTime agrees: hours <= 23, minutes and seconds
# <= 59 (IsDateTime has no leap second), offsets within 23:59, a "." before the fraction,
# nothing after the zone. The day is checked against the calendar after the match.
_DATE_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]"
    r"([01][0-9]|2[0-3]):([0-5][0-9]):([0-5][0-9])"
    r"(?:\.([0-9]+))?"
    r"(?:[Zz]|([+-])([01][0-9]|2[0-3]):([0-5][0-9]))\Z"
)


def _date_time(text: str, causes: list[Cause]) -> datetime | None:
    """The UTC instant of a valid date-time; None, and maybe a cause, otherwise.

    None without a cause is a valid date-time outside years 1..9999 UTC (our own rule,
    reported by the caller only if the CRD's rules would run).
    """
    match = _DATE_TIME.match(text)
    if match is not None:
        year, month, day, hour, minute, second, frac, sign, off_h, off_m = match.groups()
        leap_year_zero = year == "0000"
        try:
            stamp = datetime(
                2000 if leap_year_zero else int(year),  # Go's year 0 is a leap year, too
                int(month),
                int(day),
                int(hour),
                int(minute),
                int(second),
                int(frac[:6].ljust(6, "0")) if frac else 0,
                UTC,
            )
        except ValueError:
            pass  # no such day: not a date-time
        else:
            if leap_year_zero:
                return None
            if sign is None:
                return stamp
            offset = timedelta(hours=int(off_h), minutes=int(off_m))
            try:
                return stamp - offset if sign == "+" else stamp + offset
            except OverflowError:
                return None
    quoted = go_quote(text)
    causes.append(
        Cause(
            TYPE_INVALID,
            f"Invalid value: {quoted}: trainerStatus.lastUpdatedTime in body must be of type "
            f"date-time: {quoted}",
            "status.trainerStatus.lastUpdatedTime",
        )
    )
    return None


# The CRD's CEL rule reads lastUpdatedTime through go-openapi's date-time parser, which
# tries Go layouts with an upper-case "T" and "Z" only and reports its last layout's error:
# RFC 3339 allows "t" and "z", the API server refuses them (recorded from kube-apiserver).
_CEL_LAST_LAYOUT = "2006-01-02T15:04:05"
_CEL_RULE = "lastUpdatedTime is required when trainerStatus is present"


def _cel_time_refusal(text: str) -> Cause | None:
    """The API server's cause for a date-time (``_DATE_TIME`` matched it) that Go's layouts
    cannot parse: a lower-case "t" or "z"; None for any other."""
    if text[10] == "t":
        error = (
            f"parsing time {go_quote(text)} as {go_quote(_CEL_LAST_LAYOUT)}: "
            f"cannot parse {go_quote(text[10:])} as {go_quote('T')}"
        )
    elif text.endswith("z"):
        error = f"parsing time {go_quote(text)}: extra text: {go_quote('z')}"
    else:
        return None
    return Cause(
        INVALID,
        f'Invalid value: "object": Invalid date-time formatted string {text}: {error} '
        f"evaluating rule: {_CEL_RULE}",
        "status.trainerStatus",
    )


def _time_cause(text: str, detail: str) -> Cause:
    return Cause(
        INVALID,
        f"Invalid value: {go_quote(text)}: {detail}",
        "status.trainerStatus.lastUpdatedTime",
    )


# -- wording --------------------------------------------------------------------------


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    kind = type(value)
    if kind is bool:
        return "boolean"
    if kind is int or kind is float:
        return "number"
    if kind is str:
        return "string"
    if kind is list:
        return "array"
    return "object"


def _type_detail(path: str, expected: str, value: Any) -> str:
    return f"{path}: must be {expected}, got {_json_type(value)}"
