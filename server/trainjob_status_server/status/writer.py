"""Writers of accepted updates to the TrainJob status subresource.

``CoalescingWriter`` (the default): a post is answered once its update is queued; one
pending update per TrainJob (the newest wins), at most one write in flight per TrainJob,
writes conditioned on the resourceVersion they were decided on so status never moves
back in time (also across replicas; by ``coalescing.ordering_time``, so a stamp from a
fast clock cannot hold back the updates after it), retries while the update is still the
newest, and a drain on shutdown. Over the API budget the next write goes to the most
awaited update (final, then progress, then routine, none starved: ``priority.py``), chosen
when the budget has a token for it; a final update is written even when a newer one
follows it. Decisions live in ``coalescing.py``, ``priority.py`` and ``advice.py``.

On SIGTERM (``stop``) it takes no new update (``ShuttingDown``: the post is answered 503
and retried on another replica) and writes what it holds, final updates first, at the
drain budget (``drain_qps``, above the steady one: a rolling update must not lose what
was answered 200). With other replicas ready (``successors``), the drain keeps its last
``HANDOVER_SECONDS`` to hand what it could not write to them (``peers/replicas.py``),
and they write it (``adopt``); with none, the drain has all its time. What is still left
is logged per TrainJob and counted.

``DirectWriter``: one server-side apply per post, answered with the write's outcome, as
Kubeflow Trainer's status server does; the benchmarks' baseline (``--write-mode direct``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from ..failures import (
    Failure,
    Invalid,
    ShuttingDown,
    TrainJobNotFound,
    Unavailable,
    WriteFailed,
)
from ..kube.cache import WatchCache
from ..kube.client import KubeClient
from ..kube.errors import KubeError, KubeUnavailable
from ..kube.resources import Obj
from ..kube.store import CacheEvent
from ..kube.views import written_view
from ..metrics import selfmetrics
from .advice import WINDOW_SECONDS
from .advisor import BudgetAdvisor
from .coalescing import (
    FirstSeen,
    Key,
    Pending,
    UpdateClass,
    is_stale,
    newer_object,
    retry_delay,
    supersedes,
)
from .priority import (
    PrioritySchedule,
    classify,
    fair_round,
    is_final,
    turned_terminal,
)
from .validation import EncodedStatus

log = logging.getLogger(__name__)

# Conflicts retried at once before backing off: another writer changed the object.
_QUICK_CONFLICT_RETRIES = 3

_CANCELLED_WRITES_SECONDS = 1.0

HANDOVER_SECONDS = 2.0
"""The end of the drain kept for handing what is left to the replicas that stay (at
most half the drain): one or two requests on the cluster's network."""


class Successors(Protocol):
    """The replicas that take over what a stopping one could not write:
    ``peers.replicas.Replicas``."""

    def successors(self) -> Sequence[object]:
        """The replicas that would take updates now (none: the drain has all its time)."""
        ...

    async def hand_over(
        self, updates: Sequence[tuple[Key, EncodedStatus]], seconds: float
    ) -> set[Key]:
        """Hand ``updates`` over within ``seconds``; the TrainJobs whose updates were taken."""
        ...


class DirectWriter:
    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    async def write(self, namespace: str, name: str, update: EncodedStatus) -> None:
        """Apply ``update``; a failed write raises what the post is refused for."""
        started = time.monotonic()
        try:
            await self.kube.apply_trainjob_status(namespace, name, update.trainer_status())
        except KubeUnavailable as exc:
            selfmetrics.API_WRITES.labels("error").inc()
            raise Unavailable.of(exc) from exc
        except KubeError as exc:
            selfmetrics.API_WRITES.labels(_result_of(exc.status)).inc()
            raise _refusal(exc) from exc
        selfmetrics.API_WRITES.labels("ok").inc()
        selfmetrics.API_WRITE_DURATION.observe(time.monotonic() - started)

    async def start(self) -> None:
        return None

    async def stop(self, drain_seconds: float) -> None:
        return None

    async def wait_idle(self) -> None:
        return None


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _refusal(exc: KubeError) -> Failure:
    """Why a post whose write the API server answered with ``exc`` is refused."""
    if exc.status == 404:
        return TrainJobNotFound()
    if exc.status == 422:
        # The API server's own message and details, passed on.
        details = exc.body.get("details")
        return Invalid(
            str(exc.body.get("message") or "Invalid"),
            details if isinstance(details, Mapping) else None,
        )
    if exc.status in (429, 503, 504):
        return Unavailable()
    return WriteFailed()


def _result_of(code: int) -> str:
    return {404: "not_found", 409: "conflict", 422: "invalid", 429: "throttled"}.get(code, "error")


