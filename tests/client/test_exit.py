"""Process exit: the last update of a fast loop arrives without an explicit flush, and a
dead server cannot hold exit longer than the flush timeout. Real interpreters in
subprocesses (atexit only runs there)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

from trainjob_status import StatusReporter, update_trainjob_status
from trainjob_status.contract import URL_ENV

from .conftest import MakeReporter
from .sink import Reply, Sink


def run(
    code: str, environ: dict[str, str], timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env.update(environ)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, timeout=timeout, capture_output=True, text=True
    )


def test_a_fast_loop_that_exits_delivers_its_final_update(sink: Sink) -> None:
    code = (
        "from trainjob_status import update_trainjob_status\n"
        "for step in range(1, 1001):\n"
        "    assert update_trainjob_status(step // 10, 1000 - step, {'loss': 1 / step})\n"
    )
    done = run(code, sink.environ())
    assert done.returncode == 0, done.stderr
    final = sink.requests[-1].status
    assert (final["progressPercentage"], final["estimatedRemainingSeconds"]) == (100, 0)
    assert final["metrics"] == [{"name": "loss", "value": "0.001"}]
    assert len(sink.requests) <= 2  # the first at once, the last at exit


def test_exit_with_a_stalled_server_returns_within_the_flush_timeout(sink: Sink) -> None:
    code = (
        "from trainjob_status import StatusReporter\n"
        "reporter = StatusReporter(timeout=600, flush_timeout=0.5)\n"
        "reporter.report(10)\n"
        "reporter.report(100)\n"
    )
    with sink.stalled():
        # Without the bound the exit would wait for the 600 s socket timeout (and the
        # subprocess timeout would fail the test); it ends while the server still stalls.
        done = run(code, sink.environ(), timeout=60)
        assert done.returncode == 0, done.stderr
        assert not sink.gate.is_set()
        assert sink.answered == 0


class OffsetClock:
    """time.monotonic() plus an offset the test (or the sink, while answering) moves."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Polls what the reporter offers no event for."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.01)


def opened(make_reporter: MakeReporter, clock: OffsetClock) -> StatusReporter:
    """A reporter whose first update was delivered: its hour-long throttle window is shut,
    so the next update leaves only when a flush, already waiting, lets it."""
    reporter = make_reporter(flush_timeout=3600, min_interval=3600, monotonic=clock)
    reporter.report(0)
    assert reporter.flush() is True
    return reporter


