"""The development cluster's HTTP/1.1 server: requests parsed by httptools, answers and
watch events written to the connections at the end of each turn of the event loop.

Why not aiohttp's web server, which the status server uses: it spends more CPU on a
keep-alive HTTPS request before any handler runs than the cluster's whole write path
does through httptools and an asyncio protocol. The cluster has to take 2,000 status
writes a second on one core (``bench/devcluster_bench.py``, figures in
docs/benchmarks.md) so that it is never what our benchmarks measure,
and the API it serves is small: requests with a body, answers with a length, and chunked
watch streams. Everything is HTTP/1.1 with keep-alive; pipelined requests are answered in
order.

A handler gets the whole request (body read, at most ``max_body`` bytes) and returns a
``Response``, or a coroutine for answers that wait (a stalled request, a watch). A
coroutine may stream its answer through ``Connection.stream`` and then return None.
When the client goes away while a coroutine runs, the coroutine is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import http
import logging
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import parse_qsl, unquote

import httptools
from multidict import CIMultiDict, CIMultiDictProxy, MultiDict, MultiDictProxy

from trainjob_status_server.http.listener import FirstRequestDeadline, tls_protocol

from ..common.status import ApiError
from ..storage.store import dumps

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str  # percent-decoded
    query: MultiDictProxy[str]  # the first value of a repeated parameter is query[name]
    headers: CIMultiDictProxy[str]
    body: bytes
    scheme: str  # http or https, as the server listens

    @property
    def host(self) -> str:
        return self.headers.get("Host", "")


@dataclass(slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


HandlerResult = Response | Coroutine[Any, Any, Response | None]
Handler = Callable[[Request, "Connection"], HandlerResult]


_REASONS = {code.value: code.phrase.encode() for code in http.HTTPStatus}


class _Clock:
    """The Date header, formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def date(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = email.utils.formatdate(now, usegmt=True).encode()
        return self._value


_CLOCK = _Clock()


def _head(code: int, content_type: str, headers: dict[str, str], framing: bytes) -> bytes:
    lines = [
        b"HTTP/1.1 %d %s\r\n" % (code, _REASONS.get(code, b"Unknown")),
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n",
        b"Date: " + _CLOCK.date() + b"\r\n",
        framing,
    ]
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"header {name!r} has a line break")
        lines.append(f"{name}: {value}\r\n".encode("latin-1"))
    lines.append(b"\r\n")
    return b"".join(lines)


# Go's net/http limit on a request's line and headers (http.DefaultMaxHeaderBytes), and its
# answer beyond it.
MAX_HEAD_BYTES = 1 << 20
_HEAD_TOO_LARGE = Response(431, b"431 Request Header Fields Too Large", "text/plain; charset=utf-8")


# Parsed query strings by their raw bytes: clients repeat a handful of them
# (``fieldManager=...&force=true`` on every status write), and a proxy is read-only, so
# requests can share one. Bounded: the oldest entry goes when it is full.
_QUERIES: dict[bytes, MultiDictProxy[str]] = {}
_QUERIES_LIMIT = 1024


def parse_query(raw: bytes) -> MultiDictProxy[str]:
    """The parameters of a raw query string, blank values kept, in order."""
    found = _QUERIES.get(raw)
    if found is None:
        pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True)
        found = MultiDictProxy(MultiDict(pairs))
        if len(_QUERIES) >= _QUERIES_LIMIT:
            del _QUERIES[next(iter(_QUERIES))]
        _QUERIES[raw] = found
    return found


def _internal_error() -> Response:
    return Response(500, dumps(ApiError(500, "InternalError", "internal error").to_json()))


