"""Scrape cost of the metrics page with 10,000 TrainJobs x 10 metrics (130,000 per-TrainJob
series: progress, ETA, last update and 10 metrics each), two runs of each figure.

Prints, per run: the time to take in the TrainJobs (one cache event each, as after the
first list), the render time of the per-TrainJob families and of the whole page in the
Prometheus text format and in OpenMetrics (total and per series), the same series through
prometheus_client's generic renderer (the collector path) for comparison, and the page
with the series cap at half. Prints figures; asserts nothing.

The exporter reads the TrainJob cache only through ``list()`` and its listeners, so a
stand-in cache holding decoded TrainJob objects feeds it here, without a watch.

    .venv/bin/python bench/exporter.py [--trainjobs 10000] [--metrics 10] [--smoke]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from _harness import parse_args
from trainjob_status_server.kube.resources import TRAINJOBS
from trainjob_status_server.kube.store import CacheEvent
from trainjob_status_server.metrics.exporter import Exporter

OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"


class StandInCache:
    """What the exporter uses of a WatchCache."""

    resource = TRAINJOBS

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = {
            (obj["metadata"]["namespace"], obj["metadata"]["name"]): obj for obj in objects
        }
        self.listeners: list[Callable[[CacheEvent], None]] = []

    def __len__(self) -> int:
        return len(self.objects)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace, name))

    def list(self) -> list[dict[str, Any]]:
        return list(self.objects.values())

    def add_listener(self, listener: Callable[[CacheEvent], None]) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: Callable[[CacheEvent], None]) -> None:
        self.listeners.remove(listener)


def trainjobs(count: int, metrics: int) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"namespace": f"team-{i % 50}", "name": f"llama-finetune-{i:05d}"},
            "status": {
                "trainerStatus": {
                    "progressPercentage": i % 101,
                    "estimatedRemainingSeconds": 36 * (100 - i % 101),
                    "lastUpdatedTime": "2026-12-02T18:33:25.123456+00:00",
                    "metrics": [
                        {"name": f"metric_{k}", "value": f"{(i + k) * 0.001234:.6f}"}
                        for k in range(metrics)
                    ],
                }
            },
        }
        for i in range(count)
    ]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def line(label: str, seconds: float, series: int, extra: str = "") -> None:
    per = seconds / series * 1e6 if series else 0.0
    print(f"  {label:<44} {seconds * 1000:8.1f} ms  {per:6.2f} us/series  {extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trainjobs", type=int, default=10_000)
    parser.add_argument("--metrics", type=int, default=10)
    args = parse_args(parser, {"trainjobs": 100, "metrics": 3})
    cache = StandInCache(trainjobs(args.trainjobs, args.metrics))
    print(f"{args.trainjobs} TrainJobs x {args.metrics} metrics")
    for run in (1, 2):
        print(f"run {run}")
        measure(cache, args.trainjobs)


def measure(cache: StandInCache, count: int) -> None:
    exporter = Exporter(cache, max_series=0)  # type: ignore[arg-type]  # a stand-in
    took, _ = timed(exporter.start)
    series = exporter.series_count
    print(f"  {'series':<44} {series:8d}")
    print(
        f"  {'take in the TrainJobs (one event each)':<44} {took * 1000:8.1f} ms  "
        f"{took / count * 1e6:6.1f} us/TrainJob"
    )
    took, body = timed(exporter.trainjob_exposition)
    line("render TrainJob families", took, series, f"{len(body) / 1e6:.1f} MB")
    took, (body, _) = timed(lambda: exporter.render(None))
    line("render whole page, Prometheus text", took, series, f"{len(body) / 1e6:.1f} MB")
    took, (body, _) = timed(lambda: exporter.render(OPENMETRICS))
    line("render whole page, OpenMetrics", took, series, f"{len(body) / 1e6:.1f} MB")
    registry = CollectorRegistry()
    registry.register(exporter.collector)
    took, body = timed(lambda: generate_latest(registry))
    line("same series via prometheus_client's renderer", took, series)
    exporter.max_series = series // 2
    took, (body, _) = timed(lambda: exporter.render(None))
    line(f"whole page, capped at {series // 2}", took, series // 2)
    exporter.stop()


if __name__ == "__main__":
    main()
