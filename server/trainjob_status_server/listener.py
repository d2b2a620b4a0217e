"""A TCP listener for an aiohttp runner with a cap on open connections.

Connections beyond the cap are closed as soon as they arrive instead of queueing inside
the server: a flood of idle or slow clients cannot starve the pods that report.
"""

from __future__ import annotations

import asyncio
import socket
import ssl

from aiohttp import web


class _Refuse(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class CappedSite(web.BaseSite):
    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None,
        max_connections: int,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host = host
        self._port = port
        self._max_connections = max_connections
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

        def factory() -> asyncio.BaseProtocol:
            if len(server.connections) >= self._max_connections:
                self.refused += 1
                return _Refuse()
            return server()

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            factory,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=True,
            family=socket.AF_INET6 if ":" in self._host else socket.AF_INET,
        )