class Stream:
    """A chunked answer in progress. Writes never wait: a watch checks ``buffered`` and
    gives up on a client that does not read."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self.started = False
        self.ended = False

    def start(self, code: int, content_type: str, headers: dict[str, str] | None = None) -> None:
        if self.started:
            raise RuntimeError("the answer has started")
        self.started = True
        framing = b"Transfer-Encoding: chunked\r\n"
        self._connection.write_soon(_head(code, content_type, headers or {}, framing))

    def write(self, data: bytes) -> None:
        if not self.started or self.ended:
            raise RuntimeError("write outside the answer")
        if data:
            self._connection.write_soon(b"%x\r\n%s\r\n" % (len(data), data))

    def end(self) -> None:
        if self.started and not self.ended:
            self.ended = True
            self._connection.write_soon(b"0\r\n\r\n")

    @property
    def buffered(self) -> int:
        """Bytes written and not yet taken by the kernel: 0 while the transport has not
        asked us to pause (its buffer is under its high-water mark, 64 KiB; asking it the
        exact figure on every event costs more than the event's own framing)."""
        return self._connection.buffered if self._connection.writing_paused else 0


class Connection(asyncio.Protocol):
    """One client connection: parses requests, runs the handler, writes the answers."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._handler = server.handler
        self._max_body = server.max_body
        self._scheme = "http" if server.ssl_context is None else "https"
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url: list[bytes] = []
        self._headers: list[tuple[str, str]] = []
        self._body: list[bytes] = []
        self._body_size = 0
        # Bytes received while a request's line and headers were still coming in.
        self._in_head = False
        self._head_bytes = 0
        self._ready: deque[tuple[Request, bool]] = deque()  # pipelined, not yet answered
        self._task: asyncio.Task[None] | None = None
        self._stream: Stream | None = None
        self._pending: list[bytes] = []  # write_soon's, in order
        self._closing = False  # no more requests: answer what is in and close
        self.lost = False
        # The transport's buffer is over its high-water mark (pause_writing).
        self.writing_paused = False

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's TLS one is not an asyncio.Transport subclass).
        self._transport = cast(asyncio.Transport, transport)
        self._server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse(_HEAD_TOO_LARGE)
                return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            # Go's net/http answer to what it cannot parse (upgrades included: the API
            # server's are for exec and port-forward, which this cluster has not got).
            if not self._closing:
                self._refuse(Response(400, b"400 Bad Request", "text/plain; charset=utf-8"))

    def eof_received(self) -> bool | None:
        # The client is done sending: the connection closes (TLS cannot stay half open,
        # and HTTP clients do not half-close to wait for an answer).
        self._closing = True
        return None

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._closing = True
        self._ready.clear()
        self._server.connections.discard(self)
        if self._task is not None:
            self._task.cancel()

    # -- httptools callbacks -------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = []
        self._headers = []
        self._body = []
        self._body_size = 0
        self._in_head = True
        self._head_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._url.append(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        self._in_head = False
        length = self._parser_content_length()
        if length is not None and length > self._max_body:
            self._too_large()
            return
        if any(n.lower() == "expect" and v.lower() == "100-continue" for n, v in self._headers):
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._closing:
            return
        self._body_size += len(body)
        if self._body_size > self._max_body:
            self._too_large()
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._closing:
            return
        url = b"".join(self._url)
        raw_path, _, raw_query = url.partition(b"?")
        request = Request(
            method=self._parser.get_method().decode("ascii"),
            path=unquote(raw_path.decode("latin-1")),
            query=parse_query(raw_query),
            headers=CIMultiDictProxy(CIMultiDict(self._headers)),
            body=b"".join(self._body),
            scheme=self._scheme,
        )
        keep_alive = self._parser.should_keep_alive()
        if self._task is not None or self._ready:
            self._ready.append((request, keep_alive))
            if len(self._ready) > 16 and self._transport is not None:
                self._transport.pause_reading()  # a client that pipelines far ahead
            return
        self._serve(request, keep_alive)

    def _parser_content_length(self) -> int | None:
        for name, value in self._headers:
            if name.lower() == "content-length":
                with contextlib.suppress(ValueError):
                    return int(value)
        return None

    # -- answering -----------------------------------------------------------------------

    def _serve(self, request: Request, keep_alive: bool) -> None:
        self._stream = None
        try:
            answer = self._handler(request, self)
        except Exception:
            log.exception("handler failed for %s %s", request.method, request.path)
            answer = _internal_error()
        if isinstance(answer, Response):
            self._respond(request, answer, keep_alive)
            return
        self._task = asyncio.get_running_loop().create_task(
            self._finish(request, answer, keep_alive)
        )

    async def _finish(
        self,
        request: Request,
        answer: Coroutine[Any, Any, Response | None],
        keep_alive: bool,
    ) -> None:
        try:
            response = await answer
        except asyncio.CancelledError:
            self._task = None
            return
        except Exception:
            log.exception("handler failed for %s %s", request.method, request.path)
            response = _internal_error()
        self._task = None
        if self.lost:
            return
        stream = self._stream
        if stream is not None and stream.started:
            if response is not None:
                log.error("%s %s streamed and answered", request.method, request.path)
            stream.end()
            self._after(keep_alive)
        elif response is None:
            log.error("%s %s had no answer", request.method, request.path)
            self._respond(request, _internal_error(), keep_alive)
        else:
            self._respond(request, response, keep_alive)
        if self._transport is not None and not self._closing:
            self._transport.resume_reading()
        while self._ready and self._task is None and not self.lost:
            self._serve(*self._ready.popleft())

    def _respond(self, request: Request, response: Response, keep_alive: bool) -> None:
        if self.lost:
            return
        close = not keep_alive or (self._closing and not self._ready)
        framing = b"Content-Length: %d\r\n" % len(response.body)
        if close:
            framing += b"Connection: close\r\n"
        head = _head(response.status, response.content_type, response.headers, framing)
        self.write_soon(head if request.method == "HEAD" else head + response.body)
        self._after(keep_alive)

    def _after(self, keep_alive: bool) -> None:
        if not keep_alive or (self._closing and not self._ready):
            self._closing = True
            self.close()

    def _refuse(self, response: Response) -> None:
        """Answer a request the protocol cannot take, then close (its bytes are unread)."""
        self._closing = True
        self._ready.clear()
        if self._task is not None:
            return  # an answer is being written; the connection closes after it
        framing = b"Content-Length: %d\r\nConnection: close\r\n" % len(response.body)
        self.write(_head(response.status, response.content_type, {}, framing) + response.body)
        self.close()

    def _too_large(self) -> None:
        # The real server's answer to a body over its limit (it finds out while reading
        # the body; here a Content-Length over the limit is enough).
        error = ApiError(
            413, "RequestEntityTooLarge", f"Request entity too large: limit is {self._max_body}"
        )
        self._refuse(Response(413, dumps(error.to_json())))

    # -- for handlers --------------------------------------------------------------------

    def stream(self) -> Stream:
        """The chunked answer of the request being served (one per request)."""
        if self._stream is None:
            self._stream = Stream(self)
        return self._stream

    def write(self, data: bytes) -> None:
        """Write now, after anything ``write_soon`` still holds."""
        if self._pending:
            data = b"".join(self._pending) + data
            self._pending.clear()
        if self._transport is not None and not self.lost:
            self._transport.write(data)

    def write_soon(self, data: bytes) -> None:
        """Write at the end of this turn of the event loop, with whatever else this and
        the other connections are given meanwhile (answers and watch events alike): the
        TLS writes then run one after the other with the TLS layer in the CPU's caches
        instead of between pieces of request handling, which on these machines halves
        what a watch event costs or better and a write's answer a little; and what
        meets on one connection shares a record and a send."""
        if self._server.on_another_thread():
            # An object changed on another thread: the loop's own thread alone touches
            # what is pending, so what it wrote goes there first.
            self._server.call_on_loop(self.write_soon, data)
            return
        if not self._pending:
            self._server.flush_soon(self)
        self._pending.append(data)

    def flush(self) -> None:
        if self._pending:
            self.write(b"")

    @property
    def buffered(self) -> int:
        return 0 if self._transport is None else self._transport.get_write_buffer_size()

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The answer being waited for, if any."""
        return self._task

    def close(self) -> None:
        """Close once what is written has gone out (write_soon's included)."""
        self.flush()
        if self._transport is not None:
            self._transport.close()


def layers_tls_itself(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether TLS is layered by listener.tls_protocol (16 KiB buffers per connection)
    rather than by the loop: on asyncio's own loops, whose TLS is Python code with
    256 KiB buffers. uvloop's is C and costs less CPU per request (the standalone
    cluster runs on it)."""
    return isinstance(loop, asyncio.BaseEventLoop)


class HttpServer:
    """Listens on ``host:port`` (TLS when given a context) and serves ``handler``.

    ``header_timeout``: a connection must finish its TLS handshake and send its first
    request's headers within this many seconds (see listener.FirstRequestDeadline)."""

    def __init__(
        self,
        handler: Handler,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None,
        header_timeout: float,
        max_body: int,
        backlog: int = 1024,
    ) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.header_timeout = header_timeout
        self.max_body = max_body
        self.backlog = backlog
        self.connections: set[Connection] = set()
        self._server: asyncio.Server | None = None
        self._unflushed: list[Connection] = []  # connections holding write_soon's
        self._loop: asyncio.AbstractEventLoop | None = None  # the one start() listens on
        self._thread = 0  # and the thread it runs on

    def on_another_thread(self) -> bool:
        """Whether the caller runs on a thread other than the one the server's loop runs on."""
        return threading.get_ident() != self._thread

    def call_on_loop(self, callback: Callable[..., object], *args: object) -> None:
        """``callback(*args)`` on the server loop's thread, from any thread."""
        assert self._loop is not None, "start() first"
        self._loop.call_soon_threadsafe(callback, *args)

    def flush_soon(self, connection: Connection) -> None:
        """On the loop's thread, running or not: a test's synchronous fixture changes
        objects between the loop's runs, and the flush waits for the next one."""
        assert self._loop is not None, "start() first"
        if not self._unflushed:
            self._loop.call_soon(self._flush)
        self._unflushed.append(connection)

    def _flush(self) -> None:
        unflushed, self._unflushed = self._unflushed, []
        for connection in unflushed:
            connection.flush()

    async def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        context = self.ssl_context
        layered = context is not None and layers_tls_itself(loop)

        def factory() -> asyncio.BaseProtocol:
            app = FirstRequestDeadline(Connection(self), self.header_timeout)
            if not layered:
                return app
            assert context is not None
            return tls_protocol(loop, app, context, self.header_timeout)

        native: dict[str, Any] = {}
        if context is not None and not layered:
            # The loop's TLS: the deadline then starts once the handshake is done, which
            # has a deadline of its own.
            native = {"ssl": context, "ssl_handshake_timeout": self.header_timeout}
        self._server = await loop.create_server(
            factory,
            self.host,
            self.port,
            backlog=self.backlog,
            reuse_address=True,
            family=socket.AF_INET6 if ":" in self.host else socket.AF_INET,
            **native,
        )
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self, grace: float = 2.0) -> None:
        """Stop listening; give requests being served ``grace`` seconds, then close every
        connection."""
        if self._server is None:
            return
        self._server.close()
        self._server = None
        serving = [c.task for c in self.connections if c.task is not None]
        if serving:
            await asyncio.wait(serving, timeout=grace)
        for connection in list(self.connections):
            connection.close()
        # Let the transports' close callbacks run (connection_lost cancels what is left).
        for _ in range(3):
            await asyncio.sleep(0)
