"""The writer's order over budget, as pure decisions on a fake clock: final updates first,
then progress, then the rest, oldest first within each, none starved; and the budget
advice's model."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from prometheus_client import REGISTRY

from trainjob_status_server.status.advice import (
    Demand,
    DemandMeter,
    advised_qps,
    over_budget,
)
from trainjob_status_server.status.coalescing import Key, UpdateClass
from trainjob_status_server.status.priority import (
    PrioritySchedule,
    classify,
    fair_round,
    is_final,
    terminal_states,
    turned_terminal,
)
from trainjob_status_server.status.validation import EncodedStatus, parse_trainer_status

NOW = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.UTC)
FINAL, PROGRESS, ROUTINE = UpdateClass.FINAL, UpdateClass.PROGRESS, UpdateClass.ROUTINE


def stamp(seconds: float) -> str:
    return (NOW + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def encoded(trainer_status: dict[str, Any]) -> EncodedStatus:
    """``trainer_status`` as the endpoint hands it to the writer."""
    parsed = parse_trainer_status({"trainerStatus": trainer_status}, trainjob="tj", received=NOW)
    assert parsed is not None
    return parsed.encoded(NOW)


def stored(progress: int | None = None, written: float | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if written is not None:
        trainer: dict[str, Any] = {"lastUpdatedTime": stamp(written)}
        if progress is not None:
            trainer["progressPercentage"] = progress
        status["trainerStatus"] = trainer
    return {"metadata": {"name": "tj", "resourceVersion": "7"}, "status": status}


# -- classes ----------------------------------------------------------------------------


def test_progress_travels_as_a_field_of_the_encoded_update_however_it_was_parsed() -> None:
    plain = encoded({"progressPercentage": 100, "lastUpdatedTime": stamp(-1)})
    assert json.loads(plain.json)["progressPercentage"] == 100
    assert plain.progress == 100
    assert is_final(plain)
    # A body the plain path leaves to the checked one (a quote in a metric's value), its
    # keys in another order.
    checked = encoded(
        {
            "lastUpdatedTime": stamp(-1),
            "metrics": [{"name": "note", "value": 'say "hi"'}],
            "progressPercentage": 7,
        }
    )
    assert checked.progress == 7
    assert not is_final(checked)
    assert encoded({"estimatedRemainingSeconds": 3}).progress is None
    assert encoded({"progressPercentage": 0}).progress == 0


def test_an_update_reaching_100_is_final_once() -> None:
    done = encoded({"progressPercentage": 100, "metrics": [{"name": "loss", "value": "0.091"}]})
    assert classify(done, stored(99, written=-10)) is FINAL
    assert classify(done, None) is FINAL
    # Already at 100: a later metrics-only tick is no longer the final word.
    assert classify(done, stored(100, written=-10)) is ROUTINE


def view(*conditions: tuple[str, str]) -> dict[str, Any]:
    """A cached TrainJob view's conditions: (type, status) pairs (kube/views.py)."""
    return {"metadata": {"name": "tj"}, "status": {"conditions": conditions}}


def test_the_first_update_after_a_terminal_condition_is_final() -> None:
    tick = encoded({"progressPercentage": 40})
    running = view(("Created", "True"))
    for kind in ("Complete", "Failed", "Suspended"):
        turned = view(("Created", "True"), (kind, "True"))
        assert terminal_states(turned) == {kind}
        assert turned_terminal(running, turned)
        assert turned_terminal(None, turned)
        assert not turned_terminal(turned, turned)  # another change of a finished job
        assert not turned_terminal(view((kind, "False")), view((kind, "False")))
        assert classify(tick, stored(40, written=-10), after_terminal=True) is FINAL
    # Resumed (Suspended False), then Complete: a new terminal state.
    assert turned_terminal(view(("Suspended", "True")), view(("Complete", "True")))
    assert not turned_terminal(view(("Complete", "True")), view(("Created", "True")))
    assert terminal_states(None) == frozenset()
    assert classify(tick, stored(40, written=-10)) is ROUTINE


def test_progress_changed_since_the_stored_status_or_not() -> None:
    assert classify(encoded({"progressPercentage": 41}), stored(40, written=-1)) is PROGRESS
    assert classify(encoded({"progressPercentage": 40}), stored(40, written=-1)) is ROUTINE
    # The first progress a TrainJob ever reports is a change.
    assert classify(encoded({"progressPercentage": 1}), stored()) is PROGRESS
    assert classify(encoded({"estimatedRemainingSeconds": 9}), stored()) is ROUTINE


