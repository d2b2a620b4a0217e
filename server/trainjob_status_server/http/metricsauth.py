"""Who may read the metrics port under ``--metrics-secure``.

Every request carries a bearer token. The API server says whose it is (TokenReview, for
the API server's own audiences, as for a token sent to the API itself) and whether that
user may ``get`` the non-resource URL the request asks for (SubjectAccessReview), the
checks controller-runtime's secure metrics filter and kube-rbac-proxy make. No token or
a token the API server does not accept: 401; a user RBAC does not allow: 403; both as
``metav1.Status``.

A verdict is kept for ``ttl`` seconds by the token's SHA-256 digest (never the token),
the path and the verb, so a scraper costs two API calls per ``ttl``, not two per scrape;
a refusal is kept as long, so a client with a bad token cannot spend the budget either.
Approvals and refusals are kept apart, at most ``max_entries`` of each (least recently
used out first): a flood of distinct garbage tokens fills the refusals only and never
pushes a scraper's approval out. Paths the port does not serve are answered 404 before
any review. An API server that cannot answer (or a budget spent) is a 503 and is never
remembered, except for a token approved less than ``2 * ttl`` ago: its approval is
reused until then, so a scraper keeps its scrapes while strangers spend the budget (a
revocation then takes up to twice the TTL to be honoured). Concurrent requests with one
token share one pair of calls.

What a token no verdict covers may cost is bounded three times: the reviews a source
address causes (``sources``, 429 with Retry-After beyond), the share of the budget all
such tokens together may spend (``strangers``, a quarter of it: 503 with Retry-After
beyond, without queueing for the budget), and the budget itself, the metrics port's own
(``--kube-metrics-qps``), which the posts' token checks do not share. The renewal of an
approval that has just expired is neither a source's nor a stranger's: what is left of
the budget serves it, so a flood of made-up tokens from any number of addresses leaves
the scrapers their reviews.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ..auth.bearer import bearer_token
from ..auth.failures import AuthFailure
from ..auth.ratelimit import SourceLimiter
from ..auth.tokenreview import TOKENREVIEWS_PATH
from ..failures import AccessDenied, Failure, RateLimited, Unauthenticated, Unavailable
from ..kube.client import KubeClient
from ..kube.errors import KubeBudgetExhausted, KubeError, KubeUnavailable
from ..kube.ratelimit import TokenBucket
from . import errors

log = logging.getLogger(__name__)

SUBJECTACCESSREVIEWS_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
MAX_ENTRIES = 1024

REVIEWS_PER_SOURCE = (1 / 30, 4)
"""Reviews one source address may cause (per second, burst): a scraper needs one per
``--metrics-auth-cache-ttl`` per token and path; four at once cover a restart scraping
two paths with a fresh token. Twelve addresses with garbage tokens cause 0.4 a second,
within the port's budget (1 a second) with room for the scrapers."""

# The verbs the API server's request-info resolver gives non-resource requests.
_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Verdict:
    """``user`` is None when the token was not accepted; ``allowed`` says whether the
    user may make the request (always False without a user)."""

    user: str | None
    allowed: bool
    reason: str = ""


def verb_for(method: str) -> str:
    return _VERBS.get(method, method.lower())


def token_review_body(token: str) -> dict[str, Any]:
    # No audiences: the API server's own, so a scraper uses the token it would send to it.
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }


def reviewed_user(answer: Mapping[str, Any]) -> dict[str, Any] | None:
    """The UserInfo a TokenReview answer vouches for, or None."""
    status = answer.get("status")
    if not isinstance(status, dict) or status.get("authenticated") is not True:
        return None
    user = status.get("user")
    if not isinstance(user, dict) or not isinstance(user.get("username"), str):
        return None
    return user if user["username"] else None


def access_review_body(user: Mapping[str, Any], path: str, verb: str) -> dict[str, Any]:
    """The SubjectAccessReview asking whether ``user`` may ``verb`` the URL ``path``."""
    spec: dict[str, Any] = {
        "user": user["username"],
        "nonResourceAttributes": {"path": path, "verb": verb},
    }
    for key in ("uid", "groups", "extra"):
        if user.get(key):
            spec[key] = user[key]
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def judge_access(username: str, answer: Mapping[str, Any]) -> Verdict:
    status = answer.get("status")
    status = status if isinstance(status, dict) else {}
    reason = status.get("reason")
    return Verdict(
        username,
        status.get("allowed") is True and status.get("denied") is not True,
        reason if isinstance(reason, str) else "",
    )


def refusal(verdict: Verdict, path: str, verb: str) -> Failure:
    """Why a verdict does not allow the request: no user the API server vouches for, or
    one RBAC does not allow."""
    if verdict.user is None:
        return Unauthenticated()
    return AccessDenied(verdict.user, verb, path, verdict.reason)


