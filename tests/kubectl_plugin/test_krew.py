"""The krew manifest of ``kubectl trainjob`` and its archive: what krew's own validation
asks of a manifest, the archive ``make krew-archive`` builds (the same bytes each time,
the manifest's sha256, the bin the manifest names), the manifest filled in at release, and
the launcher in it running the installed plugin (by itself and as kubectl finds it), or
saying how to install it."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import venv
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KREW = ROOT / "plugin" / "krew"
MANIFEST = KREW / "trainjob.yaml"
# The project's version (server/pyproject.toml), which the plugin's must be.
VERSION: str = tomllib.loads((ROOT / "server" / "pyproject.toml").read_text())["project"]["version"]
ARCHIVE = f"kubectl-trainjob-v{VERSION}.tar.gz"


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def make_archive(out: Path) -> Path:
    """``make krew-archive`` into OUT, with this test's Python."""
    subprocess.run(
        ["make", "--no-print-directory", "krew-archive", f"KREW_OUT={out}", f"PYTHON={sys.executable}"],
        cwd=ROOT, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return out / ARCHIVE


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_archive(tmp_path_factory.mktemp("krew"))


def test_the_manifest_is_what_krew_accepts() -> None:
    # krew's own checks (its index validation), each written out.
    manifest = load(MANIFEST)
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    name = manifest["metadata"]["name"]
    assert name == MANIFEST.stem == "trainjob"
    assert re.fullmatch(r"[\w-]+", name)
    spec = manifest["spec"]
    assert spec["shortDescription"]
    assert not re.search(r"[\r\n]", spec["shortDescription"])
    assert re.fullmatch(r"v\d+\.\d+\.\d+", spec["version"])
    assert spec["platforms"]
    for platform in spec["platforms"]:
        assert platform["uri"].startswith("https://")
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert platform["bin"]
        assert platform["files"]
        assert all(op["from"] and op["to"] for op in platform["files"])
        selector = platform["selector"]
        expressions = selector.get("matchExpressions", [])
        assert selector.get("matchLabels") or expressions
        keys = set(selector.get("matchLabels", {})) | {e["key"] for e in expressions}
        assert keys <= {"os", "arch"}


def test_the_manifest_says_the_plugin_version_and_its_archive() -> None:
    with (ROOT / "plugin" / "pyproject.toml").open("rb") as file:
        assert tomllib.load(file)["project"]["version"] == VERSION
    spec = load(MANIFEST)["spec"]
    assert spec["version"] == f"v{VERSION}"
    (platform,) = spec["platforms"]
    assert platform["uri"] == (
        f"https://github.com/${{GITHUB_REPOSITORY}}/releases/download/v{VERSION}/{ARCHIVE}"
    )
    # A shell script: every architecture of the systems that run one, and no Windows.
    assert platform["selector"] == {
        "matchExpressions": [{"key": "os", "operator": "In", "values": ["linux", "darwin"]}]
    }
    assert f"python3 -m pip install kubectl-trainjob=={VERSION}" in spec["caveats"]


def test_the_archive_is_the_same_bytes_each_build(archive: Path, tmp_path: Path) -> None:
    again = make_archive(tmp_path)
    assert again.read_bytes() == archive.read_bytes()
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
    assert (
        [m.name for m in members]
        == sorted(m.name for m in members)
        == ["LICENSE", "kubectl-trainjob"]
    )
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {
        (946684800, 0, 0, "", "")
    }


def test_the_manifest_sha256_is_the_archive_built_here(archive: Path) -> None:
    (platform,) = load(MANIFEST)["spec"]["platforms"]
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == platform["sha256"]


def test_the_manifest_installs_the_launcher_and_the_license_from_the_archive(archive: Path) -> None:
    (platform,) = load(MANIFEST)["spec"]["platforms"]
    with tarfile.open(archive) as tar:
        files = {m.name: m for m in tar.getmembers() if m.isfile()}
    # krew copies each `from` to `to` (a folder of the plugin's), then links `bin`.
    installed = {
        str(PurePosixPath(op["to"]) / PurePosixPath(name).name)
        for op in platform["files"]
        for name in files
        if PurePosixPath(name).match(op["from"])
    }
    assert installed == {platform["bin"], "LICENSE"} == {"kubectl-trainjob", "LICENSE"}
    assert files["kubectl-trainjob"].mode == 0o755


def test_the_archive_carries_the_license(archive: Path) -> None:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("LICENSE")
        assert member is not None
        assert member.read() == (ROOT / "LICENSE").read_bytes()


def test_the_release_manifest_names_the_repository_and_the_same_sha256(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(KREW / "archive.py"), "manifest", "acme/trainjob-status", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    released = load(tmp_path / "trainjob.yaml")
    (platform,) = released["spec"]["platforms"]
    assert released["spec"]["homepage"] == "https://github.com/acme/trainjob-status"
    assert platform["uri"] == (
        f"https://github.com/acme/trainjob-status/releases/download/v{VERSION}/{ARCHIVE}"
    )
    assert platform["sha256"] == hashlib.sha256((tmp_path / ARCHIVE).read_bytes()).hexdigest()
    assert "${" not in (tmp_path / "trainjob.yaml").read_text()


@pytest.mark.parametrize("repository", ["acme", "acme/trainjob-status/x", "a b/c"])
def test_the_release_manifest_wants_owner_and_name(repository: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(KREW / "archive.py"), "manifest", repository, str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"REPOSITORY must be owner/name, not {repository!r}\n"
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def launcher(archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The launcher as krew unpacks it."""
    folder = tmp_path_factory.mktemp("installed")
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    return folder / "kubectl-trainjob"


def run_launcher(launcher: Path, python: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECTL_TRAINJOB_PYTHON": python}
    return subprocess.run(
        [str(launcher), *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def test_the_launcher_runs_the_installed_plugin(launcher: Path, tmp_path: Path) -> None:
    done = run_launcher(launcher, sys.executable, "--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"kubectl-trainjob {VERSION}\n", "")
    # Its arguments reach the plugin as they were given.
    path = str(tmp_path / "no  such" / "config")
    done = run_launcher(launcher, sys.executable, "progress", "--kubeconfig", path, "tj")
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        f"error: no kubeconfig: {path} does not exist (set KUBECONFIG or --kubeconfig)\n",
    )


def install_hint(python: str) -> str:
    return (
        f"kubectl-trainjob: {python} cannot run the plugin: install it with"
        f" '{python} -m pip install kubectl-trainjob=={VERSION}' (Python >= 3.11),"
        " or set KUBECTL_TRAINJOB_PYTHON to a Python that has it\n"
    )


def test_the_launcher_says_how_to_install_the_plugin_where_python_lacks_it(
    launcher: Path, tmp_path: Path
) -> None:
    venv.create(tmp_path / "bare", with_pip=False)
    bare = str(tmp_path / "bare" / "bin" / "python")
    done = run_launcher(launcher, bare, "--version")
    assert (done.returncode, done.stdout, done.stderr) == (1, "", install_hint(bare))


def test_the_launcher_says_so_where_there_is_no_such_python(launcher: Path, tmp_path: Path) -> None:
    missing = str(tmp_path / "python3")
    done = run_launcher(launcher, missing, "--version")
    assert (done.returncode, done.stdout, done.stderr) == (1, "", install_hint(missing))


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_finds_the_launcher_as_krew_links_it(launcher: Path, tmp_path: Path) -> None:
    # krew puts a link named for `bin` in its bin folder, on PATH; kubectl finds it there.
    bin_dir = tmp_path / "krew-bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl-trainjob").symlink_to(launcher)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "KUBECONFIG": str(tmp_path / "none"),
        "KUBECTL_TRAINJOB_PYTHON": sys.executable,
    }
    done = subprocess.run(
        ["kubectl", "trainjob", "--version"],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, f"kubectl-trainjob {VERSION}\n", "")
