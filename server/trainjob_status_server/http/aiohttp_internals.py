"""The one module that touches private parts of aiohttp and asyncio.

aiohttp's public API covers what the server needs except what is listed here; each use
says why it is needed, what breaks without it, and the versions it was checked against.
Checked: aiohttp 3.14.4 and 3.14.5 (the range of ``versions.py``, which ``serve``
enforces at start and ``server/pyproject.toml`` declares), asyncio of CPython 3.11, 3.12
and 3.13. ``tests/server/test_aiohttp_internals.py`` fails if any private name used here
is missing from the installed versions; ``tests/server/test_private_access.py`` fails if
another module of the server reaches into a private name of aiohttp or asyncio.

What is used, by what:

- ``RequestHandler._parser``, ``_reading_paused``, ``_buffer_paused``, ``_request_count``,
  ``_request_in_progress``, ``_messages``, ``_loop``: ``RequestHandlerBase``.
- ``BaseSite._server``: ``attach_server``.
- ``Response._payload_writer``, ``_eof_sent``, ``_body``, ``_chunked``, ``_compression``,
  ``_cookies``, ``_req``, ``_keep_alive``, ``_must_be_empty_body``, ``_headers``,
  ``_body_length``, ``_prepare_headers`` and the functions of ``aiohttp.helpers``:
  ``OneWriteResponse``.
- asyncio's ``sslproto.SSLProtocol`` (a private module) and its ``_ssl_buffer``,
  ``_ssl_buffer_view``: ``SharedBufferTLS``.
"""

from __future__ import annotations

import asyncio
import ssl
import weakref
from asyncio import sslproto
from collections.abc import Callable
from typing import Any, TypeGuard, TypeVar

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.helpers import must_be_empty_body, rfc822_formatted_time, should_remove_content_length
from aiohttp.http import HttpVersion10, HttpVersion11

_Parser = TypeVar("_Parser")

# -- the request handler (one per connection) ----------------------------------------------


class RequestHandlerBase(web.RequestHandler):
    """aiohttp's protocol for one connection, with names for the private state
    ``protocol.StatusRequestHandler`` needs; aiohttp has no public way to any of it."""

    def wrap_parser(self, wrap: Callable[[Any], _Parser]) -> _Parser:
        """Puts ``wrap(parser)`` where aiohttp's request parser was: every read goes
        through it. Needed for the bound on a request's head (``protocol.HeadBudget``):
        aiohttp bounds each line, not the head. Without it a client may hold a hundred
        lines of 8 KiB each before it authenticates. aiohttp makes the parser in
        ``RequestHandler.__init__`` and feeds it from ``data_received`` (``_parser``)."""
        wrapped = wrap(self._parser)
        self._parser = wrapped  # type: ignore[assignment]  # stands in for the parser
        return wrapped

    @property
    def event_loop(self) -> asyncio.AbstractEventLoop:
        """The loop aiohttp made the handler for (``_loop``): asking asyncio for the
        running loop costs a system call per call on Python 3.11."""
        loop: asyncio.AbstractEventLoop = self._loop
        return loop

    @property
    def reading_paused(self) -> bool:
        """Whether aiohttp paused this connection's reads (``_reading_paused``, a full
        body buffer: ``_buffer_paused``). Needed to skip aiohttp's resume on every body
        read of a connection that is not paused, which feeds the parser an empty read."""
        return bool(self._reading_paused or self._buffer_paused)

    @property
    def between_requests(self) -> bool:
        """Whether a kept-alive connection has answered a request and has neither one in
        progress nor one parsed and waiting (``_request_count``,
        ``_request_in_progress``, ``_messages``). Needed to close an idle connection to
        make room for a new one (``slots.Slots``) without dropping a request."""
        return bool(
            self._request_count > 0 and not self._request_in_progress and not self._messages
        )


# -- the site (one per listening port) -----------------------------------------------------


def attach_server(site: web.BaseSite, server: asyncio.AbstractServer) -> None:
    """Makes ``server`` (from ``loop.create_server``) the site's listening server, as
    ``web.TCPSite.start`` does: aiohttp's runner closes it on shutdown and lists its
    addresses through ``BaseSite._server``. Needed because ``listener.CappedSite``
    makes its own protocols (slots, deadlines, TLS), which ``TCPSite`` cannot."""
    site._server = server


# -- the answer (one per request) ----------------------------------------------------------


