"""The server's Kubernetes API budgets: one connection, five token buckets.

Who spends what (none can starve another, each has its own qps/burst flags):

- ``writes`` (``--kube-api-qps``/``--kube-api-burst``, Kubeflow Trainer's 5/10): status writes
  and the TrainJob look-up of an authenticated post whose TrainJob the cache lacks;
- ``auth`` (``--kube-auth-*``, 2/5): what the posts' token checking asks the API server
  for (TokenReview, issuer discovery and JWKS, a pod the cache lacks);
- ``metrics`` (``--kube-metrics-*``, 1/4): a scraper's TokenReview and
  SubjectAccessReview under ``--metrics-secure``, which anyone who can reach the port
  can cause with a garbage token: apart, so that cannot delay a pod's first post;
- ``reads`` (``--kube-reads-*``, 5/10): the aggregated API's SubjectAccessReviews, one
  per reader, namespace and verb every 10 s; only the API server's front proxy can
  cause them, for users it authenticated;
- ``watch`` (``--kube-watch-*``, 2/10): the caches' lists and watches, the certificate
  bootstrap and CA distribution, none of which any request can cause.

A call made for a request (a post's look-up, a direct write, a TokenReview, a pod
fetch) waits for its bucket at most ``--kube-api-timeout``; one that would wait longer
is refused at once (``KubeBudgetExhausted``) and the post answered 503 with a
Retry-After of that wait (``errors.answer_for``). The coalescing writer is no request:
its writes wait their turn in the ``writes`` bucket.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .kube.client import KubeClient

if TYPE_CHECKING:
    from .config import Config


@dataclass(frozen=True)
class Budgets:
    """The lanes of one KubeClient; ``watch`` is the client itself (it owns the
    connection: start and close it)."""

    watch: KubeClient
    writes: KubeClient
    auth: KubeClient
    metrics: KubeClient
    reads: KubeClient

    @classmethod
    def for_config(cls, config: Config) -> Budgets:
        watch = KubeClient(
            kubeconfig=config.kubeconfig,
            timeout=config.kube_api_timeout,
            qps=config.kube_watch_qps,
            burst=config.kube_watch_burst,
            budget_name="watch",
        )
        deadline = config.kube_api_timeout
        return cls(
            watch=watch,
            writes=watch.lane(
                "writes", qps=config.kube_api_qps, burst=config.kube_api_burst, max_wait=deadline
            ),
            auth=watch.lane(
                "auth", qps=config.kube_auth_qps, burst=config.kube_auth_burst, max_wait=deadline
            ),
            metrics=watch.lane(
                "metrics",
                qps=config.kube_metrics_qps,
                burst=config.kube_metrics_burst,
                max_wait=deadline,
            ),
            reads=watch.lane(
                "reads", qps=config.kube_reads_qps, burst=config.kube_reads_burst, max_wait=deadline
            ),
        )
