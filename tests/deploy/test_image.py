"""The Dockerfile, without a Docker engine: its invariants (user, ports, entrypoint agree
with the manifests; no caches, no build tools, no installer in the runtime, every
third-party package from the hashed lock, BuildKit said and set, OCI labels), the build
context .dockerignore leaves, and its own BUILD and INSTALL scripts run into a fresh
virtualenv, which holds the client, the server and exactly the locked packages, nothing
of the development cluster, and from which the server starts against the devcluster,
becomes ready, and stops cleanly on SIGTERM."""

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
from trainjob_devcluster.harness.pki import CertificateAuthority
from trainjob_devcluster.harness.testing import free_port

from .rendering import ROOT, one, render
from .wheels import DEVELOPMENT_ONLY, distribution_name, read_wheel

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
LOCK = ROOT / "requirements" / "server.lock"
VERSION: str = tomllib.loads((ROOT / "server" / "pyproject.toml").read_text())["project"]["version"]


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
    pip = r"python -m pip (?:--python \S+ )?(?:install|wheel|download)\b[^\n]*"
    commands = re.findall(pip, text)
    assert len(commands) == 3
    for command in commands:
        assert "--no-cache-dir" in command, command
    install = DF.heredocs["INSTALL"]
    assert "--no-index" in install  # offline: only the wheels built in stage one
    # No pip, setuptools or wheel in the runtime's virtualenv, ever.
    assert 'python -m venv --without-pip "$VENV"' in install
    runtime_text = " ".join(rest for _, rest in RUNTIME.instructions)
    for tool in ("apt-get", "gcc", "build-essential", "apk "):
        assert tool not in runtime_text
    assert "pip uninstall --yes pip setuptools wheel" in runtime_text
    env = " ".join(RUNTIME.all("ENV"))
    assert "PYTHONDONTWRITEBYTECODE=1" in env  # nothing written next to the code
    assert "HOME=/tmp" in env  # the Deployment mounts an emptyDir there
    mounts = one(render("base"), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "/tmp" in {m["mountPath"] for m in mounts["volumeMounts"]}


def test_every_third_party_package_comes_from_the_hashed_lock() -> None:
    build, install = DF.heredocs["BUILD"], DF.heredocs["INSTALL"]
    # Stage one downloads the locked wheels, checking each hash, and builds ours alone.
    assert re.search(
        r"pip download --no-cache-dir --require-hashes --only-binary :all: --no-deps"
        r" +--dest \"\$WHEELS\" --requirement requirements/server\.lock",
        " ".join(build.replace("\\\n", " ").split()),
    )
    assert "pip wheel --no-cache-dir --no-deps" in build
    # The runtime installs them offline, checked again, then ours, then checks the set.
    assert '--require-hashes --no-deps --requirement "$WHEELS/server.lock"' in install
    assert 'python -m pip --python "$VENV/bin/python" check' in install
    # The lock: exact versions, each with its hashes, none of ours, and how to refresh it.
    text = LOCK.read_text()
    assert "#    make lock\n" in text
    pins = re.findall(r"^([a-z0-9][a-z0-9._-]*)==([^ ;\\]+)", text, re.MULTILINE)
    assert len(pins) > 10
    for name, _ in pins:
        assert not name.startswith("trainjob"), name
        entry = text.split(f"\n{name}==", 1)[1].split("\n    # via", 1)[0]
        assert "--hash=sha256:" in entry, name
    requirements = [line for line in text.splitlines() if line and line[0] not in " #"]
    assert len(requirements) == len(pins)
    # `make lock` resolves for the image's Python.
    recipe = (ROOT / "Makefile").read_text().split("\nlock:", 1)[1].split("\n\n", 1)[0]
    python = re.fullmatch(r"python:(3\.\d+)-slim(-\w+)?", DF.args["PYTHON_IMAGE"])
    assert python
    assert f"--python-version {python.group(1)} " in recipe
    assert "--generate-hashes" in recipe
    assert "--output-file requirements/server.lock" in recipe


def test_buildkit_is_said_and_make_image_sets_it() -> None:
    first, *rest = DOCKERFILE.read_text().splitlines()
    assert first.startswith("# syntax=docker/dockerfile:1.")
    header = "\n".join(line for line in rest[:20] if line.startswith("#"))
    assert "Needs BuildKit" in header
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nimage:", 1)[1].split("\n\n", 1)[0]
    assert "DOCKER_BUILDKIT=1 docker build" in recipe


def test_oci_labels_name_the_version_the_source_and_the_revision() -> None:
    labels = dict(
        re.findall(r'(org\.opencontainers\.image\.\w+)="([^"]*)"', " ".join(RUNTIME.all("LABEL")))
    )
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.revision"] == "${REVISION}"
    assert labels["org.opencontainers.image.source"] == "${SOURCE}"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    args = dict(rest.partition("=")[::2] for rest in RUNTIME.all("ARG"))
    server = tomllib.loads((ROOT / "server" / "pyproject.toml").read_text())["project"]
    assert args["VERSION"] == server["version"]
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nimage:", 1)[1].split("\n\n", 1)[0]
    for arg in ("VERSION", "REVISION", "SOURCE"):
        assert f"--build-arg {arg}=" in recipe


def ignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """.dockerignore as (excludes, pattern) in order; the last rule that matches a path
    or one of its parent folders decides (Docker's rule)."""
    rules = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        include = line.startswith("!")
        pattern = line.removeprefix("!").strip("/")
        regex = "".join(
            ".*" if part == "**" else "[^/]*" if part == "*" else re.escape(part)
            for part in re.split(r"(\*\*|\*)", pattern)
        ).replace(".*/", "(?:.*/)?")
        rules.append((not include, re.compile(regex)))
    return rules


def in_context(path: str) -> bool:
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for excludes, pattern in ignore_rules():
        if any(pattern.fullmatch(prefix) for prefix in prefixes):
            excluded = excludes
    return not excluded


def test_the_build_context_is_the_package_only() -> None:
    lines = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    assert {line for line in lines if line.startswith("!")} == {
        "!client/",
        "!server/",
        "!requirements/server.lock",
    }
    for secret in ("**/*.key", "**/*.pem", "**/*.crt", "**/*.kubeconfig"):
        assert secret in lines
    copied = {rest.split()[0] for rest in DF.stages[0].all("COPY")}
    assert copied == {"client", "server", "requirements/server.lock"}


@pytest.mark.parametrize(
    ("path", "sent"),
    [
        ("client/trainjob_status/__init__.py", True),
        ("client/pyproject.toml", True),
        ("server/trainjob_status_server/cli.py", True),
        ("requirements/server.lock", True),
        ("requirements/server.in", False),
        # What a local build leaves: setuptools would put client/build's modules in the wheel.
        ("client/build/lib/trainjob_status/removed_module.py", False),
        ("server/build/bdist.linux-x86_64/x", False),
        (f"client/dist/trainjob_status-{VERSION}-py3-none-any.whl", False),
        ("server/trainjob_status_server.egg-info/PKG-INFO", False),
        ("server/trainjob_status_server/__pycache__/cli.cpython-311.pyc", False),
        ("server/tls.key", False),
        ("client/admin.kubeconfig", False),
        ("devcluster/pyproject.toml", False),
        ("plugin/kubectl_trainjob/command.py", False),
        ("tests/conftest.py", False),
        (".venv/bin/python", False),
        ("Dockerfile", False),
    ],
)
def test_what_the_build_context_sends(path: str, sent: bool) -> None:
    assert in_context(path) is sent


# -- the install steps, for real ---------------------------------------------------------


def locked() -> dict[str, str]:
    """The lock's pins: canonical name -> version."""
    pins = re.findall(r"^([a-z0-9][a-z0-9._-]*)==([^ ;\\]+)", LOCK.read_text(), re.MULTILINE)
    return {re.sub(r"[-_.]+", "-", name): version for name, version in pins}


def assert_exactly_the_lock(venv: Path) -> None:
    """The runtime's virtualenv holds the client, the server and the locked versions
    (those the image's platform needs), and no installer."""
    (site,) = venv.glob("lib/python3.*/site-packages")
    installed = {}
    for info in site.glob("*.dist-info"):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        installed[re.sub(r"[-_.]+", "-", name).lower()] = version
    assert not {"pip", "setuptools", "wheel"} & installed.keys()
    assert not (venv / "bin" / "pip").exists()
    ours = {"trainjob-status", "trainjob-status-server"}
    assert ours <= installed.keys()
    pins = locked()
    assert installed.keys() - ours <= pins.keys(), installed.keys() - ours - pins.keys()
    assert {name: installed[name] for name in installed.keys() - ours} == {
        name: pins[name] for name in installed.keys() - ours
    }
    # Only packages for another interpreter or platform are left out (cffi on PyPy ...).
    for name in pins.keys() - installed.keys():
        assert ";" in LOCK.read_text().split(f"\n{name}==", 1)[1].split("\n", 1)[0], name


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
    for path in ROOT.glob("*/**/*"):
        relative = path.relative_to(ROOT).as_posix()
        if path.is_file() and relative.split("/")[0] != ".git" and in_context(relative):
            (src / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, src / relative)
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
    assert_exactly_the_lock(venv)
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
