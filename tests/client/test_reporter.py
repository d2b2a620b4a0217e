"""StatusReporter against the local sink: what is sent, when, over which connection, and
that the caller's side never raises or waits."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from trainjob_status import StatusReporter

from .conftest import MakeReporter
from .sink import Reply, Sink

T0 = 1_796_000_000.0


class SteppingClock:
    """A wall clock the test moves by hand (Unix seconds)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_an_update_is_posted_with_token_json_and_the_time_it_was_reported(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    clock = SteppingClock()
    reporter = make_reporter(clock=clock)
    assert reporter.report(42, 600, {"loss": 0.25}, step=10, epoch=1.5)
    assert reporter.flush(5)
    (received,) = sink.requests
    assert received.path.endswith("/namespaces/team-a/trainjobs/job1/status")
    assert received.token == sink.token
    assert received.headers["content-type"] == "application/json"
    assert received.body == {
        "trainerStatus": {
            "progressPercentage": 42,
            "estimatedRemainingSeconds": 600,
            "metrics": [
                {"name": "step", "value": "10"},
                {"name": "epoch", "value": "1.5"},
                {"name": "loss", "value": "0.25"},
            ],
            "lastUpdatedTime": "2026-11-30T00:53:20.000000Z",
        }
    }


def test_lastupdatedtime_is_when_reported_not_when_sent(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    clock = SteppingClock()
    reporter = make_reporter(clock=clock, min_interval=0)
    with sink.stalled():
        reporter.report(1)
        assert sink.held.wait(5)
        clock.now = T0 + 10
        reporter.report(2)  # waits behind the stalled post
        clock.now = T0 + 500  # sent later than this
    assert reporter.flush(5)
    assert [r.status["lastUpdatedTime"] for r in sink.requests] == [
        "2026-11-30T00:53:20.000000Z",
        "2026-11-30T00:53:30.000000Z",
    ]


def test_the_newest_pending_update_goes_out_when_the_window_opens(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    reporter = make_reporter(min_interval=0.3)
    reporter.report(0)
    sink.wait_for(1)
    for progress in range(1, 51):
        assert reporter.report(progress)
    second = sink.wait_for(2)[1]  # no flush: the trailing edge sends it
    assert second.status["progressPercentage"] == 50
    assert reporter.flush(5)
    assert len(sink.requests) == 2


def test_at_most_one_request_per_interval(sink: Sink, make_reporter: MakeReporter) -> None:
    reporter = make_reporter(min_interval=0.1)
    start = time.monotonic()
    progress = 0
    while time.monotonic() - start < 0.5:
        reporter.report(progress % 100)
        progress += 1
        time.sleep(0.001)  # a training loop reporting far faster than the interval
    count = len(sink.requests)
    elapsed = time.monotonic() - start
    # Request starts are >= 0.1 s apart: never more than elapsed / 0.1 + 1 of them so far.
    assert 2 <= count <= elapsed / 0.1 + 1


def test_flush_sends_at_once_without_waiting_for_the_window(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    reporter = make_reporter(min_interval=3600)
    reporter.report(10)
    sink.wait_for(1)
    reporter.report(20)
    assert reporter.flush(5)
    assert [r.status["progressPercentage"] for r in sink.requests] == [10, 20]


def test_flush_with_nothing_reported_is_true(make_reporter: MakeReporter) -> None:
    assert make_reporter().flush(0)


def test_one_connection_is_kept_alive_across_posts(sink: Sink, make_reporter: MakeReporter) -> None:
    reporter = make_reporter(min_interval=0)
    for progress in (1, 2, 3):
        reporter.report(progress)
        assert reporter.flush(5)
    assert len({r.connection for r in sink.requests}) == 1
    assert reporter.stats.posts == 3


def test_a_connection_the_server_closes_is_reopened(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    sink.replies.append(Reply(close=True))
    reporter = make_reporter(min_interval=0)
    for progress in (1, 2):
        reporter.report(progress)
        assert reporter.flush(5)
    first, second = sink.requests
    assert first.connection != second.connection
    assert reporter.stats.delivered == 2


def test_a_stale_kept_alive_connection_is_retried_at_once_on_a_new_one(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    reporter = make_reporter(min_interval=0)
    reporter.report(1)
    assert reporter.flush(5)
    sink.replies.append(Reply(drop=True))  # closes the kept-alive connection unanswered
    reporter.report(2)
    assert reporter.flush(5)
    assert [r.status["progressPercentage"] for r in sink.requests] == [1, 2, 2]
    assert reporter.stats.retries == 0  # same request, no backoff


def test_the_caller_never_sees_an_exception(sink: Sink, make_reporter: MakeReporter) -> None:
    class Broken:
        def __str__(self) -> str:
            raise RuntimeError("no text")

    reporter = make_reporter(min_interval=0)
    bad_metrics: Any = ["not", "a", "mapping"]
    assert reporter.report(metrics=bad_metrics) is False
    assert reporter.report("not a number", object(), {"ok": 1, "bad": Broken()})
    assert reporter.flush(5)
    assert sink.requests[-1].status["metrics"] == [{"name": "ok", "value": "1"}]
    assert "progressPercentage" not in sink.requests[-1].status


def test_only_global_rank_zero_reports_in_a_distributed_launch(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    worker = make_reporter(environ={"RANK": "1", "WORLD_SIZE": "2"})
    assert not worker.enabled
    assert worker.report(50) is False
    chief = make_reporter(environ={"RANK": "0", "WORLD_SIZE": "2"})
    assert chief.report(60)
    everyone = make_reporter(environ={"RANK": "3", "WORLD_SIZE": "4"}, only_rank_zero=False)
    assert everyone.report(70)
    assert chief.flush(5)
    assert everyone.flush(5)
    assert sorted(r.status["progressPercentage"] for r in sink.requests) == [60, 70]


def test_not_in_a_trainjob_reports_nothing() -> None:
    with StatusReporter(environ={}) as reporter:
        assert not reporter.enabled
        assert reporter.report(10) is False
        assert reporter.flush(0)


def test_environment_supplies_url_token_and_ca(sink: Sink) -> None:
    with StatusReporter(environ=sink.environ()) as reporter:
        assert reporter.report(5)
        assert reporter.flush(5)
    assert sink.requests[0].token == sink.token


def test_close_flushes_and_later_reports_are_refused(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    reporter = make_reporter(min_interval=3600)
    reporter.report(1)
    sink.wait_for(1)
    reporter.report(2)
    reporter.close(5)
    assert sink.requests[-1].status["progressPercentage"] == 2
    assert reporter.report(3) is False
    reporter.close()  # idempotent
    assert not reporter.enabled


def test_close_cuts_a_post_in_progress_short_and_its_sender_has_ended(
    sink: Sink, make_reporter: MakeReporter, caplog: pytest.LogCaptureFixture
) -> None:
    # A daemon thread still posting while the interpreter exits can crash it (PyPy 3.9
    # did, about once in 50 exits): close leaves no sending thread behind.
    reporter = make_reporter(min_interval=0, timeout=600)
    before = set(threading.enumerate())
    with sink.stalled():
        assert reporter.report(10)
        sink.wait_for(1)  # the post waits for its answer on an open connection
        (sender,) = [t for t in set(threading.enumerate()) - before if t.name == "trainjob-status"]
        with caplog.at_level(logging.WARNING, logger="trainjob_status"):
            reporter.close(0)
        assert not sender.is_alive()
        stats = reporter.stats
        assert (stats.posts, stats.delivered, stats.retries, stats.dropped) == (1, 0, 0, 1)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("trainjob_status")] == [
        "status update not delivered before close code=0 reason=Closed"
        " message='the reporter was closed'"
    ]
    assert reporter.report(20) is False
    time.sleep(0.2)  # nothing is sent again: not the cut post, not a later report
    assert len(sink.requests) == 1


def test_reports_from_many_threads_end_with_one_of_the_last(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    reporter = make_reporter(min_interval=0.01)
    results: list[bool] = []

    def loop(worker: int) -> None:
        results.extend(reporter.report(worker, metrics={"i": i}) for i in range(500))

    threads = [threading.Thread(target=loop, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(results)
    assert len(results) == 4000
    assert reporter.flush(5)
    assert sink.requests[-1].status["metrics"] == [{"name": "i", "value": "499"}]
