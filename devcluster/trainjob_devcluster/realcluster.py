"""The real control plane behind the development cluster's test handle: the same calls
(``create_trainjob``, ``create_pod``, ``request_token``, ``get`` ...), made over HTTPS as
the admin, so a test written against :class:`.DevCluster` runs on either.

What only the development cluster can do (fault injection, dropping watches, compacting
history, reading its store) has no counterpart here: tests that need it stay on the
development cluster.
"""

from __future__ import annotations

import builtins
import ssl
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from trainjob_status import contract

from . import objects
from .controlplane import ControlPlane
from .pki import CertificateAuthority
from .resources import ResourceType, default_resources
from .routing import Registry
from .status import ApiError
from .store import Obj

# What a namespace holds that the suite creates; removed between tests (see reset).
NAMESPACED_KINDS = (
    ("pods", ""),
    ("serviceaccounts", ""),
    ("secrets", ""),
    ("configmaps", ""),
    ("services", ""),
    ("events", ""),
    ("roles", "rbac.authorization.k8s.io"),
    ("rolebindings", "rbac.authorization.k8s.io"),
    (contract.RESOURCE, contract.GROUP),
    ("jobsets", "jobset.x-k8s.io"),
)
# Namespaces the API server itself keeps objects in (kube-system's authentication
# ConfigMap, default's ``kubernetes`` Service): never emptied.
SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
CLUSTER_KINDS = (
    ("clusterroles", "rbac.authorization.k8s.io"),
    ("clusterrolebindings", "rbac.authorization.k8s.io"),
    ("mutatingwebhookconfigurations", "admissionregistration.k8s.io"),
)


def _api_error(code: int, answer: Any) -> ApiError:
    if isinstance(answer, dict) and answer.get("kind") == "Status":
        return ApiError(code, answer.get("reason", ""), answer.get("message", ""))
    return ApiError(code, "", str(answer))


