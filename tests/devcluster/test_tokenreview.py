"""TokenReview and bearer authentication of service-account tokens (tokenreview.py).

Expected answers are copied from the k_* and l_* recordings (kube-apiserver v1.36.2).
"""

from __future__ import annotations

from typing import Any

import pytest

from trainjob_devcluster.auth.signing import b64url
from trainjob_devcluster.auth.tokens import SigningKeys, TokenIssuer
from trainjob_devcluster.common.go_text import go_quote
from trainjob_devcluster.common.status import ApiError

ISSUER = "https://kubernetes.default.svc.cluster.local"
AUD = "trainer.kubeflow.org/v1alpha1/namespaces/rec/trainjobs/tj-rec/status"
SA_UID = "d45f01f3-8678-4a0a-8120-0bb8ab1119b8"
POD = "tj-rec-node-0-0"
POD_UID = "cfe06852-5984-44ea-b543-8f312cb958b6"
NEW_POD_UID = "5f099833-ec0d-4495-be84-efca5bb3d8c8"
JTI = "ebe7c967-caad-4b1e-b403-d95f45f2d5d8"
NOW = 1796236425.0
EXP = 1796240025  # NOW + 3600
SERVICE_ACCOUNT = {"metadata": {"name": "trainer", "namespace": "rec", "uid": SA_UID}}
POD_REF = {"kind": "Pod", "apiVersion": "v1", "name": POD, "uid": POD_UID}
RECORDED_USER = {
    "username": "system:serviceaccount:rec:trainer",
    "uid": "d45f01f3-8678-4a0a-8120-0bb8ab1119b8",
    "groups": ["system:serviceaccounts", "system:serviceaccounts:rec", "system:authenticated"],
    "extra": {
        "authentication.kubernetes.io/credential-id": ["JTI=ebe7c967-caad-4b1e-b403-d95f45f2d5d8"],
        "authentication.kubernetes.io/pod-name": ["tj-rec-node-0-0"],
        "authentication.kubernetes.io/pod-uid": ["cfe06852-5984-44ea-b543-8f312cb958b6"],
    },
}


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Objects:
    """A dict-backed ``lookup(plural, namespace, name)``."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str, str], dict[str, Any]] = {}

    def put(self, plural: str, namespace: str, name: str, uid: str, **extra: Any) -> None:
        self.items[(plural, namespace, name)] = {"metadata": {"name": name, "uid": uid}, **extra}

    def drop(self, plural: str, namespace: str, name: str) -> None:
        del self.items[(plural, namespace, name)]

    def __call__(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.items.get((plural, namespace, name))


@pytest.fixture(scope="module")
def keys() -> SigningKeys:
    return SigningKeys()


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


@pytest.fixture
def issuer(keys: SigningKeys, clock: Clock) -> TokenIssuer:
    return TokenIssuer(ISSUER, [ISSUER], keys, clock, new_id=lambda: JTI)


@pytest.fixture
def objects() -> Objects:
    found = Objects()
    found.put("serviceaccounts", "rec", "trainer", SA_UID)
    found.put("pods", "rec", POD, POD_UID, spec={"serviceAccountName": "trainer"})
    return found


def _mint(issuer: TokenIssuer, objects: Objects, spec: dict[str, Any] | None = None) -> str:
    body = {"spec": spec if spec is not None else {"audiences": [AUD], "boundObjectRef": POD_REF}}
    token = issuer.request_token("rec", SERVICE_ACCOUNT, body, objects)["status"]["token"]
    assert isinstance(token, str)
    return token


def _review(
    issuer: TokenIssuer, objects: Objects, token: str, auds: list[str] | None = None
) -> Any:
    spec: dict[str, Any] = {"token": token}
    if auds is not None:
        spec["audiences"] = auds
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
    return issuer.review(body, objects)


def _error(issuer: TokenIssuer, objects: Objects, token: str, auds: list[str] | None = None) -> Any:
    answer = _review(issuer, objects, token, auds)
    assert answer["status"]["user"] == {}
    assert "authenticated" not in answer["status"]
    return answer["status"]["error"]


def test_valid_token_review_matches_the_recording(issuer: TokenIssuer, objects: Objects) -> None:
    token = _mint(issuer, objects)
    assert _review(issuer, objects, token, [AUD]) == {
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {},
        "spec": {"token": token, "audiences": [AUD]},
        "status": {"authenticated": True, "user": RECORDED_USER, "audiences": [AUD]},
    }


def test_audiences_are_the_intersection(issuer: TokenIssuer, objects: Objects) -> None:
    token = _mint(issuer, objects)
    answer = _review(issuer, objects, token, ["something-else", AUD])
    assert answer["spec"]["audiences"] == ["something-else", AUD]
    assert answer["status"] == {"authenticated": True, "user": RECORDED_USER, "audiences": [AUD]}


def test_wrong_audience_matches_the_recording(issuer: TokenIssuer, objects: Objects) -> None:
    token = _mint(issuer, objects)
    assert _review(issuer, objects, token, ["something-else"])["status"] == {
        "user": {},
        "error": "[invalid bearer token, token audiences "
        '["trainer.kubeflow.org/v1alpha1/namespaces/rec/trainjobs/tj-rec/status"] '
        'is invalid for the target audiences ["something-else"]]',
    }


def test_without_audiences_the_api_audience_is_required(
    issuer: TokenIssuer, objects: Objects
) -> None:
    token = _mint(issuer, objects)
    answer = _review(issuer, objects, token)
    assert answer["spec"] == {"token": token}
    assert answer["status"] == {
        "user": {},
        "error": "[invalid bearer token, token audiences "
        '["trainer.kubeflow.org/v1alpha1/namespaces/rec/trainjobs/tj-rec/status"] '
        'is invalid for the target audiences ["https://kubernetes.default.svc.cluster.local"]]',
    }


def test_audience_lists_print_like_go(issuer: TokenIssuer, objects: Objects) -> None:
    token = _mint(issuer, objects, {"audiences": ['say "hi"\n']})
    assert _error(issuer, objects, token, ["a", "b"]) == (
        '[invalid bearer token, token audiences ["say \\"hi\\"\\n"] is invalid for the target '
        'audiences ["a" "b"]]'
    )
    assert go_quote("tab\there\x00é") == '"tab\\there\\x00é"'


def test_garbage_matches_the_recording(issuer: TokenIssuer, objects: Objects) -> None:
    answer = _review(issuer, objects, "not-a-jwt", [AUD])
    assert answer["spec"] == {"token": "not-a-jwt", "audiences": [AUD]}
    assert answer["status"] == {"user": {}, "error": "invalid bearer token"}


def test_deleted_pod_invalidates_the_token_at_once(issuer: TokenIssuer, objects: Objects) -> None:
    """No 10-second cache of successes, unlike kube-apiserver's default."""
    token = _mint(issuer, objects)
    assert _review(issuer, objects, token, [AUD])["status"]["authenticated"] is True
    objects.drop("pods", "rec", POD)
    assert _error(issuer, objects, token, [AUD]) == (
        "[invalid bearer token, service account token has been invalidated]"
    )