class CoalescingWriter:
    def __init__(
        self,
        kube: KubeClient,
        trainjobs: WatchCache,
        *,
        min_interval: float = 1.0,
        concurrency: int = 16,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], dt.datetime] = _utc_now,
        rand: Callable[[], float] = random.random,
        target_freshness: float | None = None,
        advice_window: float = WINDOW_SECONDS,
        drain_qps: float | None = None,
        successors: Successors | None = None,
        touched: Callable[[Key], None] | None = None,
    ) -> None:
        self.kube = kube
        self.drain_qps = drain_qps
        self.successors = successors
        # Told of each TrainJob whose held update changes (the exporter: ``newest``).
        self.touched = touched
        self.trainjobs = trainjobs
        self.min_interval = min_interval
        self.concurrency = concurrency
        self.clock = clock
        self.wall_clock = wall_clock
        self.rand = rand
        self._pending: dict[Key, Pending] = {}
        # A newer update behind a final one, written after it (a final is never replaced).
        self._following: dict[Key, Pending] = {}
        # What is being written, by TrainJob.
        self._in_flight: dict[Key, Pending] = {}
        self._last_start: dict[Key, float] = {}
        # Views of what our own writes returned, until the cache shows them, and the
        # updates those writes stored (what ``newest`` shows meanwhile).
        self._written: dict[Key, Obj] = {}
        self._unseen: dict[Key, EncodedStatus] = {}
        self._first_seen = FirstSeen()
        self._schedule = PrioritySchedule()
        self._dirty_since: dict[Key, float] = {}
        # Turned Complete, Failed or Suspended since our last write: the next is final.
        self._after_terminal: set[Key] = set()
        self.advisor = BudgetAdvisor(min_interval, target_freshness, advice_window)
        self._advising: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        self._settled.set()
        self._draining = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._dispatcher: asyncio.Task[None] | None = None

    # -- accepting ---------------------------------------------------------------------

    async def write(self, namespace: str, name: str, update: EncodedStatus) -> None:
        """Queue ``update``; returns at once (the post is answered 200). Once stopping,
        raises ``ShuttingDown``: what is answered 200 is what the drain writes."""
        if self._draining:
            raise ShuttingDown()
        self.submit((namespace, name), update)

    def adopt(self, updates: Sequence[tuple[Key, EncodedStatus]]) -> None:
        """Take updates a stopping replica handed over (in their order), as if posted
        here; none once this replica stops too (``ShuttingDown``)."""
        if self._draining:
            raise ShuttingDown()
        for key, update in updates:
            self.submit(key, update)

    def submit(self, key: Key, update: EncodedStatus) -> None:
        self._take(key, update)
        if self.touched is not None:
            self.touched(key)

    def _take(self, key: Key, update: EncodedStatus) -> None:
        now = self.clock()
        self.advisor.saw(key, now)
        behind = self._following.get(key)
        if behind is not None:
            # A final update is pending or in flight ahead of it: the newest waits behind.
            if supersedes(update, behind.update):
                self._following[key] = Pending(update, now)
                selfmetrics.UPDATES_COALESCED.inc()
            else:
                selfmetrics.UPDATES_DROPPED.labels("stale").inc()
            return
        held = self._pending.get(key)
        if held is not None:
            if supersedes(update, held.update):
                self._replace(key, held, Pending(update, now))
            else:
                selfmetrics.UPDATES_DROPPED.labels("stale").inc()
            return
        stored = self._stored(key)
        if is_stale(update, self._stored_order(key, stored)):
            selfmetrics.UPDATES_DROPPED.labels("stale").inc()
            return
        self._pending[key] = Pending(update, now, update_class=self._classify(key, update, stored))
        self._dirty_since.setdefault(key, now)
        self._settled.clear()
        selfmetrics.PENDING_WRITES.set(len(self._pending))
        if key not in self._in_flight:
            self._push(key, now)
            self._wake.set()

    def _replace(self, key: Key, held: Pending, newer: Pending) -> None:
        """``newer`` supersedes the pending ``held``: it takes its place, unless ``held``
        is final and ``newer`` is not, in which case ``newer`` waits behind it."""
        if is_final(held.update) and not is_final(newer.update):
            self._following[key] = newer
            return
        selfmetrics.UPDATES_COALESCED.inc()
        newer.update_class = held.update_class
        if held.update_class is not UpdateClass.FINAL:
            newer.update_class = min(
                held.update_class, self._classify(key, newer.update, self._stored(key))
            )
            self._schedule.promote(key, newer.update_class)
        self._pending[key] = newer

    def _classify(self, key: Key, update: EncodedStatus, stored: Obj | None) -> UpdateClass:
        return classify(update, stored, key in self._after_terminal)

    def _push(self, key: Key, now: float) -> None:
        pending = self._pending[key]
        since = self._dirty_since.get(key, now)
        self._schedule.push(key, self._ready_at(key, now), pending.update_class, since)
        self._count_classes()

    def _count_classes(self) -> None:
        for update_class, count in self._schedule.counts().items():
            selfmetrics.PENDING_BY_CLASS.labels(update_class.label).set(count)

    def _ready_at(self, key: Key, now: float) -> float:
        if self._draining:
            return now
        return max(now, self._last_start.get(key, -self.min_interval) + self.min_interval)

    def _stored(self, key: Key) -> Obj | None:
        return newer_object(self.trainjobs.get(*key), self._written.get(key))

    def _stored_order(self, key: Key, stored: Obj | None) -> dt.datetime | None:
        return self._first_seen.order(key, stored, self.wall_clock())

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def unseen_writes(self) -> int:
        """Own writes the TrainJob cache does not show yet (remembered until it does)."""
        return len(self._written)

    def newest(self, key: Key) -> EncodedStatus | None:
        """``key``'s newest accepted update the TrainJob cache may not show yet (behind
        a final one, else pending, else being written, else written but not seen by the
        watch yet), or None."""
        for source in (self._following, self._pending, self._in_flight):
            held = source.get(key)
            if held is not None:
                return held.update
        return self._unseen.get(key)

    def newest_in(self, namespace: str | None) -> list[tuple[Key, EncodedStatus]]:
        """``newest`` of every TrainJob of ``namespace`` (None: of all) that has one."""
        keys = {
            key
            for source in (self._following, self._pending, self._in_flight, self._unseen)
            for key in source
            if namespace is None or key[0] == namespace
        }
        found = [(key, self.newest(key)) for key in sorted(keys)]
        return [(key, update) for key, update in found if update is not None]

    @property
    def writing(self) -> frozenset[Key]:
        """The TrainJobs this writer has written (from its first write until the
        TrainJob is deleted): with several replicas, each TrainJob's owner alone."""
        return frozenset(self._last_start)

    async def wait_idle(self) -> None:
        """Until nothing is pending or in flight (tests and the demo use it)."""
        await self._settled.wait()

    # -- writing -----------------------------------------------------------------------

    def _overdue_after(self) -> float:
        """The fair round now: every dirty TrainJob written once at the budget's rate."""
        dirty = len(self._pending) + len(self._in_flight)
        return fair_round(dirty, self.kube.budget.rate)

    async def _dispatch(self) -> None:
        while True:
            now = self.clock()
            key = None
            # A write is chosen only when the budget has its token: choosing ahead and
            # queueing in the bucket would make a final update wait behind the queue.
            token_in = self.kube.budget.delay()
            if len(self._in_flight) < self.concurrency and token_in <= 0:
                key = self._schedule.pop_ready(now, self._overdue_after())
                self._count_classes()
            if key is None:
                self._wake.clear()
                wake_at = self._schedule.next_time()
                if wake_at is None or len(self._in_flight) >= self.concurrency:
                    await self._wake.wait()
                else:
                    timeout = max(0.0, wake_at - now, token_in)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), timeout)
                continue
            pending = self._pending.pop(key, None)
            if pending is None:
                continue
            self._dirty_since.pop(key, None)
            self._in_flight[key] = pending
            self._last_start[key] = now
            task = asyncio.create_task(self._write_one(key, pending), name=f"write {key}")
            self._tasks.add(task)
            task.add_done_callback(lambda t, k=key: self._finished(t, k))  # type: ignore[misc]
            # Let the write take its token before the next choice looks at the budget.
            await asyncio.sleep(0)

    def _finished(self, task: asyncio.Task[None], key: Key) -> None:
        self._tasks.discard(task)
        self._in_flight.pop(key, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("status write failed", exc_info=task.exception())
        # What waited behind a final update goes next, unless the final one is pending
        # again (its write failed and is retried first).
        if key in self._following and key not in self._pending:
            following = self._following.pop(key)
            self._pending[key] = following
            following.update_class = self._classify(key, following.update, self._stored(key))
        if key in self._pending:
            now = self.clock()
            self._dirty_since.setdefault(key, now)
            self._push(key, now)
        selfmetrics.PENDING_WRITES.set(len(self._pending))
        if not self._pending and not self._in_flight:
            self._settled.set()
        if self.touched is not None:
            self.touched(key)
        self._wake.set()

    async def _write_one(self, key: Key, pending: Pending) -> None:
        namespace, name = key
        stored = self._stored(key)
        if stored is None:
            try:
                stored = await self.kube.get_trainjob(namespace, name)
            except (KubeError, KubeUnavailable):
                self._retry(key, pending, None)
                return
            if stored is None:
                self._drop(key, "not_found")
                return
        if is_stale(pending.update, self._stored_order(key, stored)):
            selfmetrics.UPDATES_DROPPED.labels("stale").inc()
            return
        version = str((stored.get("metadata") or {}).get("resourceVersion") or "") or None
        started = self.clock()
        try:
            written = await self.kube.apply_trainjob_status(
                namespace, name, pending.update.trainer_status(), resource_version=version
            )
        except KubeUnavailable:
            selfmetrics.API_WRITES.labels("error").inc()
            self._retry(key, pending, None)
            return
        except KubeError as exc:
            selfmetrics.API_WRITE_DURATION.observe(self.clock() - started)
            selfmetrics.API_WRITES.labels(_result_of(exc.status)).inc()
            await self._failed(key, pending, exc)
            return
        selfmetrics.API_WRITE_DURATION.observe(self.clock() - started)
        selfmetrics.API_WRITES.labels("ok").inc()
        fresh = self.clock() - pending.accepted_at
        selfmetrics.WRITE_FRESHNESS.observe(fresh)
        selfmetrics.WRITE_FRESHNESS_BY_CLASS.labels(pending.update_class.label).observe(fresh)
        self._after_terminal.discard(key)
        # What was written orders from when its post was received, not from now.
        self._first_seen.saw(key, written, pending.update.received)
        self._unseen[key] = pending.update
        self._remember(key, written)

    def _remember(self, key: Key, written: Obj) -> None:
        """Keep what ``written`` (an answer of the API server) orders updates by, until
        the cache shows it or something newer: a post that arrives between the write
        and its watch event must not be taken for newer than what is stored."""
        held = self.trainjobs.get(*key)
        if held is not None and newer_object(held, written) is held:
            self._written.pop(key, None)
            self._unseen.pop(key, None)
        else:
            self._written[key] = written_view(written)

    async def _failed(self, key: Key, pending: Pending, exc: KubeError) -> None:
        if exc.status == 404:
            self._drop(key, "not_found")
        elif exc.status == 422:
            log.warning(
                "status write refused by the API server",
                extra={"trainjob": "/".join(key), "error": exc.message},
            )
            selfmetrics.UPDATES_DROPPED.labels("invalid").inc()
        elif exc.status == 409:
            # Someone else changed the TrainJob since we decided: look again, then retry
            # (or drop, if what is stored now is newer).
            self._written.pop(key, None)
            self._unseen.pop(key, None)
            with contextlib.suppress(KubeError, KubeUnavailable):
                fresh = await self.kube.get_trainjob(*key)
                if fresh is None:
                    self._drop(key, "not_found")
                    return
                self._remember(key, fresh)
            quick = pending.attempts < _QUICK_CONFLICT_RETRIES
            self._retry(key, pending, 0.0 if quick else None)
        else:
            self._retry(key, pending, exc.retry_after if exc.status == 429 else None)

    def _retry(self, key: Key, pending: Pending, delay: float | None) -> None:
        """Write ``pending`` again later, unless a newer update arrived meanwhile (and
        it is not a final update that the newer one is not)."""
        newer = self._pending.get(key)
        if newer is not None:
            if not (is_final(pending.update) and not is_final(newer.update)):
                selfmetrics.UPDATES_COALESCED.inc()
                return
            self._following[key] = newer  # the final goes first
        pending.attempts += 1
        if delay is None or delay > 0:
            delay = retry_delay(pending.attempts, delay, self.rand())
        now = self.clock()
        self._pending[key] = pending
        self._dirty_since.setdefault(key, pending.accepted_at)
        self._schedule.push(key, now + delay, pending.update_class, self._dirty_since[key])
        self._count_classes()

    def _drop(self, key: Key, reason: str) -> None:
        selfmetrics.UPDATES_DROPPED.labels(reason).inc()
        self._forget(key)

    def _forget(self, key: Key) -> None:
        if self.touched is not None:
            self.touched(key)
        self._written.pop(key, None)
        self._unseen.pop(key, None)
        self._following.pop(key, None)
        self._after_terminal.discard(key)
        self._last_start.pop(key, None)
        self._first_seen.forget(key)

    def _on_trainjob(self, event: CacheEvent) -> None:
        if event.new is None:
            self._forget(event.key)
            return
        self._first_seen.saw(event.key, event.new, self.wall_clock())
        if turned_terminal(event.old, event.new):
            self._after_terminal.add(event.key)
            pending = self._pending.get(event.key)
            if pending is not None:
                pending.update_class = UpdateClass.FINAL
                self._schedule.promote(event.key, UpdateClass.FINAL)
                self._count_classes()
        written = self._written.get(event.key)
        if written is not None and newer_object(event.new, written) is event.new:
            del self._written[event.key]  # the cache has caught up with our write
            self._unseen.pop(event.key, None)

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        self.trainjobs.add_listener(self._on_trainjob)
        # What the cache listed before the listener was added is first seen now.
        now = self.wall_clock()
        for obj in self.trainjobs.list():
            meta = obj.get("metadata") or {}
            self._first_seen.saw((meta.get("namespace", ""), meta.get("name", "")), obj, now)
        self._dispatcher = asyncio.create_task(self._dispatch(), name="status-writer")
        self._advising = asyncio.create_task(self._advise(), name="status-writer-advice")

    async def _advise(self) -> None:
        while True:
            await asyncio.sleep(self.advisor.meter.window / 4)
            self.advisor.check(self.clock(), self.kube.budget.rate)

    async def stop(self, drain_seconds: float) -> None:
        """Take no new update; write what is pending (minimum intervals waived, retries
        kept, at ``drain_qps``) for at most ``drain_seconds``, the last
        ``HANDOVER_SECONDS`` of them kept for handing what is left to the replicas that
        stay; then stop. What is still left is logged per TrainJob and counted."""
        self._draining = True
        if self.drain_qps is not None:
            self.kube.budget.raise_to(self.drain_qps, max(1, int(self.drain_qps)))
        for key in list(self._pending):
            if key not in self._in_flight:
                self._schedule.discard(key)
                pending = self._pending[key]
                since = self._dirty_since.get(key, pending.accepted_at)
                self._schedule.push(key, self.clock(), pending.update_class, since)
        self._wake.set()
        handing = self.successors is not None and bool(self.successors.successors())
        reserve = min(HANDOVER_SECONDS, drain_seconds / 2) if handing else 0.0
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._settled.wait(), drain_seconds - reserve)
        # No new write from here; what is held now goes to the replicas that stay, those
        # being written included (a write in flight may or may not be stored: handing it
        # over too is harmless), then counts as lost if none took it.
        loops = [t for t in (self._dispatcher, self._advising) if t is not None]
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        self._dispatcher = None
        self._advising = None
        held, writing = self._held(), set(self._in_flight)
        if held and self.successors is not None and handing:
            updates = [(key, p.update) for key, waiting in held.items() for p in waiting]
            given = await self.successors.hand_over(updates, reserve)
            held = {key: waiting for key, waiting in held.items() if key not in given}
        self._count_lost(held, writing)
        writes = list(self._tasks)
        for task in writes:
            task.cancel()
        if writes:
            # A cancelled write ends at once; none may hold the shutdown up.
            await asyncio.wait(writes, timeout=_CANCELLED_WRITES_SECONDS)
        self.trainjobs.remove_listener(self._on_trainjob)

    def _held(self) -> dict[Key, list[Pending]]:
        """Every TrainJob's updates not yet written, each in the order it must be
        written (being written, then pending, then waiting behind a final one), the
        TrainJobs most awaited first (final updates, then by how long they wait)."""
        held: dict[Key, list[Pending]] = {}
        for source in (self._in_flight, self._pending, self._following):
            for key, pending in source.items():
                waiting = held.setdefault(key, [])
                if pending not in waiting:
                    waiting.append(pending)

        def order(key: Key) -> tuple[int, float]:
            first = held[key][0]
            return (first.update_class.value, self._dirty_since.get(key, first.accepted_at))

        return {key: held[key] for key in sorted(held, key=order)}

    def _count_lost(self, lost: Mapping[Key, list[Pending]], writing: set[Key]) -> None:
        """Log each TrainJob whose newest accepted update was neither written nor handed
        over (what it holds and since when), and count them."""
        now = self.clock()
        for key in sorted(lost):
            held = lost[key][-1]  # the newest accepted
            log.warning(
                "update lost at shutdown",
                extra={
                    "trainjob": "/".join(key),
                    "progress": held.update.progress,
                    "accepted_s_ago": round(now - held.accepted_at, 3),
                    "in_flight": key in writing,
                },
            )
        if lost:
            log.warning("shutdown left updates unwritten", extra={"trainjobs": len(lost)})
            selfmetrics.UPDATES_DROPPED.labels("shutdown").inc(len(lost))
