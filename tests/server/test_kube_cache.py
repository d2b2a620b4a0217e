"""The list+watch cache against the devcluster over real sockets (sync, events, dropped
and expired watches, selectors, fetch on a miss), and its pure rules."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_both_servers, on_real_server
from trainjob_status.contract import GROUP
from trainjob_status.contract import JOBSET_NAME_LABEL as JOBSET
from trainjob_status_server.kube import (
    PODS,
    TRAINJOBS,
    Backoff,
    CacheEvent,
    KubeClient,
    WatchCache,
)
from trainjob_status_server.kube.backoff import ended_too_soon, watch_timeout
from trainjob_status_server.kube.store import ObjectStore, is_newer

NS = "team-a"
T0 = "2026-12-02T18:33:57Z"
FAST = Backoff(base=0.02, cap=0.2)


class Recorder:
    """A listener that lets a test wait for the events it expects."""

    def __init__(self) -> None:
        self.events: list[CacheEvent] = []
        self._changed = asyncio.Event()

    def __call__(self, event: CacheEvent) -> None:
        self.events.append(event)
        self._changed.set()

    def seen(self) -> list[tuple[str, str]]:
        return [(e.type, e.key[1]) for e in self.events]

    async def wait_for(self, *expected: tuple[str, str]) -> None:
        async with asyncio.timeout(5):
            while not all(e in self.seen() for e in expected):
                self._changed.clear()
                await self._changed.wait()


async def eventually(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.01)


@pytest_asyncio.fixture
async def kube(kube_api: KubeAPI) -> AsyncIterator[KubeClient]:
    async with KubeClient(kube_api.kubeconfig_path, qps=1000, burst=1000, timeout=5) as client:
        yield client


@pytest_asyncio.fixture
async def start_cache(kube: KubeClient) -> AsyncIterator[Callable[..., Any]]:
    """Starts caches (synced, with a Recorder listening) and stops them after the test."""
    started: list[WatchCache] = []

    async def start(resource: Any = TRAINJOBS, **options: Any) -> tuple[WatchCache, Recorder]:
        options.setdefault("backoff", FAST)
        cache = WatchCache(kube, resource, **options)
        recorder = Recorder()
        cache.add_listener(recorder)
        started.append(cache)
        await cache.start()
        async with asyncio.timeout(5):
            await cache.wait_synced()
        return cache, recorder

    yield start
    for cache in started:
        await cache.stop()


def watching(devcluster: DevCluster, n: int = 1) -> Callable[[], bool]:
    """The cache's watch number ``n`` is open at the server."""
    return lambda: (
        devcluster.faults.count("watch", "trainjobs") >= n and bool(devcluster.store.watchers())
    )


# -- sync and events -----------------------------------------------------------------------


@on_both_servers
async def test_syncs_then_sees_added_modified_deleted(
    kube: KubeClient, kube_api: KubeAPI, start_cache: Any
) -> None:
    kube_api.create_trainjob(NS, "old")
    cache, recorder = await start_cache()
    assert cache.synced.is_set()
    assert cache.get(NS, "old") is not None
    assert recorder.seen() == [("ADDED", "old")]

    kube_api.create_trainjob(NS, "new")
    await recorder.wait_for(("ADDED", "new"))
    await kube.apply_trainjob_status(NS, "new", {"progressPercentage": 7, "lastUpdatedTime": T0})
    await recorder.wait_for(("MODIFIED", "new"))
    held = cache.get(NS, "new")
    assert held is not None
    assert held["status"]["trainerStatus"]["progressPercentage"] == 7
    kube_api.delete("trainjobs", NS, "new", GROUP)
    await recorder.wait_for(("DELETED", "new"))

    assert cache.get(NS, "new") is None
    assert [o["metadata"]["name"] for o in cache.list()] == ["old"]
    assert recorder.seen() == [
        ("ADDED", "old"),
        ("ADDED", "new"),
        ("MODIFIED", "new"),
        ("DELETED", "new"),
    ]
    if isinstance(kube_api, DevCluster):
        assert cache.resource_version == str(kube_api.store.rv)
    else:  # the deletion's version: past the last write the cache held
        assert int(cache.resource_version) > int(held["metadata"]["resourceVersion"])
    if isinstance(kube_api, DevCluster):  # counts: devcluster only
        assert kube_api.faults.count("list", "trainjobs") == 1


