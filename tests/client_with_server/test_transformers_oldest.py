"""The key cases against the oldest transformers we support (the first with
``KubeflowCallback``), installed from the package index into a directory of its own and
put first on the path of a subprocess: the built-in callback alone posting to our server,
``attach`` removing it, and the warning when both post. The installed (newest) version
runs the full set in ``test_transformers_real.py``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trainjob_devcluster import DevCluster
from trainjob_status_server.app import StatusServer

from .conftest import Pod, stored_status
from .test_transformers_real import WARNING, accepted_posts

OLDEST = "5.4.0"
ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, logging, sys
import transformers
from trainjob_status import StatusReporter
from trainjob_status.integrations.transformers import TrainJobStatusCallback, attach
from tests.client_with_server.hf_trainer import ShellTrainer, arguments

logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
case, output_dir = sys.argv[1:]
reporter = StatusReporter(min_interval=60)
ours = [TrainJobStatusCallback(reporter)] if case == "both" else []
trainer = ShellTrainer(arguments(output_dir), ours)
if case == "attach":
    attach(trainer, TrainJobStatusCallback(reporter))
trainer.train()
reporter.close()
print(json.dumps({
    "version": transformers.__version__,
    "torch": "torch" in sys.modules,
    "callbacks": trainer.callback_names(),
    "delivered": reporter.stats.delivered,
}))
"""


@pytest.fixture(scope="session")
def oldest_transformers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """transformers==OLDEST and its dependencies in a directory of their own (from the
    package index: CI has it; a machine without it fails here, it does not skip)."""
    target = tmp_path_factory.mktemp("transformers-oldest")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--target", str(target), f"transformers=={OLDEST}"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return target


async def run_case(case: str, target: Path, pod: Pod, output_dir: Path) -> tuple[Any, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env.pop("DISABLE_KUBEFLOW_INTEGRATION", None)
    env.update(pod.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(target), str(ROOT)])
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SCRIPT, case, str(output_dir),
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, stderr.decode()[-3000:]
    return json.loads(stdout.decode().splitlines()[-1]), stderr.decode()


async def test_the_key_cases_against_the_oldest_supported_transformers(
    oldest_transformers: Path,
    pod: Pod,
    server: StatusServer,
    devcluster: DevCluster,
    tmp_path: Path,
) -> None:
    async def posts() -> float:
        return await asyncio.to_thread(accepted_posts, server)

    before = await posts()
    out, _ = await run_case("builtin", oldest_transformers, pod, tmp_path)
    assert (out["version"], out["torch"]) == (OLDEST, False)
    assert out["callbacks"] == ["DefaultFlowCallback", "KubeflowCallback"]
    assert await posts() - before == 2  # its forced train begin and train end
    status = stored_status(devcluster)
    assert status is not None
    assert (status["progressPercentage"], status["estimatedRemainingSeconds"]) == (100, 0)
    assert status["metrics"][0] == {"name": "loss", "value": "0.47619047619047616"}
    assert {"name": "total_flos", "value": "1.5614101487616e+16"} in status["metrics"]

    before = await posts()
    out, stderr = await run_case("attach", oldest_transformers, pod, tmp_path)
    assert out["callbacks"] == ["DefaultFlowCallback", "TrainJobStatusCallback"]
    assert out["delivered"] >= 1
    assert await posts() - before == out["delivered"]  # nothing from the built-in
    assert "removed transformers' KubeflowCallback from the trainer" in stderr
    status = stored_status(devcluster)
    assert status is not None
    assert status["progressPercentage"] == 100
    assert status["metrics"][:2] == [
        {"name": "step", "value": "20"},
        {"name": "epoch", "value": "2"},
    ]

    before = await posts()
    out, stderr = await run_case("both", oldest_transformers, pod, tmp_path)
    assert out["callbacks"] == [
        "DefaultFlowCallback",
        "KubeflowCallback",
        "TrainJobStatusCallback",
    ]
    assert stderr.count(WARNING) == 1
    assert await posts() - before == 2 + out["delivered"]
