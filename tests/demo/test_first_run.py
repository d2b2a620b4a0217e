"""``make demo`` on a fresh machine: it installs the four packages only (no test tool), runs
without any test tool importable, and prints the pod's three variables as ``export``
lines and a kubectl command, each on one line however narrow the terminal, saying how
long they work."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from trainjob_devcluster.harness import demo
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
from trainjob_devcluster.harness.cli import main
main(sys.argv[2:])
"""


def test_make_demo_installs_the_four_packages_only(tmp_path: Path) -> None:
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
    assert installs[-1].endswith(
        "pip install --quiet -e ./client -e ./server -e ./plugin -e ./devcluster"
    ), installs
    assert "--group" not in done.stdout


def test_make_demo_passes_args_to_the_demo(tmp_path: Path) -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    # Run as a top-level make would: a suite started by `make test` must not
    # make this one print "Entering/Leaving directory" around its commands.
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    done = subprocess.run(
        [make, "--no-print-directory", "-n", "demo", f"VENV={tmp_path / 'venv'}", "ARGS=--keep"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
        env=env,
    )
    assert (
        done.stdout.splitlines()[-1] == f"{tmp_path / 'venv'}/bin/trainjob-devcluster demo --keep"
    )


@pytest.mark.timeout(600)
def test_make_demo_installs_quietly(tmp_path: Path) -> None:
    # The install `make demo` runs first, into a fresh venv, prints make's echo of its
    # commands and nothing else: not setuptools' "Editable installation." note for each
    # package, which pip shows despite --quiet (a failing install prints its error).
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    drop = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTHONWARNINGS"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    venv = tmp_path / "venv"
    command = [make, "--no-print-directory", f"{venv}/.installed-server", f"VENV={venv}"]
    command.append(f"PYTHON={sys.executable}")

    def run(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *flags], cwd=ROOT, capture_output=True, text=True, timeout=540, env=env
        )

    echoed = run("-n").stdout.splitlines()
    assert any(" install --quiet -e ./client" in line for line in echoed), echoed
    done = run()
    assert done.returncode == 0, done.stderr
    banners = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if "Editable" in line and line not in echoed
    ]
    assert banners == []
    assert done.stderr == ""
    assert done.stdout.splitlines() == echoed
    assert (venv / "bin" / "trainjob-devcluster").is_file()


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
    # The report and the plugin's watch, as this shell can reach them (the test's PATH
    # has this interpreter's bin directory or not: either way the line is what works).
    bin_dir, path = Path(sys.executable).parent, env.get("PATH")
    assert shlex.join(demo.report_command(bin_dir, path)) in lines
    activate = demo.activation(bin_dir, path, ROOT)
    assert activate is None or activate in lines
    watch = shlex.join(demo.watch_command(tmp_path / "devcluster" / "kubeconfig", bin_dir, path))
    assert watch in lines
    # All three say they need the demo running, or --keep.
    note = demo.lifetime_note(keep=False)
    assert " ".join(done.stderr.split()).count(note) == 3
    # Given --workdir, the demo leaves it (and what is in it) to its owner; what holds a
    # secret is for that owner alone.
    assert (tmp_path / "ca.crt").is_file()
    for secret in ("tls.key", "token", "devcluster/kubeconfig"):
        assert stat.S_IMODE((tmp_path / secret).stat().st_mode) == 0o600, secret


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


def test_commands_off_the_path_are_shown_by_full_path_with_how_to_activate(
    tmp_path: Path,
) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("trainjob-status", "kubectl-trainjob", "activate"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    elsewhere = str(tmp_path / "empty")
    assert demo.report_command(bin_dir, elsewhere) == [
        str(bin_dir / "trainjob-status"), "report", "--progress", "50"
    ]  # fmt: skip
    kubeconfig = tmp_path / "kubeconfig"
    assert demo.watch_command(kubeconfig, bin_dir, elsewhere) == [
        str(bin_dir / "kubectl-trainjob"), "progress", "--kubeconfig", str(kubeconfig),
        "-n", "demo", "mnist", "-w",
    ]  # fmt: skip
    assert demo.activation(bin_dir, elsewhere, tmp_path) == "source venv/bin/activate"
    assert demo.activation(bin_dir, elsewhere, tmp_path / "x") == (f"source {bin_dir / 'activate'}")
    # On the PATH: bare names, nothing to activate.
    assert demo.report_command(bin_dir, str(bin_dir))[0] == "trainjob-status"
    assert demo.activation(bin_dir, str(bin_dir), tmp_path) is None


def default_ctrl_c() -> None:
    """Run in the demo's process before its exec: Ctrl-C's default action, as in a terminal,
    even when this test run ignores SIGINT (a background job of a non-interactive shell
    does, and an ignored signal stays ignored across exec: the demo would never hear it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_demo(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """The demo in its own temporary folder under ``tmp_path`` (TMPDIR), stopped by Ctrl-C
    however this test run was started."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINJOB_STATUS_")}
    env.update(COLUMNS="200", TERM="dumb", TMPDIR=str(tmp_path))
    command = [sys.executable, "-m", "trainjob_devcluster.harness.cli", "demo", "--duration", "1"]
    return subprocess.Popen(
        [*command, "--report-interval", "0.2", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_ctrl_c,
    )


def demo_folders(tmp_path: Path) -> list[Path]:
    return list(tmp_path.glob("trainjob-status-demo-*"))


def wait_for_line(process: subprocess.Popen[str], text: str) -> list[str]:
    """Lines of the demo's stderr up to the first holding ``text``."""
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"the demo ended before {text!r}:\n{''.join(seen)}")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_its_temporary_folder_goes_when_a_kept_demo_is_stopped(
    tmp_path: Path, stop: signal.Signals
) -> None:
    process = start_demo(tmp_path, "--keep")
    try:
        wait_for_line(process, "Serving until Ctrl-C")
        (folder,) = demo_folders(tmp_path)
        assert (folder / "tls.key").is_file()
        assert (folder / "token").is_file()
        process.send_signal(stop)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert "Traceback" not in err
    assert process.returncode == (0 if stop == signal.SIGINT else 128 + signal.SIGTERM)
    assert demo_folders(tmp_path) == []


def test_its_temporary_folder_goes_when_interrupted_while_training(tmp_path: Path) -> None:
    process = start_demo(tmp_path)
    try:
        wait_for_line(process, "export KUBEFLOW_TRAINER_SERVER_TOKEN=")
        assert len(demo_folders(tmp_path)) == 1
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert demo_folders(tmp_path) == []


def test_its_temporary_folder_goes_at_the_end_of_a_run(tmp_path: Path) -> None:
    process = start_demo(tmp_path)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert demo_folders(tmp_path) == []
