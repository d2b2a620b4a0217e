"""The same posts to the Trainer's own status server (its package, run as its controller
runs it) and to ours, on the same control plane with the Trainer's TrainJob CRD: what
each answers, side by side. Where they differ, docs/kubeflow.md says why ours does."""

from __future__ import annotations

import json
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from trainjob_devcluster.harness.testing import ServingCerts
from trainjob_status.contract import JOBSET_NAME_LABEL, audience, status_path

from .rig import Answer, Kubeflow, post, status_body

# Go programs and a control plane starting on a shared 2-core machine.
pytestmark = pytest.mark.timeout(600)

NS = "answers"


INVALID_101 = (
    'TrainJob.trainer.kubeflow.org "job1" is invalid: status.trainerStatus.progressPercentage: '
    "Invalid value: 101: trainerStatus.progressPercentage in body should be less than or "
    "equal to 100"
)
NULL_TIME = (
    'TrainJob.trainer.kubeflow.org "job1" is invalid: [status.trainerStatus.lastUpdatedTime: '
    'Invalid value: "null": trainerStatus.lastUpdatedTime in body must be of type string: '
    '"null", <nil>: Invalid value: null: some validation rules were not checked because the '
    "object was invalid; correct the existing errors to complete validation]"
)
NOT_JSON = (
    "Invalid payload: body is not valid JSON: Expecting property name enclosed in double "
    "quotes: line 1 column 2 (char 1)"
)
OK = (200, "", "")
FORBIDDEN = (403, "Forbidden", "Forbidden")
UNAUTHORIZED = (401, "Unauthorized", "Unauthorized")
# case -> server -> (code, reason, message); each difference is in docs/kubeflow.md.
EXPECTED = {
    "valid": {"peer": OK, "ours": OK},
    "forged token": {"peer": FORBIDDEN, "ours": UNAUTHORIZED},
    # The Trainer's status server checks the audience and the namespace only; ours binds the token's pod
    # to the TrainJob.
    "another TrainJob's pod": {"peer": OK, "ours": FORBIDDEN},
    "no token": {"peer": FORBIDDEN, "ours": UNAUTHORIZED},
    "malformed body": {
        "peer": (422, "Invalid", "Invalid payload"),
        "ours": (422, "Invalid", NOT_JSON),
    },
    "progress 101": {"peer": (422, "Invalid", INVALID_101), "ours": (422, "Invalid", INVALID_101)},
    # The Trainer's status server sends a null time, which the CRD refuses; ours stamps the receive time.
    "no lastUpdatedTime": {"peer": (422, "Invalid", NULL_TIME), "ours": OK},
    "unknown TrainJob": {
        "peer": (404, "NotFound", "Train job not found"),
        "ours": (404, "NotFound", "Train job not found"),
    },
}


def forged(token: str) -> str:
    """The same claims, signed by a key the issuer never had."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    claims = jwt.decode(token, options={"verify_signature": False})
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "forged"})


def summary(answer: Answer) -> tuple[int, str, str]:
    body: Any = answer.body
    if not isinstance(body, dict):
        return answer.code, "", str(body)
    return answer.code, body.get("reason", ""), body.get("message", "")


def test_what_each_server_answers(kubeflow: Kubeflow, certs: ServingCerts) -> None:
    cluster = kubeflow.cluster
    for name in ("job1", "job2"):
        kubeflow.create_trainjob(NS, name)
        cluster.create_trainjob_pod(NS, name, f"{name}-node-0-0")
    token = cluster.request_token(NS, "default", [audience(NS, "job1")], pod="job1-node-0-0")
    # job2's pod asks for a token for job1's audience: the API server mints it.
    neighbour = cluster.request_token(NS, "default", [audience(NS, "job1")], pod="job2-node-0-0")
    # A pod labelled for a TrainJob that does not exist (deleted meanwhile, say).
    cluster.create_pod(NS, "gone-node-0-0", labels={JOBSET_NAME_LABEL: "gone"})
    missing = cluster.request_token(NS, "default", [audience(NS, "gone")], pod="gone-node-0-0")
    no_time = json.dumps({"trainerStatus": {"progressPercentage": 5}}).encode()
    cases: dict[str, tuple[str, str, bytes]] = {
        "valid": ("job1", token, status_body(10, "2026-12-05T12:00:01Z")),
        "forged token": ("job1", forged(token), status_body(11, "2026-12-05T12:00:02Z")),
        "another TrainJob's pod": ("job1", neighbour, status_body(12, "2026-12-05T12:00:03Z")),
        "no token": ("job1", "", status_body(13, "2026-12-05T12:00:04Z")),
        "malformed body": ("job1", token, b"{not json"),
        "progress 101": ("job1", token, status_body(101, "2026-12-05T12:00:05Z")),
        "no lastUpdatedTime": ("job1", token, no_time),
        "unknown TrainJob": ("gone", missing, status_body(14, "2026-12-05T12:00:06Z")),
    }
    found: dict[str, dict[str, tuple[int, str, str]]] = {}
    with kubeflow.trainer_status_server(certs) as peer, kubeflow.our_server(certs) as ours:
        for server, port in (("peer", peer.port), ("ours", ours.port)):
            for case, (job, bearer, body) in cases.items():
                answer = post(
                    port,
                    f"https://localhost{status_path(NS, job)}",
                    token=bearer,
                    ca_pem=certs.ca.cert_pem,
                    body=body,
                )
                found.setdefault(case, {})[server] = summary(answer)
    assert found == EXPECTED
