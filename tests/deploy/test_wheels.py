"""The four distributions as ``pip wheel`` builds them from a clean copy of the tree: each
wheel holds its own package and nothing else, with the data files it reads at run time,
its own commands, and requirements that point one way (devcluster -> server -> client
and devcluster -> plugin, each pinned to the same version; the plugin needs none of the
others). The plugin's
wheel, installed alone as a user installs it, shows a TrainJob's progress from a real
kube-apiserver."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_status.contract import GROUP

from .rendering import ROOT
from .wheels import DEVELOPMENT_ONLY, Wheel, read_wheel

VERSION: str = tomllib.loads((ROOT / "server" / "pyproject.toml").read_text())["project"]["version"]


# What the plugin needs and the server's image must not carry.
PLUGIN_ONLY = {"rich", "pyyaml"}
# What the server needs and a laptop with the plugin alone must not carry.
SERVER_ONLY = {
    "trainjob-status",
    "trainjob-status-server",
    "pyjwt",
    "cryptography",
    "prometheus-client",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel files, by package name."""
    work = tmp_path_factory.mktemp("wheels")
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.pyc")
    for folder in ("client", "server", "plugin", "devcluster"):
        shutil.copytree(ROOT / folder, work / "src" / folder, ignore=ignore)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(work / "out"),
         "./client", "./server", "./plugin", "./devcluster"],
        cwd=work / "src", capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    paths = {}
    for path in (work / "out").glob("*.whl"):
        name, version = path.name.split("-")[:2]
        assert version == VERSION, path.name
        paths[name] = path
    assert set(paths) == {
        "trainjob_status",
        "trainjob_status_server",
        "kubectl_trainjob",
        "trainjob_devcluster",
    }
    return paths


@pytest.fixture(scope="module")
def wheels(built: dict[str, Path]) -> dict[str, Wheel]:
    return {name: read_wheel(path) for name, path in built.items()}


def test_every_wheel_ships_the_license(wheels: dict[str, Wheel]) -> None:
    text = (ROOT / "LICENSE").read_bytes()
    for name, wheel in wheels.items():
        assert wheel.license_expression == "Apache-2.0", name
        assert wheel.license_files == {"LICENSE": text}, name


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
    assert server.scripts == {"trainjob-status-server": "trainjob_status_server.cli:main"}


def test_the_server_wheel_carries_nothing_of_the_plugin(wheels: dict[str, Wheel]) -> None:
    server = wheels["trainjob_status_server"]
    assert not [n for n in server.names if "kubectl" in n]
    assert server.required.isdisjoint(PLUGIN_ONLY)
    assert server.required == {
        "trainjob-status",
        "aiohttp",
        "pyjwt",
        "kubernetes-asyncio",
        "prometheus-client",
        "cryptography",
    }


def test_the_plugin_wheel_is_the_plugin_alone(wheels: dict[str, Wheel]) -> None:
    plugin = wheels["kubectl_trainjob"]
    assert plugin.top_level == {"kubectl_trainjob"}
    assert "kubectl_trainjob/py.typed" in plugin.names
    assert plugin.required == {"kubernetes-asyncio"} | PLUGIN_ONLY
    assert plugin.required.isdisjoint(DEVELOPMENT_ONLY | SERVER_ONLY)
    assert plugin.requires_python == ">=3.11"
    assert plugin.scripts == {"kubectl-trainjob": "kubectl_trainjob:main"}


def test_the_plugin_wheel_alone_installs_and_shows_progress(
    built: dict[str, Path], real_cluster: RealCluster, tmp_path: Path
) -> None:
    # A fresh virtualenv, as a user's laptop: the plugin's wheel alone, its dependencies
    # from the package index (pip's cache where it has them).
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         str(built["kubectl_trainjob"])],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    frozen = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    installed = {line.split("==")[0].lower().replace("_", "-") for line in frozen.splitlines()}
    assert {"kubectl-trainjob", "kubernetes-asyncio", "rich", "pyyaml"} <= installed
    assert installed.isdisjoint(DEVELOPMENT_ONLY | SERVER_ONLY), frozen

    # A TrainJob on kube-apiserver that its controller created and its trainer reported on.
    real_cluster.create_trainjob("team-a", "llama")
    reported = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    status = {
        "conditions": [
            {"type": "Created", "status": "True", "reason": "Created", "message": "",
             "lastTransitionTime": real_cluster.now()},
        ],
        "trainerStatus": {
            "progressPercentage": 42,
            "estimatedRemainingSeconds": 3700,
            "lastUpdatedTime": reported.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "metrics": [{"name": "loss", "value": "0.25"}],
        },
    }  # fmt: skip
    real_cluster.call(
        "PATCH",
        real_cluster.path("trainjobs", "team-a", "llama", GROUP) + "/status",
        {"status": status},
        content_type="application/merge-patch+json",
    )
    # Only the virtualenv's programs, the kubeconfig from KUBECONFIG as kubectl passes it.
    env = {
        "PATH": str(tmp_path / "venv" / "bin"),
        "HOME": str(tmp_path),
        "KUBECONFIG": str(real_cluster.kubeconfig_path),
    }
    script = tmp_path / "venv" / "bin" / "kubectl-trainjob"
    for command in ([str(script)], [str(python), "-m", "kubectl_trainjob"]):
        done = subprocess.run(
            [*command, "progress", "-n", "team-a"],
            capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path,
        )  # fmt: skip
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        assert done.stdout.splitlines() == [
            "NAME    STATE     PROGRESS                    ETA   UPDATED   loss",
            "llama   Created   ████████░░░░░░░░░░░░  42%   61m   60m ago   0.25",
        ]


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
    layers = ("harness", "http", "auth", "storage", "common")
    assert {f"trainjob_devcluster/{layer}/__init__.py" for layer in layers} | {
        "trainjob_devcluster/harness/cli.py"
    } <= set(devcluster.names)
    assert f"trainjob-status-server=={VERSION}" in devcluster.requires
    assert f"kubectl-trainjob=={VERSION}" in devcluster.requires
    assert devcluster.scripts == {"trainjob-devcluster": "trainjob_devcluster.harness.cli:main"}
