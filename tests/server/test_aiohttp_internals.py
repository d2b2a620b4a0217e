"""Every private name of aiohttp and asyncio the fence (``http/aiohttp_internals.py``)
relies on exists on the installed versions, and aiohttp behaves as the fence's classes
assume: a release that renames one or changes when it calls what fails here, not on a
request. Each name is looked up on a real object of the kind the fence uses; the
behaviour is watched on a real connection."""

from __future__ import annotations

import asyncio
import ssl
from asyncio import sslproto
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from trainjob_status_server.http import aiohttp_internals
from trainjob_status_server.http.aiohttp_internals import RELIED_ON
from trainjob_status_server.http.protocol import HeadBudget


async def _ok(_request: web.BaseRequest) -> web.StreamResponse:
    return web.Response()


def _request_handler() -> object:
    return web.RequestHandler(web.Server(_ok), loop=asyncio.get_running_loop())


def _site() -> object:
    return web.BaseSite


def _response() -> object:
    return web.Response(body=b"{}", content_type="application/json")


def _tls() -> object:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    return sslproto.SSLProtocol(
        asyncio.get_running_loop(), asyncio.Protocol(), context, None, server_side=True
    )


# How to make an object of each kind the fence names, to look its names up on.
MAKERS: dict[str, Callable[[], Any]] = {
    "aiohttp.web_protocol.RequestHandler (instance)": _request_handler,
    "aiohttp.web_runner.BaseSite (slot)": _site,
    "aiohttp.web_response.Response (instance)": _response,
    "asyncio.sslproto.SSLProtocol (instance)": _tls,
}


def test_every_kind_the_fence_names_is_checked() -> None:
    assert set(RELIED_ON) == set(MAKERS)


@pytest.mark.parametrize("kind", sorted(RELIED_ON))
async def test_each_private_name_exists(kind: str) -> None:
    made = MAKERS[kind]()
    missing = [name for name in RELIED_ON[kind] if not hasattr(made, name)]
    assert missing == [], f"{kind} no longer has {missing}: see http/aiohttp_internals.py"


async def test_the_shared_tls_buffer_replaces_asyncios_own() -> None:
    """What ``SharedBufferTLS`` relies on: asyncio reads into ``_ssl_buffer_view`` through
    ``get_buffer``, which hands out the buffer set in ``__init__`` for any size asked."""
    loop = asyncio.get_running_loop()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    first = aiohttp_internals.tls_protocol(loop, asyncio.Protocol(), context, 5.0)
    second = aiohttp_internals.tls_protocol(loop, asyncio.Protocol(), context, 5.0)
    for asked in (-1, 1, 2**14, 2**18):
        assert first.get_buffer(asked).obj is second.get_buffer(asked).obj
    assert len(first.get_buffer(-1)) == aiohttp_internals.SharedBufferTLS.max_size


# -- the behaviour relied on ---------------------------------------------------------------
#
# What the fence's classes assume of aiohttp's protocol, watched on a real connection:
# every call aiohttp makes to its parser is one ``protocol.HeadBudget`` answers (it stands
# in for the parser), even while a big body pauses and resumes the reads; ``feed_data``
# returns (requests, upgraded, tail); and a request the parser refuses, or a handler's
# failure, reaches ``handle_error``, whose answer aiohttp writes before it closes.

BIG_BODY = 1024 * 1024  # far over the body buffer's high-water mark: reading pauses


class _RecordingParser:
    """aiohttp's parser, recording each name aiohttp asks of it and what ``feed_data``
    returns."""

    def __init__(self, parser: Any, calls: list[str], feeds: list[tuple[Any, ...]]) -> None:
        self._parser = parser
        self._calls = calls
        self._feeds = feeds

    def feed_data(self, data: bytes) -> Any:
        self._calls.append("feed_data")
        result = self._parser.feed_data(data)
        self._feeds.append(result)
        return result

    def __getattr__(self, name: str) -> Any:
        self._calls.append(name)
        return getattr(self._parser, name)


class _Recording(aiohttp_internals.RequestHandlerBase):
    """aiohttp's protocol, recording what it asks of its parser and each
    ``handle_error``."""

    def __init__(self, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.parser_calls: list[str] = []
        self.feeds: list[tuple[Any, ...]] = []
        self.errors: list[tuple[int, type[BaseException] | None]] = []
        self.wrap_parser(lambda parser: _RecordingParser(parser, self.parser_calls, self.feeds))

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        self.errors.append((status, None if exc is None else type(exc)))
        answer = web.Response(status=status, text=f"refused {status}")
        answer.force_close()
        return answer


async def _read_body(request: web.BaseRequest) -> web.StreamResponse:
    if request.headers.get("X-Fail"):
        raise RuntimeError("a handler's failure")
    body = await request.read()
    return web.Response(text=str(len(body)))


class _Served:
    def __init__(self) -> None:
        self.handlers: list[_Recording] = []

    async def exchange(self, port: int, data: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(data)
        await writer.drain()
        try:
            return await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()


@pytest.fixture
async def recorded() -> Any:
    loop = asyncio.get_running_loop()
    manager = web.Server(_read_body)
    served = _Served()

    def factory() -> _Recording:
        handler = _Recording(manager, loop=loop)
        served.handlers.append(handler)
        return handler

    server = await loop.create_server(factory, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield served, port
    finally:
        server.close()
        await manager.shutdown(1)
        await server.wait_closed()


def _post(body: bytes, *, close: bool = False, fail: bool = False) -> bytes:
    head = f"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n"
    head += "Connection: close\r\n" if close else ""
    head += "X-Fail: 1\r\n" if fail else ""
    return head.encode() + b"\r\n" + body


async def test_aiohttp_asks_its_parser_only_what_the_head_budget_answers(recorded: Any) -> None:
    served, port = recorded
    # Two posts in one write, then a body far over the buffer's high-water mark.
    raw = await served.exchange(
        port, _post(b"{}") + _post(b"[]") + _post(b"x" * BIG_BODY, close=True)
    )
    assert raw.count(b"HTTP/1.1 200 OK") == 3
    assert raw.endswith(str(BIG_BODY).encode())
    (handler,) = served.handlers
    budget = {name for name in vars(HeadBudget) if not name.startswith("_")}
    assert set(handler.parser_calls) <= budget - {"idle", "limit", "pending", "detach"}
    assert handler.feeds
    for requests, upgraded, tail in handler.feeds:
        assert all(len(pair) == 2 for pair in requests)
        assert upgraded is False
        assert tail == b""


async def test_a_parser_refusal_and_a_handlers_failure_reach_handle_error(
    recorded: Any,
) -> None:
    served, port = recorded
    refused = await served.exchange(port, b"GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n")
    failed = await served.exchange(port, _post(b"{}", fail=True))
    assert refused.startswith(b"HTTP/1.0 400 Bad Request\r\n")  # the version unread
    assert refused.endswith(b"\r\n\r\nrefused 400")
    assert failed.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert failed.endswith(b"\r\n\r\nrefused 500")
    first, second = served.handlers
    assert len(first.errors) == 1
    status, kind = first.errors[0]
    assert status == 400
    assert kind is not None
    assert issubclass(kind, HttpProcessingError)
    assert second.errors == [(500, RuntimeError)]