def test_recreated_pod_matches_the_recording(issuer: TokenIssuer, objects: Objects) -> None:
    token = _mint(issuer, objects)
    objects.put("pods", "rec", POD, NEW_POD_UID, spec={"serviceAccountName": "trainer"})
    assert _error(issuer, objects, token, [AUD]) == (
        "[invalid bearer token, pod UID (5f099833-ec0d-4495-be84-efca5bb3d8c8) does not match "
        "service account pod ref claim (cfe06852-5984-44ea-b543-8f312cb958b6)]"
    )


def test_pod_being_deleted_counts_after_the_leeway(
    issuer: TokenIssuer, objects: Objects, clock: Clock
) -> None:
    token = _mint(issuer, objects)
    pod = objects("pods", "rec", POD)
    assert pod is not None
    pod["metadata"]["deletionTimestamp"] = "2026-12-02T18:33:45Z"
    clock.now = NOW + 60
    assert _review(issuer, objects, token, [AUD])["status"]["authenticated"] is True
    clock.now = NOW + 61
    assert _error(issuer, objects, token, [AUD]) == (
        "[invalid bearer token, service account token has been invalidated]"
    )


def test_service_account_deleted_or_recreated(issuer: TokenIssuer, objects: Objects) -> None:
    token = _mint(issuer, objects)
    objects.put("serviceaccounts", "rec", "trainer", "new-uid")
    assert _error(issuer, objects, token, [AUD]) == (
        f"[invalid bearer token, service account UID (new-uid) does not match claim ({SA_UID})]"
    )
    objects.drop("serviceaccounts", "rec", "trainer")
    assert _error(issuer, objects, token, [AUD]) == (
        '[invalid bearer token, serviceaccounts "trainer" not found]'
    )


def test_expiry_allows_one_minute_of_leeway(
    issuer: TokenIssuer, objects: Objects, clock: Clock
) -> None:
    token = _mint(issuer, objects)
    clock.now = EXP + 60
    assert _review(issuer, objects, token, [AUD])["status"]["authenticated"] is True
    clock.now = EXP + 61
    assert _error(issuer, objects, token, [AUD]) == (
        "[invalid bearer token, service account token has expired]"
    )


