"""``responses.Answer``, written a loop turn later and without ``Server``: over a real
socket, every answer is byte for byte what aiohttp's own ``web.Response`` sends for the
same request, less the ``Server`` header (the ``Date`` value aside, which moves with the
clock)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import BaseTestServer, RawTestServer

from trainjob_status_server.http.responses import Answer

CASES = {
    "json": {"status": 200, "body": b'{"a":1}', "content_type": "application/json"},
    "empty-body": {"status": 200, "body": b""},
    "no-body": {"status": 200},
    "text": {"status": 503, "text": "not ready"},
    "headers": {
        "status": 429,
        "body": b"{}",
        "content_type": "application/json",
        "headers": {"Retry-After": "3", "X-Request-Id": "abc"},
    },
    "no-content": {"status": 204},
    "not-modified": {"status": 304, "body": b""},
    "closing": {"status": 400, "body": b"{}", "content_type": "application/json"},
    "own-length": {"status": 200, "body": b"xyz", "headers": {"Content-Length": "3"}},
}

_DATE = re.compile(rb"\r\nDate: [^\r]*")


async def _handle(request: web.BaseRequest) -> web.StreamResponse:
    if request.path == "/last":
        return web.Response(status=202)
    kind, case = request.path.strip("/").split("/")
    made = (Answer if kind == "ours" else web.Response)(**CASES[case])  # type: ignore[arg-type]
    if case == "closing":
        made.force_close()
    return made


@pytest_asyncio.fixture
async def server() -> AsyncIterator[BaseTestServer]:
    async with RawTestServer(_handle) as running:
        yield running


_LAST = b"GET /last HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
_LAST_ANSWER = b"HTTP/1.1 202 Accepted\r\n"


async def _exchange(server: BaseTestServer, request: bytes, *, closes: bool = False) -> bytes:
    """The raw bytes answered to ``request``, read until the server closes. Unless the
    request itself asks for that (``closes``), a last request follows that does, and its
    answer is cut off."""
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(request if closes else request + _LAST)
        raw = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    return raw.split(_LAST_ANSWER, 1)[0]


def _request(method: str, path: str, version: str, connection: str | None) -> bytes:
    lines = [f"{method} {path} HTTP/{version}", "Host: test"]
    if connection is not None:
        lines.append(f"Connection: {connection}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _normalized(raw: bytes) -> bytes:
    return _DATE.sub(b"\r\nDate: -", raw)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("method", ["GET", "HEAD", "POST"])
@pytest.mark.parametrize(
    ("version", "connection"),
    [("1.1", None), ("1.1", "close"), ("1.0", None), ("1.0", "keep-alive")],
)
async def test_an_answer_is_framed_as_aiohttp_frames_it_less_the_server_header(
    server: BaseTestServer, case: str, method: str, version: str, connection: str | None
) -> None:
    closes = connection == "close" or (version == "1.0" and connection != "keep-alive")
    theirs = await _exchange(
        server, _request(method, f"/aiohttp/{case}", version, connection), closes=closes
    )
    ours = await _exchange(
        server, _request(method, f"/ours/{case}", version, connection), closes=closes
    )
    assert b"\r\nServer: " in theirs
    assert b"\r\nServer: " not in ours
    assert b"\r\nDate: " in ours
    without_server = re.sub(rb"\r\nServer: [^\r]*", b"", theirs)
    assert _normalized(ours) == _normalized(without_server)


async def test_keep_alive_answers_follow_each_other_on_one_connection(
    server: BaseTestServer,
) -> None:
    one = _request("GET", "/ours/json", "1.1", None)
    raw = await _exchange(
        server, one + one + _request("GET", "/ours/text", "1.1", "close"), closes=True
    )
    assert raw.count(b"HTTP/1.1 200 OK\r\n") == 2
    assert raw.count(b'{"a":1}') == 2
    assert raw.endswith(b"Connection: close\r\n\r\nnot ready")


@pytest.mark.parametrize("made", [Answer, web.Response])
async def test_a_newline_in_a_header_value_is_refused_as_aiohttp_refuses_it(
    made: type[web.Response],
) -> None:
    async def forged(_request: web.BaseRequest) -> web.StreamResponse:
        return made(status=200, body=b"{}", headers={"X-Request-Id": "a\r\nSet-Cookie: x"})

    async with RawTestServer(forged) as other:
        raw = await _exchange(other, _request("GET", "/", "1.1", None))
    # The head fails to frame after the handler has returned: aiohttp logs the error and
    # closes the connection; not a byte, the forged header least of all, is sent.
    assert raw == b""
