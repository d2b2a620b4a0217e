"""What the caches keep of TrainJobs and pods: exactly the fields the server reads."""

from __future__ import annotations

from typing import Any

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.testing import eventually
from trainjob_status.contract import GROUP, JOBSET_NAME_LABEL
from trainjob_status_server.app import StatusServer
from trainjob_status_server.kube.views import pod_view, trainjob_view, written_view

from .conftest import NS, Poster

META: dict[str, Any] = {
    "name": "tj",
    "namespace": "team-a",
    "uid": "u-1",
    "resourceVersion": "42",
    "generation": 3,
    "labels": {"team": "a", "jobset.sigs.k8s.io/jobset-name": "tj"},
    "annotations": {"a": "b" * 100},
    "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
    "creationTimestamp": "2026-12-03T10:00:00Z",
}
# What every view keeps of META.
KEPT = {"name": "tj", "namespace": "team-a", "uid": "u-1", "resourceVersion": "42"}
DELETING = "2026-12-03T10:05:00Z"


def test_a_trainjob_view_keeps_identity_deletion_and_the_trainer_status() -> None:
    trainer = {
        "progressPercentage": 5,
        "metrics": [{"name": "loss", "value": "0.5"}, "not a metric"],
        "lastUpdatedTime": "2026-12-03T10:00:01Z",
    }
    obj = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {**META, "deletionTimestamp": DELETING},
        "spec": {"runtimeRef": {"name": "torch"}},
        "status": {"conditions": [{"type": "Created"}], "trainerStatus": trainer},
    }
    assert trainjob_view(obj) == {
        "metadata": {**KEPT, "deletionTimestamp": DELETING},
        "spec": {"runtimeRef": {"name": "torch"}},
        "status": {
            "trainerStatus": {
                "progressPercentage": 5,
                "metrics": (("loss", "0.5"),),
                "lastUpdatedTime": "2026-12-03T10:00:01Z",
            }
        },
    }
    assert obj["status"]["trainerStatus"] is trainer  # the input is not changed
    assert trainer["metrics"] == [{"name": "loss", "value": "0.5"}, "not a metric"]


def test_a_views_metrics_are_pairs_in_order_without_entries_nothing_could_export() -> None:
    items = [
        {"name": "loss", "value": "0.5"},
        {"name": "loss", "value": "0.25"},
        {"name": "acc"},
        {"name": 7, "value": "1"},
        {"name": "step", "value": 3},
        "garbage",
        {"name": "", "value": "1", "extra": True},
        {"name": "lr", "value": "nan"},
    ]
    view = trainjob_view({"metadata": META, "status": {"trainerStatus": {"metrics": items}}})
    pairs = view["status"]["trainerStatus"]["metrics"]
    assert pairs == (("loss", "0.5"), ("loss", "0.25"), ("", "1"), ("lr", "nan"))
    # Names are interned: one copy across TrainJobs.
    other = trainjob_view(
        {"metadata": META, "status": {"trainerStatus": {"metrics": [
            {"name": "".join(["lo", "ss"]), "value": "1"}
        ]}}}
    )  # fmt: skip
    assert other["status"]["trainerStatus"]["metrics"][0][0] is pairs[0][0]


def test_the_writers_view_keeps_what_orders_updates() -> None:
    trainer = {"progressPercentage": 5, "lastUpdatedTime": "2026-12-03T10:00:01Z"}
    obj = {"metadata": META, "spec": {}, "status": {"trainerStatus": trainer}}
    assert written_view(obj) == {
        "metadata": KEPT,
        "status": {"trainerStatus": {"lastUpdatedTime": "2026-12-03T10:00:01Z"}},
    }
    assert written_view({"metadata": META, "status": {"trainerStatus": {}}}) == {"metadata": KEPT}


