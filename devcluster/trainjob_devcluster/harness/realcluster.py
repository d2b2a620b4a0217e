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
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..common.resources import ResourceType, default_resources
from ..common.status import ApiError
from ..http.routing import Registry
from ..storage import objects
from ..storage.store import Obj
from . import workloads
from .controlplane import ControlPlane
from .pki import CertificateAuthority

# Kinds reset keeps: namespaces go their own way, CRDs stay installed for the session, and
# the API server keeps its own APIServices.
KEPT_CLUSTER_KINDS = frozenset({"namespaces", "customresourcedefinitions", "apiservices"})
# default's objects the API server itself maintains (the kubernetes Service).
KEPT_IN_DEFAULT = frozenset({"services", "endpoints", "endpointslices"})
# Namespaces the API server itself keeps objects in (kube-system's authentication
# ConfigMap): never emptied.
SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})


@dataclass(frozen=True)
class Kind:
    """A resource the API server serves, as discovery lists it."""

    root: str  # /api/v1 or /apis/GROUP/VERSION
    plural: str
    namespaced: bool
    collection_delete: bool

    def path(self, namespace: str = "", name: str = "") -> str:
        scope = f"/namespaces/{quote(namespace)}" if namespace else ""
        tail = f"/{quote(name)}" if name else ""
        return f"{self.root}{scope}/{self.plural}{tail}"


def _api_error(code: int, answer: Any) -> ApiError:
    if isinstance(answer, dict) and answer.get("kind") == "Status":
        return ApiError(code, answer.get("reason", ""), answer.get("message", ""))
    return ApiError(code, "", str(answer))


class RealCluster(workloads.TrainJobWorkloads):
    """A :class:`.ControlPlane` with the development cluster's test handle."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.registry = Registry(default_resources())
        self._cluster_baseline: set[str] = set()

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
        spec = self.token_request_spec(namespace, audiences, pod, expiration_seconds)
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

    def kinds(self) -> builtins.list[Kind]:
        """Every resource that can be listed and deleted, at its group's preferred version
        (custom resources included), from discovery."""
        roots = ["/api/v1"]
        for group in self.call("GET", "/apis")["groups"]:
            roots.append(f"/apis/{group['preferredVersion']['groupVersion']}")
        found = []
        for root in roots:
            for entry in self.call("GET", root)["resources"]:
                verbs = set(entry.get("verbs") or ())
                if "/" in entry["name"] or not {"list", "delete"} <= verbs:
                    continue
                found.append(
                    Kind(root, entry["name"], entry["namespaced"], "deletecollection" in verbs)
                )
        return found

    def _cluster_objects(self, kinds: Iterable[Kind]) -> set[str]:
        return {
            kind.path(name=obj["metadata"]["name"])
            for kind in kinds
            if not kind.namespaced and kind.plural not in KEPT_CLUSTER_KINDS
            for obj in self.call("GET", kind.path())["items"]
        }

    def mark_baseline(self) -> None:
        """Remember the cluster-scoped objects that exist now (the built-in roles,
        bindings, priority classes ...): :meth:`reset` keeps them and removes any made
        later."""
        self._cluster_baseline = self._cluster_objects(self.kinds())

    def reset(self) -> None:
        """Back to the baseline for the next test, as far as objects go: every
        namespaced object outside the system namespaces is deleted, each namespace made
        since is finalized away as the namespace controller would (its contents deleted,
        then its finalizer cleared), and every cluster-scoped object made since is
        deleted. CRDs stay (their objects do not). Deletions run side by side: the admin
        is exempt from the API server's fairness limits."""
        kinds = self.kinds()
        deletions: builtins.list[str] = []
        namespaces = [ns["metadata"]["name"] for ns in self.list("namespaces")]
        for namespace in namespaces:
            if namespace in SYSTEM_NAMESPACES:
                continue
            for kind in kinds:
                if not kind.namespaced or (
                    namespace == "default" and kind.plural in KEPT_IN_DEFAULT
                ):
                    continue
                if kind.collection_delete:
                    deletions.append(kind.path(namespace))
                else:
                    items = self.call("GET", kind.path(namespace))["items"]
                    deletions.extend(kind.path(namespace, i["metadata"]["name"]) for i in items)
        deletions.extend(self._cluster_objects(kinds) - self._cluster_baseline)
        # Background: the default for Jobs (and a few other kinds) is to orphan their
        # dependents, which leaves an `orphan` finalizer only the garbage collector
        # removes; none runs here, so the object would stay, terminating, for good.
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda path: self.plane.request("DELETE", _background(path)), deletions))
        for namespace in namespaces:
            if namespace not in SYSTEM_NAMESPACES and namespace != "default":
                self._remove_namespace(namespace)

    def _remove_namespace(self, name: str) -> None:
        path = self.path("namespaces", "", name)
        self.plane.request("DELETE", path)
        code, found = self.plane.request("GET", path)
        if code == 200:
            found["spec"]["finalizers"] = []
            self.plane.request("PUT", path + "/finalize", found)


def _background(path: str) -> str:
    """``path`` with the deletion propagating in the background."""
    return f"{path}{'&' if '?' in path else '?'}propagationPolicy=Background"
