"""Who gets a connection slot: the caps in all and per source address, the idle
connection closed to make room, and the refusal log that does not flood."""

from __future__ import annotations

import logging

import pytest

from trainjob_status_server.http.slots import PER_ADDRESS, TOTAL, RefusalLog, Slots


class Connection:
    def __init__(self, idle: bool = False) -> None:
        self.idle = idle
        self.evicted = False

    def evict(self) -> None:
        self.evicted = True


class Recorded:
    def __init__(self) -> None:
        self.refused: list[tuple[str, str]] = []
        self.evicted = 0

    def slots(self, total: int, per_address: int) -> Slots:
        return Slots(
            total,
            per_address,
            refused=lambda reason, address: self.refused.append((reason, address)),
            evicted=self.count_eviction,
        )

    def count_eviction(self) -> None:
        self.evicted += 1


def test_one_address_is_capped_and_others_still_get_slots() -> None:
    seen = Recorded()
    slots = seen.slots(4, 2)
    assert slots.admit(Connection(), "10.0.0.1") is None
    assert slots.admit(Connection(), "10.0.0.1") is None
    assert slots.admit(Connection(), "10.0.0.1") == PER_ADDRESS
    assert slots.admit(Connection(), "10.0.0.2") is None
    assert (len(slots), slots.count("10.0.0.1"), slots.count("10.0.0.2")) == (3, 2, 1)
    assert seen.refused == [(PER_ADDRESS, "10.0.0.1")]


def test_the_total_is_capped_once_nothing_is_idle() -> None:
    seen = Recorded()
    slots = seen.slots(2, 2)
    busy = [Connection(), Connection()]
    assert [slots.admit(c, f"10.0.0.{i}") for i, c in enumerate(busy)] == [None, None]
    assert slots.admit(Connection(), "10.0.0.9") == TOTAL
    assert seen.refused == [(TOTAL, "10.0.0.9")]
    assert not any(c.evicted for c in busy)


def test_the_oldest_idle_connection_makes_room() -> None:
    seen = Recorded()
    slots = seen.slots(3, 3)
    busy, old_idle, new_idle = Connection(), Connection(idle=True), Connection(idle=True)
    for connection in (busy, old_idle, new_idle):
        assert slots.admit(connection, "10.0.0.1") is None
    newcomer = Connection()
    assert slots.admit(newcomer, "10.0.0.2") is None
    assert (busy.evicted, old_idle.evicted, new_idle.evicted) == (False, True, False)
    assert (len(slots), slots.count("10.0.0.1"), seen.evicted, seen.refused) == (3, 2, 1, [])
    # Its slot was freed when it was chosen: its own close later changes nothing.
    slots.release(old_idle)
    assert len(slots) == 3


def test_an_address_at_its_cap_makes_room_from_its_own_idle_connections_only() -> None:
    seen = Recorded()
    slots = seen.slots(10, 2)
    others_idle = Connection(idle=True)
    assert slots.admit(others_idle, "10.0.0.2") is None
    mine = [Connection(), Connection()]
    for connection in mine:
        assert slots.admit(connection, "10.0.0.1") is None
    assert slots.admit(Connection(), "10.0.0.1") == PER_ADDRESS
    assert not others_idle.evicted
    mine[0].idle = True
    assert slots.admit(Connection(), "10.0.0.1") is None
    assert mine[0].evicted
    assert slots.count("10.0.0.1") == 2


def test_release_frees_the_slot_and_the_address() -> None:
    slots = Slots(1, 1)
    first = Connection()
    assert slots.admit(first, "10.0.0.1") is None
    slots.release(first)
    slots.release(first)
    assert (len(slots), slots.count("10.0.0.1")) == (0, 0)
    assert slots.admit(Connection(), "10.0.0.1") is None


def test_refusals_are_logged_at_once_then_summarised_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="trainjob_status_server.http.slots")
    now = [100.0]
    note = RefusalLog("serving", interval=10.0, clock=lambda: now[0])
    note(PER_ADDRESS, "10.0.0.1")
    for _ in range(500):
        now[0] += 0.01
        note(PER_ADDRESS, "10.0.0.1")
    note(TOTAL, "10.0.0.2")
    now[0] = 110.5
    note(TOTAL, "10.0.0.3")
    lines = [
        (r.getMessage(), r.__dict__["refused"], r.__dict__["last_address"]) for r in caplog.records
    ]
    assert lines == [
        ("connections refused", {PER_ADDRESS: 1}, "10.0.0.1"),
        ("connections refused", {PER_ADDRESS: 500, TOTAL: 2}, "10.0.0.3"),
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records)
