"""The three distributions as ``pip wheel`` builds them from a clean copy of the tree: each
wheel holds its own package and nothing else, with the data files it reads at run time,
its own commands, and requirements that point one way (devcluster -> server -> client,
each pinned to the same version)."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from email.parser import BytesParser
from pathlib import Path

import pytest

from .rendering import ROOT

VERSION = "0.2.0"


@dataclass(frozen=True)
class Wheel:
    names: list[str]
    requires: list[str]
    requires_python: str
    scripts: dict[str, str]

    @property
    def top_level(self) -> set[str]:
        return {name.split("/")[0] for name in self.names}


def _read(path: Path) -> Wheel:
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        (info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        metadata = BytesParser().parsebytes(archive.read(f"{info}/METADATA"))
        points = configparser.ConfigParser()
        if f"{info}/entry_points.txt" in names:
            points.read_string(archive.read(f"{info}/entry_points.txt").decode())
    scripts = dict(points["console_scripts"]) if points.has_section("console_scripts") else {}
    return Wheel(
        names=[n for n in names if not n.startswith(info)],
        requires=metadata.get_all("Requires-Dist") or [],
        requires_python=metadata["Requires-Python"],
        scripts=scripts,
    )


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
        built[name] = _read(path)
    assert set(built) == {"trainjob_status", "trainjob_status_server", "trainjob_devcluster"}
    return built


def _requirement_names(wheel: Wheel) -> set[str]:
    return {re.split(r"[\s\[<>=!;~(]", r, maxsplit=1)[0].lower() for r in wheel.requires}


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
    assert _requirement_names(server).isdisjoint(
        {"trainjob-devcluster", "httptools", "orjson", "uvloop", "cel-python"}
    )
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
    assert f"trainjob-status-server=={VERSION}" in devcluster.requires
    assert devcluster.scripts == {"trainjob-devcluster": "trainjob_devcluster.cli:main"}
