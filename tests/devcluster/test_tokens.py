"""Signing keys, OIDC discovery and TokenRequest, pinned to recorded kube-apiserver answers.

Expected values are copied from the i_* and j_* recordings (kube-apiserver v1.36.2,
issuer https://kubernetes.default.svc.cluster.local). The clock is fixed at the recorded
iat and the jti generator pinned, so minted claims equal the recorded decoded JWTs.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from trainjob_devcluster.auth.signing import b64url, key_id
from trainjob_devcluster.auth.tokens import SigningKeys, TokenIssuer
from trainjob_devcluster.common.status import ApiError
from trainjob_devcluster.http.nonresource import acceptable, not_acceptable

from .conftest import bad_request

ISSUER = "https://kubernetes.default.svc.cluster.local"
AUD = "trainer.kubeflow.org/v1alpha1/namespaces/rec/trainjobs/tj-rec/status"
SA_UID = "d45f01f3-8678-4a0a-8120-0bb8ab1119b8"
POD = "tj-rec-node-0-0"
POD_UID = "cfe06852-5984-44ea-b543-8f312cb958b6"
JTI = "ebe7c967-caad-4b1e-b403-d95f45f2d5d8"
NOW = 1796236425.0  # 2026-12-02T18:33:45Z, the recorded iat
RECORDED_KID = "7K4wdfjqlF8HNrI5hFwxBM5gnuKiD6KRagk1PGlsUTY"
RECORDED_N = (
    "5sEYhPINxuWZbmJNvWh9Fpr7LjubTr0vPXSNVQmymxxIj295f_KOYg4gmUeEYyZOw5fUlolV9XFUtz50i_hUI2Uzj-"
    "Iuu5gxRUOuiztbFDgiOUAKoqZQBMYlnyhKokOAkL2VgnJr04c_u3JMJEacpm-szCIqSIaRxEgfhzmTDh9CqxM5atZ"
    "snj7NChf2dhyF4G0Nwr_iyu4jGIQYd6-FmmERnlt-ch3Xx8Rd3uG6c223cgTiyvlJ_4UlA-EH32_O2H3yE5GJjkfItF"
    "5QhxwVSfh14TNj2zRyMVgolqxuoJkSGpjrLjP13ve4-AnOVtG4ViM2tGYDFJJ1-dIsk3m7uQ"
)
SERVICE_ACCOUNT = {
    "metadata": {"name": "trainer", "namespace": "rec", "uid": SA_UID},
}
BOUND_POD_REF = {"kind": "Pod", "apiVersion": "v1", "name": POD, "uid": POD_UID}


class Objects:
    """A dict-backed ``lookup(plural, namespace, name)``."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str, str], dict[str, Any]] = {}

    def put(self, plural: str, namespace: str, name: str, uid: str, **extra: Any) -> None:
        self.items[(plural, namespace, name)] = {"metadata": {"name": name, "uid": uid}, **extra}

    def __call__(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.items.get((plural, namespace, name))


def _b64json(segment: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))


@pytest.fixture(scope="module")
def keys() -> SigningKeys:
    return SigningKeys()


@pytest.fixture
def issuer(keys: SigningKeys) -> TokenIssuer:
    return TokenIssuer(ISSUER, [ISSUER], keys, lambda: NOW, new_id=lambda: JTI)


@pytest.fixture
def objects() -> Objects:
    found = Objects()
    found.put("pods", "rec", POD, POD_UID, spec={"serviceAccountName": "trainer"})
    return found


def _request(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}


def _error(exc: pytest.ExceptionInfo[ApiError]) -> dict[str, Any]:
    return exc.value.to_json()


# -- keys --------------------------------------------------------------------------------


def test_kid_is_the_recorded_derivation_of_the_public_key() -> None:
    n = int.from_bytes(base64.urlsafe_b64decode(RECORDED_N + "=" * (-len(RECORDED_N) % 4)), "big")
    public = rsa.RSAPublicNumbers(65537, n).public_key()
    assert key_id(public) == RECORDED_KID


