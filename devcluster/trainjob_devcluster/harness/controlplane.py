"""A real Kubernetes control plane for tests: etcd and kube-apiserver, started as child
processes on loopback with credentials minted for the run, and stopped with their files.

The binaries are found as controller-runtime's envtest finds them: the folder that
``KUBEBUILDER_ASSETS`` names holds ``etcd`` and ``kube-apiserver`` (``make kube-assets``
builds both from the pinned Go module in ``tools/kube``; binaries that ``setup-envtest``
fetched work too). No kube-controller-manager runs: nothing creates a namespace's default
ServiceAccount, collects garbage or finishes a namespace's deletion unless a caller does.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from ..common.resources import load_crd
from .kubeconfig import write_kubeconfig
from .pki import CertificateAuthority
from .testing import free_port

ASSETS_ENV = "KUBEBUILDER_ASSETS"
BINARIES = ("etcd", "kube-apiserver")
DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# The admin's groups: system:masters passes every authorizer, as a cluster-admin's would.
ADMIN_USER = "trainjob-status-admin"
ADMIN_GROUPS = "system:masters"
# A kube-apiserver on a busy 2-core machine is ready in 5 to 10 s; this stays under the
# suite's 120 s per-test timeout, which the first test's session fixture counts against.
READY_TIMEOUT = 100.0
# Ports are found free and bound by the child later: another process may take one in
# between (seen on a loaded machine). A start that fails so is made again on new ports.
PORT_ATTEMPTS = 3


class AssetsMissing(RuntimeError):
    """The binaries are not where ``KUBEBUILDER_ASSETS`` says (or it is unset)."""


class PortTaken(RuntimeError):
    """A child exited during start because its port was taken meanwhile."""


def port_taken(log: str) -> bool:
    """Whether a child's log says it could not bind its port (etcd and kube-apiserver
    both report Go's ``bind: address already in use``)."""
    return "bind: address already in use" in log


def find_assets(environ: Mapping[str, str] = os.environ) -> Path:
    """The folder holding ``etcd`` and ``kube-apiserver``; :class:`AssetsMissing` saying
    what is missing and how to build it otherwise."""
    folder = environ.get(ASSETS_ENV, "")
    if not folder:
        raise AssetsMissing(f"{ASSETS_ENV} is not set (make kube-assets builds the binaries)")
    missing = [name for name in BINARIES if not os.access(Path(folder) / name, os.X_OK)]
    if missing:
        raise AssetsMissing(
            f"{ASSETS_ENV}={folder} has no executable {' or '.join(missing)}"
            " (make kube-assets builds them)"
        )
    return Path(folder)


def etcd_args(data_dir: Path, client_port: int, peer_port: int) -> list[str]:
    """One etcd member on loopback, without fsync: its data lives only as long as a test
    run, so durability buys nothing and fsync on a shared disk costs seconds."""
    client = f"http://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    return [
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


@dataclass(frozen=True)
class ApiserverFiles:
    """What kube-apiserver reads at start, all in the control plane's folder."""

    serving_cert: Path
    serving_key: Path
    client_ca: Path
    token_file: Path
    sa_public_key: Path
    sa_signing_key: Path
    front_proxy_ca: Path
    front_proxy_cert: Path
    front_proxy_key: Path


FRONT_PROXY_NAME = "front-proxy-client"


