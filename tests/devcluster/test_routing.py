from multidict import MultiDict, MultiDictProxy

from trainjob_devcluster.common.faults import RequestInfo
from trainjob_devcluster.common.resources import default_resources
from trainjob_devcluster.http.routing import Registry, route

TJ = "/apis/trainer.kubeflow.org/v1alpha1"


def query(**params: str) -> MultiDictProxy[str]:
    return MultiDictProxy(MultiDict(params))


def test_resource_paths_resolve_to_request_info() -> None:
    registry = Registry(default_resources())
    found = route(registry, "PATCH", f"{TJ}/namespaces/ns/trainjobs/job/status", query())
    assert found.resource is not None
    assert found.resource.plural == "trainjobs"
    assert found.info == RequestInfo(
        "PATCH",
        f"{TJ}/namespaces/ns/trainjobs/job/status",
        "patch",
        "trainjobs",
        "status",
        "ns",
        "job",
    )
    pods = route(registry, "GET", "/api/v1/pods", query())
    assert (pods.info.verb, pods.info.resource, pods.info.namespace) == ("list", "pods", "")
    unknown = route(registry, "GET", f"{TJ}/namespaces/ns/trainjobs/job/logs", query())
    assert unknown.resource is None
    assert unknown.info.verb == ""
    assert route(registry, "GET", "/healthz", query()).resource is None


def test_the_same_path_is_a_list_or_a_watch_by_its_query() -> None:
    registry = Registry(default_resources())
    path = "/api/v1/namespaces/ns/pods"
    assert route(registry, "GET", path, query()).info.verb == "list"
    assert route(registry, "GET", path, query(watch="true")).info.verb == "watch"
    assert route(registry, "GET", path, query(watch="1")).info.verb == "watch"
    assert route(registry, "GET", path, query(watch="false")).info.verb == "list"
    assert route(registry, "DELETE", path, query(watch="true")).info.verb == "deletecollection"


def test_paths_below_a_built_in_group_version() -> None:
    registry = Registry(default_resources())
    assert registry.under_group_version("/api/v1/nosuchthings")
    assert registry.under_group_version("/apis/authorization.k8s.io/v1/selfsubjectreviews")
    # The apiextensions server answers a custom resource group's unknown paths in plain text.
    assert not registry.under_group_version("/apis/trainer.kubeflow.org/v1alpha1/namespaces/a/x")
    assert not registry.under_group_version("/api/v1")
    assert not registry.under_group_version("/apis/trainer.kubeflow.org/v1alpha1")
    assert not registry.under_group_version("/apis/no.such.group/v1/things")
    assert not registry.under_group_version("/api/v2/things")
    assert not registry.under_group_version("/openapi/v3")
