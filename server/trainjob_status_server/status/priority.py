"""Which dirty TrainJob the coalescing writer writes next when the API budget cannot
write them all at once (pure: no I/O, no clock; times are passed in).

Three classes, served in this order, oldest first within each (by when the TrainJob
became dirty):

- ``final``: an update that reaches ``progressPercentage: 100``, or the first update
  after the TrainJob turned Complete, Failed or Suspended: what ``kubectl get``, the SDK's
  ``wait_for_job_status`` and anything reading a finished job's metrics wait for;
- ``progress``: an update whose ``progressPercentage`` differs from the stored one;
- ``routine``: the rest (metrics ticks, ETA).

A share per tenant: namespaces take turns. Final updates go first, one namespace's at a
time in turn; then the others, one namespace's at a time in turn, each namespace's own
most awaited first. So a namespace with a hundred dirty TrainJobs delays another's
single one by one write, not a hundred.

No starvation: a ``progress`` or ``routine`` TrainJob dirty for longer than the fair
round (every dirty TrainJob written once: ``fair_round``) is overdue, and goes before its
namespace's other non-final ones, oldest first. So, final updates aside (one per
TrainJob's life), a TrainJob waits at most about two rounds of its namespace's share.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .coalescing import Key, UpdateClass
from .validation import EncodedStatus

__all__ = [
    "PrioritySchedule",
    "UpdateClass",
    "classify",
    "fair_round",
    "is_final",
    "terminal_states",
    "turned_terminal",
]


# Condition types after which a TrainJob's next update is its final word (the
# controller's states; Created is not one of them).
TERMINAL_CONDITIONS = frozenset({"Complete", "Failed", "Suspended"})


def is_final(update: EncodedStatus) -> bool:
    """Whether ``update`` says the training is done (100%): never coalesced away."""
    return update.progress == 100


def stored_progress(obj: Mapping[str, Any] | None) -> int | None:
    """The ``progressPercentage`` of a stored TrainJob's trainerStatus."""
    status = ((obj or {}).get("status") or {}).get("trainerStatus") or {}
    value = status.get("progressPercentage")
    return value if isinstance(value, int) else None