def _claims(**changes: Any) -> dict[str, Any]:
    claims: dict[str, Any] = {
        "aud": [AUD],
        "exp": EXP,
        "iat": int(NOW),
        "iss": ISSUER,
        "jti": JTI,
        "kubernetes.io": {
            "namespace": "rec",
            "pod": {"name": POD, "uid": POD_UID},
            "serviceaccount": {"name": "trainer", "uid": SA_UID},
        },
        "nbf": int(NOW),
        "sub": "system:serviceaccount:rec:trainer",
    }
    claims.update(changes)
    return claims


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"nbf": int(NOW) + 61}, "service account token is not valid yet"),
        ({"iat": int(NOW) + 61}, "service account token is issued in the future"),
    ],
)
def test_future_dates_are_refused(
    issuer: TokenIssuer, keys: SigningKeys, objects: Objects, changes: dict[str, Any], reason: str
) -> None:
    token = keys.sign(_claims(**changes))
    assert _error(issuer, objects, token, [AUD]) == f"[invalid bearer token, {reason}]"


def test_signature_failures(issuer: TokenIssuer, keys: SigningKeys, objects: Objects) -> None:
    stranger = SigningKeys().sign(_claims())
    assert _error(issuer, objects, stranger, [AUD]) == (
        "[invalid bearer token, invalid signature, no keys found]"
    )
    header, _, signature = keys.sign(_claims()).split(".")
    forged = ".".join([header, b64url(str(_claims(jti="x")).replace("'", '"').encode()), signature])
    assert _error(issuer, objects, forged, [AUD]) == (
        "[invalid bearer token, go-jose/go-jose: error in cryptographic primitive]"
    )
    other_issuer = keys.sign(_claims(iss="https://elsewhere"))
    assert _error(issuer, objects, other_issuer, [AUD]) == "invalid bearer token"


def test_node_claims_become_user_extra(issuer: TokenIssuer, objects: Objects) -> None:
    objects.put(
        "pods", "rec", POD, POD_UID, spec={"serviceAccountName": "trainer", "nodeName": "n1"}
    )
    token = _mint(issuer, objects)
    # A pod-bound token only reports its node (there are no Node objects to check).
    extra = _review(issuer, objects, token, [AUD])["status"]["user"]["extra"]
    assert extra == {
        "authentication.kubernetes.io/credential-id": [f"JTI={JTI}"],
        "authentication.kubernetes.io/node-name": ["n1"],
        "authentication.kubernetes.io/pod-name": [POD],
        "authentication.kubernetes.io/pod-uid": [POD_UID],
    }


def test_empty_token_is_a_bad_request(issuer: TokenIssuer, objects: Objects) -> None:
    with pytest.raises(ApiError) as exc:
        issuer.review({"spec": {}}, objects)
    assert exc.value.to_json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "token is required for TokenReview in authentication",
        "reason": "BadRequest",
        "code": 400,
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"spec": {"token": 5}}, "spec.token must be a string"),
        ({"spec": {"token": "t", "audiences": "a"}}, "spec.audiences must be a list of strings"),
        ({"spec": "t"}, "spec must be an object"),
        ({"metadata": [], "spec": {"token": "t"}}, "metadata must be an object"),
    ],
)
def test_wrongly_typed_fields_are_bad_requests(
    issuer: TokenIssuer, objects: Objects, body: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiError) as exc:
        issuer.review(body, objects)
    assert (exc.value.code, exc.value.reason, exc.value.message) == (400, "BadRequest", message)


def test_bearer_authentication_needs_an_api_audience(issuer: TokenIssuer, objects: Objects) -> None:
    api_token = _mint(issuer, objects, {"boundObjectRef": POD_REF})
    assert issuer.authenticate(api_token, objects) == RECORDED_USER
    # l_bound_token_direct_call: good signature, custom audience, so 401.
    assert issuer.authenticate(_mint(issuer, objects), objects) is None
    assert issuer.authenticate("not-a-jwt", objects) is None
    objects.drop("pods", "rec", POD)
    assert issuer.authenticate(api_token, objects) is None


def test_tokens_without_audience_are_for_the_api(
    issuer: TokenIssuer, keys: SigningKeys, objects: Objects
) -> None:
    legacy = _claims()
    del legacy["aud"]
    user = issuer.authenticate(keys.sign(legacy), objects)
    assert user is not None
    assert user["username"] == "system:serviceaccount:rec:trainer"
