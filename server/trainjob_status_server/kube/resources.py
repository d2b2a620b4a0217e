"""Which API resources the server reads and writes, and how their URLs are built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from trainjob_status import contract

Obj = dict[str, Any]
"""A Kubernetes object as decoded JSON (the server never builds typed models)."""

Key = tuple[str, str]
"""(namespace, name); namespace is "" for cluster-scoped objects."""


@dataclass(frozen=True)
class Resource:
    """One API resource: enough to build its paths and name it in logs."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``trainjobs.trainer.kubeflow.org`` or ``pods``: as the API server names it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        """The collection path (all namespaces when ``namespace`` is None) or an object's."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        # Names are validated upstream; quoting keeps a stray "/" or "?" from ever
        # turning into a different request.
        if namespace is not None:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


TRAINJOBS = Resource(contract.GROUP, contract.VERSION, contract.RESOURCE, contract.KIND)
PODS = Resource("", "v1", "pods", "Pod")
SECRETS = Resource("", "v1", "secrets", "Secret")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace")
MUTATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
)
# The aggregated API's registration: its caBundle, kept by the certificate bootstrap.
APISERVICES = Resource("apiregistration.k8s.io", "v1", "apiservices", "APIService")
# The Service's endpoints: the other replicas (peers/replicas.py).
ENDPOINTSLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
# What the Trainer turns a TrainJob into (same name); its replicated jobs carry the
# ``trainer.kubeflow.org/trainjob-ancestor-step`` label the pods themselves lack.
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
# What a JobSet makes of each replicated job, and the pods' controller.
JOBS = Resource("batch", "v1", "jobs", "Job")


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def resource_version_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
