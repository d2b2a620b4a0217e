"""Tokens over HTTP: TokenRequest (also through kubectl's path), OIDC discovery, JWKS
negotiation, TokenReview, service-account bearer tokens under RBAC."""

import base64
import json
from typing import Any

from trainjob_devcluster import DevCluster

from .conftest import TJ, Api, bad_request

NS = "rec"
AUD = "trainer.kubeflow.org/v1alpha1/namespaces/rec/trainjobs/tj-rec/status"


def claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))  # type: ignore[no-any-return]


async def test_token_request_is_bound_to_the_pod(api: Api, devcluster: DevCluster) -> None:
    pod = devcluster.create_pod(NS, "tj-rec-node-0-0", service_account="trainer")
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [AUD],
            "expirationSeconds": 3600,
            "boundObjectRef": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": "tj-rec-node-0-0",
                "uid": pod["metadata"]["uid"],
            },
        },
    }
    code, answer, _ = await api.call(
        "POST", f"/api/v1/namespaces/{NS}/serviceaccounts/trainer/token", body
    )
    assert code == 201, answer
    got = claims(answer["status"]["token"])
    assert got["aud"] == [AUD]
    assert got["iss"] == devcluster.issuer
    assert got["sub"] == "system:serviceaccount:rec:trainer"
    assert got["exp"] - got["iat"] == 3600
    assert got["kubernetes.io"]["pod"] == {"name": "tj-rec-node-0-0", "uid": pod["metadata"]["uid"]}
    code, answer, _ = await api.call(
        "POST", f"/api/v1/namespaces/{NS}/serviceaccounts/no-such-sa/token", body
    )
    assert code == 404
    assert answer["message"] == 'serviceaccounts "no-such-sa" not found'
    assert answer["details"] == {"name": "no-such-sa", "kind": "serviceaccounts"}


async def test_wrongly_typed_token_bodies_are_bad_requests(
    api: Api, devcluster: DevCluster
) -> None:
    devcluster.create_pod(NS, "p", service_account="trainer")
    for path, body, message in (
        (
            f"/api/v1/namespaces/{NS}/serviceaccounts/trainer/token",
            {"spec": {"expirationSeconds": "3600"}},
            "spec.expirationSeconds must be a 64-bit integer",
        ),
        (
            f"/api/v1/namespaces/{NS}/serviceaccounts/trainer/token",
            {"spec": {"boundObjectRef": {"kind": "Pod", "name": 7}}},
            "spec.boundObjectRef.name must be a string",
        ),
        (
            "/apis/authentication.k8s.io/v1/tokenreviews",
            {"spec": {"token": "t", "audiences": [1]}},
            "spec.audiences must be a list of strings",
        ),
    ):
        code, answer, _ = await api.call("POST", path, body)
        assert (code, answer) == (
            400,
            bad_request(message),
        )


async def test_oidc_discovery_and_jwks(api: Api, devcluster: DevCluster) -> None:
    code, body, _ = await api.call("GET", "/.well-known/openid-configuration", token=None)
    assert code == 403
    assert (
        body["message"]
        == 'forbidden: User "system:anonymous" cannot get path "/.well-known/openid-configuration"'
    )
    devcluster.create_pod(NS, "p", service_account="trainer")
    sa_token = devcluster.request_token(NS, "trainer", [devcluster.issuer])
    code, body, _ = await api.call("GET", "/.well-known/openid-configuration", token=sa_token)
    assert code == 200
    assert body["issuer"] == devcluster.issuer
    assert body["jwks_uri"] == f"{devcluster.url}/openid/v1/jwks"
    code, body, _ = await api.call("GET", "/openid/v1/jwks", headers={"Accept": "application/json"})
    assert code == 406
    assert (
        body["message"]
        == "406: Not Acceptable\n\nAvailable representations: application/jwk-set+json"
    )
    code, body, response = await api.call("GET", "/openid/v1/jwks", headers={"Accept": "*/*"})
    assert code == 200
    assert response.headers["Content-Type"] == "application/jwk-set+json"
    kid = devcluster.keys.active_kid
    assert [k["kid"] for k in body["keys"]] == [kid]
    devcluster.keys.rotate()
    _, body, _ = await api.call("GET", "/openid/v1/jwks", headers={"Accept": "*/*"})
    assert kid in [k["kid"] for k in body["keys"]]
    assert len(body["keys"]) == 2


