"""The resource types the development cluster serves, and the TrainJob CRD it loads."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
SUBRESOURCE_VERBS = ("get", "patch", "update")


@dataclass(frozen=True)
class ResourceType:
    """One REST resource: where it lives, what it is called, and how it is checked.

    ``schema`` is the structural openAPIV3Schema of a custom resource (validation,
    defaulting, pruning, typed apply); built-in types have none and are stored as sent.
    """

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    verbs: tuple[str, ...] = ALL_VERBS
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    schema: dict[str, Any] | None = None
    # False for a custom resource (from a CRD), which differs from a built-in kind in
    # discovery, generation tracking and updates without a resourceVersion.
    builtin: bool = True
    storage_version_hash: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def qualified(self) -> str:
        """``trainjobs.trainer.kubeflow.org`` or ``pods``: the name in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def kind_qualified(self) -> str:
        """``TrainJob.trainer.kubeflow.org`` or ``Pod``: the name in Invalid messages."""
        return f"{self.kind}.{self.group}" if self.group else self.kind


def _core(kind: str, plural: str, *, namespaced: bool = True, **kw: Any) -> ResourceType:
    return ResourceType(
        group="",
        version="v1",
        kind=kind,
        plural=plural,
        singular=kind.lower(),
        namespaced=namespaced,
        **kw,
    )


def load_crd(filename: str) -> dict[str, Any]:
    """A CustomResourceDefinition document shipped in ``devcluster/crds``."""
    text = (
        resources.files("trainjob_devcluster")
        .joinpath("crds", filename)
        .read_text(encoding="utf-8")
    )
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict)
    return doc


def load_trainjob_crd() -> dict[str, Any]:
    """The TrainJob CustomResourceDefinition, the one this cluster validates fully."""
    return load_crd("trainjobs.yaml")


def resource_from_crd(crd: dict[str, Any]) -> ResourceType:
    """A ResourceType for the storage version of a CustomResourceDefinition."""
    spec = crd["spec"]
    names = spec["names"]
    version = next(v for v in spec["versions"] if v.get("storage"))
    return ResourceType(
        group=spec["group"],
        version=version["name"],
        kind=names["kind"],
        plural=names["plural"],
        singular=names.get("singular", names["kind"].lower()),
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        short_names=tuple(names.get("shortNames", ())),
        categories=tuple(names.get("categories", ())),
        subresources=tuple(sorted(version.get("subresources", {}))),
        schema=version["schema"]["openAPIV3Schema"],
        builtin=False,
        storage_version_hash="Xy2B1kOsbqY=",
    )


def default_resources() -> list[ResourceType]:
    """Everything the development cluster serves, in discovery order."""
    return [
        _core("Namespace", "namespaces", namespaced=False, short_names=("ns",)),
        _core("Pod", "pods", short_names=("po",), categories=("all",), subresources=("status",)),
        _core("ServiceAccount", "serviceaccounts", short_names=("sa",), subresources=("token",)),
        _core("ConfigMap", "configmaps", short_names=("cm",)),
        _core("Secret", "secrets"),
        _core("Event", "events", short_names=("ev",)),
        _core("Service", "services", short_names=("svc",), categories=("all",)),
        # What a JobSet makes of each replicated job, and what makes the pods: the owner
        # chain a post is bound through (no controller here: a test creates them, with
        # their ownerReferences, as the JobSet and Job controllers would).
        ResourceType(
            group="batch",
            version="v1",
            kind="Job",
            plural="jobs",
            singular="job",
            namespaced=True,
            categories=("all",),
            subresources=("status",),
        ),
        # A Service's endpoints (no controller here: a test lists them itself).
        ResourceType(
            group="discovery.k8s.io",
            version="v1",
            kind="EndpointSlice",
            plural="endpointslices",
            singular="endpointslice",
            namespaced=True,
        ),
        ResourceType(
            group="authentication.k8s.io",
            version="v1",
            kind="TokenReview",
            plural="tokenreviews",
            singular="tokenreview",
            namespaced=False,
            verbs=("create",),
        ),
        ResourceType(
            group="authorization.k8s.io",
            version="v1",
            kind="SubjectAccessReview",
            plural="subjectaccessreviews",
            singular="subjectaccessreview",
            namespaced=False,
            verbs=("create",),
        ),
        _rbac("Role", "roles", namespaced=True),
        _rbac("RoleBinding", "rolebindings", namespaced=True),
        _rbac("ClusterRole", "clusterroles", namespaced=False),
        _rbac("ClusterRoleBinding", "clusterrolebindings", namespaced=False),
        ResourceType(
            group="admissionregistration.k8s.io",
            version="v1",
            kind="MutatingWebhookConfiguration",
            plural="mutatingwebhookconfigurations",
            singular="mutatingwebhookconfiguration",
            namespaced=False,
        ),
        resource_from_crd(load_trainjob_crd()),
        resource_from_crd(load_crd("jobsets.yaml")),
    ]


def _rbac(kind: str, plural: str, *, namespaced: bool) -> ResourceType:
    return ResourceType(
        group="rbac.authorization.k8s.io",
        version="v1",
        kind=kind,
        plural=plural,
        singular=kind.lower(),
        namespaced=namespaced,
    )
