"""The Trainer's controller manager as its manifests deploy it: as its own service
account with the ClusterRole they ship, not as the admin, and with its validating and
mutating webhooks registered with the API server (served on loopback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from trainjob_devcluster.harness.kubeflow_trainer import OPERATOR_NAMESPACE, SERVICE_NAME

from .rig import TRAINER_API, Kubeflow

ACCOUNT = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{SERVICE_NAME}"

pytestmark = pytest.mark.timeout(600)


def kubeconfig_token(path: Path) -> str:
    (user,) = yaml.safe_load(path.read_text())["users"]
    token: str = user["user"]["token"]
    return token


def may(kubeflow: Kubeflow, verb: str, resource: str, group: str = "") -> bool:
    """Whether the Trainer's service account may ``verb`` ``resource`` in any namespace."""
    review = kubeflow.cluster.call(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": ACCOUNT,
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{OPERATOR_NAMESPACE}",
                ],
                "resourceAttributes": {"verb": verb, "resource": resource, "group": group},
            },
        },
    )
    allowed: bool = review["status"].get("allowed", False)
    return allowed


def test_the_controller_runs_as_its_service_account(kubeflow: Kubeflow) -> None:
    ns, name = "deployed", "job1"
    with kubeflow.controller(gate=False) as trainer:
        token = kubeconfig_token(Path(trainer.process.env["KUBECONFIG"]))
        review = kubeflow.cluster.call(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            token=token,
        )
        assert review["status"]["userInfo"]["username"] == ACCOUNT
        # What its ClusterRole grants is enough to build a TrainJob's JobSet...
        kubeflow.create_trainjob(ns, name)
        jobset = kubeflow.jobset(ns, name)
        assert jobset["metadata"]["ownerReferences"][0]["name"] == name
        # Nothing it does is refused on the way (its caches list, its writes land).
        assert " is forbidden" not in trainer.process.log()
    # ...and is all it has: the role names no pods, and no admin rights.
    assert may(kubeflow, "create", "jobsets", "jobset.x-k8s.io")
    assert may(kubeflow, "patch", "trainjobs/status", "trainer.kubeflow.org")
    assert not may(kubeflow, "list", "pods")
    assert not may(kubeflow, "delete", "trainjobs", "trainer.kubeflow.org")


def test_the_trainers_webhooks_are_registered_and_served(kubeflow: Kubeflow) -> None:
    ns = "webhooks"
    kubeflow.cluster.ensure_namespace(ns)
    path = f"{TRAINER_API}/namespaces/{ns}/trainjobs"

    def trainjob(name: str, **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, **spec},
        }

    with kubeflow.controller(gate=False):
        patches = [{"manager": "example.com/tests"}]
        created = kubeflow.cluster.call("POST", path, trainjob("defaulted", runtimePatches=patches))
        # The defaulter stamps a patch entry's time.
        (patch,) = created["spec"]["runtimePatches"]
        assert patch["manager"] == "example.com/tests"
        assert patch["time"]
        missing = trainjob("unknown", runtimeRef={"name": "no-such-runtime"})
        code, answer = kubeflow.cluster.plane.request("POST", path, missing)
        assert (code, answer["reason"], answer["message"]) == (
            403,
            "Forbidden",
            'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: '
            'spec.RuntimeRef: Invalid value: {"name":"no-such-runtime",'
            '"apiGroup":"trainer.kubeflow.org","kind":"ClusterTrainingRuntime"}: '
            'ClusterTrainingRuntime.trainer.kubeflow.org "no-such-runtime" not found: '
            "specified clusterTrainingRuntime must be created before the TrainJob is created",
        )
    assert kubeflow.cluster.get("trainjobs", ns, "unknown", "trainer.kubeflow.org") is None
