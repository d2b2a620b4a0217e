"""Kubeflow Trainer's own programs beside a control plane: its controller manager and
our runner of its status server package (``tools/trainer``), as built by ``make
trainer-assets``, with the manifests copied out of the same Go modules.

Outside a cluster both read what a pod would have at fixed paths: their service
account's token, from which the status server takes the cluster's token issuer, and the
operator namespace beside it (``/var/run/secrets/kubernetes.io/serviceaccount``), and
the serving certificate (``/tmp/k8s-webhook-server/serving-certs``). Each process runs
in a mount namespace of its own (``unshare``) where those paths are bind mounts of
folders it alone has, so the binaries run unchanged and no two of them share a file.
That needs root or unprivileged user namespaces; :func:`private_mounts_usable` says
whether this machine allows it.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

ASSETS_ENV = "TRAINER_ASSETS"
# Where the Trainer looks for its own service account's files and its serving pair.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # noqa: S108 (the Trainer's, fixed)
OPERATOR_NAMESPACE = "kubeflow-system"
# The controller's defaults (its configuration API), which its pod injection names.
SERVICE_NAME = "kubeflow-trainer-controller-manager"
WEBHOOK_SECRET = "kubeflow-trainer-webhook-cert"
GATE = "TrainJobStatus"
# A cold Go binary on a busy 2-core machine: caches to sync, certificates to mint.
READY_TIMEOUT = 120.0


class TrainerAssetsMissing(RuntimeError):
    """``make trainer-assets`` has not been run, or ``TRAINER_ASSETS`` names no build."""


@dataclass(frozen=True)
class TrainerAssets:
    """A folder ``make trainer-assets`` filled: ``bin/``, ``crds/``, ``runtimes/``."""

    root: Path

    @property
    def controller_manager(self) -> Path:
        return self.root / "bin" / "trainer-controller-manager"

    @property
    def status_server(self) -> Path:
        return self.root / "bin" / "trainer-status-server"

    def crds(self) -> list[dict[str, Any]]:
        """The Trainer's CRDs and JobSet's, as the modules ship them."""
        return [_load(path) for path in sorted((self.root / "crds").glob("*.yaml"))]

    def runtime(self, name: str = "torch_distributed") -> dict[str, Any]:
        """A ClusterTrainingRuntime of the Trainer's own manifests."""
        return _load(self.root / "runtimes" / f"{name}.yaml")

    def manifests(self, file: str) -> list[Any]:
        """Every document of ``file`` of the Trainer's manifests the build copied: its
        webhook configurations (``webhooks.yaml``), its controller's RBAC
        (``manifests/role.yaml``, ``manifests/role_binding.yaml``) and the patches its
        kustomization applies to the webhooks (``manifests/patch_*.yaml``)."""
        path = self.root / file
        if not path.exists():
            raise TrainerAssetsMissing(f"no {file} in {self.root} (make trainer-assets copies it)")
        return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def assets_folder(go_mod: Path, cache: Path) -> Path:
    """The cache folder ``make trainer-assets`` builds for the versions ``go_mod`` pins
    (the Makefile names it the same way)."""
    text = go_mod.read_text()

    def version(module: str) -> str:
        found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.M)
        if found is None:
            raise TrainerAssetsMissing(f"{go_mod} does not pin {module}")
        return found.group(1)

    trainer = version("github.com/kubeflow/trainer/v2")
    jobset = version("sigs.k8s.io/jobset")
    return cache / f"trainer-{trainer}-jobset-{jobset}"


def find_trainer_assets(go_mod: Path, environ: Mapping[str, str] = os.environ) -> TrainerAssets:
    """``TRAINER_ASSETS`` if set, else the default cache folder for ``go_mod``'s pins;
    :class:`TrainerAssetsMissing` saying how to build it when it is not complete."""
    folder = environ.get(ASSETS_ENV, "")
    if not folder:
        cache = Path(environ.get("HOME", "~")).expanduser() / ".cache/trainjob-status"
        folder = str(assets_folder(go_mod, cache / "trainer-assets"))
    assets = TrainerAssets(Path(folder))
    if not (assets.root / ".complete").exists():
        raise TrainerAssetsMissing(f"no Trainer build in {folder} (make trainer-assets builds it)")
    return assets


def _unshare_prefix() -> list[str]:
    if os.geteuid() == 0:
        return ["unshare", "--mount", "--propagation", "private"]
    return ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]


# Binds each SOURCE TARGET pair, then runs what follows "--" in place of the shell.
_MOUNT_SCRIPT = (
    'set -e; while [ "$1" != -- ]; do mount --bind "$1" "$2"; shift 2; done; shift; exec "$@"'
)


def private_mounts(binds: Mapping[str, Path], argv: Sequence[str]) -> list[str]:
    """``argv`` run in a mount namespace of its own where each target path of ``binds``
    shows the folder it maps to. Each target must exist (an empty folder will do)."""
    pairs = [part for target, source in binds.items() for part in (str(source), target)]
    return [*_unshare_prefix(), "sh", "-c", _MOUNT_SCRIPT, "sh", *pairs, "--", *argv]


