"""Following TrainJobs for ``progress -w``: the list ``progress`` made, then a watch, and a
fresh list after any failure, keeping track of what the user must be told: whether the
rows are current, and if not, why.

An informer serves what it has while it retries and only logs why; a person reading a
table needs to know that the rows stopped being current, the reason, and when they are
current again. After a failure the rows are current again only once a list succeeds (a
watch that reconnects says nothing until something changes), so every failure leads to
a relist.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .kube import (
    BOOKMARK,
    TRAINJOBS,
    Key,
    KubeClient,
    KubeError,
    KubeUnavailable,
    Obj,
    ObjectList,
    key_of,
    one_line,
    resource_version_of,
)

WATCH_SECONDS = 300.0
# One person's terminal, not a fleet of replicas: retry soon, and never wait long to
# notice that the API server is back.
BACKOFF_BASE = 0.5
BACKOFF_CAP = 8.0
ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


@dataclass(frozen=True)
class Health:
    """Whether the rows are current; if not, the reason last told."""

    stale: bool = False
    reason: str = ""


def failed(health: Health, reason: str) -> tuple[Health, str | None]:
    """After a list or watch failed with ``reason``: the new health and the line to
    print on stderr (None when that reason was already told: once per outage, not once
    per retry)."""
    if health.stale and health.reason == reason:
        return health, None
    line = f"error: {reason} (retrying; rows are marked stale until the API server answers)"
    return Health(stale=True, reason=reason), line


def recovered(health: Health) -> tuple[Health, str | None]:
    """After a list succeeded: current again, and the line saying so if they were not."""
    if not health.stale:
        return health, None
    return Health(), "the API server answers again: rows are current"


def reason_of(exc: Exception) -> str:
    """What a list or watch failure says, as kubectl says it, in one line (a failure
    without an answer is in words already: ``kube.KubeUnavailable``)."""
    if isinstance(exc, KubeError):
        return one_line(f"Error from server ({exc.reason}): {exc.message}")
    return one_line(str(exc)) or type(exc).__name__


def retry_delay(failures: int, rand: float, retry_after: float | None = None) -> float:
    """Seconds to wait after ``failures`` consecutive failures (0 after none): between
    half and all of ``min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (failures - 1))``, ``rand``
    uniform in [0, 1) choosing where. A Retry-After is a floor, up to the cap."""
    if failures <= 0:
        return 0.0
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** min(failures - 1, 62))
    wait = ceiling / 2 + ceiling / 2 * rand
    if retry_after is not None:
        wait = max(wait, min(float(retry_after), BACKOFF_CAP))
    return wait


def watch_timeout(minimum: float, rand: float) -> int:
    """The server-side timeout of one watch: between ``minimum`` and twice that, as
    client-go does."""
    return max(1, round(minimum * (1.0 + rand)))


@dataclass(frozen=True)
class Change:
    """ADDED, MODIFIED or DELETED: ``obj`` is the object now, or the last one held for
    DELETED."""

    type: str
    key: Key
    obj: Obj


class TrainJobs:
    """The TrainJobs followed, by (namespace, name); each method returns the changes
    it made."""

    def __init__(self) -> None:
        self._objects: dict[Key, Obj] = {}

    def objects(self) -> list[Obj]:
        return list(self._objects.values())

    def replace(self, listed: list[Obj]) -> list[Change]:
        """A full list: what it lacks is deleted, the rest applied."""
        found = {key_of(obj) for obj in listed}
        changes = [
            Change(DELETED, key, self._objects.pop(key))
            for key in list(self._objects)
            if key not in found
        ]
        changes += [c for c in (self.apply(MODIFIED, obj) for obj in listed) if c is not None]
        return changes

    def apply(self, event_type: str, obj: Obj) -> Change | None:
        """A watch event; None when it changes nothing (the resourceVersion held)."""
        key = key_of(obj)
        held = self._objects.get(key)
        if event_type == DELETED:
            return None if held is None else Change(DELETED, key, self._objects.pop(key))
        if held is not None and resource_version_of(held) == resource_version_of(obj):
            return None
        self._objects[key] = obj
        return Change(ADDED if held is None else MODIFIED, key, obj)


class Follower:
    """The TrainJobs of ``namespace`` (None: all) matching ``selector``, followed until
    cancelled: ``on_change`` hears every change (a list of events, maybe empty when only
    the health changed), ``on_message`` every line for stderr."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str | None,
        selector: str | None,
        *,
        on_change: Callable[[Sequence[Change]], None],
        on_message: Callable[[str], None],
        watch_seconds: float = WATCH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.selector = selector
        self.on_change = on_change
        self.on_message = on_message
        self.watch_seconds = watch_seconds
        self.health = Health()
        self._clock = clock
        self._rand = rand
        self._store = TrainJobs()
        self._resource_version = ""

    def objects(self) -> list[Obj]:
        return self._store.objects()

    def load(self, listed: ObjectList) -> list[Change]:
        """Take a list (the first one ``progress`` made, or a relist): its changes."""
        self._resource_version = listed.resource_version
        return self._store.replace(listed.items)

    async def run(self) -> None:
        """Watch from the last list, relisting after failures, until cancelled."""
        failures = 0
        relist = False
        while True:
            retry_after: int | None = None
            try:
                if relist:
                    events = self.load(
                        await self.client.list(
                            TRAINJOBS, namespace=self.namespace, label_selector=self.selector
                        )
                    )
                    relist = False
                    self._tell(recovered)
                    self.on_change(events)
                failures = 0 if await self._watch() else failures + 1
            except KubeError as exc:
                relist = True
                if exc.status != 410:  # an expired version only needs the relist
                    failures += 1
                    retry_after = exc.retry_after
                    self._tell(failed, reason_of(exc))
            except (KubeUnavailable, ValueError) as exc:
                # ValueError: a watch line that is not an event (a proxy's error page).
                relist = True
                failures += 1
                self._tell(failed, reason_of(exc))
            delay = retry_delay(failures, self._rand(), retry_after)
            if delay > 0:
                await asyncio.sleep(delay)

    def _tell(self, step: Callable[..., tuple[Health, str | None]], *args: str) -> None:
        before = self.health
        self.health, line = step(self.health, *args)
        if line is not None:
            self.on_message(line)
        if self.health.stale != before.stale and self.health.stale:
            self.on_change(())  # redraw with the rows marked

    async def _watch(self) -> bool:
        """One watch to its end; False when it ended too soon to count as progress."""
        started = self._clock()
        seen = 0
        events = self.client.watch(
            TRAINJOBS,
            self._resource_version,
            namespace=self.namespace,
            label_selector=self.selector,
            timeout_seconds=watch_timeout(self.watch_seconds, self._rand()),
        )
        async with contextlib.aclosing(events):
            async for event in events:
                seen += 1
                if event.type != BOOKMARK:
                    change = self._store.apply(event.type, event.object)
                    if change is not None:
                        self.on_change([change])
                self._resource_version = resource_version_of(event.object) or self._resource_version
        # A watch that closed at once with nothing in it (not even a bookmark) counts as
        # a failure: watching again at once could spin against a server or proxy that
        # closes every watch immediately.
        return seen > 0 or self._clock() - started >= 1.0
