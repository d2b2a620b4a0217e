"""One writer per TrainJob across replicas: a post accepted here for a TrainJob another
replica owns (``Replicas.owner``) is given to that replica, which writes it; the others
go to this replica's writer. So a TrainJob whose pods post to every replica is written
at most once per ``--min-write-interval`` in all, not once per replica.

A post is answered once its update is queued, here as in the writer. The queue holds
each TrainJob's newest update per owner (a final update and the newer one behind it
both: the final one is never coalesced away), and is given every ``FORWARD_SECONDS``,
one request per owner. What an owner does not take (unreachable, stopping: 503) is
written here instead: nothing accepted waits on a replica that is not there. On SIGTERM
what is queued is given one last time, then written here, before the writer drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from ..failures import ShuttingDown
from ..metrics import selfmetrics
from ..status.coalescing import supersedes
from ..status.priority import is_final
from ..status.validation import EncodedStatus
from .replicas import Replicas
from .ring import Key, Peer

log = logging.getLogger(__name__)

FORWARD_SECONDS = 0.2
"""How long a given update waits for others to the same replica: one request carries
every post of that interval, so a replica's cost of giving is per interval, not per
post."""

GIVE_SECONDS = 2.0  # one request to another replica, at most


class LocalWriter(Protocol):
    """This replica's writer: ``status.writer.CoalescingWriter``."""

    async def write(self, namespace: str, name: str, update: EncodedStatus) -> None: ...

    def submit(self, key: Key, update: EncodedStatus) -> None: ...


def queued(held: list[EncodedStatus], update: EncodedStatus) -> list[EncodedStatus]:
    """``held`` (a TrainJob's queued updates, in order) with ``update`` arriving: it
    replaces the newest unless that one is final (then it waits behind it) or newer."""
    if not held:
        return [update]
    last = held[-1]
    if not supersedes(update, last):
        return held
    if is_final(last) and not is_final(update):
        return [*held, update]
    return [*held[:-1], update]


class Forwarder:
    """The status writer the endpoint uses: ``write`` as the writer's, ``start`` and
    ``stop`` around it."""

    def __init__(
        self, writer: LocalWriter, replicas: Replicas, interval: float = FORWARD_SECONDS
    ) -> None:
        self.writer = writer
        self.replicas = replicas
        self.interval = interval
        self._queues: dict[Peer, dict[Key, list[EncodedStatus]]] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._flushing: asyncio.Future[None] | None = None
        self._giving = 0

    async def write(self, namespace: str, name: str, update: EncodedStatus) -> None:
        if self._stopping:
            raise ShuttingDown()
        key = (namespace, name)
        owner = self.replicas.owner(key)
        if owner is None:
            await self.writer.write(namespace, name, update)
            return
        queue = self._queues.setdefault(owner, {})
        queue[key] = queued(queue.get(key, []), update)
        self._wake.set()

    @property
    def queued(self) -> int:
        """TrainJobs with an update waiting to be given to their owner, or being given."""
        return sum(len(queue) for queue in self._queues.values()) + self._giving

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="forwarder")

    async def stop(self) -> None:
        """Take no new update; give what is queued one last time, write the rest here."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._flushing is not None:
            # What is being given is not dropped with the loop: it ends, taken or kept.
            await self._flushing
        await self._flush()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.interval)
            self._wake.clear()
            self._flushing = asyncio.ensure_future(self._flush())
            await asyncio.shield(self._flushing)
            self._flushing = None

    async def _flush(self) -> None:
        queues, self._queues = self._queues, {}
        # Counted from the moment they leave the queues: the gives start a loop turn later.
        giving = sum(len(queue) for queue in queues.values())
        self._giving += giving
        try:
            await asyncio.gather(*(self._give(peer, queue) for peer, queue in queues.items()))
        finally:
            self._giving -= giving

    async def _give(self, peer: Peer, queue: dict[Key, list[EncodedStatus]]) -> None:
        updates = [(key, update) for key, held in queue.items() for update in held]
        taken = await self.replicas.give(peer, updates, GIVE_SECONDS)
        kept = [(key, update) for key, update in updates if key not in taken]
        if kept:
            log.warning(
                "updates kept: their owner did not take them",
                extra={"replica": peer.url, "trainjobs": len(queue) - len(taken)},
            )
            selfmetrics.PEER_UPDATES.labels("kept").inc(len(kept))
            for key, update in kept:
                self.writer.submit(key, update)
