"""The development cluster's lifecycle: keys and certificates, the HTTPS listener, and
handles for tests (inspection, fault injection, tokens)."""

from __future__ import annotations

import builtins
import json
import secrets
import shutil
import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from ..auth.admission import Backend
from ..auth.tokens import SigningKeys, TokenIssuer
from ..common.faults import Faults, RequestInfo
from ..common.resources import ResourceType, default_resources
from ..http.httpserver import HttpServer
from ..http.rest import Call
from ..http.routing import Registry
from ..http.server import MAX_BODY, ClusterApp
from ..storage import objects
from ..storage.store import Obj, Store
from . import workloads
from .kubeconfig import write_kubeconfig
from .pki import CertificateAuthority, server_ssl_context

DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"


class DevCluster(workloads.TrainJobWorkloads):
    """A local Kubernetes API server for development and tests. Never for production.

    ``async with DevCluster() as cluster:`` serves HTTPS on 127.0.0.1 (a free port unless
    one is given) with a CA minted at start; ``cluster.kubeconfig_path`` is an admin
    kubeconfig for kubectl and kubernetes-asyncio.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        workdir: Path | None = None,
        issuer: str = DEFAULT_ISSUER,
        clock: Callable[[], float] = time.time,
        bookmark_interval: float = 10.0,
        history_size: int = 10_000,
    ) -> None:
        self.host = host
        self.port = port
        self.issuer = issuer
        self.clock = clock
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="devcluster-"))
        self.admin_token = secrets.token_urlsafe(32)
        self.store = Store(history_size=history_size)
        self.faults = Faults()
        self.registry = Registry(default_resources())
        self.keys = SigningKeys()
        self.tokens = TokenIssuer(issuer, [issuer], self.keys, clock)
        self.ca = CertificateAuthority()
        self.app = ClusterApp(
            self.store,
            self.registry,
            self.tokens,
            self.faults,
            self.admin_token,
            clock,
            bookmark_interval,
        )
        self._http: HttpServer | None = None
        self.url = ""
        self.kubeconfig_path = self.workdir / "kubeconfig"
        self.ca_path = self.workdir / "ca.crt"

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> DevCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ca_path.write_bytes(self.ca.cert_pem)
        cert_pem, key_pem = self.ca.issue_server_cert(["localhost"], [self.host])
        context = server_ssl_context(cert_pem, key_pem, self.workdir)
        self._http = HttpServer(
            self.app.dispatch, self.host, self.port, ssl_context=context, max_body=MAX_BODY
        )
        await self._http.start()
        self.port = self._http.port
        self.url = f"https://{self.host}:{self.port}"
        for name in ("default", "kube-system", "kube-public"):
            self.ensure_namespace(name)
        write_kubeconfig(self.kubeconfig_path, self.url, self.ca.cert_pem, self.admin_token)
        return self

    async def stop(self) -> None:
        self.app.stopping.set()
        self.store.close_watches()
        if self._http is not None:
            await self._http.stop()
            self._http = None
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    async def __aenter__(self) -> DevCluster:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def client_ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts this cluster's CA."""
        return ssl.create_default_context(cadata=self.ca.cert_pem.decode())

    # -- direct access for tests (same code path as HTTP writes, so watches see them) ----

    def resource(self, plural: str, group: str = "") -> ResourceType:
        return self.registry.by_plural(plural, group)

    def get(self, plural: str, namespace: str, name: str, group: str = "") -> Obj | None:
        return self.store.get(self.resource(plural, group).qualified, namespace, name)

    def list(
        self, plural: str, namespace: str | None = None, group: str = ""
    ) -> builtins.list[Obj]:
        return self.store.list(self.resource(plural, group).qualified, namespace)

    def create(self, plural: str, obj: dict[str, Any], namespace: str = "", group: str = "") -> Obj:
        """Create ``obj`` as the admin would through POST (validated, defaulted, watched)."""
        resource = self.resource(plural, group)
        info = RequestInfo("POST", "", "create", plural, "", namespace, "")
        call = Call(info, resource, {"fieldManager": "devcluster"}, json.dumps(obj).encode())
        return self.app.api.create(call).body

    def ensure_namespace(self, name: str) -> Obj:
        found = self.get("namespaces", "", name)
        if found is not None:
            return found
        created = self.create("namespaces", {"metadata": {"name": name}})
        if self.get("serviceaccounts", name, "default") is None:
            self.create("serviceaccounts", {"metadata": {"name": "default"}}, name)
        return created

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> Obj:
        """What a kubelet would do: set ``status.phase`` (stored and watched)."""
        qualified = self.resource("pods").qualified
        old = self.store.get(qualified, namespace, name)
        if old is None:
            raise KeyError(f"pod {namespace}/{name} not found")
        new = {
            **old,
            "metadata": dict(old["metadata"]),
            "status": {**old.get("status", {}), "phase": phase},
        }
        return self.store.update(qualified, new, old)

    def delete(self, plural: str, namespace: str, name: str, group: str = "") -> Obj | None:
        return self.store.delete(self.resource(plural, group).qualified, namespace, name)

    def request_token(
        self,
        namespace: str,
        service_account: str,
        audiences: builtins.list[str],
        *,
        pod: str | None = None,
        expiration_seconds: int = 3600,
    ) -> str:
        """A TokenRequest as kubelet makes it for a projected volume; returns the JWT."""
        sa = self.get("serviceaccounts", namespace, service_account)
        if sa is None:
            raise KeyError(f"serviceaccount {namespace}/{service_account} not found")
        spec = self.token_request_spec(namespace, audiences, pod, expiration_seconds)
        answer = self.tokens.request_token(namespace, sa, {"spec": spec}, self.store.get)
        token = answer["status"]["token"]
        assert isinstance(token, str)
        return token

    def route_service(
        self, namespace: str, name: str, host: str, ports: dict[int | str, int]
    ) -> None:
        """Where the pods behind Service ``namespace/name`` listen, for the webhooks this
        cluster calls: ``ports`` maps the Service's target ports (numbers or names) to
        ports on ``host``."""
        self.app.admission.backends[(namespace, name)] = Backend(host, ports)

    # -- faults ----------------------------------------------------------------------------

    def drop_watches(self, plural: str | None = None, group: str = "") -> int:
        """Close open watch connections (all, or one resource's); returns how many."""
        qualified = self.resource(plural, group).qualified if plural else None
        return self.store.close_watches(qualified)

    def expire_resource_versions(self) -> int:
        """Compact history: watches from any resourceVersion so far, the current one
        included, get 410 Expired. Returns the new resourceVersion (one past the last
        change; LISTs answer it), from which watches work."""
        return self.store.compact()

    def now(self) -> str:
        return objects.rfc3339(self.clock())
