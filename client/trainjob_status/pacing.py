"""When the sender may post next: the throttle window, retry delays and Retry-After.

Pure: times are passed in (monotonic seconds for the schedule, Unix seconds for HTTP
dates), randomness is injected, nothing sleeps.
"""

from __future__ import annotations

import email.utils
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

# A Retry-After beyond this is taken as this: a proxy's "come back tomorrow" must not
# park the latest update for a day; newer data will be offered again anyway.
MAX_RETRY_AFTER = 300.0
# Doublings past this change nothing for any sane backoff (2**64 steps), and capping the
# exponent first keeps the arithmetic finite however long an outage lasts.
_MAX_DOUBLINGS = 64
_DELTA_SECONDS = re.compile(r"\d+(\.\d+)?")


@dataclass
class Pacer:
    """At most one request per ``min_interval``, plus a retry delay after a failure.

    The throttle window opens ``min_interval`` after a request started. A retry waits for
    the server's Retry-After, else an exponential backoff (``backoff_initial`` doubling up
    to ``backoff_max``, each scaled by a random factor in [0.5, 1]); a success resets it.
    A flush ignores the throttle window but never a retry delay.
    """

    min_interval: float
    backoff_initial: float = 0.5
    backoff_max: float = 60.0
    random: Callable[[], float] = field(default=random.random, repr=False)
    throttle_at: float = -math.inf
    retry_at: float = -math.inf
    failures: int = 0

    def ready_at(self, *, flushing: bool) -> float:
        """The earliest monotonic time the next request may start."""
        if flushing:
            return self.retry_at
        return max(self.throttle_at, self.retry_at)

    def started(self, now: float) -> None:
        """A request (not a same-request reconnect) starts at ``now``."""
        self.throttle_at = now + self.min_interval

    def succeeded(self) -> None:
        self.failures = 0
        self.retry_at = -math.inf

    def failed(self, now: float, retry_after: float | None) -> float:
        """Schedule a retry; returns its delay in seconds."""
        self.failures += 1
        if retry_after is not None:
            delay = min(max(retry_after, 0.0), MAX_RETRY_AFTER)
        else:
            doublings = min(self.failures - 1, _MAX_DOUBLINGS)
            ceiling = min(self.backoff_initial * 2.0**doublings, self.backoff_max)
            delay = ceiling * (0.5 + self.random() / 2)
        self.retry_at = now + delay
        return delay


def parse_retry_after(header: str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date; a decimal
    fraction is tolerated), with ``now`` in Unix seconds; None when absent or unreadable."""
    if header is None:
        return None
    text = header.strip()
    if _DELTA_SECONDS.fullmatch(text):
        return float(text)  # hundreds of digits read as inf, which the Pacer caps
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    return max(when.timestamp() - now, 0.0)
