"""The Dockerfile, without a Docker engine: its invariants (user, ports, entrypoint agree
with the manifests; no caches, no build tools, offline install), and its own BUILD and
INSTALL scripts run into a fresh virtualenv, which holds the client and the server and
nothing of the development cluster, and from which the server starts against the
devcluster, becomes ready, and stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest

from trainjob_devcluster import DevCluster
from trainjob_devcluster.pki import CertificateAuthority
from trainjob_devcluster.testing import free_port

from .rendering import ROOT, one, render
from .wheels import DEVELOPMENT_ONLY, distribution_name, read_wheel

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (KEYWORD, rest)

    def all(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]


@dataclass
class Dockerfile:
    args: dict[str, str]
    stages: list[Stage]
    heredocs: dict[str, str]


def parse(text: str) -> Dockerfile:
    """Enough of the Dockerfile grammar for this one: continuations, heredocs, stages."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    heredocs: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\"):
            line = line[:-1] + " " + next(lines).strip()
        keyword, _, rest = line.strip().partition(" ")
        keyword = keyword.upper()
        if found := re.search(r"<<'?(\w+)'?", rest):
            body = []
            for inner in lines:
                if inner == found.group(1):
                    break
                body.append(inner)
            heredocs[found.group(1)] = "\n".join(body) + "\n"
        if keyword == "FROM":
            base, _, name = rest.partition(" AS ")
            stages.append(Stage(base.strip(), name.strip()))
        elif keyword == "ARG" and not stages:
            key, _, value = rest.partition("=")
            args[key] = value
        elif stages:
            stages[-1].instructions.append((keyword, rest))
    return Dockerfile(args, stages, heredocs)


DF = parse(DOCKERFILE.read_text())
RUNTIME = DF.stages[-1]


def test_multi_stage_on_slim_python_311() -> None:
    assert [s.name for s in DF.stages] == ["build", "runtime"]
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", DF.args["PYTHON_IMAGE"])
    assert all(s.base == "${PYTHON_IMAGE}" for s in DF.stages)
    # The wheel is built in the first stage; the runtime takes the wheels only.
    assert "BUILD" in DF.heredocs
    assert "pip wheel" in DF.heredocs["BUILD"]
    assert RUNTIME.all("COPY") == []
    (install,) = [r for r in RUNTIME.all("RUN") if "<<'INSTALL'" in r]
    assert "--mount=type=bind,from=build,source=/wheels,target=/wheels" in install


