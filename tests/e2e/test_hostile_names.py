"""Metric names with every kind of byte a client can send, cut by the series cap: the page
passes promtool's check in the text format, and a real Prometheus (which asks for
OpenMetrics) scrapes it cleanly and stores each exported name exactly as it was posted."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest_asyncio

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.testing import eventually, exporter_on_a_port

from .conftest import Prometheus, Stack
from .test_promtool import promtool

NS = "team-a"
# In the order posted; the exportable ones interleaved with those no format can escape.
POSTED = [
    ("x\ry", "1"),
    ('q"uote\\back\nslash', "2"),
    ("\x00", "3"),
    ("λόγος 🚀", "4"),
    ("\x1b[2J\x1b]8;;http://evil\x07", "5"),
    ("a\u2028b", "6"),
    ("\u202eodd", "7"),
    ("nel\x85", "8"),
    ("loss", "9"),
]
EXPORTABLE = [('q"uote\\back\nslash', 2.0), ("λόγος 🚀", 4.0), ("\u202eodd", 7.0), ("loss", 9.0)]
CORE = 3  # the info, the last update and the progress
KEPT = 2  # of the exportable metrics, under the cap below
CAP = CORE + KEPT


@pytest_asyncio.fixture
async def capped(stack: Stack) -> AsyncIterator[str]:
    """host:port of an exporter over the stack's TrainJob cache, capped at ``CAP``."""
    async with exporter_on_a_port(stack.server.trainjobs, CAP) as target:
        yield target


async def post_hostile(stack: Stack, devcluster: DevCluster) -> None:
    devcluster.create_trainjob(NS, "tj")
    metrics = [{"name": name, "value": value} for name, value in POSTED]
    stamp = dt.datetime.now(dt.UTC).isoformat()
    await stack.post(
        NS, "tj", {"progressPercentage": 3, "metrics": metrics, "lastUpdatedTime": stamp}
    )

    async def cached() -> bool:
        # Exporters follow the cache's events: one that holds the status has exported it.
        held = stack.server.trainjobs.get(NS, "tj") or {}
        return bool(held.get("status", {}).get("trainerStatus"))

    await eventually(cached, what="the posted status in the TrainJob cache")


async def test_hostile_names_with_and_without_the_cap_pass_promtool(
    promtool_binary: str, stack: Stack, devcluster: DevCluster, capped: str
) -> None:
    await post_hostile(stack, devcluster)
    async with aiohttp.ClientSession() as session:
        for url in (stack.metrics_url, f"http://{capped}/metrics"):
            async with session.get(url) as response:
                page = await response.read()
            assert b'name="q\\"uote\\\\back\\nslash"' in page
            for raw in (b"\r", b"\x00", b"\x1b", "\u2028".encode(), "\x85".encode()):
                assert raw not in page
            code, out = await promtool(promtool_binary, "check", "metrics", stdin=page)
            assert (code, out) == (0, ""), url


async def test_prometheus_scrapes_the_capped_page_and_stores_the_names_exactly(
    stack: Stack, prometheus: Prometheus, devcluster: DevCluster, capped: str
) -> None:
    await post_hostile(stack, devcluster)
    await prometheus.start(capped)

    async def stored() -> list[dict[str, Any]]:
        return await prometheus.query('trainjob_metric{trainjob="tj"}')

    found = await eventually(stored, what="the metrics in Prometheus")
    assert sorted((r["labels"]["name"], r["value"]) for r in found) == sorted(EXPORTABLE[:KEPT])
    targets = await prometheus.api("targets")
    [target] = targets["activeTargets"]
    assert (target["health"], target["lastError"]) == ("up", "")
    # The server's own metrics came in the same scrape, the refusals counted (by each
    # exporter following the cache, and the counter is the process's).
    refused = await prometheus.query(
        'trainjob_status_metric_names_refused_total{reason="characters"}'
    )
    [value] = [r["value"] for r in refused]
    assert value >= len(POSTED) - len(EXPORTABLE)