@on_both_servers
async def test_a_failing_listener_does_not_stop_the_cache_or_the_others(
    kube_api: KubeAPI, start_cache: Any
) -> None:
    cache, recorder = await start_cache()

    def broken(event: CacheEvent) -> None:
        raise RuntimeError("listener bug")

    cache.remove_listener(recorder)
    cache.add_listener(broken)
    cache.add_listener(recorder)
    kube_api.create_trainjob(NS, "tj")
    await recorder.wait_for(("ADDED", "tj"))
    assert cache.get(NS, "tj") is not None


# -- the watch ends ------------------------------------------------------------------------


async def test_a_dropped_watch_resumes_without_relisting(
    devcluster: DevCluster, start_cache: Any
) -> None:
    _, recorder = await start_cache()
    await eventually(watching(devcluster))

    assert devcluster.drop_watches() == 1
    devcluster.create_trainjob(NS, "while-away")

    await recorder.wait_for(("ADDED", "while-away"))
    assert devcluster.faults.count("watch", "trainjobs") == 2
    assert devcluster.faults.count("list", "trainjobs") == 1


async def test_a_watch_that_times_out_resumes_from_its_bookmark(
    devcluster: DevCluster, start_cache: Any
) -> None:
    cache, _ = await start_cache(watch_seconds=1)
    listed_at = cache.resource_version
    await eventually(watching(devcluster))
    # A change the watch does not select: only a bookmark can tell the cache about it.
    devcluster.ensure_namespace("elsewhere")

    await eventually(watching(devcluster, 2))

    assert int(cache.resource_version) > int(listed_at)
    assert devcluster.faults.count("list", "trainjobs") == 1


async def test_an_expired_version_in_the_stream_relists(
    devcluster: DevCluster, start_cache: Any
) -> None:
    devcluster.create_trainjob(NS, "kept")
    devcluster.create_trainjob(NS, "gone")
    cache, recorder = await start_cache()
    await eventually(watching(devcluster))
    # Keep the cache from watching while things change and history is compacted.
    devcluster.faults.fail(503, times=None, verb="watch", resource="trainjobs")
    devcluster.drop_watches()
    await eventually(lambda: devcluster.faults.count("watch", "trainjobs") >= 2)
    devcluster.delete("trainjobs", NS, "gone", GROUP)
    devcluster.create_trainjob(NS, "born")
    devcluster.expire_resource_versions()
    devcluster.faults.clear()

    # The next watch gets an in-stream ERROR 410; the relist catches up.
    await recorder.wait_for(("DELETED", "gone"), ("ADDED", "born"))
    assert sorted(o["metadata"]["name"] for o in cache.list()) == ["born", "kept"]
    assert devcluster.faults.count("list", "trainjobs") == 2


async def test_an_http_410_relists(devcluster: DevCluster, start_cache: Any) -> None:
    await start_cache()
    await eventually(watching(devcluster))
    devcluster.faults.fail(410, verb="watch", resource="trainjobs")
    devcluster.drop_watches()

    await eventually(lambda: devcluster.faults.count("list", "trainjobs") == 2)
    await eventually(watching(devcluster, 3))


async def test_other_watch_errors_back_off_and_resume_without_relisting(
    devcluster: DevCluster, start_cache: Any
) -> None:
    _, recorder = await start_cache()
    await eventually(watching(devcluster))
    devcluster.faults.fail(500, times=2, verb="watch", resource="trainjobs")
    devcluster.drop_watches()
    devcluster.create_trainjob(NS, "meanwhile")

    await recorder.wait_for(("ADDED", "meanwhile"))
    assert devcluster.faults.count("watch", "trainjobs") == 4
    assert devcluster.faults.count("list", "trainjobs") == 1


