"""SIGTERM with posts in flight: every one gets its answer, then the process exits 0."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import aiohttp
import pytest

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.acceptall import AcceptAll
from trainjob_status.contract import GROUP
from trainjob_status_server.config import Config
from trainjob_status_server.running import serve_until_signalled

from .conftest import NS, ServingCerts, status_path, with_changes


async def _wait_ready(session: aiohttp.ClientSession, url: str) -> None:
    async with asyncio.timeout(5):
        while True:
            try:
                async with session.get(url + "/readyz") as ready:
                    if ready.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)


async def test_sigterm_lets_in_flight_posts_finish(
    devcluster: DevCluster, config: Config, certs: ServingCerts, unused_tcp_port: int
) -> None:
    devcluster.create_trainjob(NS, "tj")
    # Direct mode: each post waits for its own write, so the posts are truly in flight.
    config = with_changes(config, port=unused_tcp_port, write_mode="direct")
    serving = asyncio.create_task(serve_until_signalled(config, AcceptAll()))
    url = f"https://127.0.0.1:{unused_tcp_port}"
    connector = aiohttp.TCPConnector(ssl=certs.client_context())
    async with aiohttp.ClientSession(connector=connector) as session:
        await _wait_ready(session, url)
        # Each write to the API now takes a second: the posts are in flight when SIGTERM lands.
        devcluster.faults.stall(1.0, times=None, verb="patch", resource="trainjobs/status")
        body = {"trainerStatus": {"progressPercentage": 7, "lastUpdatedTime": devcluster.now()}}

        async def post() -> tuple[int, dict[str, object]]:
            async with session.post(
                url + status_path(NS, "tj"),
                data=json.dumps(body),
                headers={"Authorization": "Bearer test"},
            ) as response:
                return response.status, await response.json()

        posts = [asyncio.create_task(post()) for _ in range(5)]
        async with asyncio.timeout(5):
            while devcluster.faults.count("patch", "trainjobs/status") < 5:
                await asyncio.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)
        answers = await asyncio.gather(*posts)
        assert [code for code, _ in answers] == [200] * 5
        assert answers[0][1]["trainerStatus"]["progressPercentage"] == 7
        assert await asyncio.wait_for(serving, 10) == 0
        with pytest.raises(aiohttp.ClientConnectionError):
            async with session.get(url + "/healthz"):
                pass
    stored = devcluster.get("trainjobs", NS, "tj", GROUP)
    assert stored is not None
    assert stored["status"]["trainerStatus"]["progressPercentage"] == 7


async def test_sigterm_writes_pending_updates_before_exit(
    devcluster: DevCluster, config: Config, certs: ServingCerts, unused_tcp_port: int
) -> None:
    """Coalescing mode answers at once; the updates still queued at SIGTERM (behind a
    long minimum interval and a slow API) are written before the process exits."""
    names = [f"tj{i}" for i in range(3)]
    for name in names:
        devcluster.create_trainjob(NS, name)
    config = with_changes(config, port=unused_tcp_port, min_write_interval=60.0)
    serving = asyncio.create_task(serve_until_signalled(config, AcceptAll()))
    url = f"https://127.0.0.1:{unused_tcp_port}"
    connector = aiohttp.TCPConnector(ssl=certs.client_context())
    async with aiohttp.ClientSession(connector=connector) as session:
        await _wait_ready(session, url)
        devcluster.faults.stall(0.5, times=None, verb="patch", resource="trainjobs/status")
        for step in (1, 2):
            for name in names:
                body = {
                    "trainerStatus": {
                        "progressPercentage": step,
                        "lastUpdatedTime": f"2026-12-02T18:33:2{step}Z",
                    }
                }
                async with session.post(
                    url + status_path(NS, name),
                    data=json.dumps(body),
                    headers={"Authorization": "Bearer test"},
                ) as response:
                    assert response.status == 200
        os.kill(os.getpid(), signal.SIGTERM)
        assert await asyncio.wait_for(serving, 15) == 0
    for name in names:
        stored = devcluster.get("trainjobs", NS, name, GROUP)
        assert stored is not None
        assert stored["status"]["trainerStatus"]["progressPercentage"] == 2
