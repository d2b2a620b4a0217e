"""Verification keys from a JWKS, the algorithm allowlist, the refresh gate, and signature
checks against a key store fed by a local function (no network)."""

from __future__ import annotations

import json
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from trainjob_status_server.auth.failures import AuthFailure
from trainjob_status_server.auth.jwks import KeyStore, RefreshGate
from trainjob_status_server.auth.keys import KeySet, key_algorithms
from trainjob_status_server.auth.signature import SignatureVerifier

from .test_auth_support import FakeClock, b64json, hmac_signed, unsigned

CLAIMS = {"iss": "https://issuer", "sub": "system:serviceaccount:ns:sa", "exp": 2_000_000_000}
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()


def jwk(key: Any, kid: str, **extra: Any) -> dict[str, Any]:
    public = key.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        entry = RSAAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        entry = ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        entry = OKPAlgorithm.to_jwk(public, as_dict=True)
    entry.pop("key_ops", None)
    return {**entry, "kid": kid, "use": "sig", **extra}


# -- algorithms by key type ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "algorithms"),
    [
        ({"kty": "RSA"}, {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}),
        ({"kty": "RSA", "alg": "PS256"}, {"PS256"}),
        ({"kty": "RSA", "alg": "HS256"}, set()),
        ({"kty": "RSA", "alg": "none"}, set()),
        ({"kty": "RSA", "alg": "ES256"}, set()),
        ({"kty": "EC", "crv": "P-256"}, {"ES256"}),
        ({"kty": "EC", "crv": "P-384"}, {"ES384"}),
        ({"kty": "EC", "crv": "P-521"}, {"ES512"}),
        ({"kty": "EC", "crv": "P-384", "alg": "ES256"}, set()),
        ({"kty": "EC", "crv": "secp256k1"}, set()),
        ({"kty": "OKP", "crv": "Ed25519"}, {"EdDSA"}),
        ({"kty": "oct", "k": "c2VjcmV0"}, set()),
        ({"kty": "oct", "alg": "HS256"}, set()),
    ],
)
def test_algorithms_follow_the_key_type(entry: dict[str, Any], algorithms: set[str]) -> None:
    assert key_algorithms(entry) == algorithms


