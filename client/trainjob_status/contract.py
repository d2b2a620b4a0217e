"""The wire contract between a TrainJob's pods and the status server, stated once.

The Kubeflow Trainer's status server defines it: where a pod posts (the TrainJob's
``/status`` subresource path), which token audience the post carries, the three
environment variables that tell a pod both, the JobSet label that ties a pod to its
TrainJob, and the CRD's limits on ``status.trainerStatus``. The client, the server, the
development cluster and the tests all read these names from here.
"""

from __future__ import annotations

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
RESOURCE = "trainjobs"
KIND = "TrainJob"

# An aiohttp route template as well as a ``str.format`` template.
STATUS_PATH = f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{RESOURCE}/{{name}}/status"
# The projected service-account token's audience: the status path without ``/apis/``.
AUDIENCE = f"{GROUP}/{VERSION}/namespaces/{{namespace}}/{RESOURCE}/{{name}}/status"

URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_CERT_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
ENV_NAMES = (URL_ENV, CA_CERT_ENV, TOKEN_ENV)

# On every pod of a TrainJob's JobSet; its value is the TrainJob's name.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
# Where a TrainingRuntime marks the trainer step's pods (the value is ``trainer``).
ANCESTOR_STEP_LABEL = f"{GROUP}/trainjob-ancestor-step"

# ``status.trainerStatus`` as the CRD bounds it.
MAX_METRICS = 256  # metrics: maxItems
MAX_METRIC_CHARS = 64  # a metric's name and value: 1..64 characters
MAX_PROGRESS_PERCENT = 100  # progressPercentage: 0..100
INT32_MAX = 2**31 - 1  # progressPercentage and estimatedRemainingSeconds are int32


def status_path(namespace: str, name: str) -> str:
    """The URL path of TrainJob ``namespace/name``'s status subresource."""
    return STATUS_PATH.format(namespace=namespace, name=name)


def audience(namespace: str, name: str) -> str:
    """The token audience that lets a pod post TrainJob ``namespace/name``'s status."""
    return AUDIENCE.format(namespace=namespace, name=name)
