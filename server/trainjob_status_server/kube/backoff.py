"""When the cache tries again after a failure (pure: randomness and time are arguments)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff with "equal jitter": after ``n`` consecutive failures
    wait between half and all of ``min(cap, base * 2 ** (n - 1))`` seconds, so many
    replicas that lost the API server together do not come back in lockstep."""

    base: float = 0.5
    cap: float = 30.0

    def delay(self, failures: int, rand: float, retry_after: float | None = None) -> float:
        """Seconds to wait after ``failures`` consecutive failures (0 after none).

        ``rand`` is uniform in [0, 1). A server's Retry-After is honoured as a floor, up
        to ``cap``: a broken header must not park the cache for a day.
        """
        if failures <= 0:
            return 0.0
        ceiling = min(self.cap, self.base * 2.0 ** min(failures - 1, 62))
        wait = ceiling / 2 + ceiling / 2 * rand
        if retry_after is not None:
            wait = max(wait, min(float(retry_after), self.cap))
        return wait


def ended_too_soon(events: int, duration: float, min_duration: float) -> bool:
    """A watch that closed before ``min_duration`` without delivering anything (not even
    a bookmark) counts as a failure: re-watching at once could spin against a server or
    proxy that closes every watch immediately, spending the shared API budget."""
    return events == 0 and duration < min_duration


def watch_timeout(minimum: float, rand: float) -> int:
    """The server-side timeout of one watch: between ``minimum`` and twice that, as
    client-go does, so watches opened together do not all expire together."""
    return max(1, round(minimum * (1.0 + rand)))