# -- the schedule, on a fake clock ------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def key(name: str) -> Key:
    return ("ns", name)


def drain(schedule: PrioritySchedule, now: float, overdue_after: float) -> list[str]:
    served = []
    while (chosen := schedule.pop_ready(now, overdue_after)) is not None:
        served.append(chosen[1])
    return served


def test_final_then_progress_then_routine_oldest_first_within_each() -> None:
    clock = Clock()
    schedule = PrioritySchedule()
    for name, update_class in (
        ("r1", ROUTINE),
        ("p1", PROGRESS),
        ("f1", FINAL),
        ("r2", ROUTINE),
        ("p2", PROGRESS),
        ("f2", FINAL),
    ):
        schedule.push(key(name), clock.now, update_class, clock.now)
        clock.now += 1.0
    assert schedule.counts() == {FINAL: 2, PROGRESS: 2, ROUTINE: 2}
    assert drain(schedule, clock.now, overdue_after=100.0) == ["f1", "f2", "p1", "p2", "r1", "r2"]
    assert schedule.counts() == {FINAL: 0, PROGRESS: 0, ROUTINE: 0}
    assert schedule.next_time() is None


def test_a_final_update_waiting_its_interval_is_served_when_ready() -> None:
    schedule = PrioritySchedule()
    schedule.push(key("r"), 0.0, ROUTINE, 0.0)
    schedule.push(key("f"), 1.0, FINAL, 0.5)  # written 0.0: its min interval runs to 1.0
    assert schedule.next_time() == 0.0
    assert schedule.pop_ready(0.5, 100.0) == key("r")
    assert schedule.next_time() == 1.0
    assert schedule.pop_ready(0.9, 100.0) is None
    assert schedule.pop_ready(1.0, 100.0) == key("f")


def test_promotion_moves_a_dirty_trainjob_up_and_never_down() -> None:
    schedule = PrioritySchedule()
    schedule.push(key("a"), 0.0, ROUTINE, 0.0)
    schedule.push(key("b"), 0.0, ROUTINE, 1.0)
    schedule.promote(key("b"), FINAL)  # turned Complete while dirty
    schedule.promote(key("a"), PROGRESS)
    schedule.promote(key("a"), ROUTINE)  # no demotion
    assert schedule.counts() == {FINAL: 1, PROGRESS: 1, ROUTINE: 0}
    schedule.pop_ready(2.0, 100.0)  # released to their queues, b served
    schedule.push(key("b"), 2.0, ROUTINE, 2.0)
    schedule.promote(key("b"), PROGRESS)  # promoted while ready: moves queue too
    assert drain(schedule, 2.0, 100.0) == ["a", "b"]


def test_a_discarded_key_is_not_served_and_a_pushed_key_keeps_its_place() -> None:
    schedule = PrioritySchedule()
    schedule.push(key("a"), 0.0, PROGRESS, 0.0)
    schedule.push(key("b"), 0.0, PROGRESS, 1.0)
    schedule.push(key("a"), 0.0, FINAL, 5.0)  # already dirty: no change
    schedule.discard(key("a"))
    schedule.discard(key("zz"))
    assert key("a") not in schedule
    assert key("b") in schedule
    assert len(schedule) == 1
    assert drain(schedule, 2.0, 100.0) == ["b"]


def test_no_trainjob_waits_more_than_two_fair_rounds() -> None:
    """Over budget with progress updates always arriving, a routine TrainJob is still
    written within two rounds, and final updates still go first."""
    clock = Clock()
    qps = 5.0
    schedule = PrioritySchedule()
    dirty_since: dict[Key, float] = {}
    waits: dict[UpdateClass, list[float]] = {update_class: [] for update_class in UpdateClass}
    klass_of: dict[Key, UpdateClass] = {}
    busy = [key(f"p{i}") for i in range(80)]  # their progress changes every post
    quiet = [key(f"r{i}") for i in range(20)]  # metrics ticks only

    def dirty(k: Key, update_class: UpdateClass) -> None:
        if k not in schedule:
            dirty_since[k] = clock.now
            klass_of[k] = update_class
            schedule.push(k, clock.now, update_class, clock.now)

    step = 1.0 / qps
    finals_at = {30.0 + 7 * i: key(f"done{i}") for i in range(10)}
    for tick in range(int(200 / step)):
        clock.now = tick * step
        for k in busy:
            dirty(k, PROGRESS)
        for k in quiet:
            dirty(k, ROUTINE)
        for at, k in finals_at.items():
            if at <= clock.now and k not in dirty_since:
                dirty(k, FINAL)
        round_now = fair_round(len(schedule), qps)
        chosen = schedule.pop_ready(clock.now, round_now)
        assert chosen is not None
        waits[klass_of[chosen]].append(clock.now - dirty_since[chosen])
    fair = fair_round(len(busy) + len(quiet), qps)  # 20 s
    assert fair == 20.0
    assert max(waits[FINAL]) <= step  # served at the next token
    assert len(waits[FINAL]) == len(finals_at)
    assert max(waits[ROUTINE]) <= 2 * fair
    assert max(waits[PROGRESS]) <= 2 * fair
    # Every routine TrainJob was written, more than once.
    assert len(waits[ROUTINE]) >= 2 * len(quiet)


