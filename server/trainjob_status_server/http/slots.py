"""Who may hold a connection slot of a listener: at most ``max_total`` connections, at
most ``max_per_address`` from one source address.

When a new connection finds no free slot, one already open is closed to make room: one
that does not move, of the address holding the most slots (at the per-address cap, of
the newcomer's own address; between addresses holding as many, the one whose candidate
has waited longest), and only of an address that still holds at least as many as the
newcomer's with it: slots move from addresses holding more to those holding fewer,
never between addresses holding about as many, so members of a crowd cannot close each
other (or a newcomer) as fast as they reconnect. Of an address, in this order:

1. a connection idle between two requests of a keep-alive connection, the oldest: it
   loses nothing, its client reopens one when it next sends;
2. a *stalled* one, whose answer waits unsent because its client reads nothing (its
   writes paused), the one stalled longest: it would be closed at its write timeout;
3. a *slow* one, that has been waiting for its client's bytes of a request (its body,
   or a later request's head) for ``slow_body`` seconds or more (a body dripped a byte
   at a time), the one waiting longest;
4. a *fresh* one, whose first request's headers are not all in yet (connected and
   silent, through its TLS handshake and silent, or dripping its head), the oldest.

A connection whose request is in progress and moving is never closed for a newcomer,
which is refused when nothing else can go. Choosing by address first is what keeps a
crowd from closing a newcomer: a client that connects and sends at once holds one slot
of its address, while the crowd's addresses hold several. (A crowd of one connection
from each of more addresses than there are slots is bounded by the first-request
deadline instead.)
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
IDLE_EVICTED = "idle_evicted"
STALLED_EVICTED = "stalled_evicted"
SLOW_EVICTED = "slow_body_evicted"
FRESH_EVICTED = "fresh_evicted"
_ORDER = (IDLE_EVICTED, STALLED_EVICTED, SLOW_EVICTED, FRESH_EVICTED)

SLOW_BODY = 1.0
"""Seconds a request's body (or a later request's head) may be awaited before its
connection counts as slow: a status post or an admission review comes whole, with its
head, in one or two reads."""


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

    @property
    def waiting_since(self) -> float | None:
        """Since when it has been waiting for its client's bytes of a request in
        progress (a body, or a later request's head); None while it is not."""
        ...

    def evict(self) -> None:
        """Close the connection now."""


class Slots:
    """The slots of one listener (pure bookkeeping: closing is the occupant's own
    ``evict``). ``started`` tells it an occupant's first request's headers are in.
    ``clock`` is the one the occupants' ``since`` times come from."""

    def __init__(
        self,
        max_total: int,
        max_per_address: int,
        *,
        refused: Callable[[str, str], None] = lambda _reason, _address: None,
        evicted: Callable[[str], None] = lambda _reason: None,
        slow_body: float = SLOW_BODY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_total = max_total
        self.max_per_address = max_per_address
        self.slow_body = slow_body
        self._refused = refused
        self._evicted = evicted
        self._clock = clock
        # Occupants by address, each with its admission number (insertion: oldest first).
        self._by_address: dict[str, dict[Occupant, int]] = {}
        self._address: dict[Occupant, str] = {}
        self._fresh: set[Occupant] = set()
        self._admitted = 0

    def __len__(self) -> int:
        return len(self._address)

    def count(self, address: str) -> int:
        return len(self._by_address.get(address, ()))

    def fresh(self, address: str) -> int:
        """Connections from ``address`` whose first request's headers are not in."""
        return sum(1 for o in self._by_address.get(address, ()) if o in self._fresh)

    def room_for(self, address: str) -> bool:
        """Whether a newcomer from ``address`` would be admitted now: a free slot, or a
        connection these rules would close for it (nothing is closed)."""
        if self.count(address) >= self.max_per_address and self._victim(address, 0) is None:
            return False
        return (
            len(self._address) < self.max_total
            or self._victim(None, self.count(address) + 2) is not None
        )

    def admit(self, occupant: Occupant, address: str) -> str | None:
        """Takes a slot for ``occupant`` (fresh); the reason it may not have one otherwise."""
        if self.count(address) >= self.max_per_address and not self._make_room(address):
            self._refused(PER_ADDRESS, address)
            return PER_ADDRESS
        if len(self._address) >= self.max_total and not self._make_room(None, address):
            self._refused(TOTAL, address)
            return TOTAL
        self._admitted += 1
        self._by_address.setdefault(address, {})[occupant] = self._admitted
        self._address[occupant] = address
        self._fresh.add(occupant)
        return None

    def started(self, occupant: Occupant) -> None:
        """``occupant``'s first request's headers are in: it is no longer fresh."""
        self._fresh.discard(occupant)

    def release(self, occupant: Occupant) -> None:
        """Frees ``occupant``'s slot, if it holds one."""
        address = self._address.pop(occupant, None)
        if address is None:
            return
        self._fresh.discard(occupant)
        held = self._by_address[address]
        del held[occupant]
        if not held:
            del self._by_address[address]

    def _make_room(self, address: str | None, newcomer: str = "") -> bool:
        """Closes one connection (of ``address`` if given, else for a newcomer from
        ``newcomer``) by the rules above."""
        found = self._victim(address, self.count(newcomer) + 2)
        if found is None:
            return False
        victim, reason = found
        self.release(victim)
        victim.evict()
        self._evicted(reason)
        return True

    def _victim(self, address: str | None, at_least: int) -> tuple[Occupant, str] | None:
        now = self._clock()
        if address is not None:
            return self._candidate(address, now)
        # The addresses holding the most first; among as many, the longest waiting; none
        # holding fewer than ``at_least``.
        by_count: dict[int, list[str]] = {}
        for source, held in self._by_address.items():
            if len(held) >= at_least:
                by_count.setdefault(len(held), []).append(source)
        for count in sorted(by_count, reverse=True):
            found = [c for c in (self._candidate(a, now) for a in by_count[count]) if c]
            if found:
                return min(found, key=lambda c: (_ORDER.index(c[1]), self._age_key(c)))
        return None

    def _age_key(self, candidate: tuple[Occupant, str]) -> float:
        occupant, reason = candidate
        if reason == STALLED_EVICTED:
            return occupant.stalled_since or 0.0
        if reason == SLOW_EVICTED:
            return occupant.waiting_since or 0.0
        address = self._address[occupant]
        return float(self._by_address[address][occupant])

    def _candidate(self, address: str, now: float) -> tuple[Occupant, str] | None:
        """``address``'s connection to close first, and why; None if every one moves."""
        best: tuple[int, float, Occupant] | None = None
        for occupant, number in self._by_address.get(address, {}).items():
            rank: tuple[int, float] | None = None
            if occupant in self._fresh:
                rank = (3, number)
            elif occupant.idle:
                rank = (0, number)
            elif (stalled := occupant.stalled_since) is not None:
                rank = (1, stalled)
            elif (
                awaited := occupant.waiting_since
            ) is not None and now - awaited >= self.slow_body:
                rank = (2, awaited)
            if rank is not None and (best is None or rank < best[:2]):
                best = (*rank, occupant)
        return None if best is None else (best[2], _ORDER[best[0]])


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
