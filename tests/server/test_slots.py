"""Who gets a connection slot: the caps in all and per source address, the connection
that does not move closed to make room (of the address holding the most: idle, then
stalled, then slow, then fresh), and the refusal log that does not flood."""

from __future__ import annotations

import logging

import pytest

from trainjob_status_server.http.slots import (
    FRESH_EVICTED,
    IDLE_EVICTED,
    PER_ADDRESS,
    SLOW_EVICTED,
    STALLED_EVICTED,
    TOTAL,
    RefusalLog,
    Slots,
)


class Connection:
    def __init__(
        self,
        idle: bool = False,
        stalled_since: float | None = None,
        waiting_since: float | None = None,
    ) -> None:
        self.idle = idle
        self.stalled_since = stalled_since
        self.waiting_since = waiting_since
        self.evicted = False

    def evict(self) -> None:
        self.evicted = True


class Recorded:
    def __init__(self) -> None:
        self.refused: list[tuple[str, str]] = []
        self.evicted: list[str] = []

    def slots(self, total: int, per_address: int, now: float = 100.0) -> Slots:
        return Slots(
            total,
            per_address,
            refused=lambda reason, address: self.refused.append((reason, address)),
            evicted=self.evicted.append,
            clock=lambda: now,
        )


def admitted(
    slots: Slots,
    address: str,
    *,
    idle: bool = False,
    fresh: bool = False,
    stalled_since: float | None = None,
    waiting_since: float | None = None,
) -> Connection:
    """A connection holding a slot: fresh (no first request's headers yet), idle between
    requests, busy (a request in progress), stalled (its answer unread since then) or
    awaiting its body since then."""
    connection = Connection(idle=idle, stalled_since=stalled_since, waiting_since=waiting_since)
    assert slots.admit(connection, address) is None
    if not fresh:
        slots.started(connection)
    return connection


def test_one_address_is_capped_and_others_still_get_slots() -> None:
    seen = Recorded()
    slots = seen.slots(4, 2)
    admitted(slots, "10.0.0.1")
    admitted(slots, "10.0.0.1")
    assert slots.admit(Connection(), "10.0.0.1") == PER_ADDRESS
    admitted(slots, "10.0.0.2")
    assert (len(slots), slots.count("10.0.0.1"), slots.count("10.0.0.2")) == (3, 2, 1)
    assert seen.refused == [(PER_ADDRESS, "10.0.0.1")]


def test_the_total_is_capped_once_nothing_is_idle() -> None:
    seen = Recorded()
    slots = seen.slots(2, 2)
    busy = [admitted(slots, f"10.0.0.{i}") for i in range(2)]
    assert slots.admit(Connection(), "10.0.0.9") == TOTAL
    assert seen.refused == [(TOTAL, "10.0.0.9")]
    assert not any(c.evicted for c in busy)


def test_the_oldest_idle_connection_makes_room() -> None:
    seen = Recorded()
    slots = seen.slots(3, 3)
    busy = admitted(slots, "10.0.0.1")
    old_idle = admitted(slots, "10.0.0.1", idle=True)
    new_idle = admitted(slots, "10.0.0.1", idle=True)
    assert slots.admit(Connection(), "10.0.0.2") is None
    assert (busy.evicted, old_idle.evicted, new_idle.evicted) == (False, True, False)
    assert (len(slots), slots.count("10.0.0.1"), seen.refused) == (3, 2, [])
    assert seen.evicted == [IDLE_EVICTED]
    # Its slot was freed when it was chosen: its own close later changes nothing.
    slots.release(old_idle)
    assert len(slots) == 3


def test_an_address_at_its_cap_makes_room_from_its_own_idle_connections_only() -> None:
    seen = Recorded()
    slots = seen.slots(10, 2)
    others_idle = admitted(slots, "10.0.0.2", idle=True)
    mine = [admitted(slots, "10.0.0.1"), admitted(slots, "10.0.0.1")]
    assert slots.admit(Connection(), "10.0.0.1") == PER_ADDRESS
    assert not others_idle.evicted
    mine[0].idle = True
    assert slots.admit(Connection(), "10.0.0.1") is None
    assert mine[0].evicted
    assert slots.count("10.0.0.1") == 2


