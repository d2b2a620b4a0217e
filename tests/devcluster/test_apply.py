"""Apply through ResourceApi: what our server's status writes and CA ConfigMaps rely on
(one entry per manager, fields left out removed, the resourceVersion precondition, 404
on a missing object's /status), with the answers kube-apiserver gives."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trainjob_devcluster.common.faults import RequestInfo
from trainjob_devcluster.common.resources import (
    ResourceType,
    default_resources,
    load_trainjob_crd,
    resource_from_crd,
)
from trainjob_devcluster.common.status import ApiError
from trainjob_devcluster.http.rest import Call, ResourceApi
from trainjob_devcluster.storage.store import Store

TJ = resource_from_crd(load_trainjob_crd())
BUILTIN = {r.plural: r for r in default_resources()}
APPLY_TYPE = "application/apply-patch+yaml"
LUT = "2026-01-01T00:00:00Z"


def request(
    api: ResourceApi,
    verb: str,
    body: Any,
    *,
    resource: ResourceType = TJ,
    sub: str = "",
    name: str = "j",
    query: dict[str, str] | None = None,
    ctype: str = APPLY_TYPE,
) -> tuple[int, Any]:
    method = {"create": "POST", "patch": "PATCH", "get": "GET"}[verb]
    info = RequestInfo(method, "/x", verb, resource.plural, sub, "ns", name)
    call = Call(info, resource, query or {"fieldManager": "m"}, json.dumps(body).encode(), ctype)
    try:
        answer = getattr(api, verb)(call)
    except ApiError as exc:
        return exc.code, exc.to_json()
    return answer.code, answer.body


def status(**trainer_status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "j"},
        "status": {"trainerStatus": {"lastUpdatedTime": LUT, **trainer_status}},
    }


def apply_status(api: ResourceApi, manager: str, config: dict[str, Any]) -> dict[str, Any]:
    query = {"fieldManager": manager, "force": "true"}
    code, body = request(api, "patch", config, sub="status", query=query)
    assert code == 200, body
    assert isinstance(body, dict)
    return body


@pytest.fixture
def api() -> ResourceApi:
    api = ResourceApi(Store(), lambda: 1_800_000_000.0)
    ns = {"metadata": {"name": "ns"}}
    assert request(api, "create", ns, resource=BUILTIN["namespaces"], ctype="")[0] == 201
    body = {"metadata": {"name": "j"}, "spec": {"runtimeRef": {"name": "rt"}}}
    assert request(api, "create", body, ctype="application/json")[0] == 201
    return api


def entries(body: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (e["manager"], e["operation"], e.get("subresource", ""))
        for e in body["metadata"]["managedFields"]
    ]


def test_repeated_applies_keep_one_entry_and_an_unchanged_apply_writes_nothing(
    api: ResourceApi,
) -> None:
    bodies = [apply_status(api, "bench", status(progressPercentage=p)) for p in (1, 2, 2)]
    assert [entries(b) for b in bodies] == [[("bench", "Apply", "status")]] * 3
    assert bodies[0]["metadata"]["managedFields"][0]["fieldsV1"] == {
        "f:status": {"f:trainerStatus": {"f:lastUpdatedTime": {}, "f:progressPercentage": {}}}
    }
    versions = [b["metadata"]["resourceVersion"] for b in bodies]
    assert versions[0] != versions[1] == versions[2]
    assert bodies[2]["spec"]["runtimeRef"]["name"] == "rt"


def test_a_field_left_out_goes_unless_another_manager_owns_it(api: ResourceApi) -> None:
    apply_status(api, "other", status(metrics=[{"name": "loss", "value": "1"}]))
    apply_status(api, "bench", status(progressPercentage=5, estimatedRemainingSeconds=9))
    body = apply_status(api, "bench", status(progressPercentage=6))
    # lastUpdatedTime is still the other manager's too; the rest of bench's old set goes.
    assert body["status"]["trainerStatus"] == {
        "lastUpdatedTime": LUT,
        "metrics": [{"name": "loss", "value": "1"}],
        "progressPercentage": 6,
    }
    body = apply_status(api, "other", {**status(), "status": {}})
    assert body["status"]["trainerStatus"] == {"progressPercentage": 6, "lastUpdatedTime": LUT}


def test_a_changed_field_of_another_manager_moves_to_the_applier(api: ResourceApi) -> None:
    apply_status(api, "old", status(progressPercentage=1))
    body = apply_status(api, "new", status(progressPercentage=2))
    assert entries(body) == [("old", "Apply", "status"), ("new", "Apply", "status")]
    # The equal lastUpdatedTime is shared; the changed progress is the new manager's alone.
    assert body["metadata"]["managedFields"][0]["fieldsV1"] == {
        "f:status": {"f:trainerStatus": {"f:lastUpdatedTime": {}}}
    }


def test_a_stale_resource_version_is_409_and_writes_nothing(api: ResourceApi) -> None:
    first = apply_status(api, "m", status(progressPercentage=1))
    config = status(progressPercentage=2)
    config["metadata"]["resourceVersion"] = str(int(first["metadata"]["resourceVersion"]) - 1)
    code, body = request(api, "patch", config, sub="status")
    assert (code, body["reason"], body["message"]) == (
        409,
        "Conflict",
        'Operation cannot be fulfilled on trainjobs.trainer.kubeflow.org "j": the object has '
        "been modified; please apply your changes to the latest version and try again",
    )
    assert request(api, "get", None)[1] == first


def test_an_apply_to_the_status_of_a_missing_object_is_404(api: ResourceApi) -> None:
    config = status(progressPercentage=1)
    config["metadata"]["name"] = "nope"
    code, body = request(api, "patch", config, sub="status", name="nope")
    assert (code, body["message"]) == (404, 'trainjobs.trainer.kubeflow.org "nope" not found')
    assert request(api, "get", None, name="nope")[0] == 404


def test_an_apply_to_the_main_resource_leaves_the_status(api: ResourceApi) -> None:
    apply_status(api, "m", status(progressPercentage=1))
    config = {**status(progressPercentage=9), "spec": {"suspend": True}}
    code, body = request(api, "patch", config)
    assert code == 200
    assert (body["spec"]["runtimeRef"]["name"], body["spec"]["suspend"]) == ("rt", True)
    assert body["status"]["trainerStatus"]["progressPercentage"] == 1
    assert body["metadata"]["generation"] == 2


def test_an_apply_creates_a_missing_configmap_and_then_merges(api: ResourceApi) -> None:
    cm = BUILTIN["configmaps"]
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ca"}}
    code, body = request(api, "patch", {**config, "data": {"ca.crt": "A"}}, resource=cm, name="ca")
    assert code == 201
    assert entries(body) == [("m", "Apply", "")]
    assert body["metadata"]["managedFields"][0]["fieldsV1"] == {"f:data": {"f:ca.crt": {}}}
    # Another writer's key stays through the next apply of the same manager.
    merge = json.dumps({"data": {"note": "kept"}}).encode()
    info = RequestInfo("PATCH", "/x", "patch", "configmaps", "", "ns", "ca")
    api.patch(Call(info, cm, {}, merge, "application/merge-patch+json"))
    code, body = request(api, "patch", {**config, "data": {"ca.crt": "B"}}, resource=cm, name="ca")
    assert (code, body["data"]) == (200, {"ca.crt": "B", "note": "kept"})
