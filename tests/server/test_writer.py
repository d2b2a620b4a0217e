"""The coalescing writer against the devcluster: few writes for many posts, the newest
status always wins, faults and deletions handled, and its pure decisions."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest_asyncio
from prometheus_client import REGISTRY

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.acceptall import AcceptAll
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_both_servers, on_real_server
from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config
from trainjob_status_server.status.coalescing import (
    FirstSeen,
    UpdateClass,
    is_stale,
    newer_object,
    ordering_time,
    retry_delay,
    stored_time,
    supersedes,
    writes_in_flight,
)
from trainjob_status_server.status.priority import PrioritySchedule
from trainjob_status_server.status.validation import EncodedStatus
from trainjob_status_server.status.writer import CoalescingWriter

from .conftest import GROUP, NS, Poster, ServingCerts, status_path, with_changes

BASE = dt.datetime(2026, 12, 2, 18, 0, tzinfo=dt.UTC)


def at(seconds: float) -> str:
    return (BASE + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def body(step: int) -> bytes:
    return json.dumps(
        {"trainerStatus": {"progressPercentage": step % 101, "lastUpdatedTime": at(step)}}
    ).encode()


def stored_status(devcluster: KubeAPI, name: str = "tj") -> dict[str, Any]:
    obj = devcluster.get("trainjobs", NS, name, GROUP)
    assert obj is not None
    return dict(obj["status"]["trainerStatus"])


def counter(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


async def post_all(poster: Poster, name: str, steps: list[int], parallel: int = 32) -> None:
    queue = list(steps)

    async def worker() -> None:
        while queue:
            step = queue.pop(0)
            code, answer, _ = await poster.request(
                "POST", status_path(NS, name), body(step), {"Authorization": "Bearer t"}
            )
            assert code == 200, answer

    await asyncio.gather(*(worker() for _ in range(parallel)))


@pytest_asyncio.fixture
async def coalescing(config: Config, certs: ServingCerts) -> AsyncIterator[Poster]:
    """The server as deployed: coalescing, one write per TrainJob per second at most."""
    async with StatusServer(with_changes(config, min_write_interval=1.0), AcceptAll()) as server:
        await server.trainjobs.synced.wait()
        connector = aiohttp.TCPConnector(ssl=certs.client_context(), limit=64)
        async with aiohttp.ClientSession(connector=connector) as session:
            yield Poster(server, session)


async def test_a_thousand_posts_make_a_handful_of_writes(
    coalescing: Poster, devcluster: DevCluster
) -> None:
    devcluster.create_trainjob(NS, "tj")
    devcluster.faults.reset_counts()
    coalesced = counter("trainjob_status_updates_coalesced_total")
    started = time.monotonic()
    await post_all(coalescing, "tj", list(range(1, 1001)))
    await coalescing.server.writer.wait_idle()
    elapsed = time.monotonic() - started
    writes = devcluster.faults.count("patch", "trainjobs/status")
    # At most one write a second (--min-write-interval 1): a handful on an idle machine,
    # one more for each second a loaded machine takes to send the thousand.
    assert 1 <= writes <= math.floor(elapsed) + 1, (writes, elapsed)
    assert stored_status(devcluster) == {
        "progressPercentage": 1000 % 101,
        "lastUpdatedTime": at(1000),
    }
    assert counter("trainjob_status_updates_coalesced_total") - coalesced >= 1000 - writes - 32


@on_both_servers
async def test_posts_out_of_order_leave_the_newest(poster: Poster, kube_api: KubeAPI) -> None:
    kube_api.create_trainjob(NS, "tj")
    steps = list(range(1, 201))
    random.Random(7).shuffle(steps)
    stale = counter("trainjob_status_updates_dropped_total", {"reason": "stale"})
    for step in steps:
        code, _, _ = await poster.request(
            "POST", status_path(NS, "tj"), body(step), {"Authorization": "Bearer t"}
        )
        assert code == 200
    await poster.server.writer.wait_idle()
    assert stored_status(kube_api) == {
        "progressPercentage": 200 % 101,
        "lastUpdatedTime": at(200),
    }
    assert counter("trainjob_status_updates_dropped_total", {"reason": "stale"}) > stale
    # An older post after the newest was written is dropped, not written.
    if isinstance(kube_api, DevCluster):  # counts: devcluster only
        kube_api.faults.reset_counts()
    assert (await poster.post("tj", None, raw=body(3)))[0] == 200
    if isinstance(kube_api, DevCluster):  # counts: devcluster only
        assert kube_api.faults.count("patch", "trainjobs/status") == 0
    assert stored_status(kube_api)["lastUpdatedTime"] == at(200)


@on_real_server
async def test_two_replicas_converge_on_the_newest(
    config: Config, certs: ServingCerts, kube_api: KubeAPI
) -> None:
    kube_api.create_trainjob(NS, "tj")
    replicas = [
        StatusServer(with_changes(config, min_write_interval=0.05), AcceptAll()) for _ in range(2)
    ]
    for replica in replicas:
        await replica.start()
        await replica.trainjobs.synced.wait()
    try:
        connector = aiohttp.TCPConnector(ssl=certs.client_context())
        async with aiohttp.ClientSession(connector=connector) as session:
            posters = [Poster(replica, session) for replica in replicas]
            steps = list(range(1, 301))
            random.Random(11).shuffle(steps)

            async def feed(index: int) -> None:
                for step in steps[index::2]:
                    code, _, _ = await posters[index].request(
                        "POST", status_path(NS, "tj"), body(step), {"Authorization": "Bearer t"}
                    )
                    assert code == 200

            await asyncio.gather(feed(0), feed(1))
            for replica in replicas:
                await replica.writer.wait_idle()
    finally:
        for replica in replicas:
            await replica.stop()
    assert stored_status(kube_api)["lastUpdatedTime"] == at(300)


async def test_faults_during_a_burst_still_end_on_the_newest(
    poster: Poster, devcluster: DevCluster
) -> None:
    devcluster.create_trainjob(NS, "tj")
    devcluster.faults.fail(500, times=3, verb="patch", resource="trainjobs/status")
    devcluster.faults.fail(429, times=2, retry_after=1, verb="patch", resource="trainjobs/status")
    devcluster.faults.stall(3.0, times=1, verb="patch", resource="trainjobs/status")
    await post_all(poster, "tj", list(range(1, 101)), parallel=8)
    async with asyncio.timeout(30):
        await poster.server.writer.wait_idle()
    assert stored_status(devcluster)["lastUpdatedTime"] == at(100)


@on_both_servers
async def test_a_trainjob_deleted_while_pending_is_dropped_without_a_retry_storm(
    config: Config, certs: ServingCerts, kube_api: KubeAPI
) -> None:
    kube_api.create_trainjob(NS, "tj")
    async with StatusServer(with_changes(config, min_write_interval=1.0), AcceptAll()) as server:
        await server.trainjobs.synced.wait()
        connector = aiohttp.TCPConnector(ssl=certs.client_context())
        async with aiohttp.ClientSession(connector=connector) as session:
            poster = Poster(server, session)
            assert (await poster.post("tj", None, raw=body(1)))[0] == 200
            # The next update waits for the minimum interval; the TrainJob goes meanwhile.
            code, _, _ = await poster.request(
                "POST", status_path(NS, "tj"), body(2), {"Authorization": "Bearer t"}
            )
            assert code == 200
            kube_api.delete("trainjobs", NS, "tj", GROUP)
            if isinstance(kube_api, DevCluster):  # counts: devcluster only
                kube_api.faults.reset_counts()
            not_found = counter("trainjob_status_updates_dropped_total", {"reason": "not_found"})
            async with asyncio.timeout(10):
                await server.writer.wait_idle()
            assert (
                counter("trainjob_status_updates_dropped_total", {"reason": "not_found"})
                == not_found + 1
            )
            # At most one write and one look-up, never a loop of retries.
            if isinstance(kube_api, DevCluster):  # counts: devcluster only
                assert kube_api.faults.count("patch", "trainjobs/status") <= 1
                assert kube_api.faults.count("get", "trainjobs") <= 1
            assert kube_api.get("trainjobs", NS, "tj", GROUP) is None


def stamped(minutes_ahead: float, progress: int) -> tuple[str, bytes]:
    """A post stamped ``minutes_ahead`` after the real time now, and its stamp."""
    stamp = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=minutes_ahead)).isoformat()
    raw = {"trainerStatus": {"progressPercentage": progress, "lastUpdatedTime": stamp}}
    return stamp.replace("+00:00", "Z"), json.dumps(raw).encode()


@on_both_servers
async def test_a_post_from_a_fast_clock_does_not_hold_back_the_next(
    poster: Poster, kube_api: KubeAPI
) -> None:
    kube_api.create_trainjob(NS, "tj")
    ahead, raw = stamped(4, 10)
    assert (await poster.post("tj", None, raw=raw))[0] == 200
    # Stored as the client stamped it.
    assert stored_status(kube_api) == {"progressPercentage": 10, "lastUpdatedTime": ahead}
    # A post stamped before the fast one arrived is older than it: dropped.
    _, raw = stamped(-1, 5)
    stale = counter("trainjob_status_updates_dropped_total", {"reason": "stale"})
    assert (await poster.post("tj", None, raw=raw))[0] == 200
    assert stored_status(kube_api)["progressPercentage"] == 10
    assert counter("trainjob_status_updates_dropped_total", {"reason": "stale"}) == stale + 1
    # A post stamped after it arrived is newer, though its stamp is 4 minutes earlier.
    right, raw = stamped(0, 20)
    assert (await poster.post("tj", None, raw=raw))[0] == 200
    assert stored_status(kube_api) == {"progressPercentage": 20, "lastUpdatedTime": right}


@on_both_servers
async def test_a_fast_stamp_stored_before_the_server_started_does_not_hold_back_posts(
    config: Config, certs: ServingCerts, kube_api: KubeAPI
) -> None:
    kube_api.create_trainjob(NS, "tj")
    connector = aiohttp.TCPConnector(ssl=certs.client_context())
    async with aiohttp.ClientSession(connector=connector) as session:
        async with StatusServer(config, AcceptAll()) as first:
            await first.trainjobs.synced.wait()
            ahead, raw = stamped(4, 10)
            assert (await Poster(first, session).post("tj", None, raw=raw))[0] == 200
        assert stored_status(kube_api)["lastUpdatedTime"] == ahead
        async with StatusServer(config, AcceptAll()) as second:
            await second.trainjobs.synced.wait()
            right, raw = stamped(0, 20)
            assert (await Poster(second, session).post("tj", None, raw=raw))[0] == 200
    assert stored_status(kube_api) == {"progressPercentage": 20, "lastUpdatedTime": right}


# -- the pure decisions ------------------------------------------------------------------------


def time_at(seconds: float) -> dt.datetime:
    return BASE + dt.timedelta(seconds=seconds)


def update(seconds: float, received: float | None = None) -> EncodedStatus:
    """An update stamped ``seconds`` after BASE, received at ``received`` (by default a
    second after its stamp, as from a client with a right clock)."""
    arrival = seconds + 1 if received is None else received
    return EncodedStatus(time_at(seconds), b"{}", time_at(arrival))


def obj(rv: str, lut: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": {"resourceVersion": rv}}
    if lut is not None:
        out["status"] = {"trainerStatus": {"lastUpdatedTime": lut}}
    return out


def test_newest_wins_and_ties_go_to_the_later_arrival() -> None:
    assert supersedes(update(2), update(1))
    assert supersedes(update(1), update(1))
    assert not supersedes(update(1), update(2))


def test_a_stamp_orders_by_itself_unless_it_is_ahead_of_its_arrival() -> None:
    assert ordering_time(time_at(5), time_at(7)) == time_at(5)
    assert ordering_time(time_at(240), time_at(0)) == time_at(0)
    # Stamped 4 minutes ahead, then an honest post 10 s later: the honest one wins...
    assert supersedes(update(10), update(240, received=0))
    # ...and an honest post that was older than the fast one's arrival still loses.
    assert not supersedes(update(-5), update(240, received=0))


def test_stale_against_what_is_stored() -> None:
    assert is_stale(update(1), time_at(2))
    assert not is_stale(update(2), time_at(2))
    assert not is_stale(update(1), None)
    assert not is_stale(update(250, received=3), time_at(2))
    assert is_stale(update(250, received=1), time_at(2))


def test_a_stored_stamp_ahead_of_its_sighting_orders_from_the_sighting() -> None:
    seen = FirstSeen()
    key = ("ns", "tj")
    assert seen.order(key, obj("5"), time_at(0)) is None
    assert seen.order(key, obj("5", at(1)), time_at(3)) == time_at(1)
    assert len(seen) == 0  # stamps in the past are their own ordering time: nothing kept
    # Stored 4 minutes ahead, first seen at 0 (a watch event): orders from 0 after that.
    seen.saw(key, obj("6", at(240)), time_at(0))
    assert seen.order(key, obj("6", at(240)), time_at(30)) == time_at(0)
    # Received earlier than the watch showed it (our own write): the earlier time holds.
    seen.saw(key, obj("6", at(240)), time_at(-1))
    assert seen.order(key, obj("6", at(240)), time_at(30)) == time_at(-1)
    # A later sighting of the same stamp does not move it.
    seen.saw(key, obj("6", at(240)), time_at(20))
    assert seen.order(key, obj("7", at(240)), time_at(30)) == time_at(-1)
    # Never seen before (stored before this server started): seen first now.
    other = ("ns", "other")
    assert seen.order(other, obj("8", at(300)), time_at(40)) == time_at(40)
    assert seen.order(other, obj("8", at(300)), time_at(50)) == time_at(40)
    # A new stamp replaces the entry; one in the past drops it; forget drops it too.
    seen.saw(key, obj("9", at(10)), time_at(11))
    assert seen.order(key, obj("9", at(10)), time_at(12)) == time_at(10)
    assert len(seen) == 1
    seen.forget(other)
    assert len(seen) == 0
    assert stored_time(obj("5", "not a time")) is None
    assert stored_time(obj("5", "2026-12-02T18:00:00")) is None  # no zone: not comparable


def test_newer_object_by_resource_version() -> None:
    a, b = obj("9"), obj("10")
    assert newer_object(a, b) is b
    assert newer_object(b, a) is b
    assert newer_object(None, a) is a
    assert newer_object(a, None) is a


def test_retry_delay_backs_off_with_jitter_and_honours_retry_after() -> None:
    assert retry_delay(1, None, 0.0) == 0.25
    assert retry_delay(1, None, 1.0) == 0.5
    assert retry_delay(4, None, 1.0) == 4.0
    assert retry_delay(20, None, 1.0) == 30.0
    assert retry_delay(1, 7, 0.0) == 7.0
    assert retry_delay(1, 10_000, 0.0) == 300.0


def test_schedule_serves_the_earliest_and_keeps_a_dirty_places() -> None:
    schedule = PrioritySchedule()
    routine = UpdateClass.ROUTINE
    schedule.push(("ns", "b"), 2.0, routine, 0.0)
    schedule.push(("ns", "a"), 1.0, routine, 0.0)
    schedule.push(("ns", "c"), 1.0, routine, 0.1)
    schedule.push(("ns", "a"), 0.0, routine, 0.0)  # already scheduled: keeps its slot
    assert len(schedule) == 3
    assert schedule.pop_ready(0.5, 60.0) is None
    assert schedule.next_time() == 1.0
    assert schedule.pop_ready(1.0, 60.0) == ("ns", "a")
    assert schedule.pop_ready(1.0, 60.0) == ("ns", "c")
    assert schedule.pop_ready(1.5, 60.0) is None
    schedule.discard(("ns", "b"))
    assert schedule.next_time() is None
    assert schedule.pop_ready(10.0, 60.0) is None


def test_every_drop_reason_is_exported_from_the_start() -> None:
    # Alerts on rate(...) need each series before its first drop.
    for reason in ("stale", "not_found", "invalid", "shutdown"):
        assert (
            REGISTRY.get_sample_value("trainjob_status_updates_dropped_total", {"reason": reason})
            is not None
        )


def test_writes_in_flight_follow_the_budget_within_bounds() -> None:
    assert [writes_in_flight(b) for b in (1, 10, 16, 40, 64, 400)] == [16, 16, 16, 40, 64, 64]


def test_the_server_sizes_its_writer_from_the_api_burst(config: Config) -> None:
    for burst, expected in ((10, 16), (400, 64)):
        server = StatusServer(with_changes(config, kube_api_burst=burst), AcceptAll())
        assert isinstance(server.writer, CoalescingWriter)
        assert server.writer.concurrency == expected
