"""The coalescing writer's decisions, as pure functions and plain data (no I/O, no clock).

A TrainJob has at most one pending update: the newest by ``ordering_time`` (ties go to
the later arrival). An update never overwrites a newer status already stored. Dirty
TrainJobs are served in the order they became dirty, each no sooner than its own
``ready_at`` (minimum interval between writes, or a retry delay).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from typing import Any

from .validation import EncodedStatus

Key = tuple[str, str]


class UpdateClass(IntEnum):
    """What an update is served as over the API budget, in the order classes are served
    (``priority.py`` says which is which); ``label`` names it in metrics."""

    FINAL = 0
    PROGRESS = 1
    ROUTINE = 2

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass
class Pending:
    """The update waiting to be written for one TrainJob."""

    update: EncodedStatus
    accepted_at: float  # monotonic time the post carrying ``update`` was accepted
    attempts: int = 0  # failed writes of this update so far
    update_class: UpdateClass = UpdateClass.ROUTINE  # what it is served as over budget


def ordering_time(last_updated: datetime, seen: datetime) -> datetime:
    """What a status is ordered by: its ``lastUpdatedTime``, but never later than when
    this server first saw it (received the post, or saw the stored status).

    A stamp from a clock that runs ahead then orders as if stamped on arrival, so it
    cannot make every later post look older than itself until the clock catches up; a
    stamp in the past (a post delayed or retried) keeps its place. Only the order uses
    this time: the status is written and echoed with the client's ``lastUpdatedTime``.
    """
    return min(last_updated, seen)


def update_time(update: EncodedStatus) -> datetime:
    """``ordering_time`` of an update, first seen when its post was received."""
    return ordering_time(update.last_updated_time, update.received)


def supersedes(incoming: EncodedStatus, held: EncodedStatus) -> bool:
    """Whether ``incoming`` (arriving now) replaces ``held``: not older than it."""
    return update_time(incoming) >= update_time(held)


def stored_time(obj: dict[str, Any] | None) -> datetime | None:
    """The ``lastUpdatedTime`` of a stored TrainJob's trainerStatus, if it has one."""
    status = ((obj or {}).get("status") or {}).get("trainerStatus") or {}
    text = status.get("lastUpdatedTime")
    if not isinstance(text, str):
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def is_stale(update: EncodedStatus, stored_order: datetime | None) -> bool:
    """Whether writing ``update`` would move the stored status back in time; the stored
    status orders by ``stored_order`` (None: it has no time, anything may replace it)."""
    return stored_order is not None and update_time(update) < stored_order


class FirstSeen:
    """When this server first saw each TrainJob's stored ``lastUpdatedTime``, for
    ``ordering_time``. Kept only for a stamp that lay ahead of the time it was seen (for
    any other, the stamp is its ordering time): one entry per TrainJob a fast clock
    stamped, until its status changes or it is forgotten."""

    def __init__(self) -> None:
        self._ahead: dict[Key, tuple[datetime, datetime]] = {}

    def __len__(self) -> int:
        return len(self._ahead)

    def saw(self, key: Key, stored: dict[str, Any] | None, at: datetime) -> None:
        """``stored`` (a state of TrainJob ``key``) was seen, or received, at ``at``."""
        stamp = stored_time(stored)
        held = self._ahead.get(key)
        if stamp is not None and held is not None and held[0] == stamp:
            if at < held[1]:
                self._ahead[key] = (stamp, at)
        elif stamp is not None and stamp > at:
            self._ahead[key] = (stamp, at)
        else:
            self._ahead.pop(key, None)

    def order(self, key: Key, stored: dict[str, Any] | None, now: datetime) -> datetime | None:
        """What ``stored`` orders by; seen first ``now`` if it was not seen before."""
        stamp = stored_time(stored)
        if stamp is None:
            return None
        held = self._ahead.get(key)
        if held is not None and held[0] == stamp:
            return ordering_time(stamp, held[1])
        if stamp > now:
            self._ahead[key] = (stamp, now)
            return now
        if held is not None:
            del self._ahead[key]
        return stamp

    def forget(self, key: Key) -> None:
        self._ahead.pop(key, None)


def newer_object(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """The later of two states of one object, by resourceVersion (etcd revisions grow)."""
    if a is None or b is None:
        return a or b
    rv_a = str((a.get("metadata") or {}).get("resourceVersion", ""))
    rv_b = str((b.get("metadata") or {}).get("resourceVersion", ""))
    if rv_a.isdigit() and rv_b.isdigit():
        return a if int(rv_a) >= int(rv_b) else b
    return b


def writes_in_flight(burst: int) -> int:
    """How many writes the writer keeps in flight at most, for an API budget of ``burst``.

    A budget of Q writes/s is only spent if Q x (one write's latency) writes can be in
    flight; the burst (2 x Q as docs/scaling.md advises) stands in for it: 16 at
    Kubeflow Trainer's 5 QPS / burst 10, up to 64 (the API client's pool holds 100 connections, and
    the watches and lookups need some)."""
    return max(16, min(64, burst))


def retry_delay(attempts: int, retry_after: float | None, rand: float) -> float:
    """Seconds before retrying a failed write: at least Retry-After, else capped exponential
    backoff (0.5 s doubling to 30 s) with equal jitter."""
    ceiling = min(30.0, 0.5 * 2.0 ** max(0, attempts - 1))
    jittered = ceiling / 2 + rand * ceiling / 2
    return max(jittered, min(retry_after or 0.0, 300.0))
