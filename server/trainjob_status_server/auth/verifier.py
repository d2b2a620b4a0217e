"""Token authentication bound to the TrainJob and its pod: the Authenticator the server
runs with.

Per post: parse the bearer header; look the token's SHA-256 up in the verified-token
cache (a hit still needs its key in the current JWKS); on a miss verify the signature
offline (or, in TokenReview mode, check the claims and then ask the API server) and
cache the claims; check the claims against the URL's TrainJob; check the bound pod in
the pod watch cache; spend a token of the service account's bucket. Nothing before a
verified signature can cause a Kubernetes API call (TokenReview mode: nothing before the
claims pass, the digest is not a refusal remembered from the last ``negative_ttl``
seconds, the pod cache shows the bound pod with its uid in the TrainJob, and the source
address's review bucket has paid for the review). A post is charged to its service
account's bucket only once its token is verified: what an unverified token claims is
the sender's word, and charges the sender's address.

The cached path is a hash, the entry's look-up and key, the time checks when the token
passed the others for this TrainJob before, the pod cache's look-up (no judgement while
it holds the object that passed last) and the bucket.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import time
from collections.abc import Awaitable, Callable

from trainjob_status.contract import audience as audience_for

from ..failures import RateLimited, Unavailable
from ..kube.backoff import Backoff
from ..kube.cache import WatchCache
from ..kube.client import KubeClient
from ..metrics.selfmetrics import AUTH_FAILURES, RATE_LIMITED
from .authenticator import Identity
from .bearer import bearer_token
from .binding import PodBinding
from .claims import (
    PEER_AUDIENCE,
    TokenFacts,
    check_facts,
    check_peer,
    check_times,
    parse_facts,
    unverified_claims,
)
from .failures import AuthFailure
from .issuer import DISCOVERY_PATH, discover_issuer, own_token_issuer
from .jwks import JWKS_ACCEPT, JWKS_PATH, KeyStore
from .keys import KeySet
from .ownership import OwnerChain
from .ratelimit import ServiceAccountLimiter, SourceLimiter
from .settings import AuthSettings
from .signature import SignatureVerifier, allowed_algorithm, header_of
from .tokencache import Admission, TokenCache, Verified
from .tokenreview import TokenReviewer

__all__ = ["AuthSettings", "TokenAuthenticator"]

log = logging.getLogger(__name__)

_DISCOVERY_BACKOFF = Backoff(base=0.5, cap=30.0)


class TokenAuthenticator:
    """Built from settings alone; ``start(kube)`` with the server's started KubeClient
    (its request budget is shared), ``stop()`` before the client closes. ``ready`` once
    the issuer and its keys are known and the pod cache has listed; until then posts
    get 503."""

    def __init__(
        self,
        settings: AuthSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings = settings or AuthSettings()
        problems = settings.check()
        if problems:
            raise ValueError("; ".join(problems))
        self._clock = clock
        self._monotonic = monotonic
        self.tokens = TokenCache(settings.token_cache_size)
        self.limiter = ServiceAccountLimiter(
            settings.sa_rate_limit,
            settings.sa_rate_burst,
            max_buckets=settings.sa_max_buckets,
            clock=monotonic,
        )
        self.sources = SourceLimiter(
            settings.review_source_rate,
            settings.review_source_burst,
            max_buckets=settings.sa_max_buckets,
            clock=monotonic,
        )
        self.issuer: str | None = None
        self.keys: KeyStore | None = None
        self.signatures: SignatureVerifier | None = None
        if not settings.token_review:
            self.keys = KeyStore(
                self._fetch_jwks,
                refresh_interval=settings.jwks_refresh_interval,
                on_change=self._keys_changed,
                clock=monotonic,
            )
            self.signatures = SignatureVerifier(self.keys)
        # Built by start(): they need the KubeClient.
        self.api: KubeClient | None = None
        self.binding: PodBinding | None = None
        self.reviewer: TokenReviewer | None = None
        self._issuer_known = asyncio.Event()
        self._open = False  # see _opened()
        self._discovery: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        keys_loaded = self.keys is None or self.keys.loaded.is_set()
        pods_listed = self.binding is not None and self.binding.ready
        return self._issuer_known.is_set() and keys_loaded and pods_listed

    async def wait_ready(self) -> None:
        """Wait until ``ready`` (bound it with ``asyncio.timeout``)."""
        if self.binding is None:
            raise RuntimeError("TokenAuthenticator.wait_ready() before start()")
        await self._issuer_known.wait()
        if self.keys is not None:
            await self.keys.loaded.wait()
        await self.binding.pods.wait_synced()

    async def start(
        self,
        kube: KubeClient,
        watch: KubeClient | None = None,
        trainjobs: WatchCache | None = None,
        jobsets: WatchCache | None = None,
    ) -> None:
        """Launch issuer discovery, the JWKS refresh loop and the pod cache; returns at
        once (``ready`` tells when they have loaded). ``kube`` serves what a post may
        need asked (TokenReview, JWKS, a pod the cache lacks): give it a budget of its
        own, with a wait limit, so token checks and status writes cannot starve each
        other. ``watch`` (default ``kube``) lists and watches the pods. With the server's
        TrainJob cache, ``trainjobs``, pods are bound by ownership where Jobs and JobSets
        can be listed (``ownership.OwnerChain``, reading ``jobsets`` when given: a JobSet
        cache started elsewhere whose view keeps the controller); without it, by their
        label only."""
        if self.binding is not None:
            return
        settings = self.settings
        self.api = kube
        owners = (
            OwnerChain(
                watch if watch is not None else kube,
                trainjobs,
                jobsets=jobsets,
                labels_after=settings.binding_labels_after,
            )
            if trainjobs is not None and settings.require_pod_membership
            else None
        )
        self.binding = PodBinding(
            kube,
            watch=watch,
            owners=owners,
            label_selector=settings.pod_selector,
            require_membership=settings.require_pod_membership,
            leeway=settings.leeway,
            negative_ttl=settings.negative_cache_seconds,
            clock=self._monotonic,
        )
        await self.binding.start()
        if settings.token_review:
            self.reviewer = TokenReviewer(
                self.api, negative_ttl=settings.negative_cache_seconds, clock=self._monotonic
            )
        if self.keys is not None:
            await self.keys.start()
        self._discovery = asyncio.create_task(self._discover(), name="issuer-discovery")

    async def stop(self) -> None:
        if self._discovery is not None:
            self._discovery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._discovery
            self._discovery = None
        if self.keys is not None:
            await self.keys.stop()
        if self.binding is not None:
            await self.binding.stop()

    async def _discover(self) -> None:
        settings, failures = self.settings, 0
        while not self._issuer_known.is_set():
            try:
                if settings.token_review:
                    # The API server judges the issuer; check it too when we know it.
                    self.issuer = settings.issuer or await own_token_issuer(settings.own_token_path)
                else:
                    self.issuer = await discover_issuer(
                        settings.issuer, settings.own_token_path, self._fetch_discovery
                    )
                self._issuer_known.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                log.warning("issuer discovery failed", extra={"error": str(exc)})
                jitter = random.random()  # noqa: S311 - backoff jitter, not a secret
                await asyncio.sleep(_DISCOVERY_BACKOFF.delay(failures, jitter))

    async def _fetch_discovery(self) -> object:
        assert self.api is not None
        return await self.api.request_json("GET", DISCOVERY_PATH)

    async def _fetch_jwks(self) -> object:
        assert self.api is not None
        return await self.api.request_json("GET", JWKS_PATH, accept=JWKS_ACCEPT)

    def _keys_changed(self, old: KeySet, new: KeySet) -> None:
        dropped = self.tokens.drop_where(lambda e: e.key is not None and e.key not in new)
        if dropped:
            log.info("verified tokens dropped: key left the JWKS", extra={"count": dropped})

    # -- the request path ------------------------------------------------------------------

    async def authenticate(
        self, authorization: str | None, namespace: str, trainjob: str, source: str = ""
    ) -> Identity:
        """The poster's identity, or a refusal: ``AuthFailure``, ``RateLimited`` over the
        service account's rate (or, before a TokenReview, over the reviews the source
        address ``source`` may cause), ``Unavailable`` when a needed API answer is
        missing."""
        binding, keys = self.binding, self.keys
        if binding is None or not (self._open or self._opened()):
            raise Unavailable()
        entry: Verified | None = None
        try:
            token = bearer_token(authorization)
            digest = hashlib.sha256(token.encode()).digest()
            now = self._clock()
            entry = self.tokens.get(digest, now)
            if entry is None or (
                entry.key is not None and (keys is None or entry.key not in keys.keys)
            ):
                entry = await self._verify(token, digest, namespace, trainjob, now, source)
            admission = self._admit(entry, namespace, trainjob, now)
            facts = entry.facts
            pod, uid = facts.pod_name, facts.pod_uid
            if (
                pod is not None
                and uid is not None
                and not binding.still_fit(namespace, pod, trainjob, admission.pod)
            ):
                admission.pod = await binding.check(namespace, pod, uid, trainjob, now)
        except AuthFailure as failure:
            self._refused(failure, namespace, trainjob, entry.facts if entry else None)
            raise
        assert facts.subject is not None  # check_facts has made sure of it
        self._charge(facts.subject, namespace, trainjob)
        return admission.identity

    def _opened(self) -> bool:
        """Whether the issuer and the keys are known, so posts can be judged. Once they
        are, for good: neither is ever forgotten, so ``_open`` stays set."""
        self._open = self._issuer_known.is_set() and (
            self.keys is None or self.keys.loaded.is_set()
        )
        return self._open

    def _admit(self, entry: Verified, namespace: str, trainjob: str, now: float) -> Admission:
        """``check_facts`` for a post to ``namespace/trainjob`` at ``now``; what the
        entry remembers of that TrainJob. Claims that passed for it before need only
        the time checks: the rest would give the same answer again."""
        admitted = entry.admitted
        if (
            admitted is not None
            and admitted.trainjob == trainjob
            and admitted.namespace == namespace
        ):
            check_times(entry.facts, now, self.settings.leeway)
            return admitted
        facts = entry.facts
        self._check(facts, audience_for(namespace, trainjob), namespace, now)
        assert facts.service_account is not None  # check_facts has made sure of it
        identity = Identity(namespace, facts.service_account, facts.pod_name)
        entry.admitted = admitted = Admission(namespace, trainjob, identity)
        return admitted

    def _charge(self, subject: str, namespace: str, trainjob: str) -> None:
        """Spend a token of ``subject``'s bucket (a verified one), or raise RateLimited."""
        wait = self.limiter.take(subject)
        if wait is not None:
            RATE_LIMITED.inc()
            log.info(
                "post rate-limited",
                extra={"trainjob": f"{namespace}/{trainjob}", "subject": subject},
            )
            raise RateLimited(wait)

    def _charge_source(self, source: str, what: str) -> None:
        """Spend a review of ``source``'s bucket, or raise RateLimited (``what``: the
        TrainJob a post is for, or ``hand-over``, in the log line)."""
        wait = self.sources.take(source)
        if wait is not None:
            RATE_LIMITED.inc()
            log.info(
                "post rate-limited: reviews of its source address",
                extra={"trainjob": what, "source": source},
            )
            raise RateLimited(wait)

    def _check(self, facts: TokenFacts, audience: str, namespace: str, now: float) -> None:
        check_facts(
            facts,
            issuer=self.issuer,
            audience=audience,
            namespace=namespace,
            now=now,
            leeway=self.settings.leeway,
            allow_unbound=self.settings.allow_unbound_tokens,
        )

    async def _verify(
        self, token: str, digest: bytes, namespace: str, trainjob: str, now: float, source: str
    ) -> Verified:
        """The entry of ``token``, verified for a post to ``namespace/trainjob``."""
        audience = audience_for(namespace, trainjob)

        def claims(facts: TokenFacts) -> None:
            self._check(facts, audience, namespace, now)

        async def pod(facts: TokenFacts) -> None:
            if facts.pod_name is not None and facts.pod_uid is not None:
                # What the pod cache can refuse costs no review: a forged token must
                # name a live pod of the TrainJob, with its uid, to cost one.
                assert self.binding is not None  # started
                await self.binding.check_cached(
                    namespace, facts.pod_name, facts.pod_uid, trainjob, now
                )

        return await self._verified(
            token, digest, now, audience, claims, pod, source, f"{namespace}/{trainjob}"
        )

    async def _verified(
        self,
        token: str,
        digest: bytes,
        now: float,
        audience: str,
        claims: Callable[[TokenFacts], None],
        before_review: Callable[[TokenFacts], Awaitable[None]] | None,
        source: str,
        what: str,
    ) -> Verified:
        """The entry of ``token``, verified: its signature, or in TokenReview mode
        ``claims`` (then ``before_review``) and a review for ``audience`` charged to
        ``source``; ``what`` names the request in a log line."""
        if self.signatures is not None:
            verified, key = await self.signatures.verify(token)
            facts = parse_facts(verified)
        else:
            assert self.reviewer is not None  # TokenReview mode once started
            allowed_algorithm(header_of(token))
            facts = parse_facts(unverified_claims(token))
            # Claims first: a token that would fail them never reaches the API server.
            claims(facts)
            # A refusal remembered for this digest costs nothing; any other review is
            # charged to the source address that sent it, never to the account the
            # token only claims: forged tokens naming a pod cannot spend its rate.
            self.reviewer.check_refused(digest)
            if before_review is not None:
                await before_review(facts)
            if not self.reviewer.asking(digest):
                # A review already asked for costs no more; a new one is the source's.
                self._charge_source(source, what)
            await self.reviewer.review(token, digest, audience, facts)
            key = None
        until = (facts.expires if facts.expires is not None else -1.0) + self.settings.leeway
        entry = Verified(facts, key, until)
        self.tokens.put(digest, entry, now)
        return entry

    # -- hand-overs between replicas -------------------------------------------------------

    async def authenticate_peer(self, authorization: str | None, subject: str, source: str) -> None:
        """Return when the bearer token is another replica's (``claims.check_peer`` for
        the server's account ``subject``); otherwise raise as ``authenticate`` does. Its
        signature is verified as a post's token is (offline, or by TokenReview after its
        claims passed and its source paid), and cached alike."""
        if not (self._open or self._opened()):
            raise Unavailable()
        try:
            token = bearer_token(authorization)
            digest = hashlib.sha256(token.encode()).digest()
            now = self._clock()
            entry = self.tokens.get(digest, now)
            keys = self.keys
            if entry is None or (
                entry.key is not None and (keys is None or entry.key not in keys.keys)
            ):
                entry = await self._verify_peer(token, digest, subject, now, source)
            check_peer(
                entry.facts,
                issuer=self.issuer,
                subject=subject,
                now=now,
                leeway=self.settings.leeway,
            )
        except AuthFailure as failure:
            AUTH_FAILURES.labels(reason=failure.reason).inc()
            log.info(
                "hand-over refused",
                extra={"reason": failure.reason, "code": failure.code, "source": source},
            )
            raise

    async def _verify_peer(
        self, token: str, digest: bytes, subject: str, now: float, source: str
    ) -> Verified:
        def claims(facts: TokenFacts) -> None:
            check_peer(
                facts, issuer=self.issuer, subject=subject, now=now, leeway=self.settings.leeway
            )

        return await self._verified(
            token, digest, now, PEER_AUDIENCE, claims, None, source, "hand-over"
        )

    @staticmethod
    def _refused(
        failure: AuthFailure, namespace: str, trainjob: str, facts: TokenFacts | None
    ) -> None:
        AUTH_FAILURES.labels(reason=failure.reason).inc()
        fields: dict[str, object] = {
            "reason": failure.reason,
            "code": failure.code,
            "trainjob": f"{namespace}/{trainjob}",
        }
        if facts is not None:
            # Only claims a verified signature (or the API server) vouched for.
            fields.update(subject=facts.subject, pod=facts.pod_name)
        log.info("post refused", extra=fields)
