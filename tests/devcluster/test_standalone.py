"""``trainjob-devcluster serve`` as a process: it serves on uvloop, watches and writes
work through it, and SIGTERM removes its kubeconfig."""

import asyncio
import base64
import json
import signal
import ssl
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from .conftest import TJ


async def start(kubeconfig: Path) -> tuple[asyncio.subprocess.Process, dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "trainjob_devcluster.harness.cli",
        "serve",
        "--port",
        "0",
        "--kubeconfig-out",
        str(kubeconfig),
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    banner = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
    assert " on uvloop (development only); " in banner
    # Written before the banner.
    return proc, yaml.safe_load(await asyncio.to_thread(kubeconfig.read_text))


async def test_the_standalone_cluster_serves_writes_and_watches(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "dev.kubeconfig"
    proc, config = await start(kubeconfig)
    try:
        cluster = config["clusters"][0]["cluster"]
        url = cluster["server"]
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        headers = {"Authorization": f"Bearer {config['users'][0]['user']['token']}"}
        connector = aiohttp.TCPConnector(ssl=ssl.create_default_context(cadata=ca))
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

            async def call(method: str, path: str, body: Any, content_type: str) -> int:
                async with session.request(
                    method,
                    url + path,
                    data=json.dumps(body),
                    headers={"Content-Type": content_type},
                ) as response:
                    await response.read()
                    return response.status

            assert (
                await call(
                    "POST", "/api/v1/namespaces", {"metadata": {"name": "s"}}, "application/json"
                )
                == 201
            )
            job = {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": "j", "namespace": "s"},
                "spec": {"runtimeRef": {"name": "torch-distributed"}},
            }
            assert (
                await call("POST", f"{TJ}/namespaces/s/trainjobs", job, "application/json") == 201
            )
            watch = await session.get(
                f"{url}{TJ}/namespaces/s/trainjobs?watch=true&fieldSelector=metadata.name%3Dj"
            )
            assert json.loads(await watch.content.readline())["type"] == "ADDED"
            status = {
                **job,
                "status": {
                    "trainerStatus": {
                        "progressPercentage": 40,
                        "lastUpdatedTime": "2026-12-03T10:00:00Z",
                    }
                },
            }
            path = f"{TJ}/namespaces/s/trainjobs/j/status?fieldManager=t&force=true"
            assert await call("PATCH", path, status, "application/apply-patch+yaml") == 200
            event = json.loads(await asyncio.wait_for(watch.content.readline(), 5))
            assert event["type"] == "MODIFIED"
            assert event["object"]["status"]["trainerStatus"]["progressPercentage"] == 40
            watch.close()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 15)
    assert code == 0
    assert not await asyncio.to_thread(kubeconfig.exists)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_stops_it_and_removes_the_kubeconfig(tmp_path: Path, sig: int) -> None:
    kubeconfig = tmp_path / "dev.kubeconfig"
    proc, _ = await start(kubeconfig)
    proc.send_signal(sig)
    assert await asyncio.wait_for(proc.wait(), 15) == 0
    assert not await asyncio.to_thread(kubeconfig.exists)
