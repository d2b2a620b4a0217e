"""A token's signature, checked offline against the issuer's JWKS (pyjwt does the crypto).

The header picks the key (``kid``) and names the algorithm; the algorithm must be in the
allowlist *and* among those the key's type allows, so ``none``, HMAC with the public
key as secret, or an RSA key used as an EC one never reach a verifier. A token without a
``kid`` is tried against each key that allows its algorithm, as kube-apiserver does.
"""

from __future__ import annotations

import json
from typing import Any

import jwt

from . import failures
from .failures import AuthFailure
from .jwks import KeyStore
from .keys import ALLOWED_ALGORITHMS, VerificationKey


def header_of(token: str) -> dict[str, Any]:
    """The unverified JOSE header; AuthFailure(MALFORMED) when there is none."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise AuthFailure(failures.MALFORMED) from exc
    return header


def allowed_algorithm(header: dict[str, Any]) -> str:
    """The header's ``alg`` if the allowlist has it; AuthFailure(ALGORITHM) otherwise."""
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in ALLOWED_ALGORITHMS:
        raise AuthFailure(failures.ALGORITHM)
    return alg


class SignatureVerifier:
    def __init__(self, keys: KeyStore) -> None:
        self.keys = keys
        # PyJWS keeps no per-token state: one instance serves every check.
        self._jws = jwt.PyJWS()

    async def verify(self, token: str) -> tuple[dict[str, Any], VerificationKey]:
        """The claims of ``token`` and the key that verified them; AuthFailure when no
        published key does."""
        header = header_of(token)
        alg = allowed_algorithm(header)
        kid = header.get("kid")
        candidates: list[VerificationKey]
        if kid:
            found = await self.keys.get_or_refresh(kid)
            if found is None:
                raise AuthFailure(failures.UNKNOWN_KID)
            if alg not in found.algorithms:
                raise AuthFailure(failures.ALGORITHM)
            candidates = [found]
        else:
            candidates = [k for k in self.keys.keys if alg in k.algorithms]
            if not candidates:
                raise AuthFailure(failures.UNKNOWN_KID)
        for key in candidates:
            try:
                decoded = self._jws.decode_complete(token, key.key, algorithms=[alg])
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError as exc:
                raise AuthFailure(failures.MALFORMED) from exc
            return _claims(decoded["payload"]), key
        raise AuthFailure(failures.SIGNATURE)


def _claims(payload: bytes) -> dict[str, Any]:
    try:
        claims = json.loads(payload)
    except ValueError as exc:
        raise AuthFailure(failures.MALFORMED) from exc
    if not isinstance(claims, dict):
        raise AuthFailure(failures.MALFORMED)
    return claims