async def test_failed_lists_are_retried_until_the_cache_syncs(
    kube: KubeClient, devcluster: DevCluster
) -> None:
    devcluster.create_trainjob(NS, "tj")
    devcluster.faults.fail(500, times=3, verb="list", resource="trainjobs")
    cache = WatchCache(kube, TRAINJOBS, backoff=FAST)
    await cache.start()
    try:
        async with asyncio.timeout(5):
            await cache.wait_synced()
        assert cache.get(NS, "tj") is not None
        assert devcluster.faults.count("list", "trainjobs") == 4
    finally:
        await cache.stop()


async def test_stop_ends_the_watch(
    kube: KubeClient, devcluster: DevCluster, start_cache: Any
) -> None:
    cache, _ = await start_cache()
    await eventually(watching(devcluster))
    await cache.stop()
    # The devcluster notices a closed watch only when it next writes to it.
    devcluster.create_trainjob(NS, "after-stop")
    await eventually(lambda: not devcluster.store.watchers())
    assert cache.get(NS, "after-stop") is None


# -- selection -----------------------------------------------------------------------------


@on_real_server
async def test_a_label_selector_keeps_only_matching_objects(
    kube_api: KubeAPI, start_cache: Any
) -> None:
    kube_api.create_pod(NS, "worker-0", labels={JOBSET: "tj"})
    kube_api.create_pod(NS, "unrelated")
    cache, recorder = await start_cache(PODS, label_selector=JOBSET)
    assert [o["metadata"]["name"] for o in cache.list()] == ["worker-0"]

    kube_api.create_pod(NS, "stray")
    kube_api.create_pod(NS, "worker-1", labels={JOBSET: "tj"})
    await recorder.wait_for(("ADDED", "worker-1"))

    assert recorder.seen() == [("ADDED", "worker-0"), ("ADDED", "worker-1")]
    assert cache.get(NS, "stray") is None


async def test_fetch_on_a_miss_applies_the_selector(
    devcluster: DevCluster, start_cache: Any
) -> None:
    cache, _ = await start_cache(PODS, label_selector=JOBSET)
    devcluster.create_pod(NS, "stray")

    assert await cache.get_or_fetch(NS, "stray") is None
    # The initial list, then one list narrowed to the name (a GET ignores selectors).
    assert devcluster.faults.count("list", "pods") == 2
    assert devcluster.faults.count("get", "pods") == 0


# -- one request on a miss -----------------------------------------------------------------


async def test_get_or_fetch_finds_an_object_created_a_moment_ago(
    devcluster: DevCluster, start_cache: Any
) -> None:
    cache, recorder = await start_cache()
    created = devcluster.create_trainjob(NS, "fresh")

    # No await since the create: the watch cannot have delivered it yet.
    assert cache.get(NS, "fresh") is None
    found = await cache.get_or_fetch(NS, "fresh")
    assert found is not None
    assert found["metadata"]["uid"] == created["metadata"]["uid"]
    assert await cache.get_or_fetch(NS, "fresh") is found  # from the cache now

    rv = created["metadata"]["resourceVersion"]
    await eventually(lambda: int(cache.resource_version) >= int(rv))
    # The fetch and the watch event together announce the object once.
    assert recorder.seen() == [("ADDED", "fresh")]
    assert devcluster.faults.count("get", "trainjobs") == 1


async def test_concurrent_misses_share_one_request(
    devcluster: DevCluster, start_cache: Any
) -> None:
    cache, _ = await start_cache()
    answers = await asyncio.gather(*(cache.get_or_fetch(NS, "missing") for _ in range(5)))
    assert answers == [None] * 5
    assert devcluster.faults.count("get", "trainjobs") == 1


async def test_a_missing_object_is_remembered_for_a_while_and_until_the_watch_shows_it(
    devcluster: DevCluster, start_cache: Any
) -> None:
    now = [1000.0]
    cache, _ = await start_cache(absent_seconds=10.0, clock=lambda: now[0])
    for _ in range(3):
        assert await cache.get_or_fetch(NS, "later") is None
    assert devcluster.faults.count("get", "trainjobs") == 1
    now[0] += 10.5  # the memory has run out: ask again
    assert await cache.get_or_fetch(NS, "later") is None
    assert devcluster.faults.count("get", "trainjobs") == 2
    # Created while remembered as missing: the watch shows it at once.
    devcluster.create_trainjob(NS, "later")
    await eventually(lambda: cache.get(NS, "later") is not None)
    assert await cache.get_or_fetch(NS, "later") is not None
    # Deleted again: the watch says so, and a miss asks the API server again.
    devcluster.delete("trainjobs", NS, "later", GROUP)
    await eventually(lambda: cache.get(NS, "later") is None)
    assert await cache.get_or_fetch(NS, "later") is None
    assert devcluster.faults.count("get", "trainjobs") == 3


