"""Giving memory back to the system after a crowd of connections has gone.

What a connection holds outside Python's own allocator (the TLS library's state, the
buffer of an unfinished request head) comes from the C allocator's heap. glibc returns
freed heap memory to the system only from the top of the heap, and objects made while
the crowd was connected (bigger dicts and sets, caches, the next requests' objects) sit
above what the crowd freed: so after a few hundred stalled connections close, the
server's resident memory would stay where the crowd left it. ``malloc_trim`` gives back
the free pages anywhere in the heap; it is called shortly after the open connections
have fallen to half of their recent peak, that peak being at least ``CROWD`` above them,
so a few calls follow each crowd and none follow ordinary traffic. Where the C library has no
``malloc_trim`` (musl), nothing is done.

The measurements that show it is needed are in docs/connections.md.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

CROWD = 64
"""Connections that must have closed since the peak before memory is given back."""


def crowd_left(peak: int, open_now: int) -> bool:
    """Whether enough of a crowd of connections has closed to give memory back."""
    return peak - open_now >= CROWD and open_now <= peak // 2


def _malloc_trim() -> Callable[[], object] | None:
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    return lambda: trim(0)


TRIM_DELAY = 1.0
"""Seconds from the decision to the trim: the connections' last objects (their protocols,
tasks, buffers) are freed in the event loop's next rounds, after the close that decided."""


class HeapTrim:
    """Told how many connections are open after each open and close; trims the heap
    ``TRIM_DELAY`` seconds after a crowd has left (see ``crowd_left``), once however many
    decisions fall in that time."""

    def __init__(
        self,
        trim: Callable[[], object] | None = None,
        schedule: Callable[[float, Callable[[], None]], object] | None = None,
    ) -> None:
        self._trim = trim if trim is not None else _malloc_trim()
        self._schedule = schedule
        self._pending = False
        self.peak = 0
        self.trims = 0

    def opened(self, open_now: int) -> None:
        self.peak = max(self.peak, open_now)

    def closed(self, open_now: int) -> None:
        if not crowd_left(self.peak, open_now):
            return
        self.peak = open_now
        if self._trim is None or self._pending:
            return
        self._pending = True
        schedule = self._schedule or asyncio.get_running_loop().call_later
        schedule(TRIM_DELAY, self._run)

    def _run(self) -> None:
        self._pending = False
        assert self._trim is not None
        self._trim()
        self.trims += 1
        log.debug("heap trimmed")