def test_jwks_has_the_recorded_shape(keys: SigningKeys) -> None:
    jwks = keys.jwks()
    assert list(jwks) == ["keys"]
    [entry] = jwks["keys"]
    assert list(entry) == ["use", "kty", "kid", "alg", "n", "e"]
    assert entry["use"] == "sig"
    assert entry["kty"] == "RSA"
    assert entry["alg"] == "RS256"
    assert entry["e"] == "AQAB"
    assert entry["kid"] == keys.active_kid
    assert len(entry["n"]) == len(RECORDED_N)  # 2048-bit modulus, unpadded base64url
    n = int.from_bytes(base64.urlsafe_b64decode(entry["n"] + "=="), "big")
    assert key_id(rsa.RSAPublicNumbers(65537, n).public_key()) == entry["kid"]


def test_tokens_have_the_real_header_and_sorted_claims(keys: SigningKeys) -> None:
    token = keys.sign({"sub": "x", "aud": ["a"], "iss": ISSUER})
    header, payload, _ = token.split(".")
    assert base64.urlsafe_b64decode(header + "==") == (
        b'{"alg":"RS256","kid":"' + keys.active_kid.encode() + b'"}'
    )
    assert base64.urlsafe_b64decode(payload + "==") == (
        b'{"aud":["a"],"iss":"https://kubernetes.default.svc.cluster.local","sub":"x"}'
    )
    assert keys.verify(token) == {"sub": "x", "aud": ["a"], "iss": ISSUER}


def test_verify_refuses_tampering_unknown_keys_and_other_algorithms(keys: SigningKeys) -> None:
    token = keys.sign({"sub": "x"})
    header, _, signature = token.split(".")
    admin = b64url(b'{"sub":"admin"}')
    forged = f"{header}.{admin}.{signature}"
    assert keys.verify(forged) is None
    assert keys.verify(SigningKeys().sign({"sub": "x"})) is None
    unsigned = b64url(b'{"alg":"none","kid":"' + keys.active_kid.encode() + b'"}')
    assert keys.verify(f"{unsigned}.{b64url(b'{}')}.") is None
    assert keys.verify("not-a-jwt") is None
    assert keys.verify("") is None


def test_rotation_keeps_old_keys_until_retired() -> None:
    ring = SigningKeys()
    first = ring.active_kid
    old_token = ring.sign({"sub": "old"})
    second = ring.rotate()
    assert second != first
    assert ring.active_kid == second
    assert ring.kids() == [first, second]
    assert [k["kid"] for k in ring.jwks()["keys"]] == [first, second]
    new_token = ring.sign({"sub": "new"})
    assert _b64json(new_token.split(".")[0])["kid"] == second
    assert ring.verify(old_token) == {"sub": "old"}
    with pytest.raises(ValueError, match="the active signing key cannot be retired"):
        ring.retire(second)
    ring.retire(first)
    assert ring.verify(old_token) is None
    assert ring.verify(new_token) == {"sub": "new"}
    with pytest.raises(KeyError):
        ring.retire(first)
    third = ring.rotate()
    assert ring.retire_inactive() == [second]
    assert ring.kids() == [third]


# -- discovery ---------------------------------------------------------------------------


def test_openid_configuration_matches_the_recording(issuer: TokenIssuer) -> None:
    config = issuer.openid_configuration("https://127.0.0.1:38965/")
    assert json.dumps(config) == json.dumps(
        {
            "issuer": "https://kubernetes.default.svc.cluster.local",
            "jwks_uri": "https://127.0.0.1:38965/openid/v1/jwks",
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
        }
    )


@pytest.mark.parametrize(
    ("accept", "ok"),
    [
        (None, True),
        ("", True),
        ("*/*", True),
        ("application/jwk-set+json", True),
        ("application/json", False),
        ("application/json, */*;q=0.1", True),
        ("application/jwk-set+json; charset=utf-8", True),
        ("application/*", False),
        ("text/html", False),
    ],
)
def test_jwks_accept_negotiation(accept: str | None, ok: bool) -> None:
    assert acceptable(accept, "application/jwk-set+json") is ok


def test_jwks_406_body_matches_the_recording() -> None:
    error = not_acceptable("application/jwk-set+json")
    assert error.code == 406
    assert error.to_json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "406: Not Acceptable\n\nAvailable representations: application/jwk-set+json",
        "reason": "NotAcceptable",
        "details": {},
        "code": 406,
    }


