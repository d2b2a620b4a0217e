"""Over the API budget, against the devcluster and the real control plane: a final
update jumps the queue, a TrainJob that turns Complete while dirty does too, a final
update is written even when a newer one follows it (and before it when its write fails:
faults, devcluster only); and the budget advisor's log line and gauges."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client import REGISTRY

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.acceptall import AcceptAll
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_both_servers
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_devcluster.harness.testing import eventually
from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config
from trainjob_status_server.kube.store import CacheEvent
from trainjob_status_server.status.advisor import BudgetAdvisor
from trainjob_status_server.status.validation import parse_trainer_status
from trainjob_status_server.status.writer import CoalescingWriter

from .conftest import GROUP, NS, Poster, ServingCerts, with_changes

BASE = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(minutes=5)
NAMES = [f"tj{i}" for i in range(8)]


def stamp(seconds: float) -> str:
    return (BASE + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Written:
    """Each trainerStatus the server's TrainJob cache sees change, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int | None]] = []

    def __call__(self, event: CacheEvent) -> None:
        new = ((event.new or {}).get("status") or {}).get("trainerStatus")
        old = ((event.old or {}).get("status") or {}).get("trainerStatus")
        if new is not None and new != old:
            self.events.append((event.key[1], new.get("progressPercentage")))

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def progress_of(self, name: str) -> list[int | None]:
        return [progress for written, progress in self.events if written == name]


@pytest_asyncio.fixture
async def over_budget(
    config: Config, certs: ServingCerts, kube_api: KubeAPI
) -> AsyncIterator[tuple[Poster, Written]]:
    """The server with a budget of one write a second (one at once), eight TrainJobs."""
    for name in NAMES:
        kube_api.create_trainjob(NS, name)
    changed = with_changes(config, kube_api_qps=1.0, kube_api_burst=1, min_write_interval=1.0)
    async with StatusServer(changed, AcceptAll()) as server:
        await server.trainjobs.synced.wait()
        written = Written()
        server.trainjobs.add_listener(written)
        connector = aiohttp.TCPConnector(ssl=certs.client_context(), limit=8)
        async with aiohttp.ClientSession(connector=connector) as session:
            yield Poster(server, session), written
        server.trainjobs.remove_listener(written)


async def post(poster: Poster, name: str, progress: int, at: float) -> None:
    body = {"trainerStatus": {"progressPercentage": progress, "lastUpdatedTime": stamp(at)}}
    code, answer, _ = await poster.request(
        "POST",
        f"/apis/{GROUP}/v1alpha1/namespaces/{NS}/trainjobs/{name}/status",
        json.dumps(body).encode(),
        {"Authorization": "Bearer t"},
    )
    assert code == 200, answer


async def caught_up(poster: Poster, kube_api: KubeAPI, within: float = 30.0) -> None:
    """Wait until the server's TrainJob cache holds what the API server holds for each
    TrainJob: the writer being idle says its writes were answered, not that their watch
    events have arrived (kube-apiserver sends them a moment later)."""

    def behind() -> list[str]:
        late = []
        for name in NAMES:
            stored = kube_api.get("trainjobs", NS, name, GROUP) or {}
            cached = poster.server.trainjobs.get(NS, name) or {}
            version = stored.get("metadata", {}).get("resourceVersion")
            if cached.get("metadata", {}).get("resourceVersion") != version:
                late.append(name)
        return late

    async with asyncio.timeout(within):
        while behind():
            await asyncio.sleep(0.02)


@on_both_servers
async def test_a_final_update_jumps_the_queue(
    over_budget: tuple[Poster, Written], kube_api: KubeAPI
) -> None:
    poster, written = over_budget
    finals = sample("trainjob_status_write_freshness_by_class_seconds_count", {"class": "final"})
    for name in NAMES:
        await post(poster, name, 10, at=1)
    await post(poster, NAMES[-1], 100, at=2)
    await poster.server.writer.wait_idle()
    await caught_up(poster, kube_api)
    # Oldest first it would be written last; at one write a second it goes at the next.
    assert written.names().index(NAMES[-1]) < 3, written.events
    assert sorted(written.names()) == sorted(NAMES)  # each once, the final one at 100
    assert written.progress_of(NAMES[-1]) == [100]
    assert (
        sample("trainjob_status_write_freshness_by_class_seconds_count", {"class": "final"})
        == finals + 1
    )
    assert sample("trainjob_status_pending_writes_by_class", {"class": "progress"}) == 0


