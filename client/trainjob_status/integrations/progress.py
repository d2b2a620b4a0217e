"""Progress and ETA from a step counter, shared by the framework callbacks. Pure apart
from the injected monotonic clock."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

# A running job never claims 100%: that figure is kept for the train-end report.
RUNNING_MAX_PERCENT = 99


class StepProgress:
    """Percent done from ``step / total`` (capped at 99 while running) and remaining
    seconds from the step rate measured since ``start`` (so a resumed run's skipped steps
    do not count as fast ones)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start_step = 0
        self._start_time: float | None = None

    def start(self, step: int) -> None:
        self._start_step = step
        self._start_time = self._clock()

    def percent(self, step: int, total: float | None) -> int | None:
        if not total or total <= 0 or not math.isfinite(total):
            return None
        return max(0, min(RUNNING_MAX_PERCENT, math.floor(100 * step / total)))

    def eta(self, step: int, total: float | None) -> int | None:
        if not total or not math.isfinite(total) or self._start_time is None:
            return None
        done = step - self._start_step
        if done <= 0:
            return None
        elapsed = self._clock() - self._start_time
        return max(0, round((total - step) * elapsed / done))
