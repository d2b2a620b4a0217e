"""The client as a training image gets it: its wheel alone (no dependency, no module but
``trainjob_status``), installed offline into a fresh PyPy 3.9 virtualenv, posts a status
to our server, which checks the pod's real token, and the TrainJob holds it.

pypy3 is a system package (Debian: ``pypy3 pypy3-venv``): the test skips where it is
missing, but fails under CI (``TRAINJOB_STATUS_CI=1``), which installs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from email.parser import BytesParser
from pathlib import Path

import pytest

from trainjob_devcluster import DevCluster

from .conftest import Pod, stored_status

ROOT = Path(__file__).resolve().parents[2]
# 2026-12-02T18:33:45.25Z: the report's time, so the stored status is known exactly.
REPORTED_AT = 1796236425.25

SCRIPT = f"""
import json, platform, sys
import trainjob_status
from trainjob_status import StatusReporter

reporter = StatusReporter(clock=lambda: {REPORTED_AT!r})
taken = reporter.report(40, 300, {{"loss": 0.25}})
delivered = reporter.flush(30)
reporter.close(timeout=0)
print(json.dumps({{
    "implementation": platform.python_implementation(),
    "version": list(sys.version_info[:2]),
    "module": trainjob_status.__file__,
    "taken": taken,
    "delivered": delivered,
}}))
"""


def require_pypy() -> str:
    path = shutil.which("pypy3")
    if path is not None:
        return path
    if os.environ.get("TRAINJOB_STATUS_CI") == "1":
        pytest.fail("pypy3 is not installed (CI installs it: apt-get install -y pypy3 pypy3-venv)")
    pytest.skip("pypy3 is not installed (apt-get install pypy3 pypy3-venv)")


def offline_environ() -> dict[str, str]:
    """The environment without pip's settings (no index, no extra find-links) and
    without a pod's variables or Python's path settings."""
    dropped = ("PIP_", "PYTHON", "KUBEFLOW_TRAINER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def run(*command: str | Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def distributions(venv: Path) -> set[str]:
    """The names of the distributions the virtualenv's interpreter sees."""
    listed = run(
        venv / "bin" / "python", "-I", "-c",
        "import importlib.metadata as m; print(*(d.metadata['Name'] for d in m.distributions()))",
    )  # fmt: skip
    return set(listed.split())


@dataclass(frozen=True)
class PyPyVenv:
    path: Path
    added: set[str]  # the distributions the client's install added to the fresh virtualenv


@pytest.fixture(scope="module")
def client_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The client's wheel, built from a copy of client/ (the tree is left as it was), alone
    in its directory."""
    work = tmp_path_factory.mktemp("client-wheel")
    source = work / "source"
    shutil.copytree(
        ROOT / "client",
        source,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    wheels = work / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", wheels, source)
    (wheel,) = wheels.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def pypy_venv(client_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> PyPyVenv:
    """A fresh PyPy virtualenv with the client's wheel installed, offline, and nothing else."""
    pypy = require_pypy()
    venv = tmp_path_factory.mktemp("pypy") / "venv"
    run(pypy, "-m", "venv", venv)
    fresh = distributions(venv)
    # No --no-deps: were a dependency declared, this install would fail for want of it.
    run(
        venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-index",
        "--find-links", client_wheel.parent, "trainjob-status",
        env=offline_environ(),
    )  # fmt: skip
    return PyPyVenv(venv, distributions(venv) - fresh)


def test_the_wheel_holds_the_package_alone_and_needs_nothing(client_wheel: Path) -> None:
    with zipfile.ZipFile(client_wheel) as wheel:
        names = wheel.namelist()
        (dist_info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        metadata = BytesParser().parsebytes(wheel.read(f"{dist_info}/METADATA"))
    assert dist_info.startswith("trainjob_status-")
    assert {n.split("/")[0] for n in names} == {"trainjob_status", dist_info}
    assert "trainjob_status/py.typed" in names
    assert metadata["Name"] == "trainjob-status"
    assert metadata.get_all("Requires-Dist") is None
    assert metadata["Requires-Python"] == ">=3.9"


async def test_the_installed_wheel_reports_on_pypy_39(
    pypy_venv: PyPyVenv, pod: Pod, devcluster: DevCluster
) -> None:
    assert pypy_venv.added == {"trainjob-status"}
    python = pypy_venv.path / "bin" / "python"
    # -I: neither the working directory nor PYTHON* variables reach sys.path.
    process = await asyncio.create_subprocess_exec(
        str(python), "-I", "-c", SCRIPT,
        cwd=pypy_venv.path, env={**offline_environ(), **pod.environ},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()[-2000:]
    ran = json.loads(stdout)
    assert ran.pop("module").startswith(str(pypy_venv.path / "lib"))
    assert ran == {"implementation": "PyPy", "version": [3, 9], "taken": True, "delivered": True}
    assert stored_status(devcluster) == {
        "progressPercentage": 40,
        "estimatedRemainingSeconds": 300,
        "metrics": [{"name": "loss", "value": "0.25"}],
        "lastUpdatedTime": "2026-12-02T18:33:45.250000Z",
    }
