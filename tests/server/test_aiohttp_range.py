"""The aiohttp range the server is tested with: the same in the code as in
server/pyproject.toml, the installed aiohttp inside it, and ``serve`` refusing another
at start (one line, exit status 2) unless --allow-untested-aiohttp (or its environment
variable) accepts the risk, in which case it starts, says so in its log, and serves.

Another version is put in front of the real one as a distribution's metadata on
PYTHONPATH (what pip leaves in site-packages), so the check reads it as an installed
aiohttp; the code that runs is still the tested one, which lets the allowed server start.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import aiohttp
import pytest

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.testing import free_port
from trainjob_status_server import versions

ROOT = Path(__file__).resolve().parents[2]
PROG = "trainjob-status-server"
TESTED = ">=3.14.4,<3.15"


@pytest.mark.parametrize(
    ("version", "tested"),
    [
        ("3.14.4", True),
        ("3.14.5", True),
        ("3.14.40", True),
        ("3.14.5.post1", True),
        ("3.14.5+local", True),
        ("3.14.6.dev0", True),
        ("3.14.3", False),
        ("3.14.4rc1", False),
        ("3.14.4.dev3", False),
        ("3.14", False),
        ("3.13.3", False),
        ("3.9.5", False),
        ("3.15", False),
        ("3.15.0", False),
        ("3.15.0a1", False),
        ("4.0.0", False),
        ("not a version", False),
        ("", False),
    ],
)
def test_which_versions_are_tested(version: str, tested: bool) -> None:
    assert versions.aiohttp_tested(version) is tested


def test_the_range_is_the_one_the_server_distribution_declares() -> None:
    assert versions.AIOHTTP_RANGE == TESTED
    with (ROOT / "server" / "pyproject.toml").open("rb") as file:
        requires = tomllib.load(file)["project"]["dependencies"]
    assert [r for r in requires if r.startswith("aiohttp")] == [f"aiohttp{TESTED}"]


def test_the_installed_aiohttp_is_tested() -> None:
    assert versions.installed_aiohttp() == aiohttp.__version__
    assert versions.aiohttp_tested(aiohttp.__version__)


def installed_as(tmp_path: Path, version: str) -> Path:
    """A folder whose metadata says aiohttp ``version`` is installed."""
    folder = tmp_path / "site"
    info = folder / f"aiohttp-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: aiohttp\nVersion: {version}\n")
    return folder


def serve_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainjob_status_server.cli", "serve", *args]


@pytest.mark.parametrize("version", ["3.13.3", "3.15.0"])
def test_serve_refuses_an_untested_aiohttp(tmp_path: Path, version: str) -> None:
    done = subprocess.run(
        serve_command(
            "--insecure-http", "--port=0", "--metrics-port=0", "--probe-port=0", "--webhook-port=0"
        ),
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(installed_as(tmp_path, version))},
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"{PROG} serve: aiohttp {version} is installed, but this server is tested with "
        f"aiohttp{TESTED} only (it relies on aiohttp internals): install a version in that "
        "range, or give --allow-untested-aiohttp (env TRAINJOB_STATUS_ALLOW_UNTESTED_AIOHTTP) "
        "to run anyway\n"
    )


async def start_and_stop(command: list[str], env: dict[str, str], metrics: int) -> list[str]:
    """Run ``command`` until its /readyz answers 200, then SIGTERM it: its log lines."""
    server = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        async with aiohttp.ClientSession() as session, asyncio.timeout(60):
            while True:
                assert server.returncode is None, "the server exited"
                try:
                    async with session.get(f"http://127.0.0.1:{metrics}/readyz") as answer:
                        if answer.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.1)
        server.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            stdout, stderr = await server.communicate()
        assert server.returncode == 0, stderr.decode(errors="replace")[-4000:]
        assert stdout == b""
        return stderr.decode().splitlines()
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()


@pytest.mark.parametrize("how", ["flag", "env"])
async def test_the_override_starts_it_with_a_warning(
    devcluster: DevCluster, tmp_path: Path, how: str
) -> None:
    metrics = free_port()
    args = [
        "--insecure-http",
        "--host=127.0.0.1",
        f"--port={free_port()}",
        f"--metrics-port={metrics}",
        "--probe-port=0",
        "--webhook-port=0",
        f"--kubeconfig={devcluster.kubeconfig_path}",
        f"--issuer={devcluster.issuer}",
        "--no-inject-pods",
    ]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(installed_as(tmp_path, "3.13.3"))}
    if how == "flag":
        args.append("--allow-untested-aiohttp")
    else:
        env["TRAINJOB_STATUS_ALLOW_UNTESTED_AIOHTTP"] = "true"
    lines = await start_and_stop(serve_command(*args), env, metrics)
    records = [json.loads(line) for line in lines]
    (warning,) = [r for r in records if r["msg"].startswith("aiohttp")]
    assert warning["level"] == "warning"
    assert warning["msg"] == "aiohttp outside the tested range, allowed by --allow-untested-aiohttp"
    assert (warning["aiohttp"], warning["tested"]) == ("3.13.3", TESTED)
