"""Scrapers that ask for a large metrics page and never read it: each costs the server
a piece of the page, not a copy of it (the TrainJob part of the page is rendered once
and shared until a TrainJob changes), its connection is closed after --write-timeout on
the plain and the TLS metrics port alike, and scrapes that do read are answered meanwhile."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import tracemalloc
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.acceptall import AcceptAll
from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config

from .conftest import NS, ServingCerts, status_path, with_changes
from .test_connections import address, counted
from .test_metrics_secure import grant_metrics_reader, token_for

TRAINJOBS = 250
METRICS = 256  # the CRD's limit per status: the largest page per TrainJob
# Long names make a page (some 12 MiB) well over what the kernel takes into a socket's
# send buffer on loopback (up to 4 MiB): the rest is for the server to hold.
PREFIX = "llama-3-70b-instruct-finetune-with-long-context"
STALLED = 8
CLOSED = "trainjob_status_connections_closed_total"


def full_status(index: int) -> bytes:
    metrics = [
        {
            "name": f"validation_loss_per_token_for_the_held_out_component_{k:03d}",
            "value": f"{index + k / 1000:.6f}",
        }
        for k in range(METRICS)
    ]
    return json.dumps(
        {
            "trainerStatus": {
                "progressPercentage": index % 100,
                "lastUpdatedTime": "2026-12-01T08:00:00Z",
                "metrics": metrics,
            }
        }
    ).encode()


@pytest_asyncio.fixture(params=["plain", "tls"])
async def large_page(
    request: pytest.FixtureRequest, config: Config, certs: ServingCerts, devcluster: DevCluster
) -> AsyncIterator[tuple[StatusServer, str | None]]:
    """A server whose metrics page holds TRAINJOBS x METRICS series (some MiB), on a
    plain or a TLS metrics port, and the bearer token a scraper sends (TLS only)."""
    secure = request.param == "tls"
    names = [f"{PREFIX}-{i:03d}" for i in range(TRAINJOBS)]
    for name in names:
        devcluster.create_trainjob(NS, name)
    token = None
    if secure:
        token = token_for(devcluster, "prometheus")
        grant_metrics_reader(devcluster, "prometheus")
    changed = with_changes(config, write_timeout=1.0, metrics_secure=secure)
    async with StatusServer(changed, AcceptAll()) as server:
        await server.trainjobs.synced.wait()
        connector = aiohttp.TCPConnector(ssl=certs.client_context())
        async with aiohttp.ClientSession(connector=connector) as session:
            for index, name in enumerate(names):
                async with session.post(
                    server.url + status_path(NS, name),
                    data=full_status(index),
                    headers={"Authorization": "Bearer test"},
                ) as answer:
                    assert answer.status == 200
        await server.writer.wait_idle()
        async with asyncio.timeout(30):
            while server.exporter.series_count < TRAINJOBS * METRICS:
                await asyncio.sleep(0.05)  # the watch events of the writes, no one event
        yield server, token


async def scrape(server: StatusServer, certs: ServingCerts, token: str | None) -> bytes:
    headers = {"Accept-Encoding": "identity"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    connector = aiohttp.TCPConnector(ssl=certs.client_context())
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(server.metrics_url + "/metrics", headers=headers) as answer,
    ):
        assert answer.status == 200
        return await answer.read()


async def stalled_scraper(
    server: StatusServer, certs: ServingCerts, token: str | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that asks for the page once, then reads nothing (a receive buffer
    of 4 KiB: the page stays on the server's side). The writer is returned to be kept:
    a stream writer collected closes its connection."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, address(server.metrics_url))
    tls: ssl.SSLContext | None = certs.client_context() if token is not None else None
    reader, writer = await asyncio.open_connection(
        sock=sock, ssl=tls, server_hostname="localhost" if tls else None
    )
    auth = f"Authorization: Bearer {token}\r\n" if token is not None else ""
    writer.write(
        f"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n{auth}\r\n".encode()
    )
    await writer.drain()
    return reader, writer


async def test_stalled_scrapers_hold_a_piece_each_and_are_closed_after_the_write_timeout(
    large_page: tuple[StatusServer, str | None], certs: ServingCerts
) -> None:
    server, token = large_page
    page = await scrape(server, certs, token)
    assert len(page) > 10 * 1024 * 1024
    tracemalloc.start()
    try:
        held_before = tracemalloc.get_traced_memory()[0]
        stalled = await stall(server, certs, token)
        peak = tracemalloc.get_traced_memory()[1] - held_before
    finally:
        tracemalloc.stop()
    # A copy of the page per stalled connection would be STALLED pages; the page shared
    # and written a piece at a time leaves each connection a few pieces.
    assert peak < len(page) // 2, f"{peak} bytes at the peak for a page of {len(page)}"
    for reader, writer in stalled:
        # Closed by the server: what it had sent, then the end (or a reset).
        with pytest.raises((ConnectionError, ssl.SSLError, asyncio.IncompleteReadError)):
            await read_to_the_end(reader)
        writer.close()


async def read_to_the_end(reader: asyncio.StreamReader) -> None:
    """Read what was sent; at the end, IncompleteReadError (or the reset's error)."""
    while True:
        if not await asyncio.wait_for(reader.read(1 << 20), 10):
            raise asyncio.IncompleteReadError(b"", None)


async def test_a_scraper_that_reads_is_answered_while_others_stall(
    large_page: tuple[StatusServer, str | None], certs: ServingCerts
) -> None:
    server, token = large_page
    before = counted(CLOSED, listener="metrics", reason="write_timeout")
    stalled = [await stalled_scraper(server, certs, token) for _ in range(STALLED)]
    during = await scrape(server, certs, token)
    assert during.count(b"\ntrainjob_metric{") == TRAINJOBS * METRICS
    await closed_after_write_timeout(before)
    for _, writer in stalled:
        writer.close()


async def stall(
    server: StatusServer, certs: ServingCerts, token: str | None
) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """STALLED scrapers that never read, once the server has closed every one."""
    before = counted(CLOSED, listener="metrics", reason="write_timeout")
    stalled = [await stalled_scraper(server, certs, token) for _ in range(STALLED)]
    await closed_after_write_timeout(before)
    return stalled


async def closed_after_write_timeout(before: float) -> None:
    async with asyncio.timeout(60):
        while counted(CLOSED, listener="metrics", reason="write_timeout") - before < STALLED:
            await asyncio.sleep(0.05)  # a counter, no event to wait on


async def test_the_trainjob_part_is_rendered_once_per_change(
    config: Config, devcluster: DevCluster
) -> None:
    devcluster.create_trainjob(NS, "tj")
    async with StatusServer(config, AcceptAll()) as server:
        await server.trainjobs.synced.wait()
        first = server.exporter.page().pieces
        again = server.exporter.page().pieces
        shared = [piece for piece in first if any(piece is other for other in again)]
        assert b'trainjob="tj"' in b"".join(shared)
        devcluster.create_trainjob(NS, "tj2")
        async with asyncio.timeout(10):
            while len(server.trainjobs) < 2:
                await asyncio.sleep(0.01)  # the cache's size, no one event
        after = b"".join(server.exporter.page().pieces)
        assert b'trainjob="tj2"' in after