class OneWriteResponse(web.Response):
    """A response whose head this class writes itself, with the body, in one write: the
    status line, its own headers, then ``Content-Length``, ``Date`` and ``Connection`` as
    aiohttp would add them, and no ``Server`` header (aiohttp's names itself and the
    Python version, telling a scanner which known bugs to try). aiohttp's general path
    (a header map filled in several steps, a prepare hook, a serializer and a writer,
    each in its own call) costs a post several µs more; docs/scaling.md has the figures.
    A body aiohttp would stream or compress takes aiohttp's path.

    It sets and reads the response's private state as ``StreamResponse.prepare``,
    ``_start``, ``_prepare_headers`` and ``write_eof`` do, so that aiohttp's handler
    finishes the request as it finishes its own answers. Without it every answer of the
    serving port would also carry the ``Server`` header: the serving port runs on
    ``web.Server``, which has no ``on_response_prepare`` signal to drop it."""

    _message: bytes | None = None  # head and body, once prepared on the one-write path

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self._eof_sent:
            return None
        if self._payload_writer is not None:
            return self._payload_writer
        body = self._body
        if self._chunked or self._compression or self._cookies or not _plain_body(body):
            return await super().prepare(request)
        self._req = request
        writer = self._payload_writer = request.writer
        head = self._frame(request, len(body) if body else 0)
        self._message = head if self._must_be_empty_body or not body else head + body
        return writer

    async def _prepare_headers(self) -> None:  # aiohttp's path: only the Server header
        await super()._prepare_headers()
        self.headers.popall(hdrs.SERVER, None)

    def _frame(self, request: web.BaseRequest, length: int) -> bytes:
        method = request.method
        status = self.status
        empty = self._must_be_empty_body = must_be_empty_body(method, status)
        keep_alive = self._keep_alive
        if keep_alive is None:
            keep_alive = self._keep_alive = request.keep_alive
        version = request.version
        headers = self._headers
        lines = [f"HTTP/{version.major}.{version.minor} {status} {self.reason}"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                raise ValueError("a newline in a response header")
            lines.append(f"{name}: {value}")
        if hdrs.CONTENT_LENGTH not in headers:
            if empty:
                if not should_remove_content_length(method, status) and length:
                    lines.append(f"Content-Length: {length}")
            elif length or (status != 304 and method != hdrs.METH_HEAD):
                lines.append(f"Content-Length: {length}")
        if length and not empty and hdrs.CONTENT_TYPE not in headers:
            lines.append("Content-Type: application/octet-stream")
        if hdrs.DATE not in headers:
            lines.append(f"Date: {rfc822_formatted_time()}")
        if hdrs.CONNECTION not in headers:
            if keep_alive:
                if version == HttpVersion10:
                    lines.append("Connection: keep-alive")
            elif version == HttpVersion11:
                lines.append("Connection: close")
        lines.append("\r\n")
        return "\r\n".join(lines).encode()

    async def write_eof(self, data: bytes = b"") -> None:
        message = self._message
        writer = self._payload_writer
        if message is None or writer is None or self._eof_sent:
            await super().write_eof(data)
            return
        self._message = None
        # Written one loop turn later: after the loop has read (and started) the other
        # requests that are ready now, the answers go out together (docs/scaling.md,
        # "Answers written a loop turn later").
        await asyncio.sleep(0)
        await writer.write_eof(message)
        self._eof_sent = True
        self._req = None
        self._body_length = writer.output_size
        self._payload_writer = None


def _plain_body(body: object) -> TypeGuard[bytes | bytearray | None]:
    return body is None or isinstance(body, bytes | bytearray)


# -- TLS (one layer per connection) --------------------------------------------------------


class SharedBufferTLS(sslproto.SSLProtocol):
    """asyncio's TLS protocol (what ``create_server(ssl=...)`` builds, from the private
    module ``asyncio.sslproto``) with a receive buffer of one TLS record, not 256 KiB,
    shared by every connection of the event loop. asyncio fills it and hands its bytes
    to the TLS object in one synchronous step (get_buffer, recv_into, buffer_updated on
    the selector loop), so no two connections ever use it at once. Without it each idle
    or stalled TLS connection holds 256 KiB (``_ssl_buffer``, ``_ssl_buffer_view``, set
    in ``__init__``; ``get_buffer`` reallocates only for a size over ``max_size``), and
    the allocator keeps much of it after a crowd of them has gone: docs/connections.md."""

    max_size = 16 * 1024

    def __init__(self, loop: asyncio.AbstractEventLoop, *args: Any, **kwargs: Any) -> None:
        super().__init__(loop, *args, **kwargs)
        self._ssl_buffer_view = _receive_buffer(loop)
        self._ssl_buffer = self._ssl_buffer_view.obj


_RECEIVE_BUFFERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, memoryview] = (
    weakref.WeakKeyDictionary()
)


def _receive_buffer(loop: asyncio.AbstractEventLoop) -> memoryview:
    view = _RECEIVE_BUFFERS.get(loop)
    if view is None:
        view = _RECEIVE_BUFFERS[loop] = memoryview(bytearray(SharedBufferTLS.max_size))
    return view


def tls_protocol(
    loop: asyncio.AbstractEventLoop,
    app: asyncio.Protocol,
    context: ssl.SSLContext,
    handshake_timeout: float,
) -> SharedBufferTLS:
    """What ``create_server(ssl=...)`` builds around ``app``, with the shared buffer."""
    return SharedBufferTLS(
        loop,
        app,
        context,
        None,  # no waiter: nothing awaits the handshake
        server_side=True,
        ssl_handshake_timeout=handshake_timeout,
    )


# Every private name used above, by the class or module that holds it: the test of this
# module checks each one exists on the installed aiohttp and Python.
RELIED_ON: dict[str, tuple[str, ...]] = {
    "aiohttp.web_protocol.RequestHandler (instance)": (
        "_parser",
        "_loop",
        "_reading_paused",
        "_buffer_paused",
        "_request_count",
        "_request_in_progress",
        "_messages",
    ),
    "aiohttp.web_runner.BaseSite (slot)": ("_server",),
    "aiohttp.web_response.Response (instance)": (
        "_payload_writer",
        "_eof_sent",
        "_body",
        "_chunked",
        "_compression",
        "_cookies",
        "_req",
        "_keep_alive",
        "_must_be_empty_body",
        "_headers",
        "_body_length",
        "_prepare_headers",
    ),
    "aiohttp.helpers": (
        "must_be_empty_body",
        "rfc822_formatted_time",
        "should_remove_content_length",
    ),
    "asyncio.sslproto.SSLProtocol (instance)": ("_ssl_buffer", "_ssl_buffer_view", "max_size"),
}
