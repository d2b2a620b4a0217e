"""One version for the four distributions: their pyprojects, the ``==`` pins between
them (the plugin needs none of the others), each package's ``__version__`` and each command's ``--version``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path
from typing import Any

import pytest

import kubectl_trainjob
import trainjob_devcluster
import trainjob_status
import trainjob_status_server

ROOT = Path(__file__).resolve().parents[1]
# The one version, as server/pyproject.toml says it; the others must agree.
VERSION: str = tomllib.loads((ROOT / "server" / "pyproject.toml").read_text())["project"]["version"]


def project(folder: str) -> dict[str, Any]:
    with (ROOT / folder / "pyproject.toml").open("rb") as file:
        table: dict[str, Any] = tomllib.load(file)["project"]
    return table


def test_the_four_pyprojects_hold_one_version() -> None:
    folders = ("client", "server", "plugin", "devcluster")
    versions = {folder: project(folder)["version"] for folder in folders}
    assert versions == dict.fromkeys(folders, VERSION)


def test_each_distribution_pins_the_ones_it_needs_to_that_version() -> None:
    def ours(folder: str) -> list[str]:
        deps: list[str] = project(folder)["dependencies"]
        return [d for d in deps if d.startswith(("trainjob-", "kubectl-trainjob"))]

    assert ours("client") == []
    assert ours("server") == [f"trainjob-status=={VERSION}"]
    assert ours("plugin") == []
    assert ours("devcluster") == [
        f"trainjob-status-server=={VERSION}",
        f"kubectl-trainjob=={VERSION}",
    ]


def test_the_changelog_starts_at_that_version() -> None:
    headings = [
        line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## ")
    ]
    # Keep a Changelog: what is not released yet comes first, under "Unreleased".
    released = headings[1:] if headings[0] == "## Unreleased" else headings
    assert released[0].startswith(f"## {VERSION} - ")


def test_each_package_says_its_version() -> None:
    assert trainjob_status.__version__ == VERSION
    assert trainjob_status_server.__version__ == VERSION
    assert kubectl_trainjob.__version__ == VERSION
    assert trainjob_devcluster.__version__ == VERSION


def test_a_client_never_installed_says_so(tmp_path: Path) -> None:
    # A copy of the package without its distribution's metadata, and no site-packages.
    shutil.copytree(Path(trainjob_status.__file__).parent, tmp_path / "trainjob_status")
    code = "import trainjob_status; print(trainjob_status.__version__)"
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "0+unknown\n", "")


@pytest.mark.parametrize(
    "command",
    ["trainjob-status", "trainjob-status-server", "kubectl-trainjob", "trainjob-devcluster"],
)
def test_version_flag(command: str) -> None:
    script = Path(sysconfig.get_path("scripts")) / command
    done = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{command} {VERSION}\n", "")


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_passes_version_to_the_plugin(tmp_path: Path) -> None:
    scripts = sysconfig.get_path("scripts")
    env = {
        "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
        "KUBECONFIG": str(tmp_path / "none"),
    }
    done = subprocess.run(
        ["kubectl", "trainjob", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"kubectl-trainjob {VERSION}\n", "")