def test_unusable_entries_are_skipped_with_a_reason() -> None:
    document = {
        "keys": [
            jwk(RSA_KEY, "rsa"),
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
            jwk(RSA_KEY, "enc", use="enc"),
            {**jwk(RSA_KEY, "private"), "d": "AQAB"},
            jwk(RSA_KEY, ""),
            jwk(RSA_KEY, "rsa"),
            {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
            "junk",
        ]
    }
    keys, skipped = KeySet.from_jwks(document)
    assert keys.kids() == ["rsa"]
    assert skipped == {
        "hmac": "not a public key",
        "enc": "not a signing key",
        "private": "not a public key",
        "#4": "no kid",
        "rsa": "duplicate kid",
        "broken": "unreadable key: InvalidKeyError",
        "#7": "not an object",
    }


@pytest.mark.parametrize("document", [None, [], {"keys": "x"}, {}])
def test_a_document_that_is_no_jwks(document: Any) -> None:
    with pytest.raises(ValueError, match="not a JWK set"):
        KeySet.from_jwks(document)


def test_a_refresh_keeps_the_objects_of_unchanged_keys() -> None:
    first, _ = KeySet.from_jwks({"keys": [jwk(RSA_KEY, "a"), jwk(EC_KEY, "b")]})
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    second, _ = KeySet.from_jwks({"keys": [jwk(RSA_KEY, "a"), jwk(other, "b")]}, first)
    a = first.get("a")
    assert a is not None
    assert second.get("a") is a
    assert a in second
    b = first.get("b")
    assert b is not None
    assert b not in second  # same kid, another key: a cache must not trust it


def test_the_refresh_gate_opens_once_per_interval() -> None:
    clock = FakeClock(0.0)
    gate = RefreshGate(30.0, clock)
    assert gate.allow()
    assert not gate.allow()
    clock.advance(29.9)
    assert not gate.allow()
    clock.advance(0.1)
    assert gate.allow()


# -- signatures against a store -------------------------------------------------------------------


class Issuer:
    """A JWKS that tests change, served to a KeyStore through a plain function."""

    def __init__(self, *entries: dict[str, Any]) -> None:
        self.document: Any = {"keys": list(entries)}
        self.fetches = 0
        self.fail = False

    async def fetch(self) -> Any:
        self.fetches += 1
        if self.fail:
            raise OSError("unreachable")
        return json.loads(json.dumps(self.document))


async def verifier(issuer: Issuer, clock: FakeClock | None = None) -> SignatureVerifier:
    store = KeyStore(issuer.fetch, refresh_interval=30.0, clock=clock or FakeClock(0.0))
    assert await store.refresh()
    return SignatureVerifier(store)


def sign(key: Any, alg: str, kid: str | None, claims: dict[str, Any] = CLAIMS) -> str:
    headers = {"typ": None} if kid is None else {"kid": kid, "typ": None}
    return jwt.encode(claims, key, algorithm=alg, headers=headers)


async def reason(check: SignatureVerifier, token: str) -> str | None:
    try:
        await check.verify(token)
    except AuthFailure as failure:
        return failure.reason
    return None


@pytest.mark.parametrize(
    ("key", "alg"),
    [
        (RSA_KEY, "RS256"),
        (RSA_KEY, "PS256"),
        (RSA_KEY, "RS512"),
        (EC_KEY, "ES256"),
        (ED_KEY, "EdDSA"),
    ],
)
async def test_allowed_algorithms_verify(key: Any, alg: str) -> None:
    check = await verifier(Issuer(jwk(key, "k")))
    claims, used = await check.verify(sign(key, alg, "k"))
    assert claims == CLAIMS
    assert used.kid == "k"


async def test_an_algorithm_the_key_type_does_not_allow_is_refused() -> None:
    check = await verifier(Issuer(jwk(RSA_KEY, "r", alg="RS256"), jwk(EC_KEY, "e")))
    assert await reason(check, sign(RSA_KEY, "PS256", "r")) == "algorithm"
    assert await reason(check, sign(RSA_KEY, "RS256", "e")) == "algorithm"


async def test_none_and_hmac_never_verify_even_with_an_oct_key_published() -> None:
    check = await verifier(
        Issuer(jwk(RSA_KEY, "r"), {"kty": "oct", "k": "c2VjcmV0", "kid": "h", "alg": "HS256"})
    )
    assert await reason(check, unsigned({"alg": "none", "kid": "r"}, CLAIMS)) == "algorithm"
    assert await reason(check, hmac_signed({"alg": "HS256", "kid": "h"}, CLAIMS, b"secret")) == (
        "algorithm"
    )


async def test_a_token_without_kid_is_tried_against_each_fitting_key() -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    check = await verifier(Issuer(jwk(other, "a"), jwk(EC_KEY, "b"), jwk(RSA_KEY, "c")))
    _, used = await check.verify(sign(RSA_KEY, "RS256", None))
    assert used.kid == "c"
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert await reason(check, sign(stranger, "RS256", None)) == "signature"


@pytest.mark.parametrize(
    "token",
    ["", "abc", "a.b.c", f"{b64json({'alg': 'RS256', 'kid': 7})}.{b64json(CLAIMS)}.AAAA"],
)
async def test_garbage_is_malformed(token: str) -> None:
    check = await verifier(Issuer(jwk(RSA_KEY, "k")))
    assert await reason(check, token) == "malformed"


async def test_a_payload_that_is_not_an_object_is_malformed() -> None:
    check = await verifier(Issuer(jwk(RSA_KEY, "k")))
    token = jwt.PyJWS().encode(b"[1, 2]", RSA_KEY, algorithm="RS256", headers={"kid": "k"})
    assert await reason(check, token) == "malformed"


async def test_an_unknown_kid_refreshes_at_most_once_per_interval() -> None:
    issuer, clock = Issuer(jwk(RSA_KEY, "old")), FakeClock(0.0)
    check = await verifier(issuer, clock)
    new = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    issuer.document["keys"].append(jwk(new, "new"))
    # The first unknown kid refreshes and finds the new key.
    await check.verify(sign(new, "RS256", "new"))
    assert issuer.fetches == 2
    # That spent this interval's refresh: forged kids now cost nothing.
    for n in range(5):
        assert await reason(check, sign(new, "RS256", f"forged-{n}")) == "unknown_kid"
    assert issuer.fetches == 2
    clock.advance(30)
    assert await reason(check, sign(new, "RS256", "forged-again")) == "unknown_kid"
    assert issuer.fetches == 3


async def test_a_failed_or_empty_refresh_keeps_the_keys() -> None:
    issuer = Issuer(jwk(RSA_KEY, "k"))
    changes: list[tuple[list[str], list[str]]] = []
    store = KeyStore(
        issuer.fetch, on_change=lambda old, new: changes.append((old.kids(), new.kids()))
    )
    assert await store.refresh()
    assert store.loaded.is_set()
    issuer.fail = True
    assert not await store.refresh()
    issuer.fail, issuer.document = False, {"keys": [{"kty": "oct", "k": "eA", "kid": "h"}]}
    assert not await store.refresh()
    assert store.keys.kids() == ["k"]
    issuer.document = {"keys": [jwk(EC_KEY, "e")]}
    assert await store.refresh()
    assert changes == [([], ["k"]), (["k"], ["e"])]


async def test_an_empty_jwks_never_makes_the_store_loaded() -> None:
    issuer = Issuer()
    store = KeyStore(issuer.fetch)
    assert not await store.refresh()
    assert not store.loaded.is_set()
    # Before the first load an unknown kid waits for nothing (the server is not ready).
    assert await store.get_or_refresh("k") is None
    assert issuer.fetches == 1