def test_close_after_a_flush_that_timed_out_does_not_wait_again(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    clock = OffsetClock()
    reporter = opened(make_reporter, clock)

    def late() -> None:
        clock.offset += 3600  # the answer takes an hour, for the reporter

    sink.replies.append(Reply(503, headers={"Retry-After": "60"}, action=late))
    reporter.report(100)
    assert reporter.flush() is False  # the train-end flush spends the whole hour
    waits = reporter.stats.waits
    closing = threading.Thread(target=reporter.close)
    closing.start()
    closing.join(30)  # a second wait would last until the retry, a minute later
    assert not closing.is_alive()
    assert reporter.stats.waits == waits
    assert len(sink.requests) == 2  # closed before the retry


def test_a_delivery_restores_the_wait_for_a_later_flush(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    clock = OffsetClock()
    reporter = opened(make_reporter, clock)
    sink.replies.append(Reply(503, action=lambda: setattr(clock, "offset", 3600.0)))
    reporter.report(99)
    assert reporter.flush() is False  # spent: the 503 came an hour late
    until(lambda: reporter.stats.delivered == 2)  # the retry: the server answers again
    reporter.report(100)  # the window is shut again: only the flush sends it
    assert reporter.flush() is True
    assert [r.status["progressPercentage"] for r in sink.requests] == [0, 99, 99, 100]


def test_train_end_flush_and_the_exit_flush_wait_once_in_all(sink: Sink) -> None:
    code = (
        "import atexit\n"
        "from trainjob_status import StatusReporter\n"
        "reporter = StatusReporter(timeout=600, flush_timeout=0.5)\n"
        # Registered first, so it runs after the reporter's exit flush.
        "atexit.register(lambda: print('waits', reporter.stats.waits, 'posts',"
        " reporter.stats.posts, 'dropped', reporter.stats.dropped))\n"
        "reporter.report(100)\n"
        "assert reporter.flush() is False\n"
    )
    with sink.stalled():
        done = run(code, sink.environ(), timeout=60)
        assert done.returncode == 0, done.stderr
        # The held post was cut short by the exit's close, not left running.
        assert done.stdout.split() == ["waits", "1", "posts", "1", "dropped", "1"]
        assert len(sink.requests) == 1  # one connection, one request, held
        assert sink.answered == 0


def test_the_shared_reporter_is_built_once_from_the_environment(sink: Sink) -> None:
    code = (
        "from trainjob_status import default_reporter, update_trainjob_status\n"
        "assert update_trainjob_status(metrics={'a': 1})\n"
        "assert default_reporter() is default_reporter()\n"
        "assert default_reporter().flush(5)\n"
    )
    done = run(code, sink.environ())
    assert done.returncode == 0, done.stderr
    assert len(sink.requests) == 1


def test_a_worker_rank_reports_nothing(sink: Sink) -> None:
    code = (
        "from trainjob_status import update_trainjob_status\nassert not update_trainjob_status(5)\n"
    )
    done = run(code, {**sink.environ(), "RANK": "2", "WORLD_SIZE": "4"})
    assert done.returncode == 0, done.stderr
    assert sink.requests == []


def test_outside_a_trainjob_update_trainjob_status_is_false(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    assert update_trainjob_status(50, 10, {"loss": 0.1}) is False


def test_a_forked_child_reports_through_its_own_reporter(sink: Sink) -> None:
    code = (
        "import os, sys\n"
        "from trainjob_status import default_reporter, update_trainjob_status\n"
        "assert update_trainjob_status(10)\n"
        "assert default_reporter().flush(5)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    update_trainjob_status(77)  # the parent's sending thread is not here\n"
        "    sys.exit(0)  # the child's exit flush sends it\n"
        "assert os.waitpid(pid, 0)[1] == 0\n"
        "update_trainjob_status(20)\n"
    )
    done = run(code, sink.environ())
    assert done.returncode == 0, done.stderr
    assert [r.status["progressPercentage"] for r in sink.requests] == [10, 77, 20]


def release_later(sink: Sink, seconds: float) -> threading.Timer:
    """Opens the sink's gate after ``seconds``: a server that answers that late."""
    timer = threading.Timer(seconds, sink.gate.set)
    timer.start()
    return timer


def test_an_explicit_flush_waits_its_own_timeout_past_the_flush_timeout(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    reporter = make_reporter(min_interval=0, flush_timeout=0.2)
    sink.gate.clear()
    reporter.report(100)
    sink.wait_for(1)
    timer = release_later(sink, 0.6)  # later than flush_timeout, sooner than asked for
    assert reporter.flush(30) is True
    timer.join()


def test_an_explicit_flush_after_one_that_spent_the_budget_still_waits(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    reporter = make_reporter(min_interval=0, flush_timeout=0.2)
    sink.gate.clear()
    reporter.report(100)
    sink.wait_for(1)
    assert reporter.flush(0.3) is False  # spends the whole shared budget
    timer = release_later(sink, 0.3)
    assert reporter.flush(30) is True  # the caller's timeout, not what is left
    timer.join()


def test_a_wait_on_the_way_out_after_an_explicit_flush_spent_the_budget_returns_at_once(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    reporter = make_reporter(min_interval=0, flush_timeout=0.2)
    with sink.stalled():
        reporter.report(100)
        sink.wait_for(1)
        assert reporter.flush(0.3) is False
        waits = reporter.stats.waits
        # What train end in the framework callbacks, close() and the exit hook ask for.
        assert reporter.flush(3600, within_budget=True) is False
        assert reporter.stats.waits == waits  # it never blocked