@on_both_servers
async def test_a_final_update_is_written_before_the_newer_one_behind_it(
    over_budget: tuple[Poster, Written], kube_api: KubeAPI
) -> None:
    poster, written = over_budget
    last = NAMES[3]
    for name in NAMES[:4]:
        await post(poster, name, 10, at=1)
    await post(poster, last, 100, at=2)
    # Newer, lower: another pod's late tick. Coalescing alone would write only this one.
    await post(poster, last, 99, at=3)
    await poster.server.writer.wait_idle()
    await caught_up(poster, kube_api)
    assert written.progress_of(last) == [100, 99]
    assert written.names().index(last) < 3, written.events


async def test_a_final_update_whose_write_fails_is_retried_before_the_newer_one(
    over_budget: tuple[Poster, Written], devcluster: DevCluster
) -> None:
    poster, written = over_budget
    name = NAMES[0]
    # The final update's first write is held a second, then refused: meanwhile two
    # newer updates arrive, the second replacing the first.
    devcluster.faults.stall(1.0, verb="patch", resource="trainjobs/status", name=name)
    devcluster.faults.fail(500, verb="patch", resource="trainjobs/status", name=name)
    await post(poster, name, 100, at=1)
    await post(poster, name, 99, at=2)
    await post(poster, name, 98, at=3)
    await poster.server.writer.wait_idle()
    await caught_up(poster, devcluster)
    assert written.progress_of(name) == [100, 98]


@on_both_servers
async def test_a_trainjob_that_turns_complete_while_dirty_jumps_the_queue(
    over_budget: tuple[Poster, Written], kube_api: KubeAPI
) -> None:
    poster, written = over_budget
    done = NAMES[-1]
    for name in NAMES:
        await post(poster, name, 10, at=1)
    complete = {
        "type": "Complete",
        "status": "True",
        "reason": "JobsCompleted",
        "message": "jobs completed",
        "lastTransitionTime": kube_api.now(),
    }
    set_conditions(kube_api, done, complete)

    async def seen_complete() -> bool:
        found = poster.server.trainjobs.get(NS, done) or {}
        return bool((found.get("status") or {}).get("conditions"))

    await eventually(seen_complete, "the Complete condition in the cache", within=30, every=0.01)
    await poster.server.writer.wait_idle()
    await caught_up(poster, kube_api)
    assert written.names().index(done) < 3, written.events


def set_conditions(cluster: KubeAPI, name: str, *conditions: dict[str, str]) -> None:
    """What the Trainer's controller does: write ``status.conditions``."""
    if isinstance(cluster, RealCluster):
        cluster.call(
            "PATCH",
            cluster.path("trainjobs", NS, name, GROUP) + "/status",
            {"status": {"conditions": list(conditions)}},
            content_type="application/merge-patch+json",
        )
        return
    qualified = cluster.resource("trainjobs", GROUP).qualified
    old = cluster.store.get(qualified, NS, name)
    assert old is not None
    status: dict[str, Any] = {**old.get("status", {}), "conditions": list(conditions)}
    cluster.store.update(
        qualified, {**old, "metadata": dict(old["metadata"]), "status": status}, old
    )


