"""A running status server against the devcluster, and an HTTPS client that trusts it."""

from __future__ import annotations

import json
import random
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from trainjob_devcluster.harness.pytest_plugin import MakeStatusServer
from trainjob_devcluster.harness.testing import ServingCerts, settled, status_path
from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config

__all__ = ["GROUP", "NS", "Poster", "ServingCerts", "settled", "status_path", "with_changes"]

NS = "team-a"
GROUP = "trainer.kubeflow.org"


# Ports a test names before its server binds them are taken from below the kernel's
# ephemeral range (32768 and up on Linux): a port chosen from that range can be handed,
# between its choice and its use, to a server binding port 0 or to an outgoing
# connection, and the server that names it then cannot start. Above the fixed ports the
# deployment tests use (8081 to 10443).
FIXED_PORTS = range(20000, 32768)


def _free_fixed_port(taken: set[int]) -> int:
    for _ in range(1000):
        port = random.choice(FIXED_PORTS)
        if port in taken:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                continue
        taken.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


@pytest.fixture
def unused_tcp_port_factory() -> Callable[[], int]:
    """A free port each call, never the same twice in a test, outside the ephemeral
    range (``FIXED_PORTS``)."""
    taken: set[int] = set()
    return lambda: _free_fixed_port(taken)


@pytest.fixture
def unused_tcp_port(unused_tcp_port_factory: Callable[[], int]) -> int:
    return unused_tcp_port_factory()


@pytest.fixture
def certs(serving_certs: ServingCerts) -> ServingCerts:
    return serving_certs


@pytest.fixture
def config(status_config: Config) -> Config:
    """The config ``server`` starts with; a module overrides it to change flags."""
    return status_config


@pytest_asyncio.fixture
async def server(
    config: Config, make_status_server: MakeStatusServer
) -> AsyncIterator[StatusServer]:
    async with make_status_server(config) as running:
        yield running


class Poster:
    """Posts to the server over HTTPS keep-alive, verifying its certificate."""

    def __init__(self, server: StatusServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session

    async def request(
        self,
        method: str,
        path: str,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, aiohttp.ClientResponse]:
        async with self.session.request(
            method, self.server.url + path, data=data, headers=headers or {}
        ) as response:
            raw = await response.read()
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
            return response.status, body, response

    async def post(
        self, name: str, body: Any, *, namespace: str = NS, raw: bytes | None = None
    ) -> tuple[int, Any]:
        data = raw if raw is not None else json.dumps(body).encode()
        code, parsed, _ = await self.request(
            "POST",
            status_path(namespace, name),
            data,
            {"Authorization": "Bearer test"},
        )
        # A post is answered once queued; tests look at the API after the write.
        await self.server.writer.wait_idle()
        return code, parsed


@pytest_asyncio.fixture
async def poster(server: StatusServer, certs: ServingCerts) -> AsyncIterator[Poster]:
    connector = aiohttp.TCPConnector(ssl=certs.client_context())
    async with aiohttp.ClientSession(connector=connector) as session:
        yield Poster(server, session)


def with_changes(config: Config, **changes: Any) -> Config:
    return replace(config, **changes)


@pytest_asyncio.fixture
async def direct_poster(
    config: Config, certs: ServingCerts, make_status_server: MakeStatusServer
) -> AsyncIterator[Poster]:
    """A server in ``--write-mode direct``: one write per post, answered with its outcome."""
    async with make_status_server(config, write_mode="direct") as running:
        connector = aiohttp.TCPConnector(ssl=certs.client_context())
        async with aiohttp.ClientSession(connector=connector) as session:
            yield Poster(running, session)
