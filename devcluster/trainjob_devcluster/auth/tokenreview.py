"""Service-account token authentication and TokenReview, as kube-apiserver v1.36 does them.

One authenticator serves both the TokenReview API and the API server's own bearer
authentication, as in the real server. The checks run in the real order, since it
decides the error text: issuer, signature, audiences, times, then the objects the token
names (service account, pod).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..common.go_text import go_quote
from ..common.status import bad_request, body_field
from .signing import MalformedToken, SignatureRejected, SigningKeys

# lookup(plural, namespace, name) -> the stored object ("serviceaccounts" or "pods"), or None.
Lookup = Callable[[str, str, str], dict[str, Any] | None]

API_VERSION = "authentication.k8s.io/v1"
# jwt.DefaultLeeway in go-jose: the slack on exp/nbf/iat and on deletion timestamps.
LEEWAY_SECONDS = 60.0
INVALID_BEARER_TOKEN = "invalid bearer token"
INVALIDATED = "service account token has been invalidated"
EXTRA_CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
EXTRA_NODE_NAME = "authentication.kubernetes.io/node-name"
EXTRA_POD_NAME = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID = "authentication.kubernetes.io/pod-uid"


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
    return Outcome(None, error=f"[{INVALID_BEARER_TOKEN}, {reason}]")


def _go_quote_list(values: Sequence[str]) -> str:
    """Go's ``%q`` of a ``[]string``: ``["a" "b"]``, space separated."""
    return "[" + " ".join(go_quote(v) for v in values) + "]"


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
    uid = obj["metadata"].get("uid")
    return uid if isinstance(uid, str) else ""


def _deleted_before(obj: Mapping[str, Any], cutoff: float) -> bool:
    stamp = obj["metadata"].get("deletionTimestamp")
    try:
        moment = datetime.datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
    except ValueError:
        return False
    return moment is not None and moment.tzinfo is not None and moment.timestamp() < cutoff


class TokenAuthenticator:
    """Authenticates service-account JWTs from one issuer, with no cache of successes
    (kube-apiserver keeps them 10 s), so a deleted pod's token fails at once."""

    def __init__(
        self,
        issuer: str,
        api_audiences: Sequence[str],
        keys: SigningKeys,
        clock: Callable[[], float],
    ) -> None:
        self.issuer = issuer
        self.api_audiences = tuple(api_audiences)
        self.keys = keys
        self._clock = clock

    def check(self, token: str, audiences: Sequence[str], lookup: Lookup) -> Outcome:
        """Authenticate ``token`` for the requested ``audiences`` (the API's if empty)."""
        requested = tuple(audiences) or self.api_audiences
        # Tokens from another issuer (or not JWTs at all) are not this authenticator's
        # business: the real one passes on them without a reason.
        if _unverified_issuer(token) != self.issuer:
            return _failure(None)
        try:
            claims = self.keys.verify_signature(token)
            token_audiences = _audiences(claims) or list(self.api_audiences)
            matched = tuple(a for a in token_audiences if a in requested)
            if not matched and self.api_audiences:
                raise _Rejected(
                    f"token audiences {_go_quote_list(token_audiences)} is invalid for the "
                    f"target audiences {_go_quote_list(requested)}"
                )
            now = self._clock()
            _check_times(claims, now)
            user = self._validate_objects(claims, lookup, now)
        except MalformedToken:
            return _failure(None)
        except (SignatureRejected, _Rejected) as exc:
            return _failure(str(exc))
        return Outcome(user, matched)

    @staticmethod
    def _validate_objects(claims: Mapping[str, Any], lookup: Lookup, now: float) -> User:
        private = claims.get("kubernetes.io")
        if not isinstance(private, dict):
            raise MalformedToken("no kubernetes.io claims")
        namespace = private.get("namespace", "")
        if not isinstance(namespace, str):
            raise MalformedToken("namespace is not a string")
        sa_name, sa_uid = _ref(private, "serviceaccount") or ("", "")
        cutoff = now - LEEWAY_SECONDS
        account = lookup("serviceaccounts", namespace, sa_name)
        if account is None:
            raise _Rejected(f"serviceaccounts {go_quote(sa_name)} not found")
        if _uid(account) != sa_uid:
            raise _Rejected(
                f"service account UID ({_uid(account)}) does not match claim ({sa_uid})"
            )
        if _deleted_before(account, cutoff):
            raise _Rejected(f"service account {namespace}/{sa_name} has been deleted")
        pod = _ref(private, "pod")
        if pod is not None:
            found = lookup("pods", namespace, pod[0])
            if found is None:
                raise _Rejected(INVALIDATED)
            if _uid(found) != pod[1]:
                raise _Rejected(
                    f"pod UID ({_uid(found)}) does not match service account pod ref claim "
                    f"({pod[1]})"
                )
            if _deleted_before(found, cutoff):
                raise _Rejected(INVALIDATED)
        # A pod-bound token names the pod's node; the node itself is not checked.
        node = _ref(private, "node")
        extra: list[tuple[str, tuple[str, ...]]] = []
        jti = claims.get("jti")
        if isinstance(jti, str) and jti:
            extra.append((EXTRA_CREDENTIAL_ID, (f"JTI={jti}",)))
        if node is not None and node[0]:
            extra.append((EXTRA_NODE_NAME, (node[0],)))
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

    def review(self, body: Mapping[str, Any], lookup: Lookup) -> dict[str, Any]:
        """The TokenReview answer (201) for a request body, or raise ApiError (400)."""
        spec = body_field(body, "spec", dict, "spec") or {}
        token = body_field(spec, "token", str, "spec.token")
        audiences = body_field(spec, "audiences", list, "spec.audiences")
        if not token:
            raise bad_request("token is required for TokenReview in authentication")
        metadata = body_field(body, "metadata", dict, "metadata") or {}
        outcome = self.check(token, audiences or (), lookup)
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
            "kind": "TokenReview",
            "apiVersion": API_VERSION,
            "metadata": dict(metadata),
            "spec": echoed,
            "status": status,
        }

    def authenticate(self, token: str, lookup: Lookup) -> dict[str, Any] | None:
        """The user behind a bearer token sent to the API itself, or None (answer 401).

        The token's audiences must include an API audience: a token minted for another
        audience is refused even though its signature is good.
        """
        outcome = self.check(token, self.api_audiences, lookup)
        return outcome.user.to_json() if outcome.user is not None else None