async def test_a_writer_over_budget_for_a_window_says_so_with_the_advised_qps(
    over_budget: tuple[Poster, Written], caplog: pytest.LogCaptureFixture
) -> None:
    """A writer of its own on the server's one-write-a-second budget, judged every
    0.4 s instead of every minute: eight TrainJobs, each updated every 0.1 s."""
    poster, _ = over_budget
    server = poster.server
    caplog.set_level(logging.WARNING, logger="trainjob_status_server.status.advisor")
    writer = CoalescingWriter(
        server.budgets.writes.waiting(None),
        server.trainjobs,
        min_interval=1.0,
        target_freshness=2.0,
        advice_window=0.4,
    )
    await writer.start()
    try:
        step = 0
        while not writer.advisor.over:
            assert step < 300, "the advisor never judged the demand over the budget"
            step += 1
            wall = dt.datetime.now(dt.UTC)
            for name in NAMES:
                body = {"trainerStatus": {"progressPercentage": step % 100}}
                parsed = parse_trainer_status(body, trainjob=name, received=wall)
                assert parsed is not None
                writer.submit((NS, name), parsed.encoded(wall))
            await asyncio.sleep(0.1)  # the pace of the demand: an update every 0.1 s
    finally:
        await writer.stop(0.0)
    [line] = [r for r in caplog.records if r.name == "trainjob_status_server.status.advisor"]
    assert line.getMessage() == "status write demand exceeds the API budget"
    assert line.__dict__["kube_api_qps"] == 1.0
    assert line.__dict__["trainjobs"] == len(NAMES)
    # Eight TrainJobs, at most one write a second each: 8 writes/s of demand; a 2 s
    # target needs a round of 8 / 2 = 4 writes/s.
    assert line.__dict__["advised_kube_api_qps"] == 4
    assert sample("trainjob_status_write_budget_exceeded", {}) == 1


def test_the_advisor_logs_once_per_episode_with_the_advised_qps(
    caplog: pytest.LogCaptureFixture,
) -> None:
    advisor = BudgetAdvisor(min_interval=1.0, target_freshness=60.0, window=60.0)
    caplog.set_level(logging.INFO, logger="trainjob_status_server.status.advisor")

    def minute(start: float, trainjobs: int) -> None:
        for second in range(0, 60, 5):  # every TrainJob posts every 5 s
            for i in range(trainjobs):
                advisor.saw(("ns", f"t{i}"), start + second)

    minute(0.0, 1000)
    advisor.check(30.0, qps=5.0)  # the window is not over: nothing judged
    assert caplog.records == []
    advisor.check(60.0, qps=5.0)
    minute(60.0, 1000)
    advisor.check(120.0, qps=5.0)  # still over: no second line
    [line] = caplog.records
    assert line.levelno == logging.WARNING
    assert line.getMessage() == "status write demand exceeds the API budget"
    assert line.__dict__["writes_per_second"] == 200.0
    assert line.__dict__["trainjobs"] == 1000
    assert line.__dict__["advised_kube_api_qps"] == 17  # 1,000 TrainJobs / 60 s
    assert sample("trainjob_status_write_budget_exceeded", {}) == 1
    assert sample("trainjob_status_advised_kube_api_qps", {}) == 17
    assert sample("trainjob_status_write_demand_per_second", {}) == 200.0
    minute(120.0, 10)  # 2 writes/s: within 5 QPS
    advisor.check(180.0, qps=5.0)
    assert [r.getMessage() for r in caplog.records][1:] == [
        "status write demand back within the API budget"
    ]
    assert sample("trainjob_status_write_budget_exceeded", {}) == 0


def test_without_a_target_the_advisor_still_says_when_demand_is_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    advisor = BudgetAdvisor(min_interval=1.0, target_freshness=None, window=10.0)
    caplog.set_level(logging.WARNING, logger="trainjob_status_server.status.advisor")
    for i in range(100):
        advisor.saw(("ns", f"t{i}"), 0.0)
    advisor.check(10.0, qps=5.0)  # 100 writes in 10 s: 10/s
    [line] = caplog.records
    assert line.__dict__["advised_kube_api_qps"] is None
    assert line.__dict__["target_freshness"] is None


def test_the_server_passes_its_target_freshness_to_the_writer(config: Config) -> None:
    server = StatusServer(with_changes(config, target_freshness=30.0), AcceptAll())
    assert isinstance(server.writer, CoalescingWriter)
    assert server.writer.advisor.target_freshness == 30.0


def test_a_target_freshness_must_be_positive_and_is_unset_by_default() -> None:
    assert Config().target_freshness is None
    assert "--target-freshness must be > 0" in Config(target_freshness=0.0).check()
    assert not any("target-freshness" in p for p in Config(target_freshness=0.5).check())