def terminal_states(obj: Mapping[str, Any] | None) -> frozenset[str]:
    """The Complete, Failed and Suspended conditions that are True on ``obj``, a cached
    TrainJob view (conditions as (type, status) pairs, ``kube/views.py``)."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or ()
    return frozenset(
        kind for kind, status in conditions if kind in TERMINAL_CONDITIONS and status == "True"
    )


def turned_terminal(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """Whether the change from ``old`` to ``new`` made the TrainJob Complete, Failed or
    Suspended: the next update written for it is the first after that."""
    return bool(terminal_states(new) - terminal_states(old))


def classify(
    update: EncodedStatus, stored: Mapping[str, Any] | None, after_terminal: bool = False
) -> UpdateClass:
    """The class of writing ``update`` over ``stored`` (the TrainJob as last known);
    ``after_terminal``: nothing was written since the TrainJob turned terminal."""
    progress = update.progress
    before = stored_progress(stored)
    if after_terminal or (progress == 100 and before != 100):
        return UpdateClass.FINAL
    if progress != before:
        return UpdateClass.PROGRESS
    return UpdateClass.ROUTINE


def fair_round(dirty: int, qps: float) -> float:
    """Seconds to write each of ``dirty`` TrainJobs once at ``qps`` writes per second:
    the wait of the last one served oldest first (docs/scaling.md, "The model")."""
    return dirty / qps if qps > 0 else float("inf")


@dataclass
class _Entry:
    seq: int
    ready_at: float
    update_class: UpdateClass
    dirty_since: float
    ready: bool = False


@dataclass(order=True)
class _Slot:
    at: float  # ready_at while waiting, dirty_since once ready
    seq: int
    key: Key = field(compare=False)


def _queues() -> tuple[list[_Slot], ...]:
    return tuple([] for _ in UpdateClass)


class PrioritySchedule:
    """The dirty TrainJobs not in flight, each waiting until its ``ready_at`` (minimum
    interval or retry delay), then served namespace by namespace in turn: final updates
    first (their namespaces in turn), then the others (their namespaces in turn, each
    namespace's overdue one first, else its progress, else its routine one), oldest
    first. Heap entries are invalidated lazily: a key's live slot is the one whose
    ``seq`` its entry holds; a namespace leaves its turn once it has nothing ready."""

    def __init__(self) -> None:
        self._entries: dict[Key, _Entry] = {}
        self._waiting: list[_Slot] = []
        # Ready slots by namespace, one queue per class.
        self._ready: dict[str, tuple[list[_Slot], ...]] = {}
        # The namespaces in turn: those with a final update ready, and the others.
        self._turns: tuple[deque[str], deque[str]] = (deque(), deque())
        self._in_turn: tuple[set[str], set[str]] = (set(), set())
        self._counts = [0 for _ in UpdateClass]
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Key) -> bool:
        return key in self._entries

    def counts(self) -> dict[UpdateClass, int]:
        """Scheduled TrainJobs by class."""
        return {update_class: self._counts[update_class] for update_class in UpdateClass}

    def push(
        self, key: Key, ready_at: float, update_class: UpdateClass, dirty_since: float
    ) -> None:
        """Schedule ``key`` unless it is scheduled already: a newer update for a dirty
        TrainJob keeps its place (and its minimum interval or retry delay); ``promote``
        raises its class."""
        if key in self._entries:
            return
        entry = _Entry(next(self._seq), ready_at, update_class, dirty_since)
        self._entries[key] = entry
        self._counts[update_class] += 1
        heapq.heappush(self._waiting, _Slot(ready_at, entry.seq, key))

    def promote(self, key: Key, update_class: UpdateClass) -> None:
        """Serve ``key`` in ``update_class`` if that comes before its class (never demoted)."""
        entry = self._entries.get(key)
        if entry is None or update_class >= entry.update_class:
            return
        self._counts[entry.update_class] -= 1
        self._counts[update_class] += 1
        entry.update_class = update_class
        if entry.ready:
            entry.seq = next(self._seq)
            self._queue(key, entry)

    def discard(self, key: Key) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._counts[entry.update_class] -= 1

    def _live(self, slot: _Slot) -> _Entry | None:
        entry = self._entries.get(slot.key)
        return entry if entry is not None and entry.seq == slot.seq else None

    def _queue(self, key: Key, entry: _Entry) -> None:
        """``key`` is ready: into its namespace's queue of its class, and its namespace
        into its turn."""
        namespace = key[0]
        queues = self._ready.get(namespace)
        if queues is None:
            queues = self._ready[namespace] = _queues()
        heapq.heappush(queues[entry.update_class], _Slot(entry.dirty_since, entry.seq, key))
        turn = 0 if entry.update_class is UpdateClass.FINAL else 1
        if namespace not in self._in_turn[turn]:
            self._in_turn[turn].add(namespace)
            self._turns[turn].append(namespace)

    def _release(self, now: float) -> None:
        """Move the keys whose time has come to their namespace's queues."""
        waiting = self._waiting
        while waiting and waiting[0].at <= now:
            slot = heapq.heappop(waiting)
            entry = self._live(slot)
            if entry is not None:
                entry.ready = True
                self._queue(slot.key, entry)

    def _head(self, namespace: str, update_class: UpdateClass) -> _Slot | None:
        queues = self._ready.get(namespace)
        if queues is None:
            return None
        queue = queues[update_class]
        while queue and self._live(queue[0]) is None:
            heapq.heappop(queue)
        return queue[0] if queue else None

    def _choose(
        self, namespace: str, final: bool, now: float, overdue_after: float
    ) -> _Slot | None:
        """``namespace``'s next key: its oldest final one; or, for the others, the oldest
        if it is overdue, else its oldest progress one, else its oldest routine one."""
        if final:
            return self._head(namespace, UpdateClass.FINAL)
        heads = [
            head
            for head in (
                self._head(namespace, UpdateClass.PROGRESS),
                self._head(namespace, UpdateClass.ROUTINE),
            )
            if head is not None
        ]
        oldest = min(heads, default=None)
        if oldest is not None and now - oldest.at >= overdue_after:
            return oldest
        return heads[0] if heads else None

    def _next(self, final: bool, now: float, overdue_after: float) -> _Slot | None:
        """The next namespace in turn with something ready, its key; the namespace goes
        to the back of the turn."""
        turn, members = self._turns[0 if final else 1], self._in_turn[0 if final else 1]
        while turn:
            namespace = turn[0]
            chosen = self._choose(namespace, final, now, overdue_after)
            if chosen is None:
                turn.popleft()
                members.discard(namespace)
                self._forget(namespace)
                continue
            turn.rotate(-1)
            return chosen
        return None

    def _forget(self, namespace: str) -> None:
        """Drop ``namespace``'s queues once no turn holds it (they hold nothing live)."""
        if namespace not in self._in_turn[0] and namespace not in self._in_turn[1]:
            self._ready.pop(namespace, None)

    def pop_ready(self, now: float, overdue_after: float) -> Key | None:
        """The next key to write, removed from the schedule; None if none is ready.
        ``overdue_after``: seconds dirty after which a non-final key goes first."""
        self._release(now)
        chosen = self._next(True, now, overdue_after) or self._next(False, now, overdue_after)
        if chosen is None:
            return None
        entry = self._entries.pop(chosen.key)
        self._counts[entry.update_class] -= 1
        heapq.heappop(self._ready[chosen.key[0]][entry.update_class])
        return chosen.key

    def next_time(self) -> float | None:
        """When the earliest scheduled key is (or was) ready; None: nothing scheduled."""
        for namespace in list(self._ready):
            if any(self._head(namespace, update_class) is not None for update_class in UpdateClass):
                return float("-inf")
        while self._waiting and self._live(self._waiting[0]) is None:
            heapq.heappop(self._waiting)
        return self._waiting[0].at if self._waiting else None