def private_mounts_usable() -> str:
    """Why this machine cannot give a process mount namespaces of its own ("" if it can)."""
    if shutil.which("unshare") is None:
        return "unshare is not installed (apt-get install util-linux)"
    probe = subprocess.run(
        [*_unshare_prefix(), "sh", "-c", "mount -t tmpfs none /mnt"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"no private mount namespace here: {probe.stderr.decode(errors='replace').strip()}"
    return ""


def _die_with_parent() -> None:
    # The Trainer outlives a killed test run otherwise, holding its ports.
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


Ready = Callable[[], bool]


class ChildProcess:
    """A program run for a test or a bench, logging to a file of its own. ``with``
    starts it and waits until ``ready()``; leaving stops it (SIGTERM, as a kubelet
    would) and removes its folder. ``prepare`` may fill the folder before the start."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        ready: Ready,
        name: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.name = name
        self.ready = ready
        self.env = {**os.environ, **(env or {})}
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{name}-"))
        self.log_path = self.workdir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        return self.argv

    def start(self) -> ChildProcess:
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=self.env,
                preexec_fn=_die_with_parent,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def close(self) -> None:
        """Stop it and remove its files."""
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def __enter__(self) -> ChildProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.process.returncode}:\n{self.log()[-6000:]}"
                )
            if self.ready():
                return
            time.sleep(0.2)
        raise TimeoutError(
            f"{self.name} not ready after {READY_TIMEOUT:.0f} s:\n{self.log()[-6000:]}"
        )


class TrainerProcess(ChildProcess):
    """One of the Trainer's programs, in a mount namespace of its own where its service
    account folder holds ``token`` (whose issuer claim is all the status server reads)
    and the operator namespace, and its certificate folder holds ``certs`` (its serving
    pair: ``tls.crt``, ``tls.key``, as a mounted Secret would)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        token: str,
        kubeconfig: Path,
        ready: Ready,
        certs: Mapping[str, bytes] | None = None,
        name: str = "trainer",
    ) -> None:
        super().__init__(argv, ready=ready, name=name, env={"KUBECONFIG": str(kubeconfig)})
        account = self.workdir / "run" / "secrets" / "kubernetes.io" / "serviceaccount"
        account.mkdir(parents=True)
        (account / "token").write_text(token)
        (account / "namespace").write_text(OPERATOR_NAMESPACE)
        self.cert_dir = self.workdir / "serving-certs"
        self.cert_dir.mkdir()
        for file, content in (certs or {}).items():
            (self.cert_dir / file).write_bytes(content)

    def command(self) -> list[str]:
        # The mount point on this machine: an empty folder, shared and never written.
        Path(CERT_DIR).mkdir(parents=True, exist_ok=True)
        binds = {"/var/run": self.workdir / "run", CERT_DIR: self.cert_dir}
        return private_mounts(binds, self.argv)


def http_ready(port: int, path: str = "/readyz") -> Ready:
    """Plain HTTP ``GET path`` on 127.0.0.1:``port`` answers 200 (a manager's probes,
    our server's probe port)."""

    def probe() -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            connection.request("GET", path)
            return connection.getresponse().status == 200
        except OSError:
            return False
        finally:
            connection.close()

    return probe


def tls_ready(port: int) -> Ready:
    """A TLS handshake on 127.0.0.1:``port`` completes: the Trainer's status server
    listens only once its token issuer has answered."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE

    def probe() -> bool:
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=2) as raw,
                context.wrap_socket(raw),
            ):
                return True
        except OSError:
            return False

    return probe


def controller_config(
    *,
    probe_port: int,
    webhook_port: int,
    status_port: int,
    qps: float = 5,
    burst: int = 10,
) -> dict[str, Any]:
    """The controller manager's configuration file for a run outside a cluster: probes
    and webhooks on loopback, no metrics endpoint, no leader election (one replica);
    everything else the Trainer's defaults but its certificate management, off: its
    certificate names only the webhook Service's DNS name, which
    kube-apiserver reaches through a Service and a cluster network that a control plane
    alone does not have, so the serving pair and the Secret its TrainJobs'
    ``NAME-tls-config`` ConfigMaps copy the CA from are provided from outside, as
    cert-manager provides them where the Trainer's chart turns it off."""
    return {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
        "kind": "Configuration",
        "health": {
            "healthProbeBindAddress": f"127.0.0.1:{probe_port}",
            "readinessEndpointName": "readyz",
            "livenessEndpointName": "healthz",
        },
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1"},
        "leaderElection": {"leaderElect": False},
        "certManagement": {
            "enable": False,
            "webhookServiceName": SERVICE_NAME,
            "webhookSecretName": WEBHOOK_SECRET,
        },
        "statusServer": {"port": status_port, "qps": qps, "burst": burst},
    }


def status_server_config(*, status_port: int, qps: float = 5, burst: int = 10) -> dict[str, Any]:
    """The configuration our runner of the Trainer's status server reads: the port and
    the status server's own API budget (the Trainer's defaults, 5 and 10)."""
    return {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
        "kind": "Configuration",
        "statusServer": {"port": status_port, "qps": qps, "burst": burst},
    }


def write_config(folder: Path, config: Mapping[str, Any]) -> Path:
    path = folder / "trainer-config.yaml"
    path.write_text(yaml.safe_dump(dict(config)))
    return path


@contextlib.contextmanager
def config_folder() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="trainer-config-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
