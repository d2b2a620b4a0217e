"""What the ingest bench puts in the devcluster: its scenarios, and TrainJobs and pods
shaped as the Trainer and JobSet make them."""

from __future__ import annotations

from dataclasses import dataclass

from trainjob_status.contract import (
    ANCESTOR_STEP_LABEL,
    CA_CERT_ENV,
    GROUP,
    JOBSET_NAME_LABEL,
    TOKEN_ENV,
    URL_ENV,
    VERSION,
    audience,
    status_path,
)

MEMBERSHIP_LABEL = JOBSET_NAME_LABEL
POST_INTERVAL = 5.0  # seconds between two posts of one pod (the SDK's throttle)
PEER_BUDGET = ("5", "10")  # QPS, burst
NO_SA_LIMIT = ("--sa-rate-limit", "1000000", "--sa-rate-burst", "1000000")


@dataclass(frozen=True)
class Scenario:
    name: str
    trainjobs: int
    pods: int  # per TrainJob

    @property
    def namespace(self) -> str:
        return f"bench-{self.name}"

    @property
    def total_pods(self) -> int:
        return self.trainjobs * self.pods

    @property
    def label(self) -> str:
        return f"{self.trainjobs:,} TJ x {self.pods:,} pods"


SCENARIOS = {s.name: s for s in (Scenario("1", 1, 1000), Scenario("100", 100, 10), Scenario("10k", 10_000, 1))}  # fmt: skip
# The same three shapes, tiny: --smoke.
SMOKE_SCENARIOS = {s.name: s for s in (Scenario("1", 1, 20), Scenario("100", 4, 5), Scenario("10k", 10, 1))}  # fmt: skip


# -- what the devcluster holds ------------------------------------------------------------


def trainjob_body(name: str) -> dict[str, object]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": {"team": "bench"}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": 2,
                "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
                "command": ["torchrun", "/workspace/train.py"],
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}},
            },
        },
    }


def pod_body(
    namespace: str, job: str, name: str, account: str, index: int, owner_uid: str
) -> dict[str, object]:
    """A pod shaped like a JobSet's trainer pod with the status volume injected, owned
    by the Job ``<job>-node-0`` with uid ``owner_uid`` (the server binds posts through
    that chain)."""
    uid = owner_uid
    env = {
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "auto",
        "PET_NODE_RANK": str(index),
        "PET_MASTER_ADDR": f"{job}-node-0-0.{job}",
        "PET_MASTER_PORT": "29400",
        URL_ENV: "https://trainjob-status.kubeflow-system.svc:10443" + status_path(namespace, job),
        CA_CERT_ENV: "/var/run/secrets/kubeflow/trainer/ca.crt",
        TOKEN_ENV: "/var/run/secrets/kubeflow/trainer/token",
    }
    return {
        "metadata": {
            "name": name,
            "labels": {
                MEMBERSHIP_LABEL: job,
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "jobset.sigs.k8s.io/job-index": "0",
                "batch.kubernetes.io/job-completion-index": str(index),
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": f"{job}-node-0",
                ANCESTOR_STEP_LABEL: "trainer",
            },
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": f"{job}-node-0",
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "serviceAccountName": account,
            "restartPolicy": "OnFailure",
            "subdomain": job,
            "containers": [
                {
                    "name": "node",
                    "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
                    "command": ["torchrun", "/workspace/train.py"],
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "ports": [{"containerPort": 29400, "protocol": "TCP"}],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    "volumeMounts": [
                        {
                            "name": "kubeflow-trainer-status",
                            "mountPath": "/var/run/secrets/kubeflow/trainer",
                            "readOnly": True,
                        }
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "kubeflow-trainer-status",
                    "projected": {
                        "sources": [
                            {
                                "serviceAccountToken": {
                                    "audience": audience(namespace, job),
                                    "expirationSeconds": 3600,
                                    "path": "token",
                                }
                            },
                            {"configMap": {"name": "trainjob-status-ca"}},
                        ]
                    },
                }
            ],
        },
    }
