"""A TCP listener for an aiohttp runner with a cap on open connections and a deadline for
the first request of each. The development cluster's own HTTP server uses the same
deadline and TLS layer (``FirstRequestDeadline``, ``tls_protocol``).

Connections beyond the cap are closed as soon as they arrive instead of queueing inside
the server: a flood of idle or slow clients cannot starve the pods that report. aiohttp
times a connection out only between requests (its keep-alive timer starts after a
response), so a client that connects and then sends nothing, or its headers a byte at a
time, would hold a slot for ever; here a connection whose first request's headers have
not all arrived ``header_timeout`` seconds after it opened is closed.

TLS is layered here rather than by ``create_server(ssl=...)`` for one reason: memory.
asyncio gives every TLS connection a 256 KiB receive buffer, written through when it is
made, so 1,000 idle keep-alive connections from pods cost 250 MiB. A status post is a
few KiB; a buffer of one TLS record (16 KiB) reads it in the same number of calls.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from asyncio import sslproto

from aiohttp import web


class _Refuse(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


_END_OF_HEADERS = b"\r\n\r\n"


class FirstRequestDeadline(asyncio.Protocol):
    """Passes everything to ``inner`` (aiohttp's protocol for the connection) and closes
    the connection if the first request's headers (up to the blank line that ends them)
    are not in within ``seconds`` of the connection being made. After that it only
    forwards."""

    def __init__(self, inner: asyncio.Protocol, seconds: float) -> None:
        self.inner = inner
        self.seconds = seconds
        self.timed_out = False
        self._timer: asyncio.TimerHandle | None = None
        self._waiting = True  # for the end of the first request's headers
        self._tail = b""  # the last bytes seen, for a blank line split across reads

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._timer = asyncio.get_running_loop().call_later(self.seconds, self._expire, transport)
        self.inner.connection_made(transport)

    def _expire(self, transport: asyncio.BaseTransport) -> None:
        self._timer = None
        if self._waiting:
            self.timed_out = True
            transport.close()

    def data_received(self, data: bytes) -> None:
        if self._waiting:
            seen = self._tail + data
            if _END_OF_HEADERS in seen:
                self._waiting = False
                self._cancel()
            else:
                self._tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class _TLSProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol with a receive buffer of one TLS record, not 256 KiB."""

    max_size = 16 * 1024


def tls_protocol(
    loop: asyncio.AbstractEventLoop,
    app: asyncio.Protocol,
    context: ssl.SSLContext,
    handshake_timeout: float,
) -> asyncio.BaseProtocol:
    """What ``create_server(ssl=...)`` builds around ``app``, with the smaller buffer. No
    waiter: nothing awaits the handshake (typeshed asks for a future and an int; the code
    takes None and any positive number)."""
    return _TLSProtocol(
        loop,
        app,
        context,
        None,  # type: ignore[arg-type]
        server_side=True,
        ssl_handshake_timeout=handshake_timeout,  # type: ignore[arg-type]
    )


class CappedSite(web.BaseSite):
    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None,
        max_connections: int,
        header_timeout: float,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host = host
        self._port = port
        self._max_connections = max_connections
        self._header_timeout = header_timeout
        self.refused = 0

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was asked for)."""
        if self._server is not None and isinstance(self._server, asyncio.Server):
            sockets = self._server.sockets
            if sockets:
                return int(sockets[0].getsockname()[1])
        return self._port

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None, "runner.setup() first"

        loop = asyncio.get_running_loop()
        tls = self._ssl_context

        def factory() -> asyncio.BaseProtocol:
            if len(server.connections) >= self._max_connections:
                self.refused += 1
                return _Refuse()
            app = FirstRequestDeadline(server(), self._header_timeout)
            if tls is None:
                return app
            return tls_protocol(loop, app, tls, self._header_timeout)

        self._server = await loop.create_server(
            factory,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=True,
            family=socket.AF_INET6 if ":" in self._host else socket.AF_INET,
        )
