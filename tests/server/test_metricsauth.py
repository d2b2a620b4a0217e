"""The secure metrics decisions without a network: the reviews asked, the verdicts read
from their answers, the refusals answered, and the verdict cache's TTL and bound."""

from __future__ import annotations

from trainjob_status_server.http.errors import answer_for
from trainjob_status_server.http.metricsauth import (
    Verdict,
    VerdictCache,
    access_review_body,
    judge_access,
    refusal,
    reviewed_user,
    token_review_body,
    verb_for,
)

USER = {
    "username": "system:serviceaccount:mon:prometheus",
    "uid": "u-1",
    "groups": ["system:serviceaccounts", "system:authenticated"],
    "extra": {"authentication.kubernetes.io/credential-id": ["JTI=x"]},
}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_reviews_asked() -> None:
    assert token_review_body("t0k") == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "t0k"},
    }
    assert access_review_body(USER, "/metrics", "get") == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": USER["username"],
            "uid": "u-1",
            "groups": USER["groups"],
            "extra": USER["extra"],
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        },
    }
    assert access_review_body({"username": "alice"}, "/metrics", "get")["spec"] == {
        "user": "alice",
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }
    assert [verb_for(m) for m in ("GET", "HEAD", "POST", "DELETE")] == [
        "get",
        "get",
        "create",
        "delete",
    ]


def test_the_user_a_token_review_vouches_for() -> None:
    assert reviewed_user({"status": {"authenticated": True, "user": USER}}) == USER
    for answer in (
        {},
        {"status": {"authenticated": False, "user": USER, "error": "expired"}},
        {"status": {"authenticated": "true", "user": USER}},
        {"status": {"authenticated": True, "user": {"username": ""}}},
        {"status": {"authenticated": True, "user": {"username": 7}}},
        {"status": {"authenticated": True}},
    ):
        assert reviewed_user(answer) is None, answer


def test_what_an_access_review_allows() -> None:
    name = USER["username"]
    assert judge_access(name, {"status": {"allowed": True, "reason": "RBAC: x"}}) == Verdict(
        name, True, "RBAC: x"
    )
    assert judge_access(name, {"status": {"allowed": False}}) == Verdict(name, False)
    # Denied wins, as the API server's union authorizer reads it; anything else is no.
    assert not judge_access(name, {"status": {"allowed": True, "denied": True}}).allowed
    assert not judge_access(name, {"status": {"allowed": "yes"}}).allowed
    assert not judge_access(name, {}).allowed


def test_refusals_are_statuses() -> None:
    assert answer_for(refusal(Verdict(None, False), "/metrics", "get")).body() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }
    forbidden = answer_for(refusal(Verdict("bob", False), "/metrics", "get"))
    assert (forbidden.code, forbidden.reason, forbidden.message) == (
        403,
        "Forbidden",
        'forbidden: User "bob" cannot get path "/metrics"',
    )
    explained = answer_for(
        refusal(Verdict("bob", False, "no RBAC policy matched"), "/metrics", "get")
    )
    assert explained.message == (
        'forbidden: User "bob" cannot get path "/metrics": no RBAC policy matched'
    )


def test_verdicts_live_for_their_ttl() -> None:
    clock = Clock()
    cache = VerdictCache(30.0, clock=clock)
    key = (b"d", "/metrics", "get")
    cache.put(key, Verdict("bob", True))
    clock.now += 29.9
    assert cache.get(key) == Verdict("bob", True)
    clock.now += 0.1
    assert cache.get(key) is None
    # An expired approval is kept one more TTL, for when no review can be asked for.
    assert cache.stale(key) == Verdict("bob", True)
    clock.now += 30.0
    assert (cache.get(key), cache.stale(key)) == (None, None)
    assert len(cache) == 0


def test_a_refusal_expires_at_once_and_is_never_stale() -> None:
    clock = Clock()
    cache = VerdictCache(30.0, clock=clock)
    key = (b"d", "/metrics", "get")
    cache.put(key, Verdict(None, False))
    assert cache.get(key) == Verdict(None, False)
    assert cache.stale(key) is None
    clock.now += 30.0
    assert cache.get(key) is None
    assert len(cache) == 0


def test_a_flood_of_refusals_never_pushes_an_approval_out() -> None:
    cache = VerdictCache(30.0, max_entries=4, clock=Clock())
    scraper = (b"prometheus", "/metrics", "get")
    cache.put(scraper, Verdict("prometheus", True))
    for i in range(100):
        cache.put((b"garbage-%d" % i, "/metrics", "get"), Verdict(None, False))
    assert cache.get(scraper) == Verdict("prometheus", True)
    assert len(cache) == 5  # the approval and the newest four refusals
    assert cache.get((b"garbage-99", "/metrics", "get")) == Verdict(None, False)
    assert cache.get((b"garbage-95", "/metrics", "get")) is None


def test_a_new_verdict_replaces_the_other_kind() -> None:
    cache = VerdictCache(30.0, clock=Clock())
    key = (b"d", "/metrics", "get")
    cache.put(key, Verdict("bob", True))
    cache.put(key, Verdict("bob", False, "unbound"))
    assert (cache.get(key), cache.stale(key), len(cache)) == (
        Verdict("bob", False, "unbound"),
        None,
        1,
    )


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    cache = VerdictCache(30.0, max_entries=2, clock=Clock())
    a, b, c = ((d, "/metrics", "get") for d in (b"a", b"b", b"c"))
    cache.put(a, Verdict("a", True))
    cache.put(b, Verdict("b", True))
    assert cache.get(a) is not None  # a is now the most recent
    cache.put(c, Verdict("c", True))
    assert (cache.get(a), cache.get(b), cache.get(c)) == (
        Verdict("a", True),
        None,
        Verdict("c", True),
    )


def test_a_ttl_of_zero_keeps_nothing() -> None:
    cache = VerdictCache(0.0, clock=Clock())
    cache.put((b"a", "/metrics", "get"), Verdict("a", True))
    assert len(cache) == 0
