"""Following TrainJobs for ``progress -w``: the list ``progress`` made, then a watch, and a
fresh list after any failure, keeping track of what the user must be told: whether the
rows are current, and if not, why.

A shared informer (``kube.cache.WatchCache``) serves what it has while it retries and
only logs why; a person reading a table needs to know that the rows stopped being
current, the reason, and when they are current again. After a failure the rows are
current again only once a list succeeds (a watch that reconnects says nothing until
something changes), so every failure leads to a relist.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp

from trainjob_status_server.kube.backoff import Backoff, ended_too_soon, watch_timeout
from trainjob_status_server.kube.client import BOOKMARK, KubeClient, ObjectList
from trainjob_status_server.kube.errors import KubeError, KubeUnavailable
from trainjob_status_server.kube.resources import TRAINJOBS, Obj, resource_version_of
from trainjob_status_server.kube.store import CacheEvent, ObjectStore

# One person's terminal, not a fleet of replicas: retry soon, and never wait long to
# notice that the API server is back.
BACKOFF = Backoff(base=0.5, cap=8.0)
WATCH_SECONDS = 300.0


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
    """What a list or watch failure says, as kubectl says it, in one line: the HTTP
    library's own words (exception classes, the chunked-encoding detail of a cut
    stream) replaced by what happened to the API server."""
    if isinstance(exc, KubeError):
        return one_line(f"Error from server ({exc.reason}): {exc.message}")
    if isinstance(exc, KubeUnavailable) and exc.__cause__ is not None:
        plain = _connection_lost(exc.__cause__)
        if plain is not None:
            return plain
    return one_line(str(exc)) or type(exc).__name__


def _connection_lost(cause: BaseException) -> str | None:
    if isinstance(cause, aiohttp.ClientConnectorError):
        errno = cause.os_error.errno
        why = os.strerror(errno).lower() if errno else "no connection"
        return f"cannot connect to the API server at {cause.host}:{cause.port}: {why}"
    lost = (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, ConnectionError)
    if isinstance(cause, lost):
        return "lost the connection to the API server: it closed the connection"
    return None


def one_line(text: str) -> str:
    """``text`` on one line (a YAML parser's or a proxy's message may span several)."""
    return " ".join(text.split())


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
        on_change: Callable[[Sequence[CacheEvent]], None],
        on_message: Callable[[str], None],
        backoff: Backoff = BACKOFF,
        watch_seconds: float = WATCH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.selector = selector
        self.on_change = on_change
        self.on_message = on_message
        self.backoff = backoff
        self.watch_seconds = watch_seconds
        self.health = Health()
        self._clock = clock
        self._rand = rand
        self._store = ObjectStore()
        self._resource_version = ""

    def objects(self) -> list[Obj]:
        return self._store.objects()

    def load(self, listed: ObjectList) -> list[CacheEvent]:
        """Take a list (the first one ``progress`` made, or a relist): its changes."""
        self._resource_version = listed.resource_version
        return self._store.replace(listed.items, listed.resource_version)

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
            delay = self.backoff.delay(failures, self._rand(), retry_after)
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
        return not ended_too_soon(seen, self._clock() - started, 1.0)
