"""A report as the caller gave it, fitted to the TrainJob CRD and encoded as the post body.

Pure functions, no I/O. The CRD's ``status.trainerStatus`` takes ``progressPercentage``
int32 0..100, ``estimatedRemainingSeconds`` int32 >= 0, at most 256 ``metrics`` whose
``name`` and ``value`` are strings of 1..64 characters, and an RFC 3339
``lastUpdatedTime``. The API server rejects a whole update for one field out of bounds,
so every field is made to fit instead:

- progress is floored and clamped to 0..100 (99.7% is not yet done); the ETA is rounded
  and clamped to 0..2**31-1; a value that is not a number drops that field;
- metric values are formatted compactly: floats to at most 6 significant digits, NaN and
  infinities as ``NaN``, ``+Inf``, ``-Inf``, booleans as ``true``/``false``, strings as
  given; names and values are cut to 64 characters; an empty name or value, or a name
  already taken (after cutting), drops that metric; the first 256 that remain are kept.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import numbers
from dataclasses import dataclass
from typing import Any

from .contract import INT32_MAX, MAX_METRICS
from .contract import MAX_METRIC_CHARS as MAX_CHARS
from .contract import MAX_PROGRESS_PERCENT as PERCENT_MAX

# What fitting changed, as short keys: the reporter warns once per key.
CLAMPED_PROGRESS = f"progress clamped to 0..{PERCENT_MAX}"
CLAMPED_ETA = f"estimated remaining seconds clamped to 0..{INT32_MAX}"
DROPPED_PROGRESS = "progress is not a number: left out"
DROPPED_ETA = "estimated remaining seconds is not a number: left out"
TOO_MANY_METRICS = f"more than {MAX_METRICS} metrics: only the first {MAX_METRICS} are sent"
CUT_NAME = f"metric name cut to {MAX_CHARS} characters"
CUT_VALUE = f"metric value cut to {MAX_CHARS} characters"
DROPPED_METRIC = "metric with an empty, duplicate or unprintable name or value left out"


@dataclass(frozen=True)
class Observation:
    """One ``report`` call as given, stamped with when it was made (Unix seconds).

    Only references are kept; formatting waits for the sending thread.
    """

    # dataclass(slots=True) needs Python 3.10.
    __slots__ = ("estimated_remaining_seconds", "metrics", "observed_at", "progress_percent")

    progress_percent: object
    estimated_remaining_seconds: object
    metrics: tuple[tuple[object, object], ...]
    observed_at: float


def fit(observation: Observation) -> tuple[dict[str, Any], set[str]]:
    """The ``trainerStatus`` object for ``observation`` and the set of changes made."""
    notes: set[str] = set()
    status: dict[str, Any] = {}
    progress = fit_progress(observation.progress_percent, notes)
    if progress is not None:
        status["progressPercentage"] = progress
    eta = fit_eta(observation.estimated_remaining_seconds, notes)
    if eta is not None:
        status["estimatedRemainingSeconds"] = eta
    if observation.metrics:
        status["metrics"] = fit_metrics(observation.metrics, notes)
    status["lastUpdatedTime"] = format_time(observation.observed_at)
    return status, notes


def encode(trainer_status: dict[str, Any]) -> bytes:
    """The post body. A lone surrogate in a string becomes ``?`` (the server refuses it)."""
    text = json.dumps({"trainerStatus": trainer_status}, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "replace")


def fit_progress(value: object, notes: set[str]) -> int | None:
    """``value`` floored into 0..100, or None (noted) when it is not a number."""
    if value is None:
        return None
    number = _number(value)
    if number is None or math.isnan(number):
        notes.add(DROPPED_PROGRESS)
        return None
    if not 0 <= number <= PERCENT_MAX:
        notes.add(CLAMPED_PROGRESS)
        return 0 if number < 0 else PERCENT_MAX
    return math.floor(number)


def fit_eta(value: object, notes: set[str]) -> int | None:
    """``value`` rounded into 0..2**31-1 seconds, or None (noted) when not a number."""
    if value is None:
        return None
    number = _number(value)
    if number is None or math.isnan(number):
        notes.add(DROPPED_ETA)
        return None
    if not 0 <= number <= INT32_MAX:
        notes.add(CLAMPED_ETA)
        return 0 if number < 0 else INT32_MAX
    return math.floor(number + 0.5)


def fit_metrics(items: tuple[tuple[object, object], ...], notes: set[str]) -> list[dict[str, str]]:
    """The first 256 metrics that fit, in the order given."""
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for name, value in items:
        text_name = _text(name)
        text_value = format_value(value)
        if not text_name or not text_value:
            notes.add(DROPPED_METRIC)
            continue
        if len(text_name) > MAX_CHARS:
            notes.add(CUT_NAME)
            text_name = text_name[:MAX_CHARS]
        if text_name in seen:
            notes.add(DROPPED_METRIC)
            continue
        if len(out) == MAX_METRICS:
            notes.add(TOO_MANY_METRICS)
            break
        if len(text_value) > MAX_CHARS:
            notes.add(CUT_VALUE)
            text_value = text_value[:MAX_CHARS]
        seen.add(text_name)
        out.append({"name": text_name, "value": text_value})
    return out


def format_value(value: object) -> str | None:
    """A metric value as compact text (not yet cut), or None when it cannot be printed."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        try:
            return format_float(float(value))
        except (OverflowError, ValueError, TypeError):
            return _text(value)
    return _text(value)


def format_float(value: float) -> str:
    """At most 6 significant digits; NaN and infinities spelled as Go and Prometheus do."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return format(value, ".6g")


def format_time(unix_seconds: float) -> str:
    """RFC 3339 in UTC with microseconds, e.g. ``2026-12-02T18:33:25.123456Z``."""
    stamp = dt.datetime.fromtimestamp(unix_seconds, dt.timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        try:
            return float(value)
        except OverflowError:  # an int beyond float range: only its sign matters here
            return -math.inf if str(value).lstrip().startswith("-") else math.inf
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except Exception:  # an object whose __str__ fails is left out, never raised
        return None