def apiserver_args(files: ApiserverFiles, port: int, etcd_port: int, issuer: str) -> list[str]:
    """kube-apiserver as a cluster's would be set up, minus what needs other components:
    RBAC with the node authorizer, service-account tokens from our own issuer and key,
    and a static admin token (the only credential the suite hands out itself)."""
    return [
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        f"--tls-cert-file={files.serving_cert}",
        f"--tls-private-key-file={files.serving_key}",
        f"--client-ca-file={files.client_ca}",
        f"--token-auth-file={files.token_file}",
        "--authorization-mode=Node,RBAC",
        f"--service-account-issuer={issuer}",
        f"--service-account-key-file={files.sa_public_key}",
        f"--service-account-signing-key-file={files.sa_signing_key}",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--allow-privileged=true",
        # The discovery document points at this server, where the suite can reach it.
        f"--service-account-jwks-uri=https://127.0.0.1:{port}/openid/v1/jwks",
        # The aggregation layer, as kubeadm sets it up: a front proxy with a client
        # certificate of its own CA, and the APIServices' Services reached at their
        # endpoints (no kube-proxy here).
        f"--requestheader-client-ca-file={files.front_proxy_ca}",
        f"--requestheader-allowed-names={FRONT_PROXY_NAME}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={files.front_proxy_cert}",
        f"--proxy-client-key-file={files.front_proxy_key}",
        "--enable-aggregator-routing=true",
    ]


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the test process goes, however it goes
    (a SIGKILL or a crash runs no finalizer), so no etcd outlives its run."""
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


class ControlPlane:
    """``with ControlPlane(assets) as plane:`` etcd and kube-apiserver serving on free
    loopback ports, ready, with the TrainJob and JobSet CRDs installed.

    ``plane.url``, ``plane.kubeconfig_path`` (the admin, a bearer token), ``plane.ca_path``,
    ``plane.issuer``. Everything it writes is in a temporary folder removed on stop, and
    stop is called on every exit path of ``with`` (KeyboardInterrupt included).
    """

    def __init__(
        self,
        assets: Path,
        *,
        issuer: str | None = DEFAULT_ISSUER,
        ports: Callable[[], int] = free_port,
    ) -> None:
        # None: the API server's own URL, where a client outside the cluster finds the
        # issuer's discovery document (Kubeflow Trainer's status server looks there).
        self.assets = assets
        self._given_issuer = issuer or ""
        self.issuer = self._given_issuer
        self._ports = ports
        self.workdir = Path(tempfile.mkdtemp(prefix="controlplane-"))
        self.admin_token = secrets.token_urlsafe(32)
        self.ca = CertificateAuthority("trainjob-status control plane CA")
        # Signs the front proxy's client certificate (an aggregated API trusts it).
        self.front_proxy = CertificateAuthority("trainjob-status front proxy CA")
        self.url = ""
        self.kubeconfig_path = self.workdir / "kubeconfig"
        self.ca_path = self.workdir / "ca.crt"
        self._processes: list[tuple[str, subprocess.Popen[bytes]]] = []

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> ControlPlane:
        try:
            for attempt in range(1, PORT_ATTEMPTS + 1):
                try:
                    self._start_processes()
                    break
                except PortTaken:
                    self._stop_processes()
                    shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
                    if attempt == PORT_ATTEMPTS:
                        raise
            for crd in ("trainjobs.yaml", "jobsets.yaml"):
                self.install_crd(load_crd(crd))
        except BaseException:
            self.stop()
            raise
        return self

    def _start_processes(self) -> None:
        etcd_port = self._ports()
        self._spawn("etcd", etcd_args(self.workdir / "etcd", etcd_port, self._ports()))
        port = self._ports()
        self.issuer = self._given_issuer or f"https://127.0.0.1:{port}"
        files = self._write_files()
        self._spawn("kube-apiserver", apiserver_args(files, port, etcd_port, self.issuer))
        self.url = f"https://127.0.0.1:{port}"
        write_kubeconfig(self.kubeconfig_path, self.url, self.ca.cert_pem, self.admin_token)
        self._wait_ready()

    def stop(self) -> None:
        self._stop_processes()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _stop_processes(self) -> None:
        # The API server first: it would log etcd's absence for as long as it outlived it.
        for _, process in reversed(self._processes):
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._processes.clear()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _spawn(self, name: str, args: list[str]) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        with log:
            process = subprocess.Popen(
                [str(self.assets / name), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                preexec_fn=_die_with_parent,
            )
        self._processes.append((name, process))

    def _write_files(self) -> ApiserverFiles:
        def private(name: str, content: bytes) -> Path:
            path = self.workdir / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
            return path

        cert, key = self.ca.issue_server_cert(
            ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
            ["127.0.0.1"],
        )
        signing = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ca_path.write_bytes(self.ca.cert_pem)
        proxy_cert, proxy_key = self.front_proxy.issue_client_cert(FRONT_PROXY_NAME)
        return ApiserverFiles(
            serving_cert=private("apiserver.crt", cert),
            serving_key=private("apiserver.key", key),
            client_ca=self.ca_path,
            token_file=private(
                "tokens.csv",
                f'{self.admin_token},{ADMIN_USER},{ADMIN_USER},"{ADMIN_GROUPS}"\n'.encode(),
            ),
            sa_public_key=private(
                "sa.pub",
                signing.public_key().public_bytes(
                    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
                ),
            ),
            sa_signing_key=private(
                "sa.key",
                signing.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                ),
            ),
            front_proxy_ca=private("front-proxy-ca.crt", self.front_proxy.cert_pem),
            front_proxy_cert=private("front-proxy-client.crt", proxy_cert),
            front_proxy_key=private("front-proxy-client.key", proxy_key),
        )

    def _check_alive(self) -> None:
        for name, process in self._processes:
            if process.poll() is not None:
                log = (self.workdir / f"{name}.log").read_text(errors="replace")
                failure = PortTaken if port_taken(log) else RuntimeError
                raise failure(
                    f"{name} exited with {process.returncode} during start:\n{log[-4000:]}"
                )

    def _wait_ready(self) -> None:
        """Until ``/readyz`` answers 200: etcd reached, the built-in RBAC roles bootstrapped,
        every post-start hook done."""
        deadline = time.monotonic() + READY_TIMEOUT
        last = "no answer"
        while time.monotonic() < deadline:
            self._check_alive()
            with contextlib.suppress(OSError, http.client.HTTPException):
                code, body = self.request("GET", "/readyz")
                if code == 200:
                    return
                last = f"{code} {body!r}"
            time.sleep(0.2)
        log = (self.workdir / "kube-apiserver.log").read_text(errors="replace")
        raise TimeoutError(
            f"kube-apiserver not ready after {READY_TIMEOUT:.0f} s: {last}\n{log[-4000:]}"
        )

    # -- requests as the admin -------------------------------------------------------------

    def client_ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts this control plane's CA."""
        return ssl.create_default_context(cadata=self.ca.cert_pem.decode())

    @contextlib.contextmanager
    def _connection(self) -> Iterator[http.client.HTTPSConnection]:
        host, _, port = self.url.removeprefix("https://").partition(":")
        connection = http.client.HTTPSConnection(
            host, int(port), context=self.client_ssl_context(), timeout=30
        )
        try:
            yield connection
        finally:
            connection.close()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        token: str | None = None,
    ) -> tuple[int, Any]:
        """One request as the admin (or as ``token``'s holder): (status, decoded JSON body,
        or the text where it is not JSON)."""
        headers = {
            "Authorization": f"Bearer {token or self.admin_token}",
            "Accept": "application/json",
        }
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        with self._connection() as connection:
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, raw.decode(errors="replace")

    def install_crd(self, crd: dict[str, Any]) -> None:
        """Create ``crd`` and wait until its resource is served (Established, and a list
        of it answers 200)."""
        code, answer = self.request(
            "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd
        )
        if code != 201:
            raise RuntimeError(f"CRD {crd['metadata']['name']} refused: {code} {answer}")
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("served"))
        listing = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
        deadline = time.monotonic() + 60
        while self.request("GET", listing)[0] != 200:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{listing} not served 60 s after its CRD was created")
            time.sleep(0.1)
