"""Rate-limited logging: a training loop that hits the same problem every step logs it
once, then at most once per interval with a count of what was held back.

Messages are ``key=value`` lines. Nothing here ever sees the token.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("trainjob_status")

DEFAULT_INTERVAL = 600.0


class RateLimitedLog:
    """``log(level, key, message, *args)`` emits the first time ``key`` is seen, then at
    most once per ``interval`` seconds."""

    def __init__(
        self,
        target: logging.Logger = logger,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = target
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def log(self, level: int, key: str, message: str, *args: object) -> bool:
        """Returns True when the line was emitted."""
        if not self.target.isEnabledFor(level):
            return False
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval:
                self._held[key] = self._held.get(key, 0) + 1
                return False
            self._last[key] = now
            held = self._held.pop(key, 0)
        if held:
            message += " suppressed=%d"
            args = (*args, held)
        self.target.log(level, message, *args)
        return True
