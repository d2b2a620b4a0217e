"""Who may hold a connection slot of a listener: at most ``max_total`` connections, at
most ``max_per_address`` from one source address. When a new connection finds no free
slot, the oldest connection that sits idle between requests is closed to make room (it
loses nothing: a client reopens one when it next posts); only when none is idle is the
new one refused. A client that opens connections and leaves them idle after one request
therefore cannot lock out others, and one source address cannot take every slot.
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


class Occupant(Protocol):
    @property
    def idle(self) -> bool:
        """Between two requests of a keep-alive connection, nothing of the next one in."""
        ...

    def evict(self) -> None:
        """Close the connection now."""


class Slots:
    def __init__(
        self,
        max_total: int,
        max_per_address: int,
        *,
        refused: Callable[[str, str], None] = lambda _reason, _address: None,
        evicted: Callable[[], None] = lambda: None,
    ) -> None:
        self.max_total = max_total
        self.max_per_address = max_per_address
        self._refused = refused
        self._evicted = evicted
        self._open: dict[Occupant, str] = {}  # insertion order: oldest first
        self._per_address: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._open)

    def count(self, address: str) -> int:
        return self._per_address[address]

    def admit(self, occupant: Occupant, address: str) -> str | None:
        """Takes a slot for ``occupant``; the reason it may not have one otherwise."""
        if self._per_address[address] >= self.max_per_address and not self._evict_idle(address):
            self._refused(PER_ADDRESS, address)
            return PER_ADDRESS
        if len(self._open) >= self.max_total and not self._evict_idle(None):
            self._refused(TOTAL, address)
            return TOTAL
        self._open[occupant] = address
        self._per_address[address] += 1
        return None

    def release(self, occupant: Occupant) -> None:
        """Frees ``occupant``'s slot, if it holds one."""
        address = self._open.pop(occupant, None)
        if address is not None:
            self._per_address[address] -= 1
            if not self._per_address[address]:
                del self._per_address[address]

    def _evict_idle(self, address: str | None) -> bool:
        """Closes the oldest idle connection (from ``address`` if given)."""
        for occupant, source in self._open.items():
            if (address is None or source == address) and occupant.idle:
                self.release(occupant)
                occupant.evict()
                self._evicted()
                return True
        return False


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
