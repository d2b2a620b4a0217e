"""The issuer's public keys as verification keys, and which one may check a token (pure).

A JWKS entry becomes a :class:`VerificationKey` with the algorithms its key type allows
(RSA: RS*/PS*; EC: the one ES* of its curve; OKP: EdDSA), narrowed to its ``alg`` member
when it has one. Symmetric (``oct``) keys, private keys, keys for encryption and
anything outside the allowlist are skipped, so ``none`` and HMAC can never verify a
token, whatever its header says.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jwt

ALLOWED_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
_RSA = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
_EC_BY_CURVE = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}
_OKP_CURVES = frozenset({"Ed25519", "Ed448"})


@dataclass(frozen=True, eq=False)
class VerificationKey:
    """One usable public key. Compared by identity: a refresh that finds the same JWK
    keeps the same object, so a verified-token cache can tell "still this key" with
    ``is``."""

    kid: str
    key: Any  # a cryptography public key object
    algorithms: frozenset[str]
    jwk: str  # canonical JSON of the entry, to recognise it across refreshes


def key_algorithms(jwk: Mapping[str, Any]) -> frozenset[str]:
    """The allowlisted algorithms this JWK may verify (empty: unusable)."""
    kty, crv = jwk.get("kty"), jwk.get("crv")
    if kty == "RSA":
        allowed = _RSA
    elif kty == "EC" and isinstance(crv, str) and crv in _EC_BY_CURVE:
        allowed = frozenset({_EC_BY_CURVE[crv]})
    elif kty == "OKP" and crv in _OKP_CURVES:
        allowed = frozenset({"EdDSA"})
    else:
        return frozenset()
    alg = jwk.get("alg")
    if alg is None:
        return allowed
    return allowed & {alg} if isinstance(alg, str) else frozenset()


def _skip_reason(jwk: Any) -> str | None:
    if not isinstance(jwk, dict):
        return "not an object"
    if not isinstance(jwk.get("kid"), str) or not jwk["kid"]:
        return "no kid"
    if jwk.get("use", "sig") != "sig":
        return "not a signing key"
    if "d" in jwk or jwk.get("kty") == "oct":
        return "not a public key"
    if not key_algorithms(jwk):
        return "no allowed algorithm"
    return None


class KeySet:
    """Verification keys by kid (immutable once built)."""

    def __init__(self, keys: Mapping[str, VerificationKey] | None = None) -> None:
        self._keys = dict(keys or {})

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[VerificationKey]:
        return iter(self._keys.values())

    def __contains__(self, key: VerificationKey) -> bool:
        return self._keys.get(key.kid) is key

    def get(self, kid: str) -> VerificationKey | None:
        return self._keys.get(kid)

    def kids(self) -> list[str]:
        return list(self._keys)

    @classmethod
    def from_jwks(
        cls, document: Any, previous: KeySet | None = None
    ) -> tuple[KeySet, dict[str, str]]:
        """The usable keys of a JWKS document and, by kid (or position), why the others
        were skipped. Entries equal to one in ``previous`` keep its object.

        ValueError when the document is not a JWKS at all."""
        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise ValueError("not a JWK set: no keys list")
        keys: dict[str, VerificationKey] = {}
        skipped: dict[str, str] = {}
        for position, entry in enumerate(document["keys"]):
            label = entry.get("kid") if isinstance(entry, dict) else None
            label = label if isinstance(label, str) and label else f"#{position}"
            reason = _skip_reason(entry)
            if reason is None and entry["kid"] in keys:
                reason = "duplicate kid"
            if reason is not None:
                skipped[label] = reason
                continue
            canonical = json.dumps(entry, sort_keys=True, separators=(",", ":"))
            kept = previous.get(entry["kid"]) if previous is not None else None
            if kept is not None and kept.jwk == canonical:
                keys[kept.kid] = kept
                continue
            try:
                public = jwt.PyJWK(entry).key
            except (jwt.PyJWTError, ValueError, TypeError) as exc:
                skipped[label] = f"unreadable key: {type(exc).__name__}"
                continue
            keys[entry["kid"]] = VerificationKey(
                entry["kid"], public, key_algorithms(entry), canonical
            )
        return cls(keys), skipped
