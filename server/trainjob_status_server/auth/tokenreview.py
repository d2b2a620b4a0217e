"""TokenReview mode, for clusters whose issuer keys cannot be fetched: the API server
verifies the signature; everything else is checked here as in JWKS mode.

The caller checks the token's claims (unverified) before asking, so a token that would
fail them never costs an API call. The API server's verdict on a token does not depend
on the audience we ask with beyond the audience check the caller has already made, so
a success is cached by digest until the token expires (in the verified-token cache,
with the claims the review vouched for) and a refusal for ``negative_ttl`` seconds here.
Concurrent reviews of one token share one request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from ..failures import Unavailable
from ..kube.client import KubeClient
from ..kube.errors import KubeBudgetExhausted, KubeError, KubeUnavailable
from . import failures
from .claims import TokenFacts
from .failures import AuthFailure

log = logging.getLogger(__name__)

TOKENREVIEWS_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
EXTRA_POD_NAME = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID = "authentication.kubernetes.io/pod-uid"

# kube-apiserver's texts inside status.error, most specific first.
_ERROR_REASONS = (
    ("has been invalidated", failures.POD_GONE),
    ("does not match service account pod ref claim", failures.POD_UID),
    ("no keys found", failures.UNKNOWN_KID),
    ("has expired", failures.EXPIRED),
    ("is not valid yet", failures.NOT_YET_VALID),
    ("issued in the future", failures.NOT_YET_VALID),
    ("is invalid for the target audiences", failures.AUDIENCE),
)


def review_body(token: str, audience: str) -> dict[str, Any]:
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, "audiences": [audience]},
    }


def reason_of_error(error: str) -> str:
    """Our reason for a review's ``status.error`` (a signature problem unless the text
    says otherwise: that is what is left once the claims have passed here)."""
    for text, reason in _ERROR_REASONS:
        if text in error:
            return reason
    return failures.SIGNATURE


def _extra(user: Mapping[str, Any], key: str) -> str | None:
    extra = user.get("extra")
    values = extra.get(key) if isinstance(extra, dict) else None
    if isinstance(values, list) and len(values) == 1 and isinstance(values[0], str):
        return values[0]
    return None


def judge_review(answer: Mapping[str, Any], facts: TokenFacts) -> str | None:
    """The refusal reason for a TokenReview answer about a token with ``facts``, or None.

    The user the API server authenticated must be the token's own subject and pod, so
    the claims we go on to check are the ones it vouched for."""
    status = answer.get("status")
    status = status if isinstance(status, dict) else {}
    if status.get("authenticated") is not True:
        error = status.get("error")
        return reason_of_error(error if isinstance(error, str) else "")
    user = status.get("user")
    user = user if isinstance(user, dict) else {}
    if user.get("username") != facts.subject:
        return failures.CLAIMS
    if facts.pod_uid is not None and (
        _extra(user, EXTRA_POD_UID) != facts.pod_uid
        or _extra(user, EXTRA_POD_NAME) != facts.pod_name
    ):
        return failures.CLAIMS
    return None


class TokenReviewer:
    """Asks the API server about tokens; remembers refusals briefly."""

    def __init__(
        self,
        api: KubeClient,
        *,
        negative_ttl: float = 10.0,
        max_negative: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.negative_ttl = negative_ttl
        self.max_negative = max_negative
        self._clock = clock
        self._refused: OrderedDict[bytes, tuple[str, float]] = OrderedDict()
        self._inflight: dict[bytes, asyncio.Task[str | None]] = {}

    def check_refused(self, digest: bytes) -> None:
        """Raise the AuthFailure remembered for ``digest``, if any is still fresh."""
        refused = self._refused.get(digest)
        if refused is not None:
            if self._clock() < refused[1]:
                raise AuthFailure(refused[0])
            del self._refused[digest]

    def asking(self, digest: bytes) -> bool:
        """Whether a review of ``digest`` is in flight (a caller would share it)."""
        return digest in self._inflight

    async def review(self, token: str, digest: bytes, audience: str, facts: TokenFacts) -> None:
        """Return when the API server vouches for ``token`` (with ``facts``); raise
        AuthFailure when it does not, ``Unavailable`` when it cannot answer
        (with the budget's Retry-After when the request was not sent for lack of it)."""
        self.check_refused(digest)
        task = self._inflight.get(digest)
        if task is None:
            task = asyncio.create_task(self._ask(token, digest, audience, facts))
            self._inflight[digest] = task
            task.add_done_callback(lambda done: self._asked(digest, done))
        reason = await asyncio.shield(task)
        if reason is not None:
            raise AuthFailure(reason)

    def _asked(self, digest: bytes, task: asyncio.Task[str | None]) -> None:
        self._inflight.pop(digest, None)
        if not task.cancelled():
            # Retrieved here too: every caller may have given up before it failed.
            task.exception()

    async def _ask(self, token: str, digest: bytes, audience: str, facts: TokenFacts) -> str | None:
        try:
            answer = await self.api.request_json(
                "POST", TOKENREVIEWS_PATH, body=review_body(token, audience)
            )
        except KubeBudgetExhausted as exc:
            log.info("TokenReview refused: API budget spent", extra={"budget": exc.budget})
            raise Unavailable.of(exc) from None
        except (KubeError, KubeUnavailable) as exc:
            # Never str(exc) of a request that carried a token: log the status only.
            status = exc.status if isinstance(exc, KubeError) else None
            log.warning("TokenReview failed", extra={"status": status})
            raise Unavailable() from None
        reason = judge_review(answer, facts)
        if reason is not None:
            self._refused[digest] = (reason, self._clock() + self.negative_ttl)
            while len(self._refused) > self.max_negative:
                self._refused.popitem(last=False)
        return reason
