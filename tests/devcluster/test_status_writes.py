"""Whole status writes through ResourceApi: an apply to /status over fields another
manager owns, and an apply repeated with the same fields."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trainjob_devcluster.common.faults import RequestInfo
from trainjob_devcluster.common.resources import (
    default_resources,
    load_trainjob_crd,
    resource_from_crd,
)
from trainjob_devcluster.common.status import ApiError
from trainjob_devcluster.http.rest import Call, ResourceApi
from trainjob_devcluster.storage.store import Store

TRAINJOB = resource_from_crd(load_trainjob_crd())
TJ = TRAINJOB
NAMESPACES = next(r for r in default_resources() if r.plural == "namespaces")


def request(
    api: ResourceApi, verb: str, sub: str, query: dict[str, str], body: Any, ctype: str
) -> tuple[int, Any]:
    method, name = ("POST", "") if verb == "create" else ("PATCH", "j")
    info = RequestInfo(method, "/x", verb, "trainjobs", sub, "ns", name)
    call = Call(info, TJ, query, json.dumps(body).encode(), ctype)
    try:
        answer = api.create(call) if verb == "create" else api.patch(call)
    except ApiError as exc:
        return exc.code, exc.to_json()
    return answer.code, answer.body


def status_config(progress: int) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "j"},
        "status": {
            "trainerStatus": {
                "progressPercentage": progress,
                "lastUpdatedTime": "2026-01-01T00:00:00Z",
            }
        },
    }


@pytest.fixture
def api() -> ResourceApi:
    api = ResourceApi(Store(), lambda: 1_800_000_000.0)
    info = RequestInfo("POST", "", "create", "namespaces", "", "", "")
    api.create(Call(info, NAMESPACES, {}, json.dumps({"metadata": {"name": "ns"}}).encode()))
    body = {"metadata": {"name": "j"}, "spec": {"runtimeRef": {"name": "rt"}}}
    code, _ = request(api, "create", "", {"fieldManager": "creator"}, body, "application/json")
    assert code == 201
    return api


APPLY_TYPE = "application/apply-patch+yaml"


def test_an_apply_over_another_managers_status_field_conflicts_without_force(
    api: ResourceApi,
) -> None:
    merge = {
        "status": {
            "trainerStatus": {"progressPercentage": 1, "lastUpdatedTime": "2026-01-01T00:00:00Z"}
        }
    }
    code, _ = request(
        api,
        "patch",
        "status",
        {"fieldManager": "controller"},
        merge,
        "application/merge-patch+json",
    )
    assert code == 200
    code, body = request(
        api, "patch", "status", {"fieldManager": "bench"}, status_config(2), APPLY_TYPE
    )
    assert code == 409
    # The equal lastUpdatedTime is shared, not a conflict.
    assert body["message"] == (
        'Apply failed with 1 conflict: conflict with "controller" with subresource "status" '
        "using trainer.kubeflow.org/v1alpha1: .status.trainerStatus.progressPercentage"
    )
    forced = {"fieldManager": "bench", "force": "true"}
    code, body = request(api, "patch", "status", forced, status_config(3), APPLY_TYPE)
    assert code == 200
    entries = {e["manager"]: e["fieldsV1"] for e in body["metadata"]["managedFields"]}
    assert entries["bench"] == {
        "f:status": {"f:trainerStatus": {"f:lastUpdatedTime": {}, "f:progressPercentage": {}}}
    }
    # The controller lost the forced field and keeps the shared one.
    assert entries["controller"] == {
        "f:status": {".": {}, "f:trainerStatus": {".": {}, "f:lastUpdatedTime": {}}}
    }
    assert body["status"]["trainerStatus"]["progressPercentage"] == 3


def test_repeated_applies_of_the_same_fields_keep_one_entry_and_move_only_the_status(
    api: ResourceApi,
) -> None:
    forced = {"fieldManager": "bench", "force": "true"}
    bodies = []
    for progress in (1, 2, 2):
        code, body = request(api, "patch", "status", forced, status_config(progress), APPLY_TYPE)
        assert code == 200
        bodies.append(body)
    managers = [[e["manager"] for e in b["metadata"]["managedFields"]] for b in bodies]
    assert managers == [["bench", "creator"]] * 3
    versions = [b["metadata"]["resourceVersion"] for b in bodies]
    assert versions[0] != versions[1] == versions[2]  # the last apply changed nothing
    assert bodies[2]["spec"] == {
        "runtimeRef": {
            "name": "rt",
            "apiGroup": "trainer.kubeflow.org",
            "kind": "ClusterTrainingRuntime",
        },
        "managedBy": "trainer.kubeflow.org/trainjob-controller",
        "suspend": False,
    }
