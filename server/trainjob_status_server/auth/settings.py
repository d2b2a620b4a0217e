"""Every option of token authentication, in one frozen object built from the flags."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .binding import TRAINJOB_PODS
from .issuer import DEFAULT_TOKEN_PATH
from .ownership import LABELS_AFTER


@dataclass(frozen=True)
class AuthSettings:
    issuer: str | None = None
    """The tokens' ``iss``; discovered when None (own token, then OIDC discovery)."""

    own_token_path: Path | None = DEFAULT_TOKEN_PATH
    """The server's own service-account token, read once for its ``iss``."""

    leeway: float = 60.0
    """Seconds of clock skew allowed on exp/nbf/iat: go-jose's (and kube-apiserver's)."""

    jwks_refresh_interval: float = 30.0
    """Seconds between JWKS refreshes, and at least between two refreshes an unknown kid
    triggers: a removed key stops verifying within this, and a flood of forged kids
    costs at most one fetch per interval (two requests a minute per replica at most)."""

    require_pod_membership: bool = True
    """The bound pod's ``jobset.sigs.k8s.io/jobset-name`` must be the TrainJob's name.
    Off, the pod cache holds every pod (it cannot be narrowed to TrainJob pods)."""

    allow_unbound_tokens: bool = False
    """Accept tokens without a ``kubernetes.io.pod`` binding (any pod of the namespace
    could then post with its service account's token)."""

    token_review: bool = False
    """Verify signatures with TokenReview instead of the JWKS."""

    sa_rate_limit: float = 500.0
    """Posts per second per service account. A pod posts every 5 s at most, so 1,000
    pods sharing one account make 200/s: 2.5x headroom for clients without the
    throttle (the Transformers callback posts at its logging steps), while one runaway
    account stays a few percent of a core."""

    sa_rate_burst: int = 2_000
    """Posts one service account may make at once: two synchronised rounds of 1,000
    pods (train begin, epoch ends)."""

    sa_max_buckets: int = 10_000
    """Service accounts whose rate is tracked at once (least recently seen forgotten)."""

    token_cache_size: int = 10_000
    """Verified tokens kept (LRU), about 1.5 KB each; 0 turns the cache off. kubelet
    renews a projected token at 80% of its life, so a pod has at most two live tokens:
    this covers 5,000 posting pods per replica."""

    review_source_rate: float = 2.0
    """TokenReviews per second one source address may cause (``--token-review``), for
    tokens no cache vouches for yet: a pod's first post, then one per token renewal
    (hourly). A node's pods share their node's address on host network or behind SNAT:
    64 of them starting at once fit ``review_source_burst`` and two seconds."""

    review_source_burst: int = 32
    """TokenReviews one source address may cause at once."""

    negative_cache_seconds: float = 10.0
    """How long a refusal that took an API request (pod not found, TokenReview said
    no) is remembered, so a stale token retried in a loop costs one request per
    interval."""

    binding_labels_after: float = LABELS_AFTER
    """Seconds Jobs or JobSets must stay unlistable (403 or 404) before a pod is bound by
    its label alone (``ownership.LABELS_AFTER``); until then such posts are answered 503."""

    @property
    def pod_selector(self) -> str | None:
        """The pod cache's label selector: TrainJob pods only, unless membership is off."""
        return TRAINJOB_PODS if self.require_pod_membership else None

    def check(self) -> list[str]:
        """What is wrong with these settings, one line each (empty when usable)."""
        problems = []
        if self.leeway < 0:
            problems.append("--token-leeway must be >= 0")
        if self.jwks_refresh_interval <= 0:
            problems.append("--jwks-refresh-interval must be > 0")
        if self.sa_rate_limit <= 0 or self.sa_rate_burst < 1:
            problems.append("--sa-rate-limit must be > 0 and --sa-rate-burst >= 1")
        if self.sa_max_buckets < 1:
            problems.append("sa_max_buckets must be >= 1")
        if self.token_cache_size < 0:
            problems.append("--token-cache-size must be >= 0")
        if self.negative_cache_seconds < 0:
            problems.append("negative_cache_seconds must be >= 0")
        return problems
