"""Figures as the status server reads and writes them (pure): kubectl's ages and ETAs in
Go's duration format, metric values read as numbers and update stamps as times.

The server has the same three (``go_text.human_duration``, ``metrics.series.parse_number``
and ``parse_time``); the plugin keeps its own so that it installs without the server, and
``tests/kubectl_plugin/test_shared_facts.py`` holds each pair to the same answers.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

# A decimal number as people and Python's str(float) write it. Stricter than float():
# no surrounding whitespace, no "1_000", no "infinity".
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")


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


def parse_number(text: str) -> float | None:
    """The value of a metric if it is a finite decimal number, else None."""
    if _NUMBER.match(text) is None:
        return None
    number = float(text)
    return number if math.isfinite(number) else None  # "1e999" overflows to inf


def parse_time(text: str) -> float | None:
    """Unix seconds of an RFC 3339 date-time (fraction digits past 6 dropped; no offset
    read as UTC); None if it does not parse."""
    try:
        stamp = datetime.fromisoformat(text.upper())
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    try:
        return stamp.timestamp()
    except (OverflowError, ValueError):
        return None
