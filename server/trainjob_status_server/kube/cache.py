"""A list+watch cache of one resource (an informer): the current objects in memory,
kept fresh by a watch, with listeners for every change.

The loop: list, then watch from the list's resourceVersion with bookmarks. A watch that
ends (its timeout, a dropped connection) is resumed from the last resourceVersion seen;
410 Gone (the version left the server's window) means a relist; any other failure
means waiting (capped exponential backoff with jitter) and trying again. Nothing but
``stop()`` ends the loop. The rules for changing the objects live in ``store.py``, the
retry timing in ``backoff.py``; this module is the I/O around them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable

from .backoff import Backoff, ended_too_soon, watch_timeout
from .client import BOOKMARK, KubeClient
from .errors import KubeError, KubeUnavailable
from .resources import Key, Obj, Resource, resource_version_of
from .store import CacheEvent, ObjectStore

log = logging.getLogger(__name__)

Listener = Callable[[CacheEvent], None]
"""Called on the event loop for every change; must not block (schedule work instead)."""

DEFAULT_BACKOFF = Backoff()

MAX_ABSENT = 4096
"""Missing objects ``get_or_fetch`` remembers at most."""


class WatchCache:
    """The objects of ``resource`` (in ``namespace``, or all; matching
    ``label_selector``, if given), keyed by (namespace, name).

    ``synced`` is set once the first list has been loaded and stays set: after that the
    cache serves what it has while it recovers from failures. ``transform``, when given,
    maps every object before it is kept (what ``get``, ``list`` and listeners see): it
    must keep ``metadata`` name, namespace, uid and resourceVersion. ``absent_seconds``
    (0: not at all) is how long ``get_or_fetch`` remembers that the API server said an
    object does not exist, so a caller that keeps asking for a missing object costs one
    request per period, not one per call; the watch showing the object ends that at once.
    ``fetch_client`` (default: ``client``) is the one ``get_or_fetch`` spends: a caller
    on a request path gives the budget lane with its deadline there, while the list and
    watch keep theirs.

    ``optional`` is for a resource the cluster may not serve, or may not let us list
    (a CRD not installed, an RBAC rule left out): a 403 or 404 from the list then sets
    ``unavailable``, is logged once, and the list is retried at the backoff's cap, so a
    CRD installed later is picked up. Readers treat an unavailable cache as empty.
    """

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        transform: Callable[[Obj], Obj] | None = None,
        absent_seconds: float = 0.0,
        fetch_client: KubeClient | None = None,
        optional: bool = False,
        watch_seconds: float = 300.0,
        backoff: Backoff = DEFAULT_BACKOFF,
        min_watch_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.transform = transform
        self.absent_seconds = absent_seconds
        self.fetch_client = fetch_client if fetch_client is not None else client
        self.optional = optional
        self.unavailable = False
        # Since when (clock) the list has been refused with 403 or 404, while it is.
        self.unavailable_since: float | None = None
        self._said_missing = self._said_listed = False
        self.watch_seconds = watch_seconds
        self.backoff = backoff
        self.min_watch_seconds = min_watch_seconds
        self.synced = asyncio.Event()
        self.resource_version = ""  # the last one listed, watched or bookmarked
        self._clock = clock
        self._rand = rand
        self._store = ObjectStore()
        self._listeners: list[Listener] = []
        self._task: asyncio.Task[None] | None = None
        self._fetches: dict[Key, asyncio.Task[Obj | None]] = {}
        self._absent: dict[Key, float] = {}  # key -> until when (clock) it is known absent
        self._waiters: dict[Key, list[asyncio.Future[None]]] = {}
        self._failures = 0  # consecutive list/watch attempts that made no progress

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Launch the list+watch loop (once); it runs until ``stop()``."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"watch-{self.resource.qualified}")

    async def stop(self) -> None:
        """Cancel the loop and any fetch in flight, and wait for them to end."""
        tasks = [t for t in (self._task, *self._fetches.values()) if t is not None]
        self._task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def wait_synced(self) -> None:
        """Wait for the first list (bound it with ``asyncio.timeout``)."""
        await self.synced.wait()

    # -- reads -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._store)

    @property
    def waiting(self) -> int:
        """Readers in ``wait_for`` now."""
        return sum(len(waiters) for waiters in self._waiters.values())

    def get(self, namespace: str, name: str) -> Obj | None:
        """The cached object, or None. Treat it as read-only: it is shared."""
        return self._store.get((namespace, name))

    def list(self) -> list[Obj]:
        """Every cached object (read-only, as for ``get``)."""
        return self._store.objects()

    async def wait_for(
        self,
        namespace: str,
        name: str,
        grace: float,
        fits: Callable[[Obj], bool] | None = None,
    ) -> Obj | None:
        """The cached object, or the one the watch brings within ``grace`` seconds
        (the first list included), or None; never a request of its own. For callers
        that learn of an object from something its creation caused (a pod of a
        TrainJob's JobSet) a moment before the watch may deliver it. With ``fits``, an
        object it rejects is waited past as if absent (and returned when the time is
        up): a recreation the watch has not shown yet."""
        key = (namespace, name)
        if self.namespace is not None and namespace != self.namespace:
            return None
        try:
            async with asyncio.timeout(grace):
                while True:
                    held = self._store.get(key)
                    if (held is not None and (fits is None or fits(held))) or self.unavailable:
                        return held
                    # Woken by an event for this key, a relist, or the resource
                    # turning out to be unavailable; then looked at again.
                    woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                    waiters = self._waiters.setdefault(key, [])
                    waiters.append(woken)
                    try:
                        await woken
                    finally:
                        waiters.remove(woken)
                        if not waiters:
                            self._waiters.pop(key, None)
        except TimeoutError:
            return self._store.get(key)

    async def get_or_fetch(self, namespace: str, name: str) -> Obj | None:
        """The cached object; on a miss, one request to the API server, so an object
        created a moment ago is found before its watch event arrives.

        A fetched object that is news to the watch is cached (listeners hear of it), so
        the posts that follow do not fetch again; concurrent misses of one key share one
        request. An answer the watch has already overtaken is not cached, and the cache's
        newer view (the object is gone) is what is returned.
        """
        key = (namespace, name)
        held = self._store.get(key)
        if held is not None:
            return held
        if self.namespace is not None and namespace != self.namespace:
            return None
        until = self._absent.get(key)
        if until is not None:
            if until > self._clock():
                return None
            del self._absent[key]
        fetch = self._fetches.get(key)
        if fetch is None:
            fetch = asyncio.create_task(self._fetch(namespace, name))
            self._fetches[key] = fetch
            fetch.add_done_callback(lambda task: self._fetched(key, task))
        # A caller that gives up must not cancel the others' request.
        fetched = await asyncio.shield(fetch)
        if fetched is None:
            return None
        return self._store.get(key)

    def _fetched(self, key: Key, task: asyncio.Task[Obj | None]) -> None:
        self._fetches.pop(key, None)
        if not task.cancelled():
            # Retrieved here too: every caller may have given up before it failed.
            task.exception()

    async def _fetch(self, namespace: str, name: str) -> Obj | None:
        if self.label_selector is None:
            found = await self.fetch_client.get(self.resource, namespace, name)
        else:
            # A GET would ignore the selector; a list narrowed to the name applies it,
            # still in one request.
            listed = await self.fetch_client.list(
                self.resource,
                namespace=namespace,
                label_selector=self.label_selector,
                field_selector=f"metadata.name={name}",
            )
            found = listed.items[0] if listed.items else None
        if found is not None:
            self._notify(self._store.offer_fetched(self._view(found), self.resource_version))
        elif self.absent_seconds > 0 and self._store.get((namespace, name)) is None:
            self._remember_absent((namespace, name))
        return found

    def _remember_absent(self, key: Key) -> None:
        now = self._clock()
        if len(self._absent) >= MAX_ABSENT:
            for known, until in list(self._absent.items()):
                if until <= now:
                    del self._absent[known]
            if len(self._absent) >= MAX_ABSENT:
                self._absent.clear()  # a flood of names: forget, rather than grow
        self._absent[key] = now + self.absent_seconds

    def _view(self, obj: Obj) -> Obj:
        return obj if self.transform is None else self.transform(obj)

    # -- listeners -------------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Hear of every change from now on (call ``list()`` for what is already here)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    def _notify(self, *events: CacheEvent | None) -> None:
        for event in events:
            if event is None:
                continue
            if event.new is not None:
                self._absent.pop(event.key, None)
                for waiter in self._waiters.get(event.key, ()):
                    if not waiter.done():
                        waiter.set_result(None)
            for listener in list(self._listeners):
                try:
                    listener(event)
                except Exception:
                    # One broken listener must not stop the cache or the others.
                    log.exception(
                        "cache listener failed",
                        extra={"resource": self.resource.qualified, "event": event.type},
                    )

    # -- the loop --------------------------------------------------------------------------

    async def _run(self) -> None:
        relist = True
        while True:
            retry_after: int | None = None
            just_listed = relist
            try:
                if relist:
                    await self._relist()
                    relist = False
                if await self._watch():
                    self._failures = 0
                else:
                    self._failures += 1
            except KubeError as exc:
                if self.optional and exc.status in (403, 404):
                    self._missing(exc)
                    # Served again, it is listed afresh.
                    relist = True
                    if not self.synced.is_set():
                        # Never listed: the cluster may never serve it, no fault to
                        # back off from.
                        await asyncio.sleep(self.backoff.cap)
                        continue
                    # Listed before: a refusal that may pass (RBAC rolling out), retried
                    # as any failure is (logged once, by _missing).
                    self._failures += 1
                elif exc.status == 410:
                    relist = True
                    # Expiry is routine after a long disconnect, but a version expired
                    # the moment it was listed means something is wrong: slow down.
                    self._failures += 1 if just_listed else 0
                    log.info("watch expired, relisting", extra=self._log_fields(exc))
                else:
                    self._failures += 1
                    retry_after = exc.retry_after
                    log.warning("list/watch failed", extra=self._log_fields(exc))
            except KubeUnavailable as exc:
                self._failures += 1
                log.warning("list/watch failed", extra=self._log_fields(exc))
            except Exception as exc:
                # A malformed event or a bug: the cache keeps running on what it has.
                self._failures += 1
                log.exception("list/watch failed", extra=self._log_fields(exc))
            delay = self.backoff.delay(self._failures, self._rand(), retry_after)
            if delay > 0:
                await asyncio.sleep(delay)

    def _missing(self, exc: KubeError) -> None:
        if not self.unavailable:
            self.unavailable = True
            self.unavailable_since = self._clock()
            # Once per process: a cluster that lets us list but not watch would
            # otherwise say it again after every relist.
            level = logging.DEBUG if self._said_missing else logging.WARNING
            self._said_missing = True
            log.log(
                level,
                "cannot list an optional resource: carrying on without it",
                extra=self._log_fields(exc),
            )
        self._wake_all()

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def _relist(self) -> None:
        listed = await self.client.list(
            self.resource, namespace=self.namespace, label_selector=self.label_selector
        )
        if self.unavailable:
            self.unavailable = False
            self.unavailable_since = None
            level = logging.DEBUG if self._said_listed else logging.INFO
            self._said_listed = True
            log.log(level, "optional resource listed", extra={"resource": self.resource.qualified})
        self.resource_version = listed.resource_version
        items = listed.items if self.transform is None else [self._view(o) for o in listed.items]
        self._notify(*self._store.replace(items, listed.resource_version))
        self.synced.set()
        self._wake_all()

    async def _watch(self) -> bool:
        """One watch to its end; False when it ended too soon to count as progress."""
        started = self._clock()
        seen = 0
        events = self.client.watch(
            self.resource,
            self.resource_version,
            namespace=self.namespace,
            label_selector=self.label_selector,
            timeout_seconds=watch_timeout(self.watch_seconds, self._rand()),
        )
        async with contextlib.aclosing(events):
            async for event in events:
                # The server is answering again: however this watch ends, the next
                # failure starts the backoff from the beginning.
                self._failures = 0
                seen += 1
                if event.type != BOOKMARK:
                    self._notify(self._store.apply(event.type, self._view(event.object)))
                # Bookmarks and events the store skipped (older than what a GET showed
                # us) still move the resume point forward.
                rv = resource_version_of(event.object)
                self.resource_version = rv or self.resource_version
        return not ended_too_soon(seen, self._clock() - started, self.min_watch_seconds)

    def _log_fields(self, exc: Exception) -> dict[str, object]:
        return {
            "resource": self.resource.qualified,
            "resource_version": self.resource_version,
            "error": str(exc),
        }
