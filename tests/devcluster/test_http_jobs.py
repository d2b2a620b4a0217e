"""batch/v1 Jobs over HTTP, and the owner chain a TrainJob's pods hang from: a JobSet owned
by the TrainJob, a Job owned by the JobSet, the pod owned by the Job, each reference
naming its owner's uid as a real API server stores it."""

from typing import Any

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_both_servers
from trainjob_status.contract import JOBSET_NAME_LABEL

from .conftest import Api

NS = "jobs"


def job(name: str, labels: dict[str, str], owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }


async def test_jobs_are_created_listed_by_label_and_keep_their_owner_references(
    api: Api, devcluster: DevCluster
) -> None:
    devcluster.ensure_namespace(NS)
    owner = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "name": "js",
        "uid": "4f2d9c1e-0000-4000-8000-000000000001",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    path = f"/apis/batch/v1/namespaces/{NS}/jobs"
    code, made, _ = await api.call("POST", path, job("js-node-0", {JOBSET_NAME_LABEL: "js"}, owner))
    assert code == 201
    assert (made["apiVersion"], made["kind"]) == ("batch/v1", "Job")
    assert made["metadata"]["ownerReferences"] == [owner]
    assert made["metadata"]["uid"]
    code, _, _ = await api.call("POST", path, job("plain", {}))
    assert code == 201
    code, listed, _ = await api.call(
        "GET", f"/apis/batch/v1/jobs?labelSelector={JOBSET_NAME_LABEL}"
    )
    assert code == 200
    assert listed["kind"] == "JobList"
    assert [item["metadata"]["name"] for item in listed["items"]] == ["js-node-0"]


@on_both_servers
def test_a_trainjob_pod_hangs_from_its_jobset_and_job_by_uid(kube_api: KubeAPI) -> None:
    """The harness builds the same chain on both servers (the tests of the server's
    ownership binding rely on it)."""
    kube_api.ensure_namespace(NS)
    trainjob = kube_api.create_trainjob(NS, "tj")
    pod = kube_api.create_trainjob_pod(NS, "tj", "tj-node-0-0", index=0)
    again = kube_api.create_trainjob_pod(NS, "tj", "tj-node-0-1", index=0)
    jobset = kube_api.get("jobsets", NS, "tj", "jobset.x-k8s.io")
    made = kube_api.get("jobs", NS, "tj-node-0", "batch")
    assert jobset is not None
    assert made is not None

    def controller(obj: dict[str, Any]) -> tuple[str, str, str]:
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["controller"] is True
        return ref["kind"], ref["name"], ref["uid"]

    assert controller(jobset) == ("TrainJob", "tj", trainjob["metadata"]["uid"])
    assert controller(made) == ("JobSet", "tj", jobset["metadata"]["uid"])
    assert controller(pod) == controller(again) == ("Job", "tj-node-0", made["metadata"]["uid"])
    assert made["metadata"]["labels"][JOBSET_NAME_LABEL] == "tj"
    assert pod["metadata"]["labels"] == {JOBSET_NAME_LABEL: "tj"}