def test_release_frees_the_slot_and_the_address() -> None:
    slots = Slots(1, 1)
    first = admitted(slots, "10.0.0.1", fresh=True)
    assert slots.fresh("10.0.0.1") == 1
    slots.release(first)
    slots.release(first)
    slots.started(first)  # a late word about a connection already gone changes nothing
    assert (len(slots), slots.count("10.0.0.1"), slots.fresh("10.0.0.1")) == (0, 0, 0)
    assert slots.admit(Connection(), "10.0.0.1") is None


def test_of_an_address_idle_then_stalled_then_slow_then_fresh_makes_room() -> None:
    seen = Recorded()
    slots = seen.slots(5, 5, now=100.0)
    fresh = admitted(slots, "10.0.0.1", fresh=True)
    slow = admitted(slots, "10.0.0.1", waiting_since=90.0)
    moving = admitted(slots, "10.0.0.1", waiting_since=99.5)  # under SLOW_BODY
    stalled = admitted(slots, "10.0.0.1", stalled_since=95.0)
    idle = admitted(slots, "10.0.0.1", idle=True)
    order = []
    for i in range(4):
        assert slots.admit(Connection(), f"10.0.1.{i}") is None
        order.append(next(c for c in (fresh, slow, stalled, idle) if c.evicted and c not in order))
    assert order == [idle, stalled, slow, fresh]
    assert seen.evicted == [IDLE_EVICTED, STALLED_EVICTED, SLOW_EVICTED, FRESH_EVICTED]
    assert not moving.evicted
    # Only a connection that moves is left there, and newcomers of one each.
    assert slots.admit(Connection(), "10.0.2.1") == TOTAL


def test_the_address_holding_the_most_slots_loses_one_first() -> None:
    seen = Recorded()
    slots = seen.slots(7, 7)
    crowd = [admitted(slots, "10.0.0.9", idle=True) for _ in range(3)]
    # Older than the crowd's, fresh, but its address holds fewer.
    early = admitted(slots, "10.0.0.1", fresh=True)
    pair = [admitted(slots, "10.0.0.2", fresh=True) for _ in range(2)]
    busy = admitted(slots, "10.0.0.3")
    order = []
    for i in range(3):
        assert slots.admit(Connection(), f"10.0.1.{i}") is None
        order.append(next(c for c in [*crowd, early, *pair] if c.evicted and c not in order))
    # 3 against 2: the crowd's oldest; 2 against 2: idle goes before fresh, the crowd's
    # again; then the pair's, which holds the most.
    assert order == [crowd[0], crowd[1], pair[0]]
    assert seen.evicted == [IDLE_EVICTED, IDLE_EVICTED, FRESH_EVICTED]
    # One each now: no address holds more than a newcomer's would, so none loses one.
    assert slots.admit(Connection(), "10.0.1.9") == TOTAL
    assert not any(c.evicted for c in (crowd[2], early, pair[1], busy))


def test_a_crowd_reconnecting_closes_neither_its_own_nor_a_newcomer_in_its_handshake() -> None:
    """Addresses holding four idle connections each, every one reopened the moment it
    is closed: a newcomer from another address (fresh, one slot) takes an idle one's
    slot, and the member closed for it cannot take one back from its peers, nor the
    newcomer's."""
    seen = Recorded()
    slots = seen.slots(8, 4)
    crowd = [admitted(slots, f"10.0.0.{a}", idle=True) for a in (1, 2) for _ in range(4)]
    newcomer = Connection()
    assert slots.admit(newcomer, "10.0.9.9") is None
    assert sum(c.evicted for c in crowd) == 1
    closed_from = "10.0.0.1" if crowd[0].evicted else "10.0.0.2"
    for _ in range(20):
        assert slots.admit(Connection(), closed_from) == TOTAL
    assert not newcomer.evicted
    assert sum(c.evicted for c in crowd) == 1