async def test_without_absent_seconds_every_miss_asks(
    devcluster: DevCluster, start_cache: Any
) -> None:
    cache, _ = await start_cache()
    for _ in range(3):
        assert await cache.get_or_fetch(NS, "missing") is None
    assert devcluster.faults.count("get", "trainjobs") == 3


async def test_a_namespaced_cache_does_not_fetch_other_namespaces(
    devcluster: DevCluster, start_cache: Any
) -> None:
    devcluster.create_trainjob("other", "tj")
    cache, _ = await start_cache(namespace=NS)
    assert await cache.get_or_fetch("other", "tj") is None
    assert devcluster.faults.count("get") == 0


# -- the store's rules (pure) --------------------------------------------------------------


def obj(name: str, rv: int | str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": NS, "name": name, "resourceVersion": str(rv)}, **extra}


def test_is_newer_compares_resource_versions_as_numbers() -> None:
    assert is_newer(obj("a", 10), None)
    assert is_newer(obj("a", 10), obj("a", 9))
    assert not is_newer(obj("a", 9), obj("a", 10))
    assert not is_newer(obj("a", 10), obj("a", 10))
    # Unorderable versions: the latest arrival wins.
    assert is_newer(obj("a", "x"), obj("a", 10))


def test_a_lagging_watch_does_not_undo_a_fetched_object() -> None:
    store = ObjectStore()
    store.offer_fetched(obj("a", 12, spec={"v": 2}), watched_rv="9")
    # The watch now delivers the object's history up to the fetched state.
    assert store.apply("ADDED", obj("a", 10, spec={"v": 0})) is None
    assert store.apply("MODIFIED", obj("a", 12, spec={"v": 2})) is None
    event = store.apply("MODIFIED", obj("a", 13, spec={"v": 3}))
    assert event is not None
    assert (event.type, event.old, event.new) == (
        "MODIFIED",
        obj("a", 12, spec={"v": 2}),
        obj("a", 13, spec={"v": 3}),
    )


def test_a_fetch_the_watch_has_overtaken_is_not_kept() -> None:
    store = ObjectStore()
    store.offer(obj("a", 10))
    store.apply("DELETED", obj("a", 14))
    # A GET answered before the delete arrives after it: it must not bring "a" back.
    assert store.offer_fetched(obj("a", 10), watched_rv="14") is None
    assert store.get((NS, "a")) is None


def test_a_deletion_of_an_older_incarnation_keeps_the_new_one() -> None:
    store = ObjectStore()
    store.offer_fetched(obj("a", 20), watched_rv="15")  # re-created, seen by a GET
    assert store.apply("DELETED", obj("a", 17)) is None  # the old one's deletion
    assert store.get((NS, "a")) == obj("a", 20)


def test_replace_reports_the_difference_and_keeps_later_fetches() -> None:
    store = ObjectStore()
    for o in (obj("same", 3), obj("changed", 4), obj("vanished", 5)):
        store.offer(o)
    store.offer_fetched(obj("fetched", 30), watched_rv="5")

    events = store.replace([obj("same", 3), obj("changed", 8), obj("appeared", 9)], "20")

    assert sorted((e.type, e.key[1]) for e in events) == [
        ("ADDED", "appeared"),
        ("DELETED", "vanished"),
        ("MODIFIED", "changed"),
    ]
    assert sorted(o["metadata"]["name"] for o in store.objects()) == [
        "appeared",
        "changed",
        "fetched",
        "same",
    ]


# -- retry timing (pure) -------------------------------------------------------------------


def test_backoff_doubles_up_to_its_cap_with_jitter() -> None:
    backoff = Backoff(base=1, cap=8)
    assert backoff.delay(0, 0.9) == 0
    assert [backoff.delay(n, 0.0) for n in range(1, 7)] == [0.5, 1, 2, 4, 4, 4]
    assert [backoff.delay(n, 0.999) for n in range(1, 5)] == pytest.approx([1, 2, 4, 8], 0.01)
    assert backoff.delay(10_000, 0.5) == 6


def test_backoff_honours_retry_after_up_to_its_cap() -> None:
    backoff = Backoff(base=1, cap=8)
    assert backoff.delay(1, 0.0, retry_after=3) == 3
    assert backoff.delay(1, 0.0, retry_after=86_400) == 8


def test_a_watch_ending_at_once_with_nothing_counts_as_a_failure() -> None:
    assert ended_too_soon(events=0, duration=0.01, min_duration=1)
    assert not ended_too_soon(events=1, duration=0.01, min_duration=1)
    assert not ended_too_soon(events=0, duration=300, min_duration=1)


def test_watch_timeouts_spread_between_one_and_two_times_the_minimum() -> None:
    assert watch_timeout(300, 0.0) == 300
    assert watch_timeout(300, 0.5) == 450
    assert watch_timeout(0.1, 0.0) == 1


# -- waiting for the watch, never asking ---------------------------------------------------


async def test_wait_for_returns_an_object_the_watch_brings_without_a_request(
    devcluster: DevCluster, start_cache: Any
) -> None:
    cache, _ = await start_cache()
    gets = devcluster.faults.count("get")
    waiting = asyncio.create_task(cache.wait_for(NS, "soon", 30.0))
    await eventually(lambda: cache.waiting == 1)
    created = devcluster.create_trainjob(NS, "soon")
    async with asyncio.timeout(10):  # a hang guard, not a measurement
        found = await waiting
    assert found is not None
    assert found["metadata"]["uid"] == created["metadata"]["uid"]
    assert cache.waiting == 0
    assert devcluster.faults.count("get") == gets


async def test_wait_for_gives_up_after_its_grace_without_a_request(
    devcluster: DevCluster, start_cache: Any
) -> None:
    cache, _ = await start_cache()

    def asked() -> int:  # watches aside: the cache's own may open meanwhile
        return devcluster.faults.count("get") + devcluster.faults.count("list")

    before = asked()
    assert await cache.wait_for(NS, "never", 0.0) is None
    assert await cache.wait_for(NS, "never", 0.01) is None
    assert (cache.waiting, asked()) == (0, before)


async def test_an_optional_resource_the_cluster_refuses_leaves_the_cache_unavailable(
    devcluster: DevCluster, kube: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trainjob_status_server.kube.cache")
    devcluster.faults.fail(403, verb="list", resource="trainjobs", times=None)
    cache = WatchCache(kube, TRAINJOBS, optional=True, backoff=Backoff(base=0.01, cap=0.01))
    await cache.start()
    try:
        await eventually(lambda: devcluster.faults.count("list", "trainjobs") >= 3)
        assert cache.unavailable
        assert not cache.synced.is_set()
        # Readers are not held: the resource is not there to wait for.
        assert await cache.wait_for(NS, "tj", 30.0) is None
        devcluster.faults.clear()
        await eventually(lambda: cache.synced.is_set())
        assert not cache.unavailable
    finally:
        await cache.stop()
    refused = [r for r in caplog.records if "optional resource" in r.getMessage()]
    assert [r.levelname for r in refused] == ["WARNING", "INFO"]


async def test_an_optional_resource_listed_but_never_watched_warns_once(
    devcluster: DevCluster, kube: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trainjob_status_server.kube.cache")
    devcluster.faults.fail(403, verb="watch", resource="trainjobs", times=None)
    cache = WatchCache(kube, TRAINJOBS, optional=True, backoff=Backoff(base=0.01, cap=0.01))
    await cache.start()
    try:
        await eventually(lambda: devcluster.faults.count("list", "trainjobs") >= 4)
    finally:
        await cache.stop()
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "optional" in r.getMessage()]
    # Each later refusal and relist is at DEBUG: one warning, however long it lasts.
    assert said == [
        ("WARNING", "cannot list an optional resource: carrying on without it"),
        ("INFO", "optional resource listed"),
    ]