class VerdictCache:
    """Verdicts by (token digest, path, verb) for ``ttl`` seconds (pure), approvals and
    refusals in two maps, each LRU-bounded by ``max_entries``."""

    def __init__(
        self,
        ttl: float,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._clock = clock
        self._allowed: _Entries = OrderedDict()
        self._refused: _Entries = OrderedDict()

    def __len__(self) -> int:
        return len(self._allowed) + len(self._refused)

    def get(self, key: tuple[bytes, str, str]) -> Verdict | None:
        for entries, kept in ((self._allowed, self.ttl), (self._refused, 0.0)):
            found = entries.get(key)
            if found is None:
                continue
            now = self._clock()
            if now >= found[1]:
                if now >= found[1] + kept:
                    del entries[key]
                return None
            entries.move_to_end(key)
            return found[0]
        return None

    def stale(self, key: tuple[bytes, str, str]) -> Verdict | None:
        """An approval expired less than ``ttl`` ago: for when none can be asked for."""
        found = self._allowed.get(key)
        if found is None or self._clock() >= found[1] + self.ttl:
            return None
        return found[0]

    def put(self, key: tuple[bytes, str, str], verdict: Verdict) -> None:
        if self.ttl <= 0 or self.max_entries <= 0:
            return
        entries, other = (
            (self._allowed, self._refused) if verdict.allowed else (self._refused, self._allowed)
        )
        other.pop(key, None)
        entries[key] = (verdict, self._clock() + self.ttl)
        entries.move_to_end(key)
        while len(entries) > self.max_entries:
            entries.popitem(last=False)


_Entries = OrderedDict[tuple[bytes, str, str], tuple[Verdict, float]]


class MetricsGuard:
    """Authenticates and authorizes every request of the metrics app (its middleware).
    ``sources`` bounds the reviews each source address causes, ``strangers`` those all
    tokens that are not renewing an approval cause together."""

    def __init__(
        self,
        api: KubeClient,
        cache: VerdictCache,
        sources: SourceLimiter | None = None,
        strangers: TokenBucket | None = None,
    ) -> None:
        self.api = api
        self.cache = cache
        self.sources = sources
        self.strangers = strangers
        self._inflight: dict[tuple[bytes, str, str], asyncio.Task[Verdict]] = {}

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.match_info.http_exception is not None:
            # A path or method the port does not serve is refused without asking: the
            # reviews are per path, and a stranger could otherwise vary it at will.
            return await handler(request)
        path, verb = request.path, verb_for(request.method)
        try:
            verdict = await self.verdict(
                request.headers.get("Authorization"), path, verb, request.remote or ""
            )
            if not verdict.allowed:
                raise refusal(verdict, path, verb)
        except Failure as failure:
            answer = errors.answer_for(failure)
            log.info("metrics request refused", extra={"path": path, "code": answer.code})
            return answer.response()
        return await handler(request)

    async def verdict(self, header: str | None, path: str, verb: str, source: str = "") -> Verdict:
        """The verdict for a request with this Authorization header from address
        ``source``; Unavailable when the API server cannot give one, RateLimited when
        ``source`` has caused its share of reviews."""
        try:
            token = bearer_token(header)
        except AuthFailure:
            return Verdict(None, False)
        key = (hashlib.sha256(token.encode()).digest(), path, verb)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        task = self._inflight.get(key)
        if task is None:
            # A token approved a moment ago renews its approval: not the source's charge
            # (only made-up tokens are), whatever its scrape interval and the TTL.
            if self.cache.stale(key) is None:
                self._admit_stranger(source)
            task = asyncio.create_task(self._ask(token, key))
            self._inflight[key] = task
            task.add_done_callback(lambda done: self._asked(key, done))
        try:
            return await asyncio.shield(task)
        except Unavailable:
            stale = self.cache.stale(key)
            if stale is None:
                raise
            log.info("metrics review unavailable: the last approval reused", extra={"path": path})
            return stale

    def _admit_stranger(self, source: str) -> None:
        """Charge a review for a token not renewing an approval, or refuse it."""
        wait = None if self.sources is None else self.sources.take(source)
        if wait is not None:
            log.info("metrics review refused: source over its rate", extra={"source": source})
            raise RateLimited(wait)
        if self.strangers is not None and not self.strangers.try_take():
            log.info("metrics review refused: the strangers' share is spent")
            raise Unavailable.of(KubeBudgetExhausted("metrics", self.strangers.delay()))

    def _asked(self, key: tuple[bytes, str, str], task: asyncio.Task[Verdict]) -> None:
        self._inflight.pop(key, None)
        if not task.cancelled():
            # Retrieved here too: every caller may have gone before it failed.
            task.exception()

    async def _ask(self, token: str, key: tuple[bytes, str, str]) -> Verdict:
        _, path, verb = key
        user = reviewed_user(await self._post(TOKENREVIEWS_PATH, token_review_body(token)))
        if user is None:
            verdict = Verdict(None, False)
        else:
            answer = await self._post(
                SUBJECTACCESSREVIEWS_PATH, access_review_body(user, path, verb)
            )
            verdict = judge_access(user["username"], answer)
        self.cache.put(key, verdict)
        return verdict

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self.api.request_json("POST", path, body=body)
        except KubeBudgetExhausted as exc:
            log.info("metrics review refused: API budget spent", extra={"budget": exc.budget})
            raise Unavailable.of(exc) from None
        except (KubeError, KubeUnavailable) as exc:
            # Never str(exc) of a request that carried a token: the status only.
            status = exc.status if isinstance(exc, KubeError) else None
            log.warning("metrics review failed", extra={"review": path, "status": status})
            raise Unavailable() from None
