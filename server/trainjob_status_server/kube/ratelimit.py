"""A token bucket for outbound API calls (pure: the clock is injected, nothing sleeps)."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up; starts full.

    ``reserve()`` always takes a token and says how long the caller must wait before
    using it, borrowing from the future when the bucket is empty: callers are served in
    the order they reserved and no caller polls. ``reserve_within(limit)`` does the same
    only when that wait is at most ``limit``, so a caller with a deadline never queues
    behind more borrowing than it can wait out. ``try_take()`` takes one only if it is
    there now, for callers that would rather do something else than wait.
    """

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst}")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def _refill(self) -> float:
        now = self._clock()
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate)
        return self._tokens

    def raise_to(self, rate: float, burst: int) -> None:
        """Spend at ``rate`` with ``burst`` from now on, where they are above today's
        (never lowered): what is saved up so far is kept."""
        self._refill()
        self.rate = max(self.rate, rate)
        self.burst = max(self.burst, burst)

    @property
    def tokens(self) -> float:
        """Tokens available now; negative while reservations are waiting."""
        return self._refill()

    def delay(self) -> float:
        """Seconds until a token would be available (0 if one is), taking nothing."""
        return max(0.0, (1.0 - self._refill()) / self.rate)

    def try_take(self) -> bool:
        """Take a token if one is available now."""
        # _refill written out: this runs on every authenticated post.
        now = self._clock()
        elapsed = now - self._last
        self._last = now
        tokens = self._tokens
        if elapsed > 0.0:
            tokens += elapsed * self.rate
            if tokens > self.burst:
                tokens = float(self.burst)
        if tokens >= 1.0:
            self._tokens = tokens - 1.0
            return True
        self._tokens = tokens
        return False

    def reserve(self) -> float:
        """Take a token, possibly one not yet earned; returns the seconds to wait first."""
        wait = self.delay()
        self._tokens -= 1.0
        return wait

    def reserve_within(self, limit: float) -> float | None:
        """Like ``reserve()`` when the wait would be at most ``limit`` seconds; otherwise
        take nothing and return None (``delay()`` then says how long until one fits)."""
        wait = self.delay()
        if wait > limit:
            return None
        self._tokens -= 1.0
        return wait

    def cancel(self) -> None:
        """Give back a reserved token its caller never used (it was cancelled waiting)."""
        self._refill()
        self._tokens = min(float(self.burst), self._tokens + 1.0)
