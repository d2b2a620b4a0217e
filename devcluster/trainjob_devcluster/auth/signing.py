"""The RSA keys that sign and verify the development cluster's service-account tokens.

Shapes follow kube-apiserver: RS256 only, a ``kid`` derived from the public key, and a
JWKS entry ``{use, kty, kid, alg, n, e}``. Keys are minted in memory at start and never
written anywhere.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ALGORITHM = "RS256"
# Reasons kube-apiserver gives (inside a TokenReview error) for a token from its own
# issuer that no current key verifies. The first is go-jose's text.
CRYPTO_FAILURE = "go-jose/go-jose: error in cryptographic primitive"
NO_KEYS_FOUND = "invalid signature, no keys found"


def b64url(data: bytes) -> str:
    """Unpadded base64url, as JOSE uses everywhere."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _int_b64url(value: int) -> str:
    return b64url(value.to_bytes((value.bit_length() + 7) // 8 or 1, "big"))


def key_id(public_key: rsa.RSAPublicKey) -> str:
    """The ``kid`` kube-apiserver derives: base64url(SHA-256(DER SubjectPublicKeyInfo))."""
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return b64url(hashlib.sha256(der).digest())


class MalformedToken(Exception):
    """Not a compact RS256 JWS with a JSON object payload.

    The real server's JWT authenticator passes on such tokens silently, so they end as
    a bare ``invalid bearer token``.
    """


class SignatureRejected(Exception):
    """A well-formed JWS that no key in the set verifies; ``str()`` is the server's reason."""


class SigningKeys:
    """RSA signing keys: one active signer plus older keys still published for verification.

    ``rotate()`` makes a new key the signer; the previous ones stay in the JWKS (so
    tokens they signed still verify) until ``retire(kid)`` or ``retire_inactive()``.
    """

    def __init__(self, key_size: int = 2048) -> None:
        self._key_size = key_size
        self._private: dict[str, rsa.RSAPrivateKey] = {}
        self._public: dict[str, rsa.RSAPublicKey] = {}
        self._active = ""
        # PyJWS holds no per-token state; one instance serves every sign and verify.
        self._jws = jwt.PyJWS()
        self.rotate()

    @property
    def active_kid(self) -> str:
        return self._active

    def kids(self) -> list[str]:
        """Every published key ID, oldest first."""
        return list(self._private)

    def rotate(self) -> str:
        """Mint a new key, make it the signer and return its ``kid``."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=self._key_size)
        kid = key_id(key.public_key())
        self._private[kid] = key
        self._public[kid] = key.public_key()
        self._active = kid
        return kid

    def retire(self, kid: str) -> None:
        """Stop publishing (and accepting) a previous key."""
        if kid == self._active:
            raise ValueError("the active signing key cannot be retired; rotate() first")
        if kid not in self._private:
            raise KeyError(kid)
        del self._private[kid]
        del self._public[kid]

    def retire_inactive(self) -> list[str]:
        """Retire every key but the signer; return the retired IDs."""
        retired = [kid for kid in self._private if kid != self._active]
        for kid in retired:
            self.retire(kid)
        return retired

    def sign(self, claims: Mapping[str, Any]) -> str:
        """A compact JWS with header ``{"alg":"RS256","kid":...}`` over ``claims``.

        Claims are serialized with sorted keys, as go-jose does, so decoded tokens read
        the same as the real server's.
        """
        payload = json.dumps(claims, sort_keys=True, separators=(",", ":")).encode("utf-8")
        return self._jws.encode(
            payload,
            self._private[self._active],
            algorithm=ALGORITHM,
            # typ None drops PyJWT's default "typ":"JWT"; the real header has none.
            headers={"kid": self._active, "typ": None},
        )

    def jwks(self) -> dict[str, Any]:
        """The JSON Web Key Set served at ``/openid/v1/jwks``."""
        keys = []
        for kid, public in self._public.items():
            numbers = public.public_numbers()
            keys.append(
                {
                    "use": "sig",
                    "kty": "RSA",
                    "kid": kid,
                    "alg": ALGORITHM,
                    "n": _int_b64url(numbers.n),
                    "e": _int_b64url(numbers.e),
                }
            )
        return {"keys": keys}

    def verify_signature(self, token: str) -> dict[str, Any]:
        """The claims of a token signed by a published key.

        Like the real server, a ``kid`` picks exactly one key (an unknown ``kid`` finds
        none) and a token without one is tried against every key. Raises
        :class:`MalformedToken` or :class:`SignatureRejected`; never checks claims.
        """
        try:
            header = self._jws.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise MalformedToken("not a JWS") from exc
        # Only RS256 is ever issued; refusing other algorithms up front also rules out
        # "none" and HMAC-with-the-public-key confusion.
        if header.get("alg") != ALGORITHM:
            raise MalformedToken("unsupported algorithm")
        kid = header.get("kid") or ""
        if kid:
            candidates = [self._public[kid]] if kid in self._public else []
        else:
            candidates = list(self._public.values())
        if not candidates:
            raise SignatureRejected(NO_KEYS_FOUND)
        for public in candidates:
            try:
                decoded = self._jws.decode_complete(token, public, algorithms=[ALGORITHM])
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError as exc:
                raise MalformedToken("not a JWS") from exc
            try:
                claims = json.loads(decoded["payload"])
            except ValueError as exc:
                raise MalformedToken("payload is not JSON") from exc
            if not isinstance(claims, dict):
                raise MalformedToken("payload is not a JSON object")
            return claims
        raise SignatureRejected(CRYPTO_FAILURE)

    def verify(self, token: str) -> dict[str, Any] | None:
        """The claims of a token signed by a published key, or None."""
        try:
            return self.verify_signature(token)
        except (MalformedToken, SignatureRejected):
            return None
