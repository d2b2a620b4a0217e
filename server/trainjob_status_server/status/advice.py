"""Budget advice: whether the writer's demand exceeds its API budget, and the
``--kube-api-qps`` that would meet ``--target-freshness`` (pure: times are passed in).

The model is docs/scaling.md's ("The model"): a TrainJob that receives posts needs at
most one write per ``--min-write-interval``; within budget a post is visible after about
that interval, over it each dirty TrainJob is written once per round and a post waits
about (TrainJobs with new posts) / Q seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .coalescing import Key

# Demand is judged over whole windows of this length: "more than a minute" over budget.
WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class Demand:
    """One window's write demand."""

    trainjobs: int  # TrainJobs that received an update in the window
    writes_per_second: float  # the writes they needed, at most one per min interval each


def advised_qps(demand: Demand, target_freshness: float, min_interval: float) -> int:
    """The smallest whole QPS that the model says gives a post's freshness of
    ``target_freshness`` seconds: a round of ``trainjobs / Q`` seconds, but never more
    than the demand itself (within budget freshness is the min interval, and no
    budget does better: a target below it gets the QPS that writes every update)."""
    if target_freshness <= min_interval:
        return max(1, math.ceil(demand.writes_per_second))
    rounds = demand.trainjobs / target_freshness
    return max(1, math.ceil(min(rounds, demand.writes_per_second)))


class DemandMeter:
    """Counts the updates each TrainJob receives per window and says, at each window's
    end, whether that window's demand exceeded the budget."""

    def __init__(self, min_interval: float, window: float = WINDOW_SECONDS) -> None:
        self.min_interval = min_interval
        self.window = window
        self._counts: dict[Key, int] = {}
        self._started: float | None = None

    def saw(self, key: Key, now: float) -> None:
        """An update for ``key`` was accepted at ``now``."""
        if self._started is None:
            self._started = now
        self._counts[key] = self._counts.get(key, 0) + 1

    def due(self, now: float) -> bool:
        """Whether the current window is over."""
        return self._started is not None and now - self._started >= self.window

    def close(self, now: float) -> Demand:
        """The demand of the window that ends at ``now``; a new window starts empty."""
        started = self._started if self._started is not None else now
        elapsed = max(now - started, self.window)
        # One TrainJob needs at most one write per min interval, however often it posts.
        cap = elapsed / self.min_interval if self.min_interval > 0 else math.inf
        needed = sum(min(count, cap) for count in self._counts.values())
        demand = Demand(len(self._counts), needed / elapsed)
        self._counts = {}
        self._started = now
        return demand


def over_budget(demand: Demand, qps: float) -> bool:
    """Whether the window's demand needed more writes than the budget pays for."""
    return demand.writes_per_second > qps
