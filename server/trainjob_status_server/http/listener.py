"""A TCP listener for an aiohttp runner that bounds what each connection may hold: slots
(``slots.Slots``: a cap in all and per source address; connections that have not sent
their first request's headers, then idle keep-alive ones, closed to make room), a
deadline for the first request, a bound on each request's head
(``protocol.StatusRequestHandler``) and a write timeout. The development cluster's own
HTTP server uses the same deadline and TLS layer (``FirstRequestDeadline``,
``tls_protocol``).

A connection beyond the caps for which no other can be closed is closed as soon as it
arrives, before its TLS handshake, instead of queueing inside the server: a flood of
idle or slow clients cannot starve the pods that report. aiohttp times a connection out
only between requests (its keep-alive timer starts after a response), so a client that
connects and then sends nothing, or its headers a byte at a time, would hold a slot for
ever; here a connection whose first request's headers have not all arrived
``first_request_timeout`` seconds after it opened (after its TLS handshake, itself
bounded by that time) is closed, and until then it is the first a newcomer may close. A
client that stops reading its answers would hold its slot for ever too (the answer waits
to be sent): a connection whose socket stays too full to take more (its transport
paused) for ``write_timeout`` seconds is closed. That is watched at the socket, below
TLS: asyncio's TLS layer hands a large answer to the socket's transport in one write
without pausing its application, so only the socket's own pause shows a client that
stopped reading.

TLS is layered here rather than by ``create_server(ssl=...)`` for one reason: memory.
asyncio gives every TLS connection a receive buffer of its own (``SSLProtocol.max_size``,
256 KiB), written through when it is made, and every idle keep-alive connection from a
pod holds it. A status post is a few KiB; a buffer of one TLS record (16 KiB), shared by
all connections, reads it in the same number of calls. What a connection holds either
way, measured: docs/connections.md and docs/scaling.md.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ..metrics import selfmetrics
from .aiohttp_internals import SharedBufferTLS, attach_server
from .aiohttp_internals import tls_protocol as tls_protocol
from .memory import HeapTrim
from .protocol import HEAD_TIMEOUT, StatusRequestHandler
from .slots import RefusalLog, Slots

_END_OF_HEADERS = b"\r\n\r\n"

HEADER_TIMEOUT = HEAD_TIMEOUT
WRITE_TIMEOUT = "write_timeout"


def _ignore(_reason: str) -> None:
    pass


class WriteStall:
    """Aborts ``transport`` once its writes have stayed paused ``seconds`` (the client
    reads nothing); ``stalled`` is called first."""

    def __init__(self, seconds: float | None, stalled: Callable[[], None]) -> None:
        self.seconds = seconds
        self._stalled = stalled
        self._transport: asyncio.BaseTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.stalled_since: float | None = None

    def attach(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def paused(self) -> None:
        if self._transport is None or self.stalled_since is not None:
            return
        loop = asyncio.get_running_loop()
        self.stalled_since = loop.time()
        if self.seconds is not None:
            self._timer = loop.call_later(self.seconds, self._expire)

    def resumed(self) -> None:
        self.stalled_since = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def detach(self) -> None:
        """The connection is gone: no timer, no reference to its transport."""
        self.resumed()
        self._transport = None

    def _expire(self) -> None:
        self._timer = None
        self.stalled_since = None
        if self._transport is not None:
            self._stalled()
            # Not close(): that would wait for the unsent bytes the client does not read.
            self._transport.abort()  # type: ignore[attr-defined]


class FirstRequestDeadline(asyncio.Protocol):
    """Passes everything to ``inner`` (aiohttp's protocol for the connection) and closes
    the connection if the first request's headers (up to the blank line that ends them)
    are not in within ``seconds`` of the connection being made, or, with a
    ``write_stall``, if its writes stay paused (the client reads nothing) too long.
    ``closed`` is told why it closed one, ``started`` when the first request's headers
    are in."""

    def __init__(
        self,
        inner: asyncio.Protocol,
        seconds: float,
        *,
        write_stall: WriteStall | None = None,
        closed: Callable[[str], None] = _ignore,
        started: Callable[[], None] = lambda: None,
    ) -> None:
        self.inner = inner
        self.seconds = seconds
        self.timed_out = False
        self._closed = closed
        self._started = started
        self._transport: asyncio.BaseTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._stall = write_stall or WriteStall(None, lambda: None)
        self._waiting = True  # for the end of the first request's headers
        self._tail = b""  # the last bytes seen, for a blank line split across reads

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._stall.attach(transport)
        self._timer = asyncio.get_running_loop().call_later(self.seconds, self._expire, transport)
        self.inner.connection_made(transport)

    def _expire(self, transport: asyncio.BaseTransport) -> None:
        self._timer = None
        if self._waiting:
            self.timed_out = True
            self._closed(HEADER_TIMEOUT)
            transport.close()

    def data_received(self, data: bytes) -> None:
        if self._waiting:
            seen = self._tail + data
            if _END_OF_HEADERS in seen:
                self._waiting = False
                self._cancel()
                self._started()
            else:
                self._tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        self._stall.detach()
        # The TLS transport refers back to this protocol: without this, a closed
        # connection waits for the cycle collector to be freed.
        self._transport = None
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._stall.paused()
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self._stall.resumed()
        self.inner.resume_writing()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


@dataclass(frozen=True)
class Limits:
    """What one connection may hold, and how many may be open."""

    max_connections: int
    max_connections_per_ip: int
    first_request_timeout: float  # TLS handshake, then the first request's headers
    header_timeout: float  # each later request's headers, from their first byte
    write_timeout: float
    max_head_bytes: int


class _Seat:
    """One admitted connection, as ``Slots`` sees it."""

    __slots__ = ("handler", "stall", "transport")

    def __init__(
        self, transport: asyncio.BaseTransport, handler: StatusRequestHandler, stall: WriteStall
    ) -> None:
        self.transport = transport
        self.handler = handler
        self.stall = stall

    @property
    def idle(self) -> bool:
        return self.handler.idle

    @property
    def stalled_since(self) -> float | None:
        return self.stall.stalled_since

    @property
    def waiting_since(self) -> float | None:
        return self.handler.waiting_since

    def evict(self) -> None:
        self.transport.abort()  # type: ignore[attr-defined]


def _address(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"


class _Admitted:
    """Takes a slot when the TCP connection is made, before anything else runs for it
    (no TLS handshake for a refused one), and frees it when the connection is lost."""

    def __init__(
        self, slots: Slots, heap: HeapTrim, handler: StatusRequestHandler, stall: WriteStall
    ) -> None:
        self.slots = slots
        self.heap = heap
        self.handler = handler
        self.stall = stall
        self.seat: _Seat | None = None

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        seat = _Seat(transport, self.handler, self.stall)
        if self.slots.admit(seat, _address(transport)) is not None:
            transport.abort()  # type: ignore[attr-defined]
            return False
        self.seat = seat
        self.heap.opened(len(self.slots))
        return True

    def started(self) -> None:
        if self.seat is not None:
            self.slots.started(self.seat)

    def release(self) -> None:
        if self.seat is not None:
            self.slots.release(self.seat)
            self.seat = None
            self.heap.closed(len(self.slots))


class _AdmittedTLS(SharedBufferTLS):
    """TLS on an admitted connection, its socket watched for a stalled client."""

    admitted: _Admitted
    stall: WriteStall

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.admitted.admit(transport):
            self.stall.attach(transport)
            super().connection_made(transport)

    def pause_writing(self) -> None:
        super().pause_writing()
        self.stall.paused()

    def resume_writing(self) -> None:
        self.stall.resumed()
        super().resume_writing()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.admitted.seat is None:
            return  # refused: nothing was set up
        self.stall.detach()
        self.admitted.release()
        super().connection_lost(exc)


class _AdmittedPlain(FirstRequestDeadline):
    admitted: _Admitted

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.admitted.admit(transport):
            super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.admitted.seat is None:
            return
        self.admitted.release()
        super().connection_lost(exc)


class CappedSite(web.BaseSite):
    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None,
        limits: Limits,
        handler_settings: Mapping[str, Any],
        listener: str = "serving",
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self.runner = runner
        self.host = host
        self.asked_port = port
        self.tls = ssl_context
        self.backlog = backlog
        self.limits = limits
        # What aiohttp's protocol is made with (timeouts, lingering, access log): the
        # keyword arguments the runner's ``web.Server`` was given.
        self.handler_settings = dict(handler_settings)
        self.listening: asyncio.Server | None = None
        self.listener = listener
        refused_log = RefusalLog(listener)

        def refused(reason: str, address: str) -> None:
            selfmetrics.CONNECTIONS_REFUSED.labels(listener, reason).inc()
            refused_log(reason, address)

        self.slots = Slots(
            limits.max_connections,
            limits.max_connections_per_ip,
            refused=refused,
            evicted=self._closed,
        )
        self.heap = HeapTrim()

    def _closed(self, reason: str) -> None:
        selfmetrics.CONNECTIONS_CLOSED.labels(self.listener, reason).inc()

    @property
    def name(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was asked for)."""
        if self.listening is not None:
            sockets = self.listening.sockets
            if sockets:
                return int(sockets[0].getsockname()[1])
        return self.asked_port

    async def start(self) -> None:
        await super().start()
        server = self.runner.server
        assert server is not None, "runner.setup() first"

        loop = asyncio.get_running_loop()
        tls = self.tls
        limits = self.limits
        settings = self.handler_settings

        def factory() -> asyncio.BaseProtocol:
            handler = StatusRequestHandler(
                server,
                loop=loop,
                max_head_bytes=limits.max_head_bytes,
                head_timeout=limits.header_timeout,
                closed=self._closed,
                **settings,
            )
            # Watched at the socket: below TLS where there is TLS.
            stall = WriteStall(limits.write_timeout, lambda: self._closed(WRITE_TIMEOUT))
            admitted = _Admitted(self.slots, self.heap, handler, stall)
            if tls is None:
                plain = _AdmittedPlain(
                    handler,
                    limits.first_request_timeout,
                    write_stall=stall,
                    closed=self._closed,
                    started=admitted.started,
                )
                plain.admitted = admitted
                return plain
            app = FirstRequestDeadline(
                handler,
                limits.first_request_timeout,
                closed=self._closed,
                started=admitted.started,
            )
            outer = _AdmittedTLS(
                loop,
                app,
                tls,
                None,  # no waiter: nothing awaits the handshake
                server_side=True,
                ssl_handshake_timeout=limits.first_request_timeout,
            )
            outer.admitted = admitted
            outer.stall = stall
            return outer

        self.listening = await loop.create_server(
            factory,
            self.host,
            self.asked_port,
            backlog=self.backlog,
            reuse_address=True,
            family=socket.AF_INET6 if ":" in self.host else socket.AF_INET,
        )
        attach_server(self, self.listening)
