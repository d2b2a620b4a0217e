"""The writer's budget advisor: once a window of demand over the write budget is seen,
one warning with the demand, the budget and the QPS that would meet
``--target-freshness`` (``advice.advised_qps``), and gauges that say the same; one info
line when demand is back within budget."""

from __future__ import annotations

import logging

from ..metrics import selfmetrics
from .advice import WINDOW_SECONDS, Demand, DemandMeter, advised_qps, over_budget
from .coalescing import Key

log = logging.getLogger(__name__)


class BudgetAdvisor:
    def __init__(
        self,
        min_interval: float,
        target_freshness: float | None,
        window: float = WINDOW_SECONDS,
    ) -> None:
        self.meter = DemandMeter(min_interval, window)
        self.min_interval = min_interval
        self.target_freshness = target_freshness
        self.over = False
        self.last: Demand | None = None

    def saw(self, key: Key, now: float) -> None:
        self.meter.saw(key, now)

    def check(self, now: float, qps: float) -> None:
        """Judge the window if it is over: log and export a change of state."""
        if not self.meter.due(now):
            return
        demand = self.meter.close(now)
        self.last = demand
        selfmetrics.WRITE_DEMAND.set(demand.writes_per_second)
        advised = None
        if self.target_freshness is not None:
            advised = advised_qps(demand, self.target_freshness, self.min_interval)
            selfmetrics.ADVISED_QPS.set(advised)
        over = over_budget(demand, qps)
        selfmetrics.WRITE_BUDGET_EXCEEDED.set(1 if over else 0)
        if over and not self.over:
            log.warning(
                "status write demand exceeds the API budget",
                extra={
                    "trainjobs": demand.trainjobs,
                    "writes_per_second": round(demand.writes_per_second, 2),
                    "kube_api_qps": qps,
                    "target_freshness": self.target_freshness,
                    "advised_kube_api_qps": advised,
                },
            )
        elif self.over and not over:
            log.info(
                "status write demand back within the API budget",
                extra={
                    "writes_per_second": round(demand.writes_per_second, 2),
                    "kube_api_qps": qps,
                },
            )
        self.over = over
