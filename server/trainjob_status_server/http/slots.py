"""Who may hold a connection slot of a listener: at most ``max_total`` connections, at
most ``max_per_address`` from one source address.

When a new connection finds no free slot, one already open is closed to make room, in
this order:

1. a *fresh* connection, one whose first request's headers are not all in yet
   (connected and silent, through its TLS handshake and silent, or dripping its head):
   at the per-address cap the oldest of that address; at the total cap the oldest of the
   address holding the most fresh connections (the oldest of all between equals). A
   crowd of strangers that never send a request therefore only ever evicts itself: a
   client that connects and sends at once is the newest of an address holding one, and
   its request is in before the crowd reaches it;
2. else a connection idle between two requests of a keep-alive connection, the oldest
   (of that address at the per-address cap): it loses nothing, its client reopens one
   when it next sends;
3. else a *stalled* connection, one whose answer waits unsent because its client reads
   nothing (its writes paused), the one stalled longest (of that address at the
   per-address cap): it would be closed at its write timeout anyway, and meanwhile holds
   a slot a reading client needs;
4. else none: a connection whose request is in progress and moving is never closed for
   a newcomer, which is refused instead.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)

PER_ADDRESS = "max_connections_per_ip"
TOTAL = "max_connections"

# Why an open connection was closed to make room (the closed-connections metric's reason).
FRESH_EVICTED = "fresh_evicted"
IDLE_EVICTED = "idle_evicted"
STALLED_EVICTED = "stalled_evicted"


class Occupant(Protocol):
    @property
    def idle(self) -> bool:
        """Between two requests of a keep-alive connection, nothing of the next one in."""
        ...

    @property
    def stalled_since(self) -> float | None:
        """Since when its writes have been paused (the client reading nothing); None
        while they are not."""
        ...

    def evict(self) -> None:
        """Close the connection now."""


class Slots:
    """The slots of one listener (pure bookkeeping: closing is the occupant's own
    ``evict``). ``started`` tells it an occupant's first request's headers are in."""

    def __init__(
        self,
        max_total: int,
        max_per_address: int,
        *,
        refused: Callable[[str, str], None] = lambda _reason, _address: None,
        evicted: Callable[[str], None] = lambda _reason: None,
    ) -> None:
        self.max_total = max_total
        self.max_per_address = max_per_address
        self._refused = refused
        self._evicted = evicted
        self._open: dict[Occupant, str] = {}  # insertion order: oldest first
        self._per_address: Counter[str] = Counter()
        # Fresh occupants by address, each with its admission number (oldest first).
        self._fresh: dict[str, dict[Occupant, int]] = {}
        self._admitted = 0

    def __len__(self) -> int:
        return len(self._open)

    def count(self, address: str) -> int:
        return self._per_address[address]

    def fresh(self, address: str) -> int:
        """Connections from ``address`` whose first request's headers are not in."""
        return len(self._fresh.get(address, ()))

    def admit(self, occupant: Occupant, address: str) -> str | None:
        """Takes a slot for ``occupant`` (fresh); the reason it may not have one otherwise."""
        if self._per_address[address] >= self.max_per_address and not self._make_room(address):
            self._refused(PER_ADDRESS, address)
            return PER_ADDRESS
        if len(self._open) >= self.max_total and not self._make_room(None):
            self._refused(TOTAL, address)
            return TOTAL
        self._open[occupant] = address
        self._per_address[address] += 1
        self._admitted += 1
        self._fresh.setdefault(address, {})[occupant] = self._admitted
        return None

    def started(self, occupant: Occupant) -> None:
        """``occupant``'s first request's headers are in: it is no longer fresh."""
        address = self._open.get(occupant)
        if address is not None:
            self._forget_fresh(occupant, address)

    def release(self, occupant: Occupant) -> None:
        """Frees ``occupant``'s slot, if it holds one."""
        address = self._open.pop(occupant, None)
        if address is not None:
            self._forget_fresh(occupant, address)
            self._per_address[address] -= 1
            if not self._per_address[address]:
                del self._per_address[address]

    def _forget_fresh(self, occupant: Occupant, address: str) -> None:
        held = self._fresh.get(address)
        if held is not None and held.pop(occupant, None) is not None and not held:
            del self._fresh[address]

    def _make_room(self, address: str | None) -> bool:
        """Closes one connection (of ``address`` if given) by the rules above."""
        victim = self._fresh_victim(address)
        reason = FRESH_EVICTED
        if victim is None:
            victim, reason = self._idle_victim(address), IDLE_EVICTED
        if victim is None:
            victim, reason = self._stalled_victim(address), STALLED_EVICTED
        if victim is None:
            return False
        self.release(victim)
        victim.evict()
        self._evicted(reason)
        return True

    def _fresh_victim(self, address: str | None) -> Occupant | None:
        if address is not None:
            held = self._fresh.get(address)
        elif self._fresh:
            # The address holding the most; between equals, the oldest connection.
            held = max(self._fresh.values(), key=lambda h: (len(h), -next(iter(h.values()))))
        else:
            held = None
        return next(iter(held)) if held else None

    def _idle_victim(self, address: str | None) -> Occupant | None:
        for occupant, source in self._open.items():
            if (address is None or source == address) and occupant.idle:
                return occupant
        return None

    def _stalled_victim(self, address: str | None) -> Occupant | None:
        stalled = [
            (since, occupant)
            for occupant, source in self._open.items()
            if (address is None or source == address)
            and (since := occupant.stalled_since) is not None
        ]
        return min(stalled, key=lambda pair: pair[0])[1] if stalled else None


class RefusalLog:
    """Logs refused connections without flooding: the first at once, then at most one
    line per ``interval`` seconds with the counts since the last line."""

    def __init__(
        self,
        listener: str,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.listener = listener
        self.interval = interval
        self._clock = clock
        self._counts: Counter[str] = Counter()
        self._last: float | None = None

    def __call__(self, reason: str, address: str) -> None:
        self._counts[reason] += 1
        now = self._clock()
        if self._last is not None and now - self._last < self.interval:
            return
        log.warning(
            "connections refused",
            extra={
                "listener": self.listener,
                "refused": dict(self._counts),
                "last_address": address,
            },
        )
        self._counts.clear()
        self._last = now