class RealCluster:
    """A :class:`.ControlPlane` with the development cluster's test handle."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.registry = Registry(default_resources())
        self._cluster_baseline: set[tuple[str, str]] = set()

    @property
    def url(self) -> str:
        return self.plane.url

    @property
    def kubeconfig_path(self) -> Path:
        return self.plane.kubeconfig_path

    @property
    def ca_path(self) -> Path:
        return self.plane.ca_path

    @property
    def ca(self) -> CertificateAuthority:
        """The CA that signed the API server's serving certificate."""
        return self.plane.ca

    @property
    def issuer(self) -> str:
        return self.plane.issuer

    @property
    def admin_token(self) -> str:
        return self.plane.admin_token

    def client_ssl_context(self) -> ssl.SSLContext:
        return self.plane.client_ssl_context()

    def now(self) -> str:
        return objects.rfc3339(time.time())

    # -- paths and calls ---------------------------------------------------------------------

    def resource(self, plural: str, group: str = "") -> ResourceType:
        return self.registry.by_plural(plural, group)

    def path(self, plural: str, namespace: str = "", name: str = "", group: str = "") -> str:
        resource = self.resource(plural, group)
        root = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
        scope = f"/namespaces/{quote(namespace)}" if resource.namespaced and namespace else ""
        tail = f"/{quote(name)}" if name else ""
        return f"{root}{scope}/{plural}{tail}"

    def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        """A request as the admin; the decoded answer, or :class:`.ApiError` for a
        non-2xx answer (as the development cluster raises for its direct calls)."""
        code, answer = self.plane.request(method, path, body, **kwargs)
        if not 200 <= code < 300:
            raise _api_error(code, answer)
        return answer

    # -- the development cluster's handle ------------------------------------------------

    def get(self, plural: str, namespace: str, name: str, group: str = "") -> Obj | None:
        code, answer = self.plane.request("GET", self.path(plural, namespace, name, group))
        if code == 404:
            return None
        if code != 200:
            raise _api_error(code, answer)
        found: Obj = answer
        return found

    def list(
        self, plural: str, namespace: str | None = None, group: str = ""
    ) -> builtins.list[Obj]:
        items: builtins.list[Obj] = self.call("GET", self.path(plural, namespace or "", "", group))[
            "items"
        ]
        return items

    def create(self, plural: str, obj: dict[str, Any], namespace: str = "", group: str = "") -> Obj:
        """Create ``obj`` as the admin through POST (validated, defaulted, watched)."""
        resource = self.resource(plural, group)
        body = {
            "apiVersion": f"{resource.group}/{resource.version}" if resource.group else "v1",
            "kind": resource.kind,
            **obj,
        }
        created: Obj = self.call(
            "POST", self.path(plural, namespace, "", group) + "?fieldManager=devcluster", body
        )
        return created

    def delete(self, plural: str, namespace: str, name: str, group: str = "") -> Obj | None:
        found = self.get(plural, namespace, name, group)
        if found is None:
            return None
        code, answer = self.plane.request("DELETE", self.path(plural, namespace, name, group))
        if code not in (200, 202, 404):
            raise _api_error(code, answer)
        return found

    def ensure_namespace(self, name: str) -> Obj:
        """The namespace, and its ``default`` ServiceAccount (no controller makes it here)."""
        found = self.get("namespaces", "", name)
        if found is None:
            found = self.create("namespaces", {"metadata": {"name": name}})
        if self.get("serviceaccounts", name, "default") is None:
            self.create("serviceaccounts", {"metadata": {"name": "default"}}, name)
        return found

    def create_trainjob(self, namespace: str, name: str, **spec: Any) -> Obj:
        self.ensure_namespace(namespace)
        body = {
            "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, **spec},
        }
        return self.create(contract.RESOURCE, body, namespace, contract.GROUP)

    def create_pod(
        self,
        namespace: str,
        name: str,
        *,
        service_account: str = "default",
        labels: dict[str, str] | None = None,
    ) -> Obj:
        self.ensure_namespace(namespace)
        if self.get("serviceaccounts", namespace, service_account) is None:
            self.create("serviceaccounts", {"metadata": {"name": service_account}}, namespace)
        body = {
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {
                "serviceAccountName": service_account,
                "containers": [{"name": "trainer", "image": "busybox"}],
            },
        }
        return self.create("pods", body, namespace)

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> Obj:
        """What a kubelet would do: set ``status.phase`` through the status subresource."""
        patched: Obj = self.call(
            "PATCH",
            self.path("pods", namespace, name) + "/status",
            {"status": {"phase": phase}},
            content_type="application/merge-patch+json",
        )
        return patched

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
        spec: dict[str, Any] = {"audiences": audiences, "expirationSeconds": expiration_seconds}
        if pod is not None:
            found = self.get("pods", namespace, pod)
            if found is None:
                raise KeyError(f"pod {namespace}/{pod} not found")
            spec["boundObjectRef"] = {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": pod,
                "uid": found["metadata"]["uid"],
            }
        path = self.path("serviceaccounts", namespace, service_account) + "/token"
        answer = self.call(
            "POST",
            path,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        token = answer["status"]["token"]
        assert isinstance(token, str)
        return token

    # -- between tests -------------------------------------------------------------------

    def mark_baseline(self) -> None:
        """Remember the cluster-scoped objects that exist now (the built-in roles and
        bindings): :meth:`reset` keeps them and removes any made later."""
        self._cluster_baseline = {
            (plural, obj["metadata"]["name"])
            for plural, group in CLUSTER_KINDS
            for obj in self.list(plural, group=group)
        }

    def reset(self) -> None:
        """Back to the baseline for the next test: every object of the kinds the suite
        makes is deleted, and each namespace made since is finalized away as the
        namespace controller would (delete its contents, then clear its finalizer)."""
        for ns in self.list("namespaces"):
            name = ns["metadata"]["name"]
            if name in SYSTEM_NAMESPACES:
                continue
            for plural, group in NAMESPACED_KINDS:
                if name == "default" and plural == "services":
                    continue
                self.plane.request("DELETE", self.path(plural, name, "", group))
            if name != "default":
                self._remove_namespace(name)
        for plural, group in CLUSTER_KINDS:
            for obj in self.list(plural, group=group):
                if (plural, obj["metadata"]["name"]) not in self._cluster_baseline:
                    self.plane.request(
                        "DELETE", self.path(plural, "", obj["metadata"]["name"], group)
                    )

    def _remove_namespace(self, name: str) -> None:
        path = self.path("namespaces", "", name)
        self.plane.request("DELETE", path)
        code, found = self.plane.request("GET", path)
        if code == 200:
            found["spec"]["finalizers"] = []
            self.plane.request("PUT", path + "/finalize", found)
