"""TrainJobs over HTTP: create/get/list/delete, the status subresource, patch types,
optimistic concurrency, with the real API server's answers pinned."""

from typing import Any

from trainjob_devcluster import DevCluster

from .conftest import TJ, Api

NS = "rec"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


def trainjob(name: str = "tj-rec") -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }


def status_apply(pp: int, name: str = "tj-rec", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": NS},
        "status": {
            "trainerStatus": {
                "progressPercentage": pp,
                "estimatedRemainingSeconds": 300,
                "metrics": [{"name": "loss", "value": "0.31"}],
                "lastUpdatedTime": "2026-12-02T18:33:24Z",
                **extra,
            }
        },
    }


async def make(api: Api, name: str = "tj-rec") -> dict[str, Any]:
    api.cluster.ensure_namespace(NS)
    code, body, _ = await api.call(
        "POST",
        f"{TJ}/namespaces/{NS}/trainjobs",
        trainjob(name),
        headers={"User-Agent": "Python-urllib/3.11"},
    )
    assert code == 201, body
    return body  # type: ignore[no-any-return]


async def test_create_fills_identity_and_keeps_the_spec_as_sent(api: Api) -> None:
    body = await make(api)
    meta = body["metadata"]
    assert body["spec"] == trainjob()["spec"]
    assert "status" not in body
    assert meta["generation"] == 1
    assert len(meta["uid"]) == 36
    assert meta["creationTimestamp"].endswith("Z")
    assert "managedFields" not in meta


async def test_duplicate_missing_and_missing_namespace(api: Api) -> None:
    await make(api)
    code, body, _ = await api.call("POST", f"{TJ}/namespaces/{NS}/trainjobs", trainjob())
    assert code == 409
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'trainjobs.trainer.kubeflow.org "tj-rec" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "tj-rec", "group": "trainer.kubeflow.org", "kind": "trainjobs"},
        "code": 409,
    }
    for path in (
        f"{TJ}/namespaces/{NS}/trainjobs/does-not-exist",
        f"{TJ}/namespaces/no-such-ns/trainjobs/does-not-exist",
    ):
        code, body, _ = await api.call("GET", path)
        assert code == 404
        assert body["message"] == 'trainjobs.trainer.kubeflow.org "does-not-exist" not found'
        assert body["details"] == {
            "name": "does-not-exist",
            "group": "trainer.kubeflow.org",
            "kind": "trainjobs",
        }


