"""Discovery documents, pinned against recorded kube-apiserver answers (copied as literals)."""

from typing import Any

from trainjob_devcluster.common.resources import (
    ResourceType,
    default_resources,
    load_trainjob_crd,
    resource_from_crd,
)
from trainjob_devcluster.http import discovery
from trainjob_devcluster.http.discovery import (
    AGGREGATED_V2,
    AGGREGATED_V2BETA1,
    JSON,
    Answer,
    discover,
    negotiate,
)

# The Accept header kubectl v1.32 sends for /api and /apis (h_apis_aggregated).
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


def _custom(version: str) -> ResourceType:
    return ResourceType(
        group="example.com",
        version=version,
        kind="Widget",
        plural="widgets",
        singular="widget",
        namespaced=True,
        builtin=False,
    )


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


def test_api_group_matches_recording() -> None:
    # h_apis_group, verbatim.
    assert discovery.api_group(served(), "trainer.kubeflow.org") == {
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
    assert discovery.api_group_list(served()) == {
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
    assert discovery.api_versions(served(), "127.0.0.1:38965") == {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:38965"}
        ],
    }


def test_versions_are_ordered_ga_beta_alpha() -> None:
    resources = [_custom("v1alpha1"), _custom("v2beta1"), _custom("v1"), _custom("v1beta2")]
    group = discovery.api_group(resources, "example.com")
    assert group is not None
    assert [v["version"] for v in group["versions"]] == ["v1", "v2beta1", "v1beta2", "v1alpha1"]
    assert group["preferredVersion"] == {"groupVersion": "example.com/v1", "version": "v1"}


RECORDED_TRAINER_GROUP: dict[str, Any] = {
    "metadata": {"name": "trainer.kubeflow.org"},
    "versions": [
        {
            "version": "v1alpha1",
            "resources": [
                {
                    "resource": "trainjobs",
                    "responseKind": {
                        "group": "trainer.kubeflow.org",
                        "version": "v1alpha1",
                        "kind": "TrainJob",
                    },
                    "scope": "Namespaced",
                    "singularResource": "trainjob",
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
                    "subresources": [
                        {
                            "subresource": "status",
                            "responseKind": {
                                "group": "trainer.kubeflow.org",
                                "version": "v1alpha1",
                                "kind": "TrainJob",
                            },
                            "verbs": ["get", "patch", "update"],
                        }
                    ],
                }
            ],
            "freshness": "Current",
        }
    ],
}


def test_aggregated_apis_matches_recording_for_our_groups() -> None:
    body = discovery.aggregated_discovery(served(), core=False)
    assert body["kind"] == "APIGroupDiscoveryList"
    assert body["apiVersion"] == "apidiscovery.k8s.io/v2"
    assert body["metadata"] == {}
    assert [item["metadata"] for item in body["items"]] == [
        {"name": "authentication.k8s.io"},
        {"name": "trainer.kubeflow.org"},
    ]
    # h_apis_aggregated: the trainer group verbatim, and tokenreviews' entry.
    assert body["items"][1] == RECORDED_TRAINER_GROUP
    assert body["items"][0]["versions"] == [
        {
            "version": "v1",
            "resources": [
                {
                    "resource": "tokenreviews",
                    "responseKind": {"group": "", "version": "", "kind": "TokenReview"},
                    "scope": "Cluster",
                    "singularResource": "tokenreview",
                    "verbs": ["create"],
                }
            ],
            "freshness": "Current",
        }
    ]


def test_aggregated_api_core_entries_match_recording() -> None:
    body = discovery.aggregated_discovery(served(), core=True, api_version="v2beta1")
    assert body["apiVersion"] == "apidiscovery.k8s.io/v2beta1"
    [core] = body["items"]
    assert core["metadata"] == {}  # h_api_aggregated: the core group has no name
    [v1] = core["versions"]
    assert v1["version"] == "v1"
    assert v1["freshness"] == "Current"
    by_name = {r["resource"]: r for r in v1["resources"]}
    # h_api_aggregated, verbatim.
    assert by_name["configmaps"] == {
        "resource": "configmaps",
        "responseKind": {"group": "", "version": "", "kind": "ConfigMap"},
        "scope": "Namespaced",
        "singularResource": "configmap",
        "verbs": CRUD,
        "shortNames": ["cm"],
    }
    assert by_name["serviceaccounts"] == {
        "resource": "serviceaccounts",
        "responseKind": {"group": "", "version": "", "kind": "ServiceAccount"},
        "scope": "Namespaced",
        "singularResource": "serviceaccount",
        "verbs": CRUD,
        "shortNames": ["sa"],
        "subresources": [
            {
                "subresource": "token",
                "responseKind": {
                    "group": "authentication.k8s.io",
                    "version": "v1",
                    "kind": "TokenRequest",
                },
                "verbs": ["create"],
            }
        ],
    }
    assert by_name["pods"]["subresources"] == [
        {
            "subresource": "status",
            "responseKind": {"group": "", "version": "", "kind": "Pod"},
            "verbs": ["get", "patch", "update"],
        }
    ]


def test_negotiate_discovery_representation() -> None:
    assert negotiate(KUBECTL_ACCEPT, aggregated=True) == AGGREGATED_V2
    assert negotiate(KUBECTL_ACCEPT, aggregated=False) == JSON
    v2beta1_only = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    assert negotiate(v2beta1_only, aggregated=True) == AGGREGATED_V2BETA1
    assert negotiate(v2beta1_only, aggregated=False) is None
    # Parameter order and spaces do not matter.
    spaced = "application/json; as=APIGroupDiscoveryList; v=v2; g=apidiscovery.k8s.io"
    assert negotiate(spaced, aggregated=True) == AGGREGATED_V2
    assert negotiate(None, aggregated=True) == JSON
    assert negotiate("", aggregated=True) == JSON
    assert negotiate("*/*", aggregated=True) == JSON
    assert negotiate("application/json, */*", aggregated=False) == JSON
    assert negotiate("application/vnd.kubernetes.protobuf", aggregated=False) is None
    assert negotiate("application/vnd.kubernetes.protobuf, */*", aggregated=False) == JSON
    # A higher q wins over listing order; q=0 excludes.
    assert negotiate(f"application/json;q=0.5,{AGGREGATED_V2}", aggregated=True) == AGGREGATED_V2
    assert negotiate(f"{AGGREGATED_V2};q=0,application/json", aggregated=True) == JSON


def test_discover_routes() -> None:
    resources = served()
    aggregated = discover(resources, "/apis", KUBECTL_ACCEPT, "h:1")
    assert aggregated is not None
    assert (aggregated.status, aggregated.content_type) == (200, AGGREGATED_V2)
    assert aggregated.body["items"][1] == RECORDED_TRAINER_GROUP
    core = discover(resources, "/api", KUBECTL_ACCEPT, "h:1")
    assert core is not None
    assert core.content_type == AGGREGATED_V2
    assert core.body["items"][0]["metadata"] == {}
    assert discover(resources, "/api", "application/json", "h:1") == Answer(
        200, JSON, discovery.api_versions(resources, "h:1")
    )
    assert discover(resources, "/apis/", None, "h:1") == Answer(
        200, JSON, discovery.api_group_list(resources)
    )
    assert discover(resources, "/version", "application/vnd.kubernetes.protobuf", "h:1") == (
        Answer(200, JSON, discovery.version_info())
    )
    group_version = discover(resources, "/apis/trainer.kubeflow.org/v1alpha1", JSON, "h:1")
    assert group_version is not None
    assert group_version.body["groupVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert discover(resources, "/api/v1", JSON, "h:1") == Answer(
        200, JSON, discovery.api_resource_list(resources, "", "v1") or {}
    )


def test_discover_unknown_paths_are_none() -> None:
    resources = served()
    # h_apis_missing_group: the caller answers plain-text "404 page not found".
    assert discover(resources, "/apis/no.such.group/v1", JSON, "h:1") is None
    assert discover(resources, "/apis/no.such.group", JSON, "h:1") is None
    assert discover(resources, "/apis/trainer.kubeflow.org/v1", JSON, "h:1") is None
    assert discover(resources, "/api/v2", JSON, "h:1") is None
    assert discover(resources, "/apis/trainer.kubeflow.org/v1alpha1/trainjobs", JSON, "h:1") is None
    assert discover(resources, "/healthz", JSON, "h:1") is None


def test_discover_not_acceptable() -> None:
    answer = discover(served(), "/api/v1", "application/yaml", "h:1")
    assert answer == Answer(
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
    aggregated = discover(served(), "/apis", "application/yaml", "h:1")
    assert aggregated is not None
    assert aggregated.status == 406
    assert aggregated.body["message"] == (
        "only the following media types are accepted: application/json, "
        f"{AGGREGATED_V2}, {AGGREGATED_V2BETA1}"
    )
