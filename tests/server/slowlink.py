"""A TCP link to an API server that is slow, or down, on demand: the server under test
reaches its Kubernetes API (the development cluster or kube-apiserver alike) through it.

Each chunk is delivered ``delay`` seconds after it was read, in order, both ways (TLS
passes through untouched: the link sees only bytes). ``cut()`` drops every connection
and refuses new ones until ``restore()``.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from types import TracebackType

import yaml


class SlowLink:
    def __init__(self, target_url: str, delay: float) -> None:
        host_port = target_url.split("://", 1)[1].rstrip("/")
        host, port = host_port.rsplit(":", 1)
        self.target = (host.strip("[]"), int(port))
        self.delay = delay
        self.down = False
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def kubeconfig(self, original: Path, folder: Path) -> Path:
        """A copy of ``original`` whose cluster is reached through this link."""
        config = yaml.safe_load(original.read_text())
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        path = folder / "slow.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        return path

    def cut(self) -> None:
        """The API server is unreachable: open connections reset, new ones refused."""
        self.down = True
        for writer in list(self._writers):
            writer.transport.abort()

    def restore(self) -> None:
        self.down = False

    async def __aenter__(self) -> SlowLink:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.down:
            writer.transport.abort()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, upstream_writer))
        pipes = [
            asyncio.create_task(self._pipe(reader, upstream_writer)),
            asyncio.create_task(self._pipe(upstream_reader, writer)),
        ]
        self._pipes.update(pipes)
        try:
            await asyncio.gather(*pipes, return_exceptions=True)
        finally:
            self._pipes.difference_update(pipes)
            for end in (writer, upstream_writer):
                self._writers.discard(end)
                end.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds late, in order."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, chunk = await queue.get()
                await asyncio.sleep(max(0.0, due - loop.time()))
                if not chunk:
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                    return
                writer.write(chunk)
                await writer.drain()

        delivering = asyncio.create_task(deliver())
        try:
            while True:
                chunk = await reader.read(65536)
                queue.put_nowait((loop.time() + self.delay, chunk))
                if not chunk:
                    break
            await delivering
        finally:
            delivering.cancel()
