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

from trainjob_devcluster.auth.signing import b64url
from trainjob_devcluster.auth.tokens import (
    SigningKeys,
    TokenIssuer,
    check_target,
    key_id,
    service_account_not_found,
)
from trainjob_devcluster.common.status import ApiError

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
    """A dict-backed ``lookup(kind, namespace, name)``."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str, str], dict[str, Any]] = {}

    def put(self, kind: str, namespace: str, name: str, uid: str, **extra: Any) -> None:
        self.items[(kind, namespace, name)] = {"metadata": {"name": name, "uid": uid}, **extra}

    def __call__(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.items.get((kind, namespace, name))


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
    found.put("Pod", "rec", POD, POD_UID, spec={"serviceAccountName": "trainer"})
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
    assert TokenIssuer.jwks_acceptable(accept) is ok


def test_jwks_406_body_matches_the_recording() -> None:
    error = TokenIssuer.jwks_not_acceptable()
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


def test_openid_configuration_accepts_json() -> None:
    assert TokenIssuer.openid_configuration_acceptable("application/json")
    assert not TokenIssuer.openid_configuration_acceptable("application/jwk-set+json")


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


def test_missing_service_account_builder_matches_the_recording() -> None:
    assert service_account_not_found("no-such-sa").to_json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'serviceaccounts "no-such-sa" not found',
        "reason": "NotFound",
        "details": {"name": "no-such-sa", "kind": "serviceaccounts"},
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
    objects.put("Pod", "rec", "bare", "u-bare", spec={})
    default = {"metadata": {"name": "default", "namespace": "rec", "uid": "u-default"}}
    ref = {"kind": "Pod", "apiVersion": "v1", "name": "bare"}
    answer = issuer.request_token("rec", default, _request({"boundObjectRef": ref}), objects)
    assert answer["spec"]["boundObjectRef"] == ref


def test_secret_and_node_bindings_carry_their_claims(
    issuer: TokenIssuer, keys: SigningKeys, objects: Objects
) -> None:
    objects.put("Secret", "rec", "s", "u-secret")
    ref = {"kind": "Secret", "apiVersion": "v1", "name": "s"}
    answer = issuer.request_token(
        "rec", SERVICE_ACCOUNT, _request({"boundObjectRef": ref}), objects
    )
    claims = keys.verify(answer["status"]["token"])
    assert claims is not None
    assert claims["kubernetes.io"] == {
        "namespace": "rec",
        "secret": {"name": "s", "uid": "u-secret"},
        "serviceaccount": {"name": "trainer", "uid": SA_UID},
    }
    objects.put("Node", "", "n1", "u-node")
    ref = {"kind": "Node", "apiVersion": "v1", "name": "n1"}
    answer = issuer.request_token(
        "rec", SERVICE_ACCOUNT, _request({"boundObjectRef": ref}), objects
    )
    claims = keys.verify(answer["status"]["token"])
    assert claims is not None
    assert claims["kubernetes.io"]["node"] == {"name": "n1", "uid": "u-node"}


def test_scheduled_pod_adds_node_claims(
    issuer: TokenIssuer, keys: SigningKeys, objects: Objects
) -> None:
    objects.put(
        "Pod", "rec", POD, POD_UID, spec={"serviceAccountName": "trainer", "nodeName": "n1"}
    )
    answer = issuer.request_token(
        "rec", SERVICE_ACCOUNT, _request({"boundObjectRef": BOUND_POD_REF}), objects
    )
    claims = keys.verify(answer["status"]["token"])
    assert claims is not None
    # Without a Node object, upstream still records the node's name.
    assert claims["kubernetes.io"]["node"] == {"name": "n1"}
    objects.put("Node", "", "n1", "u-node")
    answer = issuer.request_token(
        "rec", SERVICE_ACCOUNT, _request({"boundObjectRef": BOUND_POD_REF}), objects
    )
    claims = keys.verify(answer["status"]["token"])
    assert claims is not None
    assert claims["kubernetes.io"]["node"] == {"name": "n1", "uid": "u-node"}


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ({"kind": "Pod", "apiVersion": "v1"}, "Name parameter required."),
        ({"kind": "Secret", "name": "a/b"}, "Name parameter invalid: \"a/b\": may not contain '/'"),
        ({"kind": "Node", "name": "missing"}, 'nodes "missing" not found'),
        ({"kind": "Secret", "name": "missing"}, 'secrets "missing" not found'),
    ],
)
def test_bound_object_lookups_fail_like_the_storage(
    issuer: TokenIssuer, objects: Objects, ref: dict[str, str], message: str
) -> None:
    with pytest.raises(ApiError) as exc:
        issuer.request_token("rec", SERVICE_ACCOUNT, _request({"boundObjectRef": ref}), objects)
    assert exc.value.message == message


def test_body_metadata_must_name_the_account(issuer: TokenIssuer, objects: Objects) -> None:
    body = {"metadata": {"name": "default"}, "spec": {}}
    with pytest.raises(ApiError) as exc:
        issuer.request_token("rec", SERVICE_ACCOUNT, body, objects)
    assert exc.value.code == 422
    assert exc.value.message == (
        'TokenRequest.authentication.k8s.io "trainer" is invalid: metadata.name: Invalid value: '
        '"default": must match the service account name if specified'
    )
    with pytest.raises(ApiError, match=r'metadata\.namespace: Invalid value: "x": must match'):
        check_target("rec", "trainer", {"metadata": {"namespace": "x"}})
    check_target("rec", "trainer", {"metadata": {"name": "trainer", "namespace": "rec"}})


def test_body_uid_must_be_the_accounts(issuer: TokenIssuer, objects: Objects) -> None:
    with pytest.raises(ApiError) as exc:
        issuer.request_token("rec", SERVICE_ACCOUNT, {"metadata": {"uid": "nope"}}, objects)
    assert exc.value.code == 409
    assert exc.value.message == (
        'Operation cannot be fulfilled on TokenRequest.authentication.k8s.io "trainer": the UID in '
        f"the token request (nope) does not match the UID of the service account ({SA_UID})"
    )


@pytest.mark.parametrize(
    ("spec", "tail"),
    [
        (
            {"expirationSeconds": "3600"},
            "string into Go struct field TokenRequestSpec.spec.expirationSeconds of type int64",
        ),
        (
            {"expirationSeconds": 36.5},
            "number 36.5 into Go struct field "
            "TokenRequestSpec.spec.expirationSeconds of type int64",
        ),
        (
            {"audiences": "a"},
            "string into Go struct field TokenRequestSpec.spec.audiences of type []string",
        ),
        (
            {"boundObjectRef": {"kind": 1}},
            "number into Go struct field "
            "BoundObjectReference.spec.boundObjectRef.kind of type string",
        ),
    ],
)
def test_wrongly_typed_fields_are_bad_requests(
    issuer: TokenIssuer, objects: Objects, spec: dict[str, Any], tail: str
) -> None:
    with pytest.raises(ApiError) as exc:
        issuer.request_token("rec", SERVICE_ACCOUNT, _request(spec), objects)
    assert exc.value.code == 400
    assert exc.value.message == (
        'TokenRequest in version "v1" cannot be handled as a TokenRequest: json: cannot unmarshal '
        + tail
    )


def test_null_fields_read_as_absent(issuer: TokenIssuer, objects: Objects) -> None:
    spec = {"audiences": None, "expirationSeconds": None, "boundObjectRef": None}
    answer = issuer.request_token("rec", SERVICE_ACCOUNT, _request(spec), objects)
    assert answer["spec"] == {"audiences": [ISSUER], "expirationSeconds": 3600}
