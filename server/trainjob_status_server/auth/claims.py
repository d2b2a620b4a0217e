"""What a service-account token says, and whether that lets it post here (pure).

``parse_facts`` reads the claims once (when the signature has been verified, or when
TokenReview has vouched for them); ``check_facts`` judges them for a post. Of its checks
only ``check_times`` depends on when the post comes: the others give the same answer for
the same facts, issuer, audience and namespace, so a caller that remembers which
TrainJob they passed for may run ``check_times`` alone for its next post there.

Kubernetes puts its private claims under ``kubernetes.io``::

    {"namespace": "rec", "pod": {"name": ..., "uid": ...},
     "serviceaccount": {"name": "trainer", "uid": ...}}

and ``sub`` is ``system:serviceaccount:<namespace>:<name>``.
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import failures
from .failures import AuthFailure

SUBJECT_PREFIX = "system:serviceaccount:"

PEER_AUDIENCE = "trainjob-status.kubeflow.org/peers"
"""The audience of the token a replica hands updates over with (``check_peer``)."""


@dataclass(frozen=True, slots=True)
class TokenFacts:
    """The claims the checks use, typed. None means the claim was absent."""

    issuer: str | None
    subject: str | None
    audiences: tuple[str, ...]  # a tuple: most tokens have one, and a set costs 216 B
    expires: float | None
    not_before: float | None
    issued_at: float | None
    namespace: str | None
    service_account: str | None
    pod_name: str | None
    pod_uid: str | None


def _string(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise AuthFailure(failures.MALFORMED)
    return value


def _date(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AuthFailure(failures.MALFORMED)
    return float(value)


def _object(value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AuthFailure(failures.MALFORMED)
    return value


def _audiences(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(a, str) for a in value):
        return tuple(value)
    raise AuthFailure(failures.MALFORMED)


def _shared(value: str | None) -> str | None:
    """One copy of a string many tokens carry (issuer, namespace, account name)."""
    return None if value is None else sys.intern(value)


def parse_facts(claims: Mapping[str, Any]) -> TokenFacts:
    """Typed facts from a claims object; AuthFailure(MALFORMED) when a claim that is
    present has the wrong JSON type (absent claims are judged by ``check_facts``)."""
    private = _object(claims.get("kubernetes.io"))
    pod = _object(private.get("pod"))
    account = _object(private.get("serviceaccount"))
    return TokenFacts(
        issuer=_shared(_string(claims.get("iss"))),
        subject=_string(claims.get("sub")),
        audiences=_audiences(claims.get("aud")),
        expires=_date(claims.get("exp")),
        not_before=_date(claims.get("nbf")),
        issued_at=_date(claims.get("iat")),
        namespace=_shared(_string(private.get("namespace"))),
        service_account=_shared(_string(account.get("name"))),
        pod_name=_string(pod.get("name")) if pod else None,
        pod_uid=_string(pod.get("uid")) if pod else None,
    )


def unverified_claims(token: str) -> dict[str, Any]:
    """The payload of a compact JWS, not verified: only for TokenReview mode, where the
    claims are checked before the API server is asked and trusted only after it vouched
    for the token."""
    parts = token.split(".")
    if len(parts) != 3:
        raise AuthFailure(failures.MALFORMED)
    segment = parts[1]
    try:
        raw = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
        claims = json.loads(raw)
    except (ValueError, binascii.Error) as exc:
        raise AuthFailure(failures.MALFORMED) from exc
    if not isinstance(claims, dict):
        raise AuthFailure(failures.MALFORMED)
    return claims


def check_times(facts: TokenFacts, now: float, leeway: float) -> None:
    """Raise AuthFailure unless ``facts`` are valid at ``now`` give or take ``leeway``
    (and have an ``exp``): the part of ``check_facts`` that depends on the time, in
    its order."""
    expires = facts.expires
    if expires is None:
        raise AuthFailure(failures.CLAIMS)
    if now - leeway > expires:
        raise AuthFailure(failures.EXPIRED)
    not_before, issued_at = facts.not_before, facts.issued_at
    if (not_before is not None and now + leeway < not_before) or (
        issued_at is not None and now + leeway < issued_at
    ):
        raise AuthFailure(failures.NOT_YET_VALID)


def check_facts(
    facts: TokenFacts,
    *,
    issuer: str | None,
    audience: str,
    namespace: str,
    now: float,
    leeway: float,
    allow_unbound: bool,
) -> None:
    """Raise AuthFailure unless ``facts`` allow a post with ``audience`` into
    ``namespace``. ``issuer`` None skips the issuer check (TokenReview mode with no
    known issuer: the API server has judged it). 401 reasons come before 403 ones."""
    if issuer is not None and facts.issuer != issuer:
        raise AuthFailure(failures.ISSUER)
    check_times(facts, now, leeway)
    if facts.namespace is None or facts.service_account is None:
        raise AuthFailure(failures.CLAIMS)
    if facts.subject != f"{SUBJECT_PREFIX}{facts.namespace}:{facts.service_account}":
        raise AuthFailure(failures.CLAIMS)
    if audience not in facts.audiences:
        raise AuthFailure(failures.AUDIENCE)
    if facts.namespace != namespace:
        raise AuthFailure(failures.NAMESPACE)
    if facts.pod_name is None or facts.pod_uid is None:
        if facts.pod_name is not None or facts.pod_uid is not None:
            raise AuthFailure(failures.CLAIMS)
        if not allow_unbound:
            raise AuthFailure(failures.NO_POD)


def check_peer(
    facts: TokenFacts, *, issuer: str | None, subject: str, now: float, leeway: float
) -> None:
    """Raise AuthFailure unless ``facts`` are those of another replica's token: the
    cluster ``issuer`` (None: not checked, as in ``check_facts``), valid at ``now``, for
    ``PEER_AUDIENCE``, of the server's own account ``subject``."""
    if issuer is not None and facts.issuer != issuer:
        raise AuthFailure(failures.ISSUER)
    check_times(facts, now, leeway)
    if PEER_AUDIENCE not in facts.audiences:
        raise AuthFailure(failures.AUDIENCE)
    if facts.subject != subject:
        raise AuthFailure(failures.NOT_PEER)
