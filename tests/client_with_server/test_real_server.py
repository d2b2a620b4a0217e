"""Against our server and the devcluster (and the real control plane), with the pod's real
token, CA file and URL: our client, the SDK-like client and a replay of Transformers'
KubeflowCallback all get their updates written to the TrainJob."""

from __future__ import annotations

import asyncio
import os
import sys

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_real_server
from trainjob_status import StatusReporter

from . import kubeflow_replay
from .conftest import Pod, stored_status
from .sdk_like import SdkLikeClient


@on_real_server
async def test_our_client_writes_the_trainer_status(pod: Pod, kube_api: KubeAPI) -> None:
    reporter = StatusReporter(environ=pod.environ)
    assert reporter.report(42, 600, {"loss": 0.25, "accuracy": 0.9}, step=1200, epoch=1.5)
    assert await asyncio.to_thread(reporter.flush, 10)
    status = stored_status(kube_api)
    assert status is not None
    assert status.pop("lastUpdatedTime").endswith("Z")
    assert status == {
        "progressPercentage": 42,
        "estimatedRemainingSeconds": 600,
        "metrics": [
            {"name": "step", "value": "1200"},
            {"name": "epoch", "value": "1.5"},
            {"name": "loss", "value": "0.25"},
            {"name": "accuracy", "value": "0.9"},
        ],
    }
    await asyncio.to_thread(reporter.close, 0)


@on_real_server
async def test_the_sdk_like_client_works_against_our_server(pod: Pod, kube_api: KubeAPI) -> None:
    sdk = SdkLikeClient(pod.environ)
    assert await asyncio.to_thread(sdk.update_trainjob_status, 30, 120, {"loss": 0.5})
    assert sdk.answers == [200]
    status = stored_status(kube_api)
    assert status is not None
    assert (status["progressPercentage"], status["estimatedRemainingSeconds"]) == (30, 120)
    assert status["metrics"] == [{"name": "loss", "value": "0.5"}]


@on_real_server
async def test_kubeflow_callback_posts_replayed_against_our_server(
    pod: Pod, kube_api: KubeAPI
) -> None:
    posts = kubeflow_replay.posts(total_steps=6, steps_per_epoch=3)
    codes = [
        await asyncio.to_thread(kubeflow_replay.post, pod.url, pod.token, str(pod.ca_file), status)
        for status in posts
    ]
    assert codes == [200] * len(posts)
    assert [p["progressPercentage"] for p in posts] == [0, 16, 33, 50, 66, 83, 99, 100]
    status = stored_status(kube_api)
    assert status is not None
    assert (status["progressPercentage"], status["estimatedRemainingSeconds"]) == (100, 0)
    assert {m["name"] for m in status["metrics"]} == {"loss", "learning_rate", "epoch"}


async def test_update_trainjob_status_in_a_process_that_exits(
    pod: Pod, devcluster: DevCluster
) -> None:
    code = (
        "from trainjob_status import update_trainjob_status\n"
        "for step in range(1, 501):\n"
        "    update_trainjob_status(step / 5, 500 - step, {'step': step})\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, env={**env, **pod.environ}
    )
    assert await asyncio.wait_for(process.wait(), 30) == 0
    status = stored_status(devcluster)
    assert status is not None
    assert status["progressPercentage"] == 100
    assert status["metrics"] == [{"name": "step", "value": "500"}]