# -- TokenRequest ------------------------------------------------------------------------


def test_bound_pod_token_matches_the_recording(
    issuer: TokenIssuer, keys: SigningKeys, objects: Objects
) -> None:
    spec = {"audiences": [AUD], "expirationSeconds": 3600, "boundObjectRef": BOUND_POD_REF}
    answer = issuer.request_token("rec", SERVICE_ACCOUNT, _request(spec), objects)
    token = answer["status"].pop("token")
    assert answer == {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {
            "name": "trainer",
            "namespace": "rec",
            "uid": SA_UID,
            "creationTimestamp": "2026-12-02T18:33:45Z",
        },
        "spec": spec,
        "status": {"expirationTimestamp": "2026-12-02T19:33:45Z"},
    }
    header, _, _ = token.split(".")
    assert _b64json(header) == {"alg": "RS256", "kid": keys.active_kid}
    assert keys.verify(token) == {
        "aud": [AUD],
        "exp": 1796240025,
        "iat": 1796236425,
        "iss": "https://kubernetes.default.svc.cluster.local",
        "jti": "ebe7c967-caad-4b1e-b403-d95f45f2d5d8",
        "kubernetes.io": {
            "namespace": "rec",
            "pod": {"name": POD, "uid": POD_UID},
            "serviceaccount": {"name": "trainer", "uid": SA_UID},
        },
        "nbf": 1796236425,
        "sub": "system:serviceaccount:rec:trainer",
    }


def test_defaults_are_the_api_audiences_and_one_hour(
    issuer: TokenIssuer, keys: SigningKeys, objects: Objects
) -> None:
    answer = issuer.request_token(
        "rec", SERVICE_ACCOUNT, _request({"boundObjectRef": BOUND_POD_REF}), objects
    )
    assert answer["spec"]["audiences"] == ["https://kubernetes.default.svc.cluster.local"]
    assert answer["spec"]["expirationSeconds"] == 3600
    claims = keys.verify(answer["status"]["token"])
    assert claims is not None
    assert claims["aud"] == ["https://kubernetes.default.svc.cluster.local"]


def test_default_jti_is_a_random_uuid(keys: SigningKeys, objects: Objects) -> None:
    plain = TokenIssuer(ISSUER, [ISSUER], keys, lambda: NOW)
    ids = set()
    for _ in range(2):
        claims = keys.verify(
            plain.request_token("rec", SERVICE_ACCOUNT, _request({}), objects)["status"]["token"]
        )
        assert claims is not None
        ids.add(claims["jti"])
    assert len(ids) == 2
    assert all(len(i) == 36 and i[14] == "4" for i in ids)


@pytest.mark.parametrize(
    ("seconds", "expires", "exp"),
    [(600, "2026-12-02T18:43:45Z", 1796237025), (94608000, "2029-12-01T18:33:45Z", 1890844425)],
)
def test_expiration_bounds_that_are_accepted(
    issuer: TokenIssuer, keys: SigningKeys, objects: Objects, seconds: int, expires: str, exp: int
) -> None:
    spec = {"audiences": [AUD], "expirationSeconds": seconds, "boundObjectRef": BOUND_POD_REF}
    answer = issuer.request_token("rec", SERVICE_ACCOUNT, _request(spec), objects)
    assert answer["status"]["expirationTimestamp"] == expires
    claims = keys.verify(answer["status"]["token"])
    assert claims is not None
    assert claims["exp"] == exp


def test_expiration_below_ten_minutes_is_invalid(issuer: TokenIssuer, objects: Objects) -> None:
    spec = {"audiences": [AUD], "expirationSeconds": 100, "boundObjectRef": BOUND_POD_REF}
    with pytest.raises(ApiError) as exc:
        issuer.request_token("rec", SERVICE_ACCOUNT, _request(spec), objects)
    assert _error(exc) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: '
        "Invalid value: 100: may not specify a duration less than 10 minutes",
        "reason": "Invalid",
        "details": {
            "group": "authentication.k8s.io",
            "kind": "TokenRequest",
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": "Invalid value: 100: "
                    "may not specify a duration less than 10 minutes",
                    "field": "spec.expirationSeconds",
                }
            ],
        },
        "code": 422,
    }


