"""Posts per service account: one token bucket per ``sub`` (pure; the clock is injected).

Only authenticated posts reach the limiter, so only someone holding valid tokens of
many service accounts can make many buckets; still, at most ``max_buckets`` are kept,
the least recently used dropped first. A dropped bucket is one that has been idle
longest, so it has most likely refilled: forgetting it changes nothing.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

from ..kube.ratelimit import TokenBucket


def retry_after_seconds(delay: float) -> int:
    """Whole seconds for ``Retry-After``: rounded up, never 0 (0 invites a hot retry)."""
    return max(1, math.ceil(delay))


class ServiceAccountLimiter:
    """``rate`` posts per second per service account, bursts of ``burst``."""

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        max_buckets: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_buckets < 1:
            raise ValueError(f"max_buckets must be >= 1, got {max_buckets}")
        # Fails early on a bad rate or burst, as TokenBucket would on first use.
        TokenBucket(rate, burst, clock)
        self.rate = rate
        self.burst = burst
        self.max_buckets = max_buckets
        self._clock = clock
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, account: str) -> int | None:
        """None when ``account`` may post now (a token is spent); otherwise the seconds
        to wait before its next post may pass, for ``Retry-After``."""
        bucket = self._buckets.get(account)
        if bucket is None:
            bucket = TokenBucket(self.rate, self.burst, self._clock)
            self._buckets[account] = bucket
            if len(self._buckets) > self.max_buckets:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(account)
        if bucket.try_take():
            return None
        return retry_after_seconds(bucket.delay())


class SourceLimiter(ServiceAccountLimiter):
    """What one source address may cause that costs an API request (a review of a token
    nothing vouches for yet): ``rate`` per second, bursts of ``burst``, per address.
    Anyone who can reach a port makes such requests with made-up tokens, each distinct
    so no cache answers it; many addresses still share the budget behind the limiter,
    but no one address can spend it. At most ``max_buckets`` addresses are tracked,
    the least recently seen forgotten (its bucket most likely full again)."""