def test_a_trainjob_without_trainer_status_or_conditions_has_no_status_in_its_view() -> None:
    assert trainjob_view({"metadata": META, "status": {"conditions": []}}) == {"metadata": KEPT}
    assert trainjob_view({"metadata": "garbage"}) == {"metadata": {}}
    assert trainjob_view({"metadata": META, "status": "garbage"}) == {"metadata": KEPT}


def test_a_trainjob_view_keeps_the_runtime_and_the_condition_types_and_statuses() -> None:
    obj = {
        "metadata": META,
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                           "name": "torch"},
            "trainer": {"image": "x", "args": ["a" * 100]},
        },
        "status": {
            "conditions": [
                {"type": "Created", "status": "True", "reason": "JobsCreationSucceeded",
                 "message": "m" * 200, "lastTransitionTime": DELETING},
                {"type": "Complete"},
                "not a condition",
                {"type": "Failed", "status": "False"},
            ],
            "jobsStatus": [{"name": "node", "ready": 1}],
        },
    }  # fmt: skip
    assert trainjob_view(obj) == {
        "metadata": KEPT,
        "spec": {"runtimeRef": {"kind": "TrainingRuntime", "name": "torch"}},
        "status": {"conditions": (("Created", "True"), ("Failed", "False"))},
    }
    # Types and statuses are one copy across TrainJobs.
    other = trainjob_view(
        {"metadata": META, "status": {"conditions": [
            {"type": "".join(["Crea", "ted"]), "status": "".join(["Tr", "ue"])}]}}
    )  # fmt: skip
    ((kind, value),) = other["status"]["conditions"]
    assert kind is obj_first_condition(obj)[0]
    assert value is obj_first_condition(obj)[1]


def obj_first_condition(obj: dict[str, Any]) -> tuple[str, str]:
    first: tuple[str, str] = trainjob_view(obj)["status"]["conditions"][0]
    return first


def test_a_pod_view_keeps_only_the_labels_asked_for() -> None:
    pod = {
        "metadata": {**META, "deletionTimestamp": DELETING,
                     "deletionGracePeriodSeconds": 30},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running"},
    }  # fmt: skip
    assert pod_view(pod, ("jobset.sigs.k8s.io/jobset-name", "absent")) == {
        "metadata": {
            **KEPT,
            "deletionTimestamp": DELETING,
            "deletionGracePeriodSeconds": 30,
            "labels": {JOBSET_NAME_LABEL: "tj"},
        }
    }
    # Label keys and values are one copy across pods (values are TrainJob names).
    other = {"metadata": {**META, "labels": {"".join(["jobset.sigs.k8s.io/", "jobset-name"]):
             "".join(["t", "j"])}}}  # fmt: skip
    first, second = (pod_view(p, ("jobset.sigs.k8s.io/jobset-name",)) for p in (pod, other))
    ((key_1, value_1),) = first["metadata"]["labels"].items()
    ((key_2, value_2),) = second["metadata"]["labels"].items()
    assert key_1 is key_2
    assert value_1 is value_2


async def test_the_servers_trainjob_cache_and_writer_hold_views(
    poster: Poster, server: StatusServer, devcluster: DevCluster
) -> None:
    devcluster.ensure_namespace(NS)
    devcluster.create_trainjob(NS, "viewed")
    code, _ = await poster.post("viewed", {"trainerStatus": {"progressPercentage": 7}})
    assert code == 200
    stored = devcluster.get("trainjobs", NS, "viewed", GROUP)
    assert stored is not None
    assert stored["metadata"]["managedFields"]

    async def delivered() -> dict[str, Any] | None:
        cached = server.trainjobs.get(NS, "viewed")
        if (
            cached
            and cached["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
        ):
            return cached
        return None

    # The watch delivers the written object; the cache keeps its view.
    cached = await eventually(delivered, "the written object in the cache", within=10, every=0.02)
    assert cached == trainjob_view(stored)
    assert set(cached) == {"metadata", "spec", "status"}
    assert "managedFields" not in cached["metadata"]
    # Once the cache shows the write, the writer no longer keeps its own copy.
    assert server.writer.unseen_writes == 0
