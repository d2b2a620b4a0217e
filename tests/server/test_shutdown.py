"""SIGTERM with posts in flight: every one gets its answer, then the process exits 0."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import aiohttp
import pytest

from trainjob_status_server.auth.testing import AcceptAll
from trainjob_status_server.config import Config
from trainjob_status_server.devcluster import DevCluster
from trainjob_status_server.running import serve_until_signalled

from .conftest import NS, ServingCerts, status_path


async def test_sigterm_lets_in_flight_posts_finish(
    devcluster: DevCluster, config: Config, certs: ServingCerts, unused_tcp_port: int
) -> None:
    devcluster.create_trainjob(NS, "tj")
    config = Config(**{**config.__dict__, "port": unused_tcp_port})
    serving = asyncio.create_task(serve_until_signalled(config, AcceptAll()))
    url = f"https://127.0.0.1:{unused_tcp_port}"
    connector = aiohttp.TCPConnector(ssl=certs.client_context())
    async with aiohttp.ClientSession(connector=connector) as session:
        async with asyncio.timeout(5):
            while True:
                try:
                    async with session.get(url + "/readyz") as ready:
                        if ready.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.05)
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
    stored = devcluster.get("trainjobs", NS, "tj", "trainer.kubeflow.org")
    assert stored is not None
    assert stored["status"]["trainerStatus"]["progressPercentage"] == 7
