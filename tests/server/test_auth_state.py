"""The pure state of token authentication: the verified-token cache, the per-account rate
limiter, the pod judgements, TokenReview answers, issuer discovery and the settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm

from trainjob_status.contract import JOBSET_NAME_LABEL
from trainjob_status_server.auth import AuthSettings
from trainjob_status_server.auth.binding import judge_departed, judge_pod
from trainjob_status_server.auth.claims import TokenFacts
from trainjob_status_server.auth.issuer import discover_issuer, issuer_of_token
from trainjob_status_server.auth.keys import KeySet
from trainjob_status_server.auth.ratelimit import ServiceAccountLimiter, retry_after_seconds
from trainjob_status_server.auth.tokencache import TokenCache, Verified
from trainjob_status_server.auth.tokenreview import judge_review, reason_of_error, review_body

from .test_auth_support import FakeClock, b64json

FACTS = TokenFacts(
    issuer="https://issuer",
    subject="system:serviceaccount:rec:trainer",
    audiences=("aud",),
    expires=2000.0,
    not_before=1000.0,
    issued_at=1000.0,
    namespace="rec",
    service_account="trainer",
    pod_name="tj-rec-node-0-0",
    pod_uid="cfe06852-5984-44ea-b543-8f312cb958b6",
)


# -- verified-token cache -----------------------------------------------------------------------


def entry(until: float = 2060.0) -> Verified:
    return Verified(FACTS, None, until)


def test_an_entry_lives_until_its_deadline() -> None:
    cache = TokenCache(10)
    cache.put(b"a", entry(2060.0), now=1500.0)
    assert cache.get(b"a", 2059.9) is not None
    assert cache.get(b"a", 2060.0) is None
    assert len(cache) == 0


def test_a_dead_entry_is_not_stored() -> None:
    cache = TokenCache(10)
    cache.put(b"a", entry(2060.0), now=2060.0)
    assert len(cache) == 0


def test_the_least_recently_used_goes_first() -> None:
    cache = TokenCache(2)
    cache.put(b"a", entry(), 0)
    cache.put(b"b", entry(), 0)
    assert cache.get(b"a", 0) is not None  # a is now the most recent
    cache.put(b"c", entry(), 0)
    assert [cache.get(d, 0) is not None for d in (b"a", b"b", b"c")] == [True, False, True]
    assert len(cache) == 2


def test_size_zero_turns_the_cache_off() -> None:
    cache = TokenCache(0)
    cache.put(b"a", entry(), 0)
    assert cache.get(b"a", 0) is None
    with pytest.raises(ValueError, match="max_entries"):
        TokenCache(-1)


def test_entries_of_a_key_that_left_are_dropped() -> None:
    keys, _ = KeySet.from_jwks({"keys": []})
    cache = TokenCache(10)
    cache.put(b"reviewed", entry(), 0)
    old = Verified(FACTS, _some_key(), 2060.0)
    cache.put(b"signed", old, 0)
    assert cache.drop_where(lambda e: e.key is not None and e.key not in keys) == 1
    assert cache.get(b"signed", 0) is None
    assert cache.get(b"reviewed", 0) is not None


def _some_key() -> Any:
    public = ec.generate_private_key(ec.SECP256R1()).public_key()
    keys, _ = KeySet.from_jwks({"keys": [{**ECAlgorithm.to_jwk(public, as_dict=True), "kid": "k"}]})
    return keys.get("k")


# -- rate limit -----------------------------------------------------------------------------------


def test_a_burst_then_the_rate_with_retry_after() -> None:
    clock = FakeClock(0.0)
    limiter = ServiceAccountLimiter(2.0, 3, clock=clock)
    assert [limiter.take("a") for _ in range(3)] == [None, None, None]
    assert limiter.take("a") == 1
    assert limiter.take("b") is None  # another account has its own bucket
    clock.advance(0.5)
    assert limiter.take("a") is None
    assert limiter.take("a") == 1


def test_retry_after_rounds_up_and_is_never_zero() -> None:
    assert [retry_after_seconds(d) for d in (0.0, 0.01, 1.0, 1.2, 59.5)] == [1, 1, 1, 2, 60]
    slow = ServiceAccountLimiter(0.1, 1, clock=FakeClock(0.0))
    assert slow.take("a") is None
    assert slow.take("a") == 10


def test_buckets_are_bounded_least_recently_used_first() -> None:
    limiter = ServiceAccountLimiter(1.0, 1, max_buckets=2, clock=FakeClock(0.0))
    assert limiter.take("a") is None
    assert limiter.take("b") is None
    assert limiter.take("a") == 1  # a is now the most recent
    assert limiter.take("c") is None  # b's bucket goes
    assert len(limiter) == 2
    assert limiter.take("a") == 1
    assert limiter.take("b") is None  # forgotten: a fresh bucket


def test_bad_limits_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="rate"):
        ServiceAccountLimiter(0, 1)
    with pytest.raises(ValueError, match="burst"):
        ServiceAccountLimiter(1, 0)
    with pytest.raises(ValueError, match="max_buckets"):
        ServiceAccountLimiter(1, 1, max_buckets=0)


# -- pods -----------------------------------------------------------------------------------------

UID = "cfe06852-5984-44ea-b543-8f312cb958b6"


def pod(labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    labels = {JOBSET_NAME_LABEL: "tj"} if labels is None else labels
    return {"metadata": {"name": "p", "uid": UID, "labels": labels, **meta}}


def judge(obj: dict[str, Any], *, uid: str = UID, membership: bool = True) -> str | None:
    return judge_pod(
        obj, uid=uid, trainjob="tj", require_membership=membership, now=1796236425.0, leeway=60
    )


def test_pod_judgements() -> None:
    assert judge(pod()) is None
    assert judge(pod(), uid="other") == "pod_uid"
    assert judge(pod({JOBSET_NAME_LABEL: "tj2"})) == "not_member"
    assert judge(pod({})) == "not_member"
    assert judge(pod({}), membership=False) is None
    assert judge({"metadata": {"uid": UID}}) == "not_member"


def test_a_terminating_pod_posts_until_a_minute_past_its_deadline() -> None:
    # now is 2026-12-02T18:33:45Z
    assert judge(pod(deletionTimestamp="2026-12-02T18:34:15Z")) is None
    assert judge(pod(deletionTimestamp="2026-12-02T18:32:46Z")) is None
    assert judge(pod(deletionTimestamp="2026-12-02T18:32:44Z")) == "pod_gone"
    assert judge(pod(deletionTimestamp="garbage")) is None


def test_a_departed_uid_is_gone_or_replaced() -> None:
    assert judge_departed(None) == "pod_gone"
    assert judge_departed(pod()) == "pod_uid"


# -- TokenReview answers (recorded texts: k_token_review_*) ---------------------------------------


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (
            "[invalid bearer token, service account token has been invalidated]",
            "pod_gone",
        ),
        (
            "[invalid bearer token, pod UID (5f099833-ec0d-4495-be84-efca5bb3d8c8) does not match "
            "service account pod ref claim (cfe06852-5984-44ea-b543-8f312cb958b6)]",
            "pod_uid",
        ),
        (
            '[invalid bearer token, token audiences ["trainer.kubeflow.org/v1alpha1/namespaces/rec/'
            'trainjobs/tj-rec/status"] is invalid for the target audiences ["something-else"]]',
            "audience",
        ),
        ("[invalid bearer token, invalid signature, no keys found]", "unknown_kid"),
        ("[invalid bearer token, service account token has expired]", "expired"),
        ("[invalid bearer token, service account token is not valid yet]", "not_yet_valid"),
        (
            "[invalid bearer token, go-jose/go-jose: error in cryptographic primitive]",
            "signature",
        ),
        ("invalid bearer token", "signature"),
        ("", "signature"),
    ],
)
def test_review_errors_map_to_reasons(error: str, reason: str) -> None:
    assert reason_of_error(error) == reason


VALID_STATUS: dict[str, Any] = {
    "authenticated": True,
    "user": {
        "username": "system:serviceaccount:rec:trainer",
        "uid": "d45f01f3-8678-4a0a-8120-0bb8ab1119b8",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:rec", "system:authenticated"],
        "extra": {
            "authentication.kubernetes.io/credential-id": ["JTI=ebe7c967"],
            "authentication.kubernetes.io/pod-name": ["tj-rec-node-0-0"],
            "authentication.kubernetes.io/pod-uid": [UID],
        },
    },
    "audiences": ["aud"],
}


def test_a_review_vouches_only_for_the_tokens_own_subject_and_pod() -> None:
    assert judge_review({"status": VALID_STATUS}, FACTS) is None
    other_user = {**VALID_STATUS, "user": {**VALID_STATUS["user"], "username": "alice"}}
    assert judge_review({"status": other_user}, FACTS) == "claims"
    no_extra = {**VALID_STATUS, "user": {"username": "system:serviceaccount:rec:trainer"}}
    assert judge_review({"status": no_extra}, FACTS) == "claims"
    refused = {"user": {}, "error": "[invalid bearer token, service account token has expired]"}
    assert judge_review({"status": refused}, FACTS) == "expired"
    assert judge_review({}, FACTS) == "signature"


def test_the_review_asks_with_the_trainjobs_audience() -> None:
    assert review_body("t", "aud") == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "t", "audiences": ["aud"]},
    }


# -- issuer ---------------------------------------------------------------------------------------


def test_issuer_of_a_token() -> None:
    assert issuer_of_token(f"x.{b64json({'iss': 'https://i'})}.y\n") == "https://i"
    assert issuer_of_token(f"x.{b64json({'iss': 5})}.y") is None
    assert issuer_of_token("garbage") is None


async def test_issuer_sources_in_order(tmp_path: Path) -> None:
    asked: list[str] = []

    async def discovery() -> Any:
        asked.append("discovery")
        return {"issuer": "https://from-discovery"}

    own = tmp_path / "token"
    own.write_text(f"x.{b64json({'iss': 'https://from-token'})}.y")
    assert await discover_issuer("https://flag", own, discovery) == "https://flag"
    assert await discover_issuer(None, own, discovery) == "https://from-token"
    assert asked == []
    assert await discover_issuer(None, tmp_path / "missing", discovery) == "https://from-discovery"
    own.write_text("not a token")
    assert await discover_issuer(None, own, discovery) == "https://from-discovery"
    assert await discover_issuer(None, None, discovery) == "https://from-discovery"

    async def empty() -> Any:
        return {"jwks_uri": "x"}

    with pytest.raises(ValueError, match="without an issuer"):
        await discover_issuer(None, None, empty)


# -- settings -------------------------------------------------------------------------------------


def test_default_settings_are_usable_and_select_trainjob_pods() -> None:
    settings = AuthSettings()
    assert settings.check() == []
    assert settings.pod_selector == "jobset.sigs.k8s.io/jobset-name"
    assert AuthSettings(require_pod_membership=False).pod_selector is None


def test_bad_settings_are_named() -> None:
    problems = AuthSettings(
        leeway=-1, jwks_refresh_interval=0, sa_rate_limit=0, token_cache_size=-1
    ).check()
    assert problems == [
        "--token-leeway must be >= 0",
        "--jwks-refresh-interval must be > 0",
        "--sa-rate-limit must be > 0 and --sa-rate-burst >= 1",
        "--token-cache-size must be >= 0",
    ]
