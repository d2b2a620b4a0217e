"""Structured logging: one line per event, JSON or key=value, extras as fields.

Callers pass fields with ``extra={...}``; nothing here ever sees a token, because no
caller passes one. Some fields carry what a client sent (a request path): neither
format writes a character from them that a terminal or a log reader would act on. JSON
lines are pure printable ASCII (every other character as a ``\\uXXXX`` escape, which
JSON readers undo); key=value lines keep printable text as it is and quote any value
with a character that is not, escaped as JSON escapes it (controls, DEL, C1, line and
paragraph separators, bidirectional and other format characters).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    for key, value in vars(record).items():
        if key not in _STANDARD and not key.startswith("_"):
            out[key] = value
    if record.exc_info:
        out["error"] = logging.Formatter().formatException(record.exc_info)
    return out


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        # ensure_ascii (the default) is what keeps U+2028, U+202E and the like escaped.
        return json.dumps(_fields(record), default=str, separators=(",", ":"), ensure_ascii=True)


# A value written bare: printable, and nothing a key=value reader splits or unquotes on.
_BARE = re.compile(r'[^\s"=\\]+')


def kv_value(value: Any) -> str:
    """``value`` as a key=value field's value: bare when that reads back unchanged, else
    quoted with every character that is not printable (str.isprintable) escaped."""
    text = str(value)
    if text.isprintable():
        if _BARE.fullmatch(text):
            return text
        return json.dumps(text, ensure_ascii=False)
    return '"' + "".join(_quoted_char(c) for c in text) + '"'


def _quoted_char(char: str) -> str:
    if char == '"' or char == "\\":
        return "\\" + char
    if char.isprintable():
        return char
    return json.dumps(char)[1:-1]  # \n, \t, ... or \uXXXX (astral: a surrogate pair)


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{key}={kv_value(value)}" for key, value in _fields(record).items())


def configure(level: str, fmt: str) -> None:
    """Route the root logger to stderr in ``fmt`` ("json" or "text") at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's own access log duplicates ours.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