async def test_token_review_follows_the_pod(api: Api, devcluster: DevCluster) -> None:
    devcluster.create_pod(NS, "tj-rec-node-0-0", service_account="trainer")
    token = devcluster.request_token(NS, "trainer", [AUD], pod="tj-rec-node-0-0")
    review = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, "audiences": [AUD]},
    }
    code, body, _ = await api.call("POST", "/apis/authentication.k8s.io/v1/tokenreviews", review)
    assert code == 201
    assert body["status"]["authenticated"] is True
    assert body["status"]["user"]["username"] == "system:serviceaccount:rec:trainer"
    wrong = {**review, "spec": {"token": token, "audiences": ["something-else"]}}
    _, body, _ = await api.call("POST", "/apis/authentication.k8s.io/v1/tokenreviews", wrong)
    assert body["status"]["error"] == (
        f'[invalid bearer token, token audiences ["{AUD}"] is invalid for the target audiences ["something-else"]]'
    )
    devcluster.delete("pods", NS, "tj-rec-node-0-0")
    _, body, _ = await api.call("POST", "/apis/authentication.k8s.io/v1/tokenreviews", review)
    assert (
        body["status"]["error"]
        == "[invalid bearer token, service account token has been invalidated]"
    )


async def test_service_account_tokens_under_rbac(api: Api, devcluster: DevCluster) -> None:
    devcluster.create_trainjob(NS, "tj-rec")
    devcluster.create_pod(NS, "p", service_account="trainer")
    token = devcluster.request_token(NS, "trainer", [devcluster.issuer])
    patch = {
        "status": {
            "trainerStatus": {"progressPercentage": 50, "lastUpdatedTime": "2026-12-02T18:33:57Z"}
        }
    }
    path = f"{TJ}/namespaces/{NS}/trainjobs/tj-rec/status"
    code, body, _ = await api.call(
        "PATCH", path, patch, token=token, content_type="application/merge-patch+json"
    )
    assert code == 403
    assert body["message"] == (
        'trainjobs.trainer.kubeflow.org "tj-rec" is forbidden: User "system:serviceaccount:rec:trainer" '
        'cannot patch resource "trainjobs/status" in API group "trainer.kubeflow.org" in the namespace "rec"'
    )
    devcluster.create(
        "roles",
        {
            "metadata": {"name": "status-writer"},
            "rules": [
                {
                    "apiGroups": ["trainer.kubeflow.org"],
                    "resources": ["trainjobs/status"],
                    "verbs": ["patch"],
                }
            ],
        },
        NS,
        "rbac.authorization.k8s.io",
    )
    devcluster.create(
        "rolebindings",
        {
            "metadata": {"name": "status-writer"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "status-writer",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "trainer", "namespace": NS}],
        },
        NS,
        "rbac.authorization.k8s.io",
    )
    code, body, _ = await api.call(
        "PATCH", path, patch, token=token, content_type="application/merge-patch+json"
    )
    assert code == 200, body
    code, body, _ = await api.call(
        "PATCH",
        f"{TJ}/namespaces/{NS}/trainjobs/tj-rec",
        {"metadata": {"labels": {"x": "y"}}},
        token=token,
        content_type="application/merge-patch+json",
    )
    assert code == 403
    # A token for another audience is not an API credential.
    bound = devcluster.request_token(NS, "trainer", [AUD])
    code, body, _ = await api.call("GET", path, token=bound)
    assert (code, body["message"]) == (401, "Unauthorized")
