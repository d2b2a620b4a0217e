"""Legacy discovery documents, pinned against recorded kube-apiserver answers (copied as
literals). Aggregated discovery is not served: kubectl falls back to these."""

from typing import Any

from trainjob_devcluster.common.resources import (
    ResourceType,
    default_resources,
    load_trainjob_crd,
    resource_from_crd,
)
from trainjob_devcluster.http import discovery
from trainjob_devcluster.http.discovery import JSON, Answer, discover

# The Accept header kubectl v1.32 sends for /api and /apis: aggregated first, plain JSON
# last, which is what it gets here.
KUBECTL_ACCEPT = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
    "application/json"
)
CRUD = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def _core(kind: str, plural: str, **kw: Any) -> ResourceType:
    kw.setdefault("namespaced", True)
    return ResourceType(
        group="", version="v1", kind=kind, plural=plural, singular=kind.lower(), **kw
    )


def served() -> list[ResourceType]:
    """A fixed list (the shared default list grows as the cluster does)."""
    return [
        _core("Namespace", "namespaces", namespaced=False, short_names=("ns",)),
        _core("Pod", "pods", short_names=("po",), categories=("all",), subresources=("status",)),
        _core("ServiceAccount", "serviceaccounts", short_names=("sa",), subresources=("token",)),
        _core("ConfigMap", "configmaps", short_names=("cm",)),
        ResourceType(
            group="authentication.k8s.io",
            version="v1",
            kind="TokenReview",
            plural="tokenreviews",
            singular="tokenreview",
            namespaced=False,
            verbs=("create",),
        ),
        resource_from_crd(load_trainjob_crd()),
    ]


def test_version_is_the_dev_cluster_claiming_1_32() -> None:
    assert discovery.version_info() == {
        "major": "1",
        "minor": "32",
        "emulationMajor": "1",
        "emulationMinor": "32",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "31",
        "gitVersion": "v1.32.4+devcluster",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-05-15T00:00:00Z",
        "goVersion": "go1.23.8",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def test_storage_version_hash_is_derived_from_the_gvk() -> None:
    # h_apis_group_version: storageVersionHash of trainjobs.
    assert discovery.storage_version_hash("trainer.kubeflow.org", "v1alpha1", "TrainJob") == (
        "9Kb7D6SpiCQ="
    )
    assert discovery.storage_version_hash("", "v1", "Pod") == "xPOwRZ+Yhw8="


def test_trainer_resource_list_matches_recording() -> None:
    # h_apis_group_version, verbatim; from the list the cluster really serves.
    assert discovery.api_resource_list(default_resources(), "trainer.kubeflow.org", "v1alpha1") == {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "trainer.kubeflow.org/v1alpha1",
        "resources": [
            {
                "name": "trainjobs",
                "singularName": "trainjob",
                "namespaced": True,
                "kind": "TrainJob",
                "verbs": [
                    "delete",
                    "deletecollection",
                    "get",
                    "list",
                    "patch",
                    "create",
                    "update",
                    "watch",
                ],
                "storageVersionHash": "9Kb7D6SpiCQ=",
            },
            {
                "name": "trainjobs/status",
                "singularName": "",
                "namespaced": True,
                "kind": "TrainJob",
                "verbs": ["get", "patch", "update"],
            },
        ],
    }


def test_core_resource_list_entries() -> None:
    body = discovery.api_resource_list(served(), "", "v1")
    assert body is not None
    assert body["groupVersion"] == "v1"
    by_name = {r["name"]: r for r in body["resources"]}
    assert [r["name"] for r in body["resources"]] == [
        "configmaps",
        "namespaces",
        "pods",
        "pods/status",
        "serviceaccounts",
        "serviceaccounts/token",
    ]
    assert by_name["pods"] == {
        "name": "pods",
        "singularName": "pod",
        "namespaced": True,
        "kind": "Pod",
        "verbs": CRUD,
        "shortNames": ["po"],
        "categories": ["all"],
        "storageVersionHash": "xPOwRZ+Yhw8=",
    }
    # The token subresource answers another group's kind, so it names it.
    assert by_name["serviceaccounts/token"] == {
        "name": "serviceaccounts/token",
        "singularName": "",
        "namespaced": True,
        "group": "authentication.k8s.io",
        "version": "v1",
        "kind": "TokenRequest",
        "verbs": ["create"],
    }


def test_create_only_resources_have_no_storage_version_hash() -> None:
    body = discovery.api_resource_list(served(), "authentication.k8s.io", "v1")
    assert body == {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "authentication.k8s.io/v1",
        "resources": [
            {
                "name": "tokenreviews",
                "singularName": "tokenreview",
                "namespaced": False,
                "kind": "TokenReview",
                "verbs": ["create"],
            }
        ],
    }


def _body(path: str, accept: str | None = JSON) -> Any:
    answer = discover(served(), path, accept, "127.0.0.1:38965")
    assert answer is not None
    assert (answer.status, answer.content_type) == (200, JSON)
    return answer.body


def test_api_group_matches_recording() -> None:
    # h_apis_group, verbatim.
    assert _body("/apis/trainer.kubeflow.org") == {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": "trainer.kubeflow.org",
        "versions": [{"groupVersion": "trainer.kubeflow.org/v1alpha1", "version": "v1alpha1"}],
        "preferredVersion": {
            "groupVersion": "trainer.kubeflow.org/v1alpha1",
            "version": "v1alpha1",
        },
    }


def test_api_group_list_lists_served_groups_only() -> None:
    assert _body("/apis/", None) == {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": "authentication.k8s.io",
                "versions": [{"groupVersion": "authentication.k8s.io/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "authentication.k8s.io/v1", "version": "v1"},
            },
            {
                "name": "trainer.kubeflow.org",
                "versions": [
                    {"groupVersion": "trainer.kubeflow.org/v1alpha1", "version": "v1alpha1"}
                ],
                "preferredVersion": {
                    "groupVersion": "trainer.kubeflow.org/v1alpha1",
                    "version": "v1alpha1",
                },
            },
        ],
    }


def test_api_versions_has_no_api_version_field() -> None:
    # h_api: kind, versions, serverAddressByClientCIDRs, and nothing else.
    assert _body("/api") == {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:38965"}
        ],
    }