def test_a_connection_whose_request_started_is_no_longer_fresh() -> None:
    seen = Recorded()
    slots = seen.slots(2, 2)
    first = admitted(slots, "10.0.0.1", fresh=True)
    second = admitted(slots, "10.0.0.1", fresh=True)
    slots.started(first)
    assert slots.fresh("10.0.0.1") == 1
    assert slots.admit(Connection(), "10.0.0.2") is None
    assert (first.evicted, second.evicted) == (False, True)


def test_an_address_at_its_cap_loses_its_own_oldest_fresh_connection() -> None:
    seen = Recorded()
    slots = seen.slots(10, 2)
    other = admitted(slots, "10.0.0.2", fresh=True)
    mine = [admitted(slots, "10.0.0.1", fresh=True) for _ in range(2)]
    again = Connection()
    assert slots.admit(again, "10.0.0.1") is None
    assert (other.evicted, mine[0].evicted, mine[1].evicted) == (False, True, False)
    assert (slots.count("10.0.0.1"), slots.fresh("10.0.0.1"), seen.refused) == (2, 2, [])


def test_of_the_address_holding_the_most_the_longest_stalled_makes_room() -> None:
    seen = Recorded()
    slots = seen.slots(3, 3)
    elsewhere = admitted(slots, "10.0.0.3", stalled_since=5.0)
    later = admitted(slots, "10.0.0.1", stalled_since=20.0)
    longest = admitted(slots, "10.0.0.1", stalled_since=10.0)
    # 10.0.0.1 holds the most: its longest stalled, not the longest of all (10.0.0.3's).
    assert slots.admit(Connection(), "10.0.0.4") is None
    assert (elsewhere.evicted, later.evicted, longest.evicted) == (False, False, True)
    assert seen.evicted == [STALLED_EVICTED]


def test_an_idle_connection_makes_room_before_a_stalled_one() -> None:
    seen = Recorded()
    slots = seen.slots(2, 2)
    stalled = admitted(slots, "10.0.0.1", stalled_since=1.0)
    idle = admitted(slots, "10.0.0.1", idle=True)
    assert slots.admit(Connection(), "10.0.0.2") is None
    assert (stalled.evicted, idle.evicted) == (False, True)


def test_an_address_at_its_cap_makes_room_from_its_own_stalled_connections_only() -> None:
    seen = Recorded()
    slots = seen.slots(4, 1)
    other = admitted(slots, "10.0.0.2", stalled_since=1.0)
    own = admitted(slots, "10.0.0.1", stalled_since=5.0)
    assert slots.admit(Connection(), "10.0.0.1") is None
    assert (other.evicted, own.evicted) == (False, True)


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


def test_room_for_says_what_admit_would_do_and_closes_nothing() -> None:
    seen = Recorded()
    slots = seen.slots(3, 3)
    busy = admitted(slots, "10.0.0.1")
    idle = admitted(slots, "10.0.0.1", idle=True)
    other = admitted(slots, "10.0.0.2")
    # Full; an address holding two more than a newcomer's has an idle connection.
    assert slots.room_for("10.0.0.9")
    # 10.0.0.2 holds one: 10.0.0.1 holds only one more, so no room for it.
    assert not slots.room_for("10.0.0.2")
    assert (seen.evicted, busy.evicted, idle.evicted, other.evicted) == ([], False, False, False)
    idle.idle = False
    # Nothing may go now: no room for anyone, as admit finds.
    assert not slots.room_for("10.0.0.9")
    assert slots.admit(Connection(), "10.0.0.9") == TOTAL
    idle.idle = True
    assert slots.admit(Connection(), "10.0.0.9") is None
    assert (seen.evicted, idle.evicted) == ([IDLE_EVICTED], True)
