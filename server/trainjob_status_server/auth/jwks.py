"""The issuer's JWKS, fetched through the API server and kept fresh.

A loop loads the keys at start (retrying with backoff until it succeeds: readiness waits
for it), then refreshes them every ``refresh_interval`` so a rotation is picked up
without traffic and a key that leaves the set stops verifying. A token with an unknown
``kid`` may trigger one extra refresh, at most once per ``refresh_interval``, so a
flood of forged kids costs at most one fetch per interval. A failed refresh keeps the
keys we have.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..kube.backoff import Backoff
from .keys import KeySet, VerificationKey

log = logging.getLogger(__name__)

JWKS_PATH = "/openid/v1/jwks"
JWKS_ACCEPT = "application/jwk-set+json, application/json;q=0.9"
"""What a real API server serves the JWKS as, with JSON as a fallback for issuers that
serve it plainly (go-restful compares media types without parameters, so the first one
matches); the route answers 406 to ``Accept: application/json`` alone."""

DEFAULT_BACKOFF = Backoff(base=0.5, cap=30.0)

Fetch = Callable[[], Awaitable[Any]]
"""Returns the JWKS document (decoded JSON); raises on failure."""

KeysChanged = Callable[[KeySet, KeySet], None]
"""Called with (old, new) after a refresh that changed the set."""


class RefreshGate:
    """On-demand refreshes at most once per ``interval`` (pure; the clock is injected)."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._last = -math.inf

    def allow(self) -> bool:
        """Whether a refresh may start now; if so, the interval starts over."""
        now = self._clock()
        if now - self._last < self.interval:
            return False
        self._last = now
        return True


class KeyStore:
    """The current verification keys; ``loaded`` is set after the first good fetch."""

    def __init__(
        self,
        fetch: Fetch,
        *,
        refresh_interval: float = 30.0,
        backoff: Backoff = DEFAULT_BACKOFF,
        on_change: KeysChanged | None = None,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.fetch = fetch
        self.refresh_interval = refresh_interval
        self.backoff = backoff
        self.keys = KeySet()
        self.loaded = asyncio.Event()
        self._on_change = on_change
        self._gate = RefreshGate(refresh_interval, clock)
        self._rand = rand
        self._task: asyncio.Task[None] | None = None
        self._inflight: asyncio.Task[bool] | None = None

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="jwks-refresh")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, self._inflight) if t is not None]
        self._task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def get(self, kid: str) -> VerificationKey | None:
        return self.keys.get(kid)

    async def get_or_refresh(self, kid: str) -> VerificationKey | None:
        """The key for ``kid``; when unknown, after one refresh if the gate allows one
        (or after the refresh already in flight)."""
        found = self.keys.get(kid)
        if found is not None or not self.loaded.is_set():
            return found
        if self._inflight is None and not self._gate.allow():
            return None
        await self.refresh()
        return self.keys.get(kid)

    async def refresh(self) -> bool:
        """Fetch now, or join the fetch in flight; whether it succeeded."""
        if self._inflight is None:
            self._inflight = asyncio.create_task(self._refresh())
            self._inflight.add_done_callback(self._refreshed)
        return await asyncio.shield(self._inflight)

    def _refreshed(self, task: asyncio.Task[bool]) -> None:
        if self._inflight is task:
            self._inflight = None

    async def _refresh(self) -> bool:
        try:
            document = await self.fetch()
            keys, skipped = KeySet.from_jwks(document, self.keys)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("JWKS fetch failed", extra={"error": str(exc), "path": JWKS_PATH})
            return False
        if skipped:
            log.warning("JWKS keys skipped", extra={"skipped": skipped})
        if not keys:
            # An issuer with no usable key is broken; keep verifying with what we had.
            log.warning("JWKS has no usable key", extra={"path": JWKS_PATH})
            return False
        old, self.keys = self.keys, keys
        changed = old.kids() != keys.kids() or any(k not in old for k in keys)
        if changed or not self.loaded.is_set():
            log.info("JWKS loaded", extra={"kids": keys.kids()})
        self.loaded.set()
        if changed and self._on_change is not None:
            self._on_change(old, keys)
        return True

    async def _run(self) -> None:
        failures = 0
        while True:
            if await self.refresh():
                failures = 0
                delay = self.refresh_interval
            else:
                failures += 1
                delay = self.backoff.delay(failures, self._rand())
                if self.loaded.is_set():
                    delay = min(delay, self.refresh_interval)
            await asyncio.sleep(delay)