def test_expiration_above_two_to_the_32_is_invalid(issuer: TokenIssuer, objects: Objects) -> None:
    with pytest.raises(ApiError) as exc:
        issuer.request_token(
            "rec", SERVICE_ACCOUNT, _request({"expirationSeconds": 2**32 + 1}), objects
        )
    assert exc.value.code == 422
    assert exc.value.message == (
        'TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: '
        "Invalid value: 4294967297: may not specify a duration larger than 2^32 seconds"
    )


def test_unsupported_bound_kind_is_a_bad_request(issuer: TokenIssuer, objects: Objects) -> None:
    spec = {
        "audiences": [AUD],
        "boundObjectRef": {"kind": "ConfigMap", "apiVersion": "v1", "name": "x"},
    }
    with pytest.raises(ApiError) as exc:
        issuer.request_token("rec", SERVICE_ACCOUNT, _request(spec), objects)
    assert _error(exc) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "cannot bind token to object of type /v1, Kind=ConfigMap",
        "reason": "BadRequest",
        "code": 400,
    }


def test_pod_in_another_group_is_not_a_pod(issuer: TokenIssuer, objects: Objects) -> None:
    spec = {"boundObjectRef": {"kind": "Pod", "apiVersion": "apps/v1", "name": POD}}
    with pytest.raises(ApiError, match=r"^cannot bind token to object of type apps/v1, Kind=Pod$"):
        issuer.request_token("rec", SERVICE_ACCOUNT, _request(spec), objects)


def test_missing_pod_is_not_found(issuer: TokenIssuer, objects: Objects) -> None:
    ref = {"kind": "Pod", "apiVersion": "v1", "name": "no-such-pod", "uid": ""}
    with pytest.raises(ApiError) as exc:
        issuer.request_token("rec", SERVICE_ACCOUNT, _request({"boundObjectRef": ref}), objects)
    assert _error(exc) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "no-such-pod" not found',
        "reason": "NotFound",
        "details": {"name": "no-such-pod", "kind": "pods"},
        "code": 404,
    }


def test_wrong_pod_uid_is_a_conflict(issuer: TokenIssuer, objects: Objects) -> None:
    ref = dict(BOUND_POD_REF, uid="00000000-0000-0000-0000-000000000000")
    with pytest.raises(ApiError) as exc:
        issuer.request_token("rec", SERVICE_ACCOUNT, _request({"boundObjectRef": ref}), objects)
    assert _error(exc) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Operation cannot be fulfilled on Pod "tj-rec-node-0-0": the UID in the bound '
        "object reference (00000000-0000-0000-0000-000000000000) does not match the UID in "
        "record. The object might have been deleted and then recreated",
        "reason": "Conflict",
        "details": {"name": "tj-rec-node-0-0", "kind": "Pod"},
        "code": 409,
    }


def test_pod_running_as_another_account_is_a_bad_request(
    issuer: TokenIssuer, objects: Objects
) -> None:
    other = {"metadata": {"name": "other-sa", "namespace": "rec", "uid": "u-other"}}
    with pytest.raises(ApiError) as exc:
        issuer.request_token("rec", other, _request({"boundObjectRef": BOUND_POD_REF}), objects)
    assert _error(exc) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'cannot bind token for serviceaccount "other-sa" to pod running with '
        "different serviceaccount name.",
        "reason": "BadRequest",
        "code": 400,
    }


def test_pod_without_account_name_runs_as_default(issuer: TokenIssuer, objects: Objects) -> None:
    objects.put("pods", "rec", "bare", "u-bare", spec={})
    default = {"metadata": {"name": "default", "namespace": "rec", "uid": "u-default"}}
    ref = {"kind": "Pod", "apiVersion": "v1", "name": "bare"}
    answer = issuer.request_token("rec", default, _request({"boundObjectRef": ref}), objects)
    assert answer["spec"]["boundObjectRef"] == ref


