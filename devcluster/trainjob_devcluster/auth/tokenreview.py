"""Service-account token authentication and TokenReview, as kube-apiserver v1.36 does them.

One authenticator serves both the TokenReview API and the API server's own bearer
authentication, as in the real server. The checks run in the real order, since it
decides the error text: issuer, signature, audiences, times, then the objects the token
names (service account, secret, pod, node).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..common.status import bad_request
from .signing import MalformedToken, SignatureRejected, SigningKeys
from .tokenfmt import (
    aggregate,
    go_quote_list,
    object_field,
    parse_rfc3339,
    string_field,
    string_list_field,
)
from .tokenrequest import API_VERSION, Lookup, core_not_found

KIND = "TokenReview"
# jwt.DefaultLeeway in go-jose: the slack on exp/nbf/iat and on deletion timestamps.
LEEWAY_SECONDS = 60.0
INVALID_BEARER_TOKEN = "invalid bearer token"
INVALIDATED = "service account token has been invalidated"
EXTRA_CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
EXTRA_NODE_NAME = "authentication.kubernetes.io/node-name"
EXTRA_NODE_UID = "authentication.kubernetes.io/node-uid"
EXTRA_POD_NAME = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID = "authentication.kubernetes.io/pod-uid"
# The real cache holds a few thousand entries; the bound only keeps memory flat.
_CACHE_LIMIT = 4096


@dataclass(frozen=True)
class User:
    """The authenticated identity (authentication.k8s.io/v1 UserInfo)."""

    username: str
    uid: str
    groups: tuple[str, ...]
    extra: tuple[tuple[str, tuple[str, ...]], ...]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "username": self.username,
            "uid": self.uid,
            "groups": list(self.groups),
        }
        if self.extra:
            out["extra"] = {key: list(values) for key, values in self.extra}
        return out


@dataclass(frozen=True)
class Outcome:
    """The answer for one (token, audiences): a user and the matched audiences, or an error."""

    user: User | None
    audiences: tuple[str, ...] = ()
    error: str = ""


class _Rejected(Exception):
    """A check failed; ``str()`` is the reason the real server reports."""


def _failure(reason: str | None) -> Outcome:
    # The real server aggregates the bearer-token authenticator's own complaint with
    # the JWT authenticator's reason; a token it passed on silently gets only the first.
    if reason is None:
        return Outcome(None, error=INVALID_BEARER_TOKEN)
    return Outcome(None, error=aggregate([INVALID_BEARER_TOKEN, reason]))


_RAW_URL_B64 = re.compile(r"^[A-Za-z0-9_-]*$")


def _unverified_issuer(token: str) -> str | None:
    """The ``iss`` of a compact JWT before any verification (only to pick a handler)."""
    parts = token.split(".")
    if token.strip().startswith("{") or len(parts) != 3 or not _RAW_URL_B64.match(parts[1]):
        return None
    try:
        raw = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        payload = json.loads(raw)
    except (ValueError, binascii.Error):
        return None
    issuer = payload.get("iss") if isinstance(payload, dict) else None
    return issuer if isinstance(issuer, str) else None


def _audiences(claims: Mapping[str, Any]) -> list[str]:
    aud = claims.get("aud")
    if isinstance(aud, str):
        return [aud]
    if isinstance(aud, list) and all(isinstance(a, str) for a in aud):
        return list(aud)
    if aud is None:
        return []
    raise MalformedToken("aud is neither a string nor a list of strings")


def _check_times(claims: Mapping[str, Any], now: float) -> None:
    dates: dict[str, float | None] = {}
    for name in ("nbf", "exp", "iat"):
        value = claims.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise MalformedToken(f"{name} is not a number")
        dates[name] = value
    # go-jose's order and comparisons (strict, each with one minute of leeway).
    nbf, exp, iat = dates["nbf"], dates["exp"], dates["iat"]
    if nbf is not None and now + LEEWAY_SECONDS < nbf:
        raise _Rejected("service account token is not valid yet")
    if exp is not None and now - LEEWAY_SECONDS > exp:
        raise _Rejected("service account token has expired")
    if iat is not None and now + LEEWAY_SECONDS < iat:
        raise _Rejected("service account token is issued in the future")


def _ref(private: Mapping[str, Any], key: str) -> tuple[str, str] | None:
    value = private.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise MalformedToken(f"kubernetes.io.{key} is not an object")
    name, uid = value.get("name", ""), value.get("uid", "")
    if not isinstance(name, str) or not isinstance(uid, str):
        raise MalformedToken(f"kubernetes.io.{key} members are not strings")
    return name, uid


def _uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) else ""


def _deleted_before(obj: Mapping[str, Any], cutoff: float) -> bool:
    meta = obj.get("metadata")
    stamp = parse_rfc3339(meta.get("deletionTimestamp")) if isinstance(meta, dict) else None
    return stamp is not None and stamp < cutoff


class ServiceAccountAuthenticator:
    """Authenticates service-account JWTs from one issuer.

    ``success_cache_ttl``: kube-apiserver caches successful authentications for 10 s per
    (token, audiences) (``--token-success-cache-ttl``), so right after a bound pod is
    deleted its token still authenticates for up to 10 s with the same audiences, and a
    different audience list misses the cache and fails. The default here is 0 (no
    cache) so tests see deletions at once; pass 10 to reproduce the real delay.
    Failures are never cached, as with the real defaults.
    """

    def __init__(
        self,
        issuer: str,
        api_audiences: Sequence[str],
        keys: SigningKeys,
        clock: Callable[[], float],
        success_cache_ttl: float = 0.0,
    ) -> None:
        self._issuer = issuer
        self._api_audiences = tuple(api_audiences)
        self._keys = keys
        self._clock = clock
        self._ttl = success_cache_ttl
        # Keyed by a digest, never the token itself, so no live credential sits in memory
        # longer than the request that carried it.
        self._cache: dict[tuple[bytes, tuple[str, ...]], tuple[float, Outcome]] = {}

    def authenticate(self, token: str, audiences: Sequence[str], lookup: Lookup) -> Outcome:
        """Authenticate ``token`` for the requested ``audiences`` (the API's if empty)."""
        requested = tuple(audiences) or self._api_audiences
        now = self._clock()
        key = (hashlib.sha256(token.encode("utf-8")).digest(), requested)
        cached = self._cache.get(key)
        if cached is not None:
            if cached[0] > now:
                return cached[1]
            del self._cache[key]
        outcome = self._authenticate(token, requested, lookup, now)
        if outcome.user is not None and self._ttl > 0:
            self._remember(key, now + self._ttl, outcome, now)
        return outcome

    def _remember(
        self, key: tuple[bytes, tuple[str, ...]], expires: float, outcome: Outcome, now: float
    ) -> None:
        if len(self._cache) >= _CACHE_LIMIT:
            for stale in [k for k, (until, _) in self._cache.items() if until <= now]:
                del self._cache[stale]
        while len(self._cache) >= _CACHE_LIMIT:
            del self._cache[next(iter(self._cache))]  # oldest insertion first
        self._cache[key] = (expires, outcome)

    def _authenticate(
        self, token: str, requested: tuple[str, ...], lookup: Lookup, now: float
    ) -> Outcome:
        # Tokens from another issuer (or not JWTs at all) are not this authenticator's
        # business: the real one passes on them without a reason.
        if _unverified_issuer(token) != self._issuer:
            return _failure(None)
        try:
            claims = self._keys.verify_signature(token)
            token_audiences = _audiences(claims) or list(self._api_audiences)
            matched = tuple(a for a in token_audiences if a in requested)
            if not matched and self._api_audiences:
                raise _Rejected(
                    f"token audiences {go_quote_list(token_audiences)} is invalid for the "
                    f"target audiences {go_quote_list(requested)}"
                )
            _check_times(claims, now)
            user = self._validate_objects(claims, lookup, now)
        except MalformedToken:
            return _failure(None)
        except (SignatureRejected, _Rejected) as exc:
            return _failure(str(exc))
        return Outcome(user, matched)

    def _validate_objects(self, claims: Mapping[str, Any], lookup: Lookup, now: float) -> User:
        private = claims.get("kubernetes.io")
        if not isinstance(private, dict):
            raise MalformedToken("no kubernetes.io claims")
        namespace = private.get("namespace", "")
        if not isinstance(namespace, str):
            raise MalformedToken("namespace is not a string")
        sa_name, sa_uid = _ref(private, "serviceaccount") or ("", "")
        cutoff = now - LEEWAY_SECONDS
        account = lookup("ServiceAccount", namespace, sa_name)
        if account is None:
            raise _Rejected(core_not_found("serviceaccounts", sa_name).message)
        if _uid(account) != sa_uid:
            raise _Rejected(
                f"service account UID ({_uid(account)}) does not match claim ({sa_uid})"
            )
        if _deleted_before(account, cutoff):
            raise _Rejected(f"service account {namespace}/{sa_name} has been deleted")
        secret = _ref(private, "secret")
        if secret is not None:
            self._check_bound(lookup("Secret", namespace, secret[0]), "secret", secret[1], cutoff)
        pod = _ref(private, "pod")
        if pod is not None:
            self._check_bound(lookup("Pod", namespace, pod[0]), "pod", pod[1], cutoff)
        node = _ref(private, "node")
        if node is not None and pod is None:
            # Only node-bound tokens need the Node; a pod-bound token merely reports it.
            self._check_bound(lookup("Node", "", node[0]), "node", node[1], cutoff)
        extra: list[tuple[str, tuple[str, ...]]] = []
        jti = claims.get("jti")
        if isinstance(jti, str) and jti:
            extra.append((EXTRA_CREDENTIAL_ID, (f"JTI={jti}",)))
        if node is not None and node[0]:
            extra.append((EXTRA_NODE_NAME, (node[0],)))
            if node[1]:
                extra.append((EXTRA_NODE_UID, (node[1],)))
        if pod is not None and pod[0] and pod[1]:
            extra += [(EXTRA_POD_NAME, (pod[0],)), (EXTRA_POD_UID, (pod[1],))]
        return User(
            username=f"system:serviceaccount:{namespace}:{sa_name}",
            uid=sa_uid,
            groups=(
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            ),
            extra=tuple(sorted(extra)),
        )

    @staticmethod
    def _check_bound(
        obj: Mapping[str, Any] | None, what: str, claimed_uid: str, cutoff: float
    ) -> None:
        if obj is None:
            raise _Rejected(INVALIDATED)
        if _uid(obj) != claimed_uid:
            raise _Rejected(
                f"{what} UID ({_uid(obj)}) does not match service account {what} ref claim "
                f"({claimed_uid})"
            )
        if _deleted_before(obj, cutoff):
            raise _Rejected(INVALIDATED)


def review(
    body: Mapping[str, Any], authenticator: ServiceAccountAuthenticator, lookup: Lookup
) -> dict[str, Any]:
    """The TokenReview answer (201) for a request body.

    The caller adds ``metadata.managedFields`` if it records them.
    """
    spec = object_field(KIND, dict(body), "spec", KIND, "spec", "v1.TokenReviewSpec") or {}
    token = string_field(KIND, spec, "token", "TokenReviewSpec", "spec.token")
    audiences = string_list_field(KIND, spec, "audiences", "TokenReviewSpec", "spec.audiences")
    if not token:
        raise bad_request("token is required for TokenReview in authentication")
    metadata = object_field(KIND, dict(body), "metadata", KIND, "metadata", "v1.ObjectMeta") or {}
    outcome = authenticator.authenticate(token, audiences or (), lookup)
    status: dict[str, Any]
    if outcome.user is not None:
        status = {"authenticated": True, "user": outcome.user.to_json()}
        if outcome.audiences:
            status["audiences"] = list(outcome.audiences)
    else:
        status = {"user": {}, "error": outcome.error}
    echoed: dict[str, Any] = {"token": token}
    if audiences:
        echoed["audiences"] = audiences
    return {
        "kind": KIND,
        "apiVersion": API_VERSION,
        "metadata": dict(metadata),
        "spec": echoed,
        "status": status,
    }
