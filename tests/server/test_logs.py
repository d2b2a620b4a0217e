"""Both log formats against hostile values: one line per event, no raw control, format
or separator character from a field, and the value reads back unchanged; and a request
path with escapes in it, logged in the text format by a running server."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from trainjob_status_server.app import StatusServer
from trainjob_status_server.logs import JsonFormatter, KeyValueFormatter, kv_value

from .conftest import ServingCerts

# C0 controls, ESC, CR/LF, DEL, C1 controls (NEL), no-break space, line and paragraph
# separators, bidirectional overrides and isolates, a zero-width joiner, BOM, a tag
# character (astral), an unpaired surrogate.
HOSTILE = [
    "\x00\x01\x07\x08\t\n\x0b\x0c\r\x1b[2J\x1b]8;;http://x\x1b\\",
    "\x1b[2J\rno-separator",
    "\x7f\x80\x85\x9b\x9f",
    "\u00a0\u2028\u2029\u202e\u2066\u2069\u200d\ufeff",
    "\U000e0041",
    "\ud800",
    'path" code=200 forged="1',
]

# What a terminal or a log reader could act on: anything outside printable ASCII.
NOT_PRINTABLE_ASCII = re.compile(r"[^\x20-\x7e]")


def record(**extra: object) -> logging.LogRecord:
    made = logging.LogRecord("test", logging.INFO, __file__, 1, "request", None, None)
    made.__dict__.update(extra)
    return made


@pytest.mark.parametrize("value", HOSTILE)
def test_json_lines_are_printable_ascii_and_read_back(value: str) -> None:
    line = JsonFormatter().format(record(path=value, header=value))
    assert NOT_PRINTABLE_ASCII.search(line) is None
    decoded = json.loads(line)
    assert (decoded["path"], decoded["header"]) == (value, value)


def read_kv(line: str) -> dict[str, str]:
    """A key=value line read back: bare values as they are, quoted ones as JSON strings."""
    fields = {}
    for match in re.finditer(r'(\w+)=("(?:[^"\\]|\\.)*"|[^ ]*)', line):
        key, raw = match.groups()
        fields[key] = json.loads(raw) if raw.startswith('"') else raw
    return fields


@pytest.mark.parametrize("value", HOSTILE)
def test_text_lines_hold_no_unprintable_character_and_read_back(value: str) -> None:
    line = KeyValueFormatter().format(record(path=value, code=404))
    assert all(c.isprintable() for c in line), ascii(line)
    fields = read_kv(line)
    assert (fields["path"], fields["code"], fields["msg"]) == (value, "404", "request")
    assert "forged" not in fields


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("plain", "plain"),
        ("λoss", "λoss"),  # printable text stays readable
        ("two words", '"two words"'),
        ("", '""'),
        ("a=b", '"a=b"'),
        ("back\\slash", '"back\\\\slash"'),
        ("/x\x1b[2J\r\n", '"/x\\u001b[2J\\r\\n"'),
        ("\u2028\u202e\x85\x7f", '"\\u2028\\u202e\\u0085\\u007f"'),
        (None, "None"),
        (12, "12"),
    ],
)
def test_kv_values(value: object, written: str) -> None:
    assert kv_value(value) == written


@pytest.fixture
def text_access_log() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(KeyValueFormatter())
    access = logging.getLogger("trainjob_status_server.access")
    access.addHandler(handler)
    level = access.level
    access.setLevel(logging.INFO)
    yield out
    access.removeHandler(handler)
    access.setLevel(level)


async def test_a_path_with_escapes_is_logged_escaped_in_text_format(
    server: StatusServer, certs: ServingCerts, text_access_log: io.StringIO
) -> None:
    host, port = server.url.removeprefix("https://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(
        host, int(port), ssl=certs.client_context(), server_hostname="localhost"
    )
    writer.write(
        b"GET /x%1b[2J%0dforged%e2%80%a8%c2%85 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 404 ")
    lines = text_access_log.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert all(c.isprintable() for c in lines[0]), ascii(lines[0])
    assert ' path="/x\\u001b[2J\\rforged\\u2028\\u0085" ' in lines[0]
    assert read_kv(lines[0])["path"] == "/x\x1b[2J\rforged\u2028\x85"