async def test_status_subresource_changes_only_status(api: Api) -> None:
    created = await make(api)
    path = f"{TJ}/namespaces/{NS}/trainjobs/tj-rec/status?fieldManager=trainer-status&force=true"
    sent = status_apply(40)
    sent["metadata"]["labels"] = {"added-via-status": "yes"}
    sent["spec"] = {"runtimeRef": {"name": "changed-via-status"}}
    code, body, _ = await api.call("PATCH", path, sent, content_type=APPLY)
    assert code == 200, body
    assert body["status"]["trainerStatus"]["progressPercentage"] == 40
    assert body["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert "labels" not in body["metadata"]
    assert body["metadata"]["generation"] == 1
    assert int(body["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    entry = body["metadata"]["managedFields"][0]
    assert (entry["manager"], entry["operation"], entry["subresource"]) == (
        "trainer-status",
        "Apply",
        "status",
    )

    # The main resource never changes status; a spec change moves generation.
    main = {
        **trainjob(),
        "status": {
            "trainerStatus": {"progressPercentage": 99, "lastUpdatedTime": "2026-12-02T18:33:24Z"}
        },
    }
    main["metadata"]["labels"] = {"touched": "yes"}
    main["spec"]["suspend"] = True
    code, body, _ = await api.call(
        "PATCH", f"{TJ}/namespaces/{NS}/trainjobs/tj-rec", main, content_type=MERGE
    )
    assert code == 200, body
    assert body["status"]["trainerStatus"]["progressPercentage"] == 40
    assert body["metadata"]["labels"] == {"touched": "yes"}
    assert body["metadata"]["generation"] == 2


async def test_apply_removes_fields_the_manager_stopped_applying(api: Api) -> None:
    await make(api)
    path = f"{TJ}/namespaces/{NS}/trainjobs/tj-rec/status?fieldManager=trainer-status&force=true"
    await api.call("PATCH", path, status_apply(40), content_type=APPLY)
    second = status_apply(40)
    del second["status"]["trainerStatus"]["progressPercentage"]
    second["status"]["trainerStatus"]["metrics"] = [{"name": "accuracy", "value": "0.88"}]
    code, body, _ = await api.call("PATCH", path, second, content_type=APPLY)
    assert code == 200
    assert body["status"]["trainerStatus"] == {
        "estimatedRemainingSeconds": 300,
        "lastUpdatedTime": "2026-12-02T18:33:24Z",
        "metrics": [{"name": "accuracy", "value": "0.88"}],
    }


async def test_status_write_to_missing_trainjob_is_404_and_creates_nothing(api: Api) -> None:
    api.cluster.ensure_namespace(NS)
    path = f"{TJ}/namespaces/{NS}/trainjobs/tj-rec/status?fieldManager=trainer-status&force=true"
    code, body, _ = await api.call("PATCH", path, status_apply(40), content_type=APPLY)
    assert (code, body["reason"]) == (404, "NotFound")
    assert api.cluster.get("trainjobs", NS, "tj-rec", "trainer.kubeflow.org") is None
    # Apply to the main resource creates it.
    code, body, _ = await api.call(
        "PATCH",
        f"{TJ}/namespaces/{NS}/trainjobs/tj-rec?fieldManager=kubectl",
        trainjob(),
        content_type=APPLY,
    )
    assert code == 201, body


async def test_stale_resource_version_conflicts(api: Api) -> None:
    await make(api)
    path = f"{TJ}/namespaces/{NS}/trainjobs/tj-rec/status"
    patch = {
        "metadata": {"resourceVersion": "1"},
        "status": {"trainerStatus": {"progressPercentage": 42}},
    }
    code, body, _ = await api.call("PATCH", path, patch, content_type=MERGE)
    assert code == 409
    assert body["message"] == (
        'Operation cannot be fulfilled on trainjobs.trainer.kubeflow.org "tj-rec": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    full = api.cluster.get("trainjobs", NS, "tj-rec", "trainer.kubeflow.org")
    assert full is not None
    stale = {**full, "metadata": {**full["metadata"], "resourceVersion": "1"}}
    code, body, _ = await api.call("PUT", path, stale)
    assert (code, body["reason"]) == (409, "Conflict")
    unversioned = {
        **full,
        "metadata": {k: v for k, v in full["metadata"].items() if k != "resourceVersion"},
    }
    code, body, _ = await api.call("PUT", path, unversioned)
    assert code == 422
    assert body["message"] == (
        'trainjobs.trainer.kubeflow.org "tj-rec" is invalid: metadata.resourceVersion: '
        "Invalid value: 0: must be specified for an update"
    )


# kube-apiserver's answer to a patch type a custom resource does not take; the
# devcluster gives it for built-in kinds too, which serve no strategic merge patch here.
UNSUPPORTED_PATCH = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "the body of the request was in an unknown format - accepted media types "
    "include: application/json-patch+json, application/merge-patch+json, "
    "application/apply-patch+yaml",
    "reason": "UnsupportedMediaType",
    "code": 415,
}


async def test_patch_types(api: Api) -> None:
    await make(api)
    path = f"{TJ}/namespaces/{NS}/trainjobs/tj-rec/status"
    for content_type in (STRATEGIC, "application/json"):
        code, body, _ = await api.call("PATCH", path, {"status": {}}, content_type=content_type)
        assert (code, body) == (415, UNSUPPORTED_PATCH)
    code, body, _ = await api.call("PATCH", path, raw=b'{"status": {', content_type=MERGE)
    assert (code, body["message"]) == (400, "error decoding patch: unexpected end of JSON input")
    ops = [{"op": "replace", "path": "/status/nope/x", "value": 1}]
    code, body, _ = await api.call("PATCH", path, ops, content_type="application/json-patch+json")
    assert (code, body["message"], body["details"]) == (
        422,
        "the server rejected our request due to an error in our request",
        {},
    )
    ops = [
        {
            "op": "add",
            "path": "/status",
            "value": {
                "trainerStatus": {
                    "progressPercentage": 7,
                    "lastUpdatedTime": "2026-12-02T18:33:25Z",
                }
            },
        }
    ]
    code, body, _ = await api.call("PATCH", path, ops, content_type="application/json-patch+json")
    assert code == 200, body
    assert body["status"]["trainerStatus"]["progressPercentage"] == 7


async def test_strategic_merge_patch_is_refused_on_built_in_kinds(api: Api) -> None:
    api.cluster.ensure_namespace(NS)
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}
    code, created, _ = await api.call(
        "POST", f"/api/v1/namespaces/{NS}/configmaps", {**config_map, "data": {"a": "1"}}
    )
    assert code == 201, created
    path = f"/api/v1/namespaces/{NS}/configmaps/cm"
    code, body, _ = await api.call("PATCH", path, {"data": {"a": "2"}}, content_type=STRATEGIC)
    assert (code, body) == (415, UNSUPPORTED_PATCH)
    # The media type is refused before the object is looked up, as for a custom resource.
    missing = f"/api/v1/namespaces/{NS}/pods/nope"
    code, body, _ = await api.call("PATCH", missing, {"metadata": {}}, content_type=STRATEGIC)
    assert (code, body) == (415, UNSUPPORTED_PATCH)
    code, stored, _ = await api.call("GET", path)
    assert (code, stored) == (200, created)
    code, merged, _ = await api.call("PATCH", path, {"data": {"a": "2"}}, content_type=MERGE)
    assert (code, merged["data"]) == (200, {"a": "2"})


async def test_no_op_write_keeps_resource_version(api: Api) -> None:
    await make(api)
    path = f"{TJ}/namespaces/{NS}/trainjobs/tj-rec/status?fieldManager=trainer-status&force=true"
    _, first, _ = await api.call("PATCH", path, status_apply(40), content_type=APPLY)
    _, again, _ = await api.call("PATCH", path, status_apply(40), content_type=APPLY)
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


async def test_list_limit_continue_and_delete(api: Api, devcluster: DevCluster) -> None:
    for name in ("a", "b", "c"):
        await make(api, name)
    code, body, _ = await api.call("GET", f"{TJ}/namespaces/{NS}/trainjobs?limit=2")
    assert code == 200
    assert [i["metadata"]["name"] for i in body["items"]] == ["a", "b"]
    assert body["metadata"]["remainingItemCount"] == 1
    token = body["metadata"]["continue"]
    _, rest, _ = await api.call("GET", f"{TJ}/namespaces/{NS}/trainjobs?limit=2&continue={token}")
    assert [i["metadata"]["name"] for i in rest["items"]] == ["c"]
    assert rest["metadata"]["continue"] == ""
    code, body, _ = await api.call("DELETE", f"{TJ}/namespaces/{NS}/trainjobs/b")
    assert (code, body["metadata"]["name"]) == (200, "b")
    _, listed, _ = await api.call("GET", f"{TJ}/trainjobs")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["a", "c"]
    assert listed["kind"] == "TrainJobList"


async def test_authentication(api: Api) -> None:
    code, body, _ = await api.call("GET", f"{TJ}/trainjobs", token=None)
    assert code == 403
    assert body["message"] == (
        'trainjobs.trainer.kubeflow.org is forbidden: User "system:anonymous" cannot list resource '
        '"trainjobs" in API group "trainer.kubeflow.org" at the cluster scope'
    )
    assert body["details"] == {"group": "trainer.kubeflow.org", "kind": "trainjobs"}
    code, body, _ = await api.call("GET", f"{TJ}/trainjobs", token="not-a-token")
    assert (code, body["message"], body["reason"]) == (401, "Unauthorized", "Unauthorized")
    code, body, _ = await api.call("GET", "/version", token=None)
    assert code == 200
