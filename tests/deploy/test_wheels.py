"""The three distributions as ``pip wheel`` builds them from a clean copy of the tree: each
wheel holds its own package and nothing else, with the data files it reads at run time,
its own commands, and requirements that point one way (devcluster -> server -> client,
each pinned to the same version)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from .rendering import ROOT
from .wheels import DEVELOPMENT_ONLY, Wheel, read_wheel

VERSION = "0.2.0"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Wheel]:
    work = tmp_path_factory.mktemp("wheels")
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.pyc")
    for folder in ("client", "server", "devcluster"):
        shutil.copytree(ROOT / folder, work / "src" / folder, ignore=ignore)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(work / "out"),
         "./client", "./server", "./devcluster"],
        cwd=work / "src", capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    built = {}
    for path in (work / "out").glob("*.whl"):
        name, version = path.name.split("-")[:2]
        assert version == VERSION, path.name
        built[name] = read_wheel(path)
    assert set(built) == {"trainjob_status", "trainjob_status_server", "trainjob_devcluster"}
    return built


def test_the_client_wheel_is_the_client_alone(wheels: dict[str, Wheel]) -> None:
    client = wheels["trainjob_status"]
    assert client.top_level == {"trainjob_status"}
    assert "trainjob_status/contract.py" in client.names
    assert client.requires == []
    assert client.requires_python == ">=3.9"
    assert client.scripts == {"trainjob-status": "trainjob_status.cli:main"}


def test_the_server_wheel_needs_the_client_and_nothing_of_the_devcluster(
    wheels: dict[str, Wheel],
) -> None:
    server = wheels["trainjob_status_server"]
    assert server.top_level == {"trainjob_status_server"}
    assert "trainjob_status_server/py.typed" in server.names
    assert not [n for n in server.names if "devcluster" in n or n.endswith(".yaml")]
    assert f"trainjob-status=={VERSION}" in server.requires
    assert server.required.isdisjoint(DEVELOPMENT_ONLY)
    assert server.requires_python == ">=3.11"
    assert server.scripts == {
        "trainjob-status-server": "trainjob_status_server.cli:main",
        "kubectl-trainjob": "trainjob_status_server.kubectl_trainjob:main",
    }


def test_the_devcluster_wheel_carries_its_crds_and_pins_the_server(
    wheels: dict[str, Wheel],
) -> None:
    devcluster = wheels["trainjob_devcluster"]
    assert devcluster.top_level == {"trainjob_devcluster"}
    assert {
        "trainjob_devcluster/crds/trainjobs.yaml",
        "trainjob_devcluster/crds/jobsets.yaml",
        "trainjob_devcluster/py.typed",
    } <= set(devcluster.names)
    # Its layers are subpackages: each ships, with the module the console script names.
    layers = ("harness", "http", "auth", "storage", "schema", "common")
    assert {f"trainjob_devcluster/{layer}/__init__.py" for layer in layers} | {
        "trainjob_devcluster/harness/cli.py"
    } <= set(devcluster.names)
    assert f"trainjob-status-server=={VERSION}" in devcluster.requires
    assert devcluster.scripts == {"trainjob-devcluster": "trainjob_devcluster.harness.cli:main"}
