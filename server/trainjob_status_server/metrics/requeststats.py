"""The count of status posts by answer code and the histogram of their durations, as a
prometheus_client collector over plain numbers.

Every post adds to both, thousands of times a second, always from the event loop's
thread. prometheus_client's Counter and Histogram take a lock for each value they add
(three per post: the code's count, the bucket, the sum) so that any thread may add; here
only one thread adds, and a scrape reads copies, so no lock is needed. The families on
the metrics page are exactly what a Counter labelled ``code`` and a Histogram with these
buckets would show, ``_created`` samples included.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

# How prometheus_client writes a bucket's bound in its "le" label ("1.0", "+Inf").
_bound_label: Callable[[float], str] = floatToGoString


class RequestStats(Collector):
    """Add a post with ``record(code, seconds)``; ``collect()`` gives the two families."""

    def __init__(
        self,
        name: str,
        documentation: str,
        duration_name: str,
        duration_documentation: str,
        buckets: Sequence[float],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if list(buckets) != sorted(set(buckets)) or not buckets:
            raise ValueError("buckets must be distinct and in increasing order")
        self.name = name
        self.documentation = documentation
        self.duration_name = duration_name
        self.duration_documentation = duration_documentation
        self.bounds = tuple(float(bound) for bound in buckets)
        self._clock = clock
        self._created = clock()
        self._by_code: dict[int, int] = {}
        self._code_created: dict[int, float] = {}
        # One count per bucket (not cumulative), and the last for above every bound.
        self._buckets = [0] * (len(self.bounds) + 1)
        self._sum = 0.0

    def record(self, code: int, seconds: float) -> None:
        """One answered post: its HTTP ``code`` and how long it took."""
        counts = self._by_code
        count = counts.get(code)
        if count is None:
            self._code_created[code] = self._clock()
            counts[code] = 1
        else:
            counts[code] = count + 1
        # A duration equal to a bound belongs to that bound's bucket ("le").
        self._buckets[bisect_left(self.bounds, seconds)] += 1
        self._sum += seconds

    def collect(self) -> Iterator[Metric]:
        # Copies first: each is taken whole while the event loop's thread waits.
        by_code, created = dict(self._by_code), dict(self._code_created)
        buckets, total = list(self._buckets), self._sum
        requests = CounterMetricFamily(self.name, self.documentation, labels=["code"])
        for code in sorted(by_code):
            requests.add_metric([str(code)], by_code[code], created=created[code])
        yield requests
        duration = HistogramMetricFamily(self.duration_name, self.duration_documentation)
        cumulative, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), buckets, strict=True):
            running += count
            cumulative.append((_bound_label(bound), float(running)))
        duration.add_metric([], cumulative, sum_value=total)
        duration.add_sample(f"{self.duration_name}_created", {}, self._created)
        yield duration