def test_namespaces_take_turns_so_a_crowded_one_delays_another_by_one_write() -> None:
    schedule = PrioritySchedule()
    for i in range(100):
        schedule.push(("crowded", f"tj{i:03d}"), 0.0, PROGRESS, float(i))
    schedule.push(("alone", "tj"), 0.0, ROUTINE, 200.0)  # dirty last, and routine
    served = []
    while (chosen := schedule.pop_ready(300.0, overdue_after=1000.0)) is not None:
        served.append(chosen)
    assert served[:3] == [("crowded", "tj000"), ("alone", "tj"), ("crowded", "tj001")]
    assert served[3:] == [("crowded", f"tj{i:03d}") for i in range(2, 100)]


def test_final_updates_go_first_their_namespaces_in_turn() -> None:
    schedule = PrioritySchedule()
    for i in range(3):
        schedule.push(("a", f"f{i}"), 0.0, FINAL, float(i))
    schedule.push(("b", "f"), 0.0, FINAL, 10.0)
    schedule.push(("b", "p"), 0.0, PROGRESS, 0.0)
    served = []
    while (chosen := schedule.pop_ready(20.0, overdue_after=1000.0)) is not None:
        served.append(chosen)
    assert served == [("a", "f0"), ("b", "f"), ("a", "f1"), ("a", "f2"), ("b", "p")]


def test_fair_round() -> None:
    assert fair_round(1000, 5.0) == 200.0
    assert fair_round(0, 5.0) == 0.0
    assert fair_round(3, 0.0) == float("inf")


def test_the_new_metrics_exist_for_every_class_from_the_start() -> None:
    for update_class in ("final", "progress", "routine"):
        labels = {"class": update_class}
        assert REGISTRY.get_sample_value("trainjob_status_pending_writes_by_class", labels) == 0
        assert (
            REGISTRY.get_sample_value(
                "trainjob_status_write_freshness_by_class_seconds_count", labels
            )
            is not None
        )


# -- budget advice ----------------------------------------------------------------------


def test_demand_counts_one_write_per_min_interval_per_trainjob() -> None:
    clock = Clock()
    meter = DemandMeter(min_interval=1.0, window=60.0)
    assert not meter.due(clock.now)
    for second in range(60):
        clock.now = float(second)
        for i in range(100):
            if second % 5 == 0:
                meter.saw(key(f"t{i}"), clock.now)  # every 5 s, as the SDK posts
        for _ in range(50):
            meter.saw(key("chatty"), clock.now)  # 50 posts a second: one write a second
    assert not meter.due(59.0)
    assert meter.due(60.0)
    demand = meter.close(60.0)
    assert demand == Demand(trainjobs=101, writes_per_second=(100 * 12 + 60) / 60)
    assert over_budget(demand, 5.0)
    assert not over_budget(demand, 25.0)
    # The next window starts empty.
    assert meter.close(120.0) == Demand(0, 0.0)


def test_advised_qps_follows_the_scaling_model() -> None:
    # 1,000 TrainJobs posting every 5 s: 200 writes/s of demand.
    demand = Demand(trainjobs=1000, writes_per_second=200.0)
    # A 60 s target: a round of 1,000 / Q = 60 s.
    assert advised_qps(demand, 60.0, 1.0) == 17
    assert advised_qps(demand, 200.0, 1.0) == 5
    # A target under the post interval needs every update written: the demand.
    assert advised_qps(demand, 2.0, 1.0) == 200
    # No budget beats the min interval: a target below it gets the demand too.
    assert advised_qps(demand, 0.5, 1.0) == 200
    assert advised_qps(Demand(0, 0.0), 10.0, 1.0) == 1