def test_runs_as_the_fixed_user_the_manifests_expect() -> None:
    (user,) = RUNTIME.all("USER")
    uid, gid = (int(part) for part in user.split(":"))  # numeric: no passwd lookup
    assert uid != 0
    assert gid != 0
    context = one(render("base"), "Deployment")["spec"]["template"]["spec"]["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (uid, gid, gid)


def test_entrypoint_and_ports_agree_with_the_package_and_the_manifests() -> None:
    (entrypoint,) = RUNTIME.all("ENTRYPOINT")
    assert json.loads(entrypoint) == ["trainjob-status-server", "serve"]
    server = tomllib.loads((ROOT / "server" / "pyproject.toml").read_text())["project"]
    assert server["scripts"]["trainjob-status-server"] == "trainjob_status_server.cli:main"
    (exposed,) = RUNTIME.all("EXPOSE")
    container = one(render("base"), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert {int(p) for p in exposed.split()} == {p["containerPort"] for p in container["ports"]}


def test_no_caches_no_build_tools_and_a_read_only_root_works() -> None:
    text = DOCKERFILE.read_text()
    for command in re.findall(r"pip (?:install|wheel)[^\n]*", text):
        assert "--no-cache-dir" in command, command
    install = DF.heredocs["INSTALL"]
    assert "--no-index" in install  # offline: only the wheels built in stage one
    assert "pip uninstall --yes pip" in install
    runtime_text = " ".join(rest for _, rest in RUNTIME.instructions)
    for tool in ("apt-get", "gcc", "build-essential", "apk "):
        assert tool not in runtime_text
    assert "pip uninstall --yes pip setuptools wheel" in runtime_text
    env = " ".join(RUNTIME.all("ENV"))
    assert "PYTHONDONTWRITEBYTECODE=1" in env  # nothing written next to the code
    assert "HOME=/tmp" in env  # the Deployment mounts an emptyDir there
    mounts = one(render("base"), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "/tmp" in {m["mountPath"] for m in mounts["volumeMounts"]}


def test_the_build_context_is_the_package_only() -> None:
    lines = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    assert {line for line in lines if line.startswith("!")} == {"!client/", "!server/"}
    for secret in ("**/*.key", "**/*.pem", "**/*.crt", "**/*.kubeconfig"):
        assert secret in lines
    copied = {rest.split()[0] for rest in DF.stages[0].all("COPY")}
    assert copied == {"client", "server"}


# -- the install steps, for real ---------------------------------------------------------


def assert_no_development_cluster(wheels: Path, venv: Path) -> None:
    """Neither the wheels the image installs from, nor what it installed, nor the server
    wheel's own files and requirements hold anything of the development cluster."""
    built = {distribution_name(w.name) for w in wheels.glob("*.whl")}
    assert {"trainjob-status", "trainjob-status-server"} <= built
    assert built.isdisjoint(DEVELOPMENT_ONLY), built & DEVELOPMENT_ONLY
    (server_wheel,) = wheels.glob("trainjob_status_server-*.whl")
    server = read_wheel(server_wheel)
    assert server.top_level == {"trainjob_status_server"}
    assert not [n for n in server.names if "devcluster" in n]
    assert server.required.isdisjoint(DEVELOPMENT_ONLY), server.required & DEVELOPMENT_ONLY
    (site,) = venv.glob("lib/python3.*/site-packages")
    installed = {distribution_name(d.name) for d in site.glob("*.dist-info")}
    assert {"trainjob-status", "trainjob-status-server"} <= installed
    assert installed.isdisjoint(DEVELOPMENT_ONLY), installed & DEVELOPMENT_ONLY
    assert not (site / "trainjob_devcluster").exists()


async def run_script(name: str, cwd: Path, env: dict[str, str]) -> None:
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        DF.heredocs[name],
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    assert process.returncode == 0, output.decode(errors="replace")[-4000:]


@pytest.mark.timeout(600)
async def test_the_image_install_steps_give_a_server_that_runs(
    devcluster: DevCluster, tmp_path: Path
) -> None:
    # The build context as .dockerignore leaves it.
    src = tmp_path / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("client", "server"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    # `python` is a Python 3.11, as in the image; nothing else leaks in from our env.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    venv = tmp_path / "opt" / "trainjob-status"
    env = {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "WHEELS": str(tmp_path / "wheels"),
        "VENV": str(venv),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST"):
        if key in os.environ:
            env[key] = os.environ[key]
    await run_script("BUILD", src, env)
    await run_script("INSTALL", src, env)
    assert not (venv / "bin" / "pip").exists()  # the installer is gone
    assert_no_development_cluster(tmp_path / "wheels", venv)

    ca = CertificateAuthority()
    cert_pem, key_pem = ca.issue_server_cert(["localhost"], ["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(cert_pem)
    (tmp_path / "tls.key").write_bytes(key_pem)
    port, metrics = free_port(), free_port()
    server = await asyncio.create_subprocess_exec(
        str(venv / "bin" / "trainjob-status-server"),
        "serve",
        "--host=127.0.0.1",
        f"--port={port}",
        f"--metrics-port={metrics}",
        f"--kubeconfig={devcluster.kubeconfig_path}",
        f"--tls-cert-file={tmp_path / 'tls.crt'}",
        f"--tls-key-file={tmp_path / 'tls.key'}",
        f"--issuer={devcluster.issuer}",
        env={"PATH": env["PATH"], "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with aiohttp.ClientSession() as session, asyncio.timeout(60):
            while True:
                try:
                    async with session.get(f"http://127.0.0.1:{metrics}/readyz") as answer:
                        if answer.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                assert server.returncode is None, "the server exited"
                await asyncio.sleep(0.1)
        server.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            output, _ = await server.communicate()
        assert server.returncode == 0, output.decode(errors="replace")[-4000:]
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
