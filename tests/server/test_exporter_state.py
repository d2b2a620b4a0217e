"""TrainJob state on the metrics page, through the server's TrainJob cache and /metrics:
every TrainJob's runtime reference (``trainjob_info``) and the conditions its controller
sets (``trainjob_condition``), following each change, gone with the TrainJob, escaped as
the metric names are, and first to stay under the series cap."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest_asyncio
from prometheus_client import CollectorRegistry, generate_latest

from trainjob_devcluster import DevCluster
from trainjob_status_server.app import StatusServer
from trainjob_status_server.metrics.exporter import Exporter
from trainjob_status_server.metrics.series import CONDITION, INFO, LAST_UPDATE, PROGRESS

from .conftest import GROUP, NS, Poster
from .test_exporter import PROMETHEUS_ACCEPT, Page, Scraper, labels, serve, stamp

STATE = (INFO, CONDITION)
CLUSTER_RUNTIME = {"runtime_kind": "ClusterTrainingRuntime", "runtime": "torch-distributed"}


@pytest_asyncio.fixture
async def scraper(server: StatusServer) -> AsyncIterator[Scraper]:
    """The server's own metrics page: the one exporter following its cache."""
    async with aiohttp.ClientSession() as session:
        yield Scraper(server.metrics_url + "/metrics", session)


def set_conditions(cluster: DevCluster, name: str, *conditions: dict[str, Any]) -> None:
    """What the Trainer's controller does: write ``status.conditions`` (stored and
    watched), leaving the rest of the status as it is."""
    qualified = cluster.resource("trainjobs", GROUP).qualified
    old = cluster.store.get(qualified, NS, name)
    assert old is not None
    status = {**old.get("status", {}), "conditions": list(conditions)}
    cluster.store.update(
        qualified, {**old, "metadata": dict(old["metadata"]), "status": status}, old
    )


def condition(kind: str, status: str = "True", **more: str) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": kind, "message": "", **more}


def state(page: Page) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return page.samples(*STATE)


def shows(expected: dict[Any, float]) -> Callable[[Page], bool]:
    return lambda page: state(page) == expected


async def test_every_trainjob_exports_its_runtime_and_follows_its_conditions(
    devcluster: DevCluster, scraper: Scraper
) -> None:
    # No trainerStatus at all: the TrainJob is counted all the same.
    devcluster.create_trainjob(NS, "tj")
    info = {(INFO, labels("tj", **CLUSTER_RUNTIME)): 1.0}
    await scraper.until(shows(info))

    set_conditions(devcluster, "tj", condition("Created"), condition("Suspended"))
    page = await scraper.until(shows(info | {
        (CONDITION, labels("tj", type="Created", status="True")): 1.0,
        (CONDITION, labels("tj", type="Suspended", status="True")): 1.0,
    }))  # fmt: skip
    assert page.samples() == {}  # no gauges: it never reported

    # Resumed, then complete: the old series go at once, no stale state stays behind.
    set_conditions(
        devcluster,
        "tj",
        condition("Created"),
        condition("Suspended", "False", reason="Resumed"),
        condition("Complete"),
    )
    await scraper.until(shows(info | {
        (CONDITION, labels("tj", type="Created", status="True")): 1.0,
        (CONDITION, labels("tj", type="Suspended", status="False")): 1.0,
        (CONDITION, labels("tj", type="Complete", status="True")): 1.0,
    }))  # fmt: skip

    devcluster.delete("trainjobs", NS, "tj", GROUP)
    await scraper.until(shows({}))


async def test_a_namespaced_runtime_is_told_from_a_cluster_one(
    devcluster: DevCluster, scraper: Scraper
) -> None:
    devcluster.create_trainjob(NS, "tj", runtimeRef={"name": "my-torch", "kind": "TrainingRuntime"})
    runtime = {"runtime_kind": "TrainingRuntime", "runtime": "my-torch"}
    await scraper.until(shows({(INFO, labels("tj", **runtime)): 1.0}))


async def test_condition_types_are_escaped_or_left_out_in_both_formats(
    devcluster: DevCluster, scraper: Scraper
) -> None:
    devcluster.create_trainjob(NS, "tj")
    set_conditions(
        devcluster,
        "tj",
        condition('Odd "type"\\\nhere'),
        condition("Ok\x1b[2J"),  # no format can escape it: left out
        condition("Failed", "Maybe"),  # no condition status: left out
    )
    expected = {
        (INFO, labels("tj", **CLUSTER_RUNTIME)): 1.0,
        (CONDITION, labels("tj", type='Odd "type"\\\nhere', status="True")): 1.0,
    }
    for accept in (None, PROMETHEUS_ACCEPT):
        page = await scraper.until(shows(expected), accept)
        assert "\x1b" not in page.text
        assert 'type="Odd \\"type\\"\\\\\\nhere"' in page.text


async def test_the_cap_keeps_the_state_before_the_gauges(
    poster: Poster, devcluster: DevCluster, server: StatusServer
) -> None:
    exporter = Exporter(server.trainjobs, max_series=3)
    exporter.start()
    runner, url = await serve(exporter)
    try:
        async with aiohttp.ClientSession() as session:
            await capped(poster, devcluster, exporter, Scraper(url, session))
    finally:
        await runner.cleanup()
        exporter.stop()


async def capped(
    poster: Poster, devcluster: DevCluster, exporter: Exporter, scraper: Scraper
) -> None:
    devcluster.create_trainjob(NS, "tj")
    update = {"progressPercentage": 40, "lastUpdatedTime": stamp(0)}
    assert (await poster.post("tj", {"trainerStatus": update}))[0] == 200
    set_conditions(devcluster, "tj", condition("Created"), condition("Failed"))
    # 2 conditions + 1 info + 2 gauges over a cap of 3: a failed job's last update is
    # never exported without the condition that says it failed.
    await scraper.until(lambda page: exporter.series_count == 5)
    page = await scraper.scrape()
    assert state(page) == {
        (INFO, labels("tj", **CLUSTER_RUNTIME)): 1.0,
        (CONDITION, labels("tj", type="Created", status="True")): 1.0,
        (CONDITION, labels("tj", type="Failed", status="True")): 1.0,
    }
    assert page.samples(LAST_UPDATE, PROGRESS) == {}
    assert_same_as_the_collector(exporter)
    # Room for one more: the last update, before the progress.
    exporter.max_series = 4
    page = await scraper.scrape()
    assert page.samples(LAST_UPDATE, PROGRESS).keys() == {(LAST_UPDATE, labels("tj"))}
    assert_same_as_the_collector(exporter)


def assert_same_as_the_collector(exporter: Exporter) -> None:
    registry = CollectorRegistry()
    registry.register(exporter.collector)
    assert generate_latest(registry) == exporter.trainjob_exposition()