@pytest.mark.parametrize("kind", ["Secret", "Node"])
def test_only_pods_are_bound_objects(issuer: TokenIssuer, objects: Objects, kind: str) -> None:
    """A real server also binds to Secrets and Nodes; the development cluster does not."""
    ref = {"kind": kind, "apiVersion": "v1", "name": "n1"}
    with pytest.raises(ApiError) as exc:
        issuer.request_token("rec", SERVICE_ACCOUNT, _request({"boundObjectRef": ref}), objects)
    assert (exc.value.code, exc.value.reason, exc.value.message) == (
        400,
        "BadRequest",
        f"cannot bind token to object of type /v1, Kind={kind}",
    )


def test_scheduled_pod_adds_node_claims(
    issuer: TokenIssuer, keys: SigningKeys, objects: Objects
) -> None:
    objects.put(
        "pods", "rec", POD, POD_UID, spec={"serviceAccountName": "trainer", "nodeName": "n1"}
    )
    answer = issuer.request_token(
        "rec", SERVICE_ACCOUNT, _request({"boundObjectRef": BOUND_POD_REF}), objects
    )
    claims = keys.verify(answer["status"]["token"])
    assert claims is not None
    # There are no Node objects: as upstream without one, only the node's name.
    assert claims["kubernetes.io"]["node"] == {"name": "n1"}


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ({"kind": "Pod", "apiVersion": "v1"}, "Name parameter required."),
        ({"kind": "Pod", "name": "a/b"}, "Name parameter invalid: \"a/b\": may not contain '/'"),
        ({"kind": "Pod", "name": ".."}, "Name parameter invalid: \"..\": may not be '..'"),
    ],
)
def test_bound_object_lookups_fail_like_the_storage(
    issuer: TokenIssuer, objects: Objects, ref: dict[str, str], message: str
) -> None:
    with pytest.raises(ApiError) as exc:
        issuer.request_token("rec", SERVICE_ACCOUNT, _request({"boundObjectRef": ref}), objects)
    assert exc.value.message == message


def test_body_metadata_is_ignored(issuer: TokenIssuer, objects: Objects) -> None:
    """A real server refuses another name, namespace or uid, and echoes labels and
    annotations; the development cluster ignores the request's metadata."""
    body = {"metadata": {"name": "default", "uid": "nope", "labels": {"a": "b"}}, "spec": {}}
    answer = issuer.request_token("rec", SERVICE_ACCOUNT, body, objects)
    assert answer["metadata"] == {
        "name": "trainer",
        "namespace": "rec",
        "uid": SA_UID,
        "creationTimestamp": "2026-12-02T18:33:45Z",
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"spec": {"expirationSeconds": "3600"}},
            "spec.expirationSeconds must be a 64-bit integer",
        ),
        ({"spec": {"expirationSeconds": 36.5}}, "spec.expirationSeconds must be a 64-bit integer"),
        ({"spec": {"expirationSeconds": True}}, "spec.expirationSeconds must be a 64-bit integer"),
        ({"spec": {"expirationSeconds": 2**63}}, "spec.expirationSeconds must be a 64-bit integer"),
        ({"spec": {"audiences": "a"}}, "spec.audiences must be a list of strings"),
        ({"spec": {"audiences": ["a", 1]}}, "spec.audiences must be a list of strings"),
        ({"spec": {"boundObjectRef": "pod"}}, "spec.boundObjectRef must be an object"),
        ({"spec": {"boundObjectRef": {"kind": 1}}}, "spec.boundObjectRef.kind must be a string"),
        (
            {"spec": {"boundObjectRef": {"kind": "Pod", "name": ["p"]}}},
            "spec.boundObjectRef.name must be a string",
        ),
        ({"spec": []}, "spec must be an object"),
        ({"metadata": "trainer"}, "metadata must be an object"),
    ],
)
def test_wrongly_typed_fields_are_bad_requests(
    issuer: TokenIssuer, objects: Objects, body: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiError) as exc:
        issuer.request_token("rec", SERVICE_ACCOUNT, body, objects)
    assert exc.value.to_json() == bad_request(message)


def test_null_fields_read_as_absent(issuer: TokenIssuer, objects: Objects) -> None:
    spec = {"audiences": None, "expirationSeconds": None, "boundObjectRef": None}
    answer = issuer.request_token("rec", SERVICE_ACCOUNT, _request(spec), objects)
    assert answer["spec"] == {"audiences": [ISSUER], "expirationSeconds": 3600}