def test_kubectl_asking_for_aggregated_discovery_gets_the_legacy_documents() -> None:
    assert _body("/apis", KUBECTL_ACCEPT)["kind"] == "APIGroupList"
    assert _body("/api", KUBECTL_ACCEPT)["kind"] == "APIVersions"
    assert _body("/api/v1", "application/vnd.kubernetes.protobuf, */*")["groupVersion"] == "v1"
    assert _body("/version", "application/vnd.kubernetes.protobuf") == discovery.version_info()


def test_discover_unknown_paths_are_none() -> None:
    resources = served()
    # h_apis_missing_group: the caller answers plain-text "404 page not found".
    assert discover(resources, "/apis/no.such.group/v1", JSON, "h:1") is None
    assert discover(resources, "/apis/no.such.group", JSON, "h:1") is None
    assert discover(resources, "/apis/trainer.kubeflow.org/v1", JSON, "h:1") is None
    assert discover(resources, "/api/v2", JSON, "h:1") is None
    assert discover(resources, "/apis/trainer.kubeflow.org/v1alpha1/trainjobs", JSON, "h:1") is None
    assert discover(resources, "/healthz", JSON, "h:1") is None
    assert discover(resources, "/openapi/v3", JSON, "h:1") is None


def test_discover_not_acceptable() -> None:
    refused = Answer(
        406,
        JSON,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "only the following media types are accepted: application/json",
            "reason": "NotAcceptable",
            "code": 406,
        },
    )
    aggregated_only = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    for accept in ("application/yaml", "application/vnd.kubernetes.protobuf", aggregated_only):
        assert discover(served(), "/api/v1", accept, "h:1") == refused
        assert discover(served(), "/apis", accept, "h:1") == refused
    assert discover(served(), "/apis", f"{aggregated_only},application/json;q=0", "h:1") == refused
