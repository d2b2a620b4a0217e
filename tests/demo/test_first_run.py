"""``make demo`` on a fresh machine: it installs the three packages only (no test tool), runs
without any test tool importable, and prints the pod's three variables as ``export``
lines and a kubectl command, each on one line however narrow the terminal, saying how
long they work."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainjob_devcluster import demo
from trainjob_status.contract import URL_ENV

ROOT = Path(__file__).resolve().parents[2]
# Importing any of these fails in the demo's process: they come with the test extra only.
TEST_ONLY = [
    "pytest",
    "_pytest",
    "pytest_asyncio",
    "pytest_aiohttp",
    "pytest_timeout",
    "hypothesis",
    "kubernetes_validate",
    "mypy",
    "ruff",
]
RUN_WITHOUT_TEST_TOOLS = """
import sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is a test-only package")
        return None

BLOCKED = set(sys.argv[1].split(","))
sys.meta_path.insert(0, Refuse())
from trainjob_devcluster.cli import main
main(sys.argv[2:])
"""


def test_make_demo_installs_the_three_packages_only(tmp_path: Path) -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    done = subprocess.run(
        [make, "-n", "demo", f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    installs = [line for line in done.stdout.splitlines() if "pip install" in line]
    assert installs[-1].endswith("pip install --quiet -e ./client -e ./server -e ./devcluster"), (
        installs
    )
    assert "--group" not in done.stdout


def test_the_demo_prints_what_a_shell_needs_on_single_lines(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINJOB_STATUS_")}
    env.update(COLUMNS="40", TERM="dumb")
    args = ["demo", "--duration", "1", "--report-interval", "0.2", "--workdir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT_TEST_TOOLS, ",".join(TEST_ONLY), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    exported = [line for line in lines if line.startswith("export ")]
    assert exported == demo.exports(_value(lines, URL_ENV), tmp_path / "ca.crt", tmp_path / "token")
    assert re.fullmatch(
        r"export KUBEFLOW_TRAINER_SERVER_URL=https://127\.0\.0\.1:\d+/apis/trainer\.kubeflow\.org"
        r"/v1alpha1/namespaces/demo/trainjobs/mnist/status",
        exported[0],
    )
    # The command is one line, as shlex.join quotes it (so a shell gets it back exactly).
    kubectl = [line for line in lines if line.startswith("kubectl ")]
    assert kubectl == [shlex.join(demo.kubectl_command(tmp_path / "devcluster" / "kubeconfig"))]
    # Both say they need the demo running, or --keep.
    note = demo.lifetime_note(keep=False)
    assert " ".join(done.stderr.split()).count(note) == 2


def _value(lines: list[str], name: str) -> str:
    prefix = f"export {name}="
    (line,) = [line for line in lines if line.startswith(prefix)]
    return shlex.split(line[len(prefix) :])[0]


def test_the_lifetime_note_follows_keep() -> None:
    assert "--keep" in demo.lifetime_note(keep=False)
    assert "Ctrl-C" in demo.lifetime_note(keep=True)


def test_exports_are_quoted_for_a_shell() -> None:
    lines = demo.exports("https://h:1/p", Path("/tmp/a b/ca.crt"), Path("/t"))
    assert lines == [
        "export KUBEFLOW_TRAINER_SERVER_URL=https://h:1/p",
        "export KUBEFLOW_TRAINER_SERVER_CA_CERT='/tmp/a b/ca.crt'",
        "export KUBEFLOW_TRAINER_SERVER_TOKEN=/t",
    ]
