"""Why a request is not served, in the domain's words.

Token checks, the caches, the writer and the status path raise these with the facts they
know (a reason, a wait, the API server's message); none of them knows HTTP. ``http/errors.py``
is the one place that says how each is answered. Token refusals are ``AuthFailure``
(``auth/failures.py``, one reason each); payload refusals are ``validation.PayloadError``
and ``validation.ValidationFailed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .kube.errors import KubeBudgetExhausted


class Failure(Exception):
    """A request refused, or not decided, for a reason its client is told."""


class Unavailable(Failure):
    """An answer of the Kubernetes API the request needed is missing: the API server did
    not answer, answered with an error, or the call was not sent because its budget would
    not be free within the caller's limit (``budget_wait``: the seconds until it would)."""

    def __init__(self, budget_wait: float | None = None) -> None:
        super().__init__("the Kubernetes API server is unavailable")
        self.budget_wait = budget_wait

    @classmethod
    def of(cls, cause: Exception) -> Unavailable:
        """For the failed Kubernetes API call that raised ``cause``."""
        return cls(cause.retry_after if isinstance(cause, KubeBudgetExhausted) else None)


class ShuttingDown(Failure):
    """This replica is stopping: it takes no new update (the client retries, and the
    Service sends the retry to a replica that stays)."""

    def __init__(self) -> None:
        super().__init__("the server is shutting down")


class RateLimited(Failure):
    """The poster's service account is over its rate for ``retry_after`` whole seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"rate-limited for {retry_after}s")
        self.retry_after = retry_after


class TrainJobNotFound(Failure):
    """The TrainJob a post is for does not exist."""


class Invalid(Failure):
    """The API server refused the update as invalid: its own ``message`` and ``details``,
    passed on as they are."""

    def __init__(self, message: str, details: Mapping[str, Any] | None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class WriteFailed(Failure):
    """The status write failed for a reason the poster can do nothing about."""


class Unauthenticated(Failure):
    """No credential the cluster vouches for (the metrics port: no bearer token, or one a
    TokenReview did not accept)."""


class AccessDenied(Failure):
    """``user`` may not ``verb`` the non-resource URL ``path``; ``reason`` is the
    authorizer's, possibly empty."""

    def __init__(self, user: str, verb: str, path: str, reason: str = "") -> None:
        super().__init__(f"{user} may not {verb} {path}")
        self.user = user
        self.verb = verb
        self.path = path
        self.reason = reason
