"""The sending thread never stops: a round that raises, a thread that ends, a handshake
that never finishes, and long random runs of failures, hangs and recoveries against the
local HTTPS sink, after which the newest update is delivered once the server answers."""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainjob_status import StatusReporter

from .conftest import MakeReporter
from .sink import Reply, Sink
from .test_exit import OffsetClock, until


class Armed(logging.Handler):
    """A log handler (the user's, as far as the client knows) that raises ``error`` at the
    next record it sees, once."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.error: BaseException | None = None
        self.raised = 0

    def emit(self, record: logging.LogRecord) -> None:
        error, self.error = self.error, None
        if error is not None:
            self.raised += 1
            raise error


@pytest.fixture
def armed() -> Iterator[Armed]:
    handler = Armed()
    target = logging.getLogger("trainjob_status")
    target.addHandler(handler)
    try:
        yield handler
    finally:
        target.removeHandler(handler)


def senders(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in set(threading.enumerate()) - before if t.name == "trainjob-status"]


def test_a_round_that_raises_keeps_its_update_and_its_thread(
    sink: Sink, make_reporter: MakeReporter, armed: Armed, caplog: pytest.LogCaptureFixture
) -> None:
    reporter = make_reporter(min_interval=0)
    before = set(threading.enumerate())
    armed.error = RuntimeError("handler broke")  # at the sender's "will be retried" line
    sink.replies.append(Reply(503))
    with caplog.at_level(logging.WARNING, logger="trainjob_status"):
        assert reporter.report(40)
        (sender,) = senders(before)
        assert reporter.flush(10)
    assert armed.raised == 1
    assert [r.status["progressPercentage"] for r in sink.requests] == [40, 40]
    stats = reporter.stats
    assert (stats.errors, stats.restarts, stats.delivered, stats.dropped) == (1, 0, 1, 0)
    assert sender.is_alive()  # the same thread goes on
    assert senders(before) == [sender]
    assert "status sender error, update kept error=RuntimeError('handler broke')" in [
        r.getMessage() for r in caplog.records if r.name == "trainjob_status"
    ]


class Fatal(BaseException):
    """Not an Exception: it ends the thread it is raised in."""


# The thread's end is reported by threading's excepthook, as any thread's would be.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_sending_thread_that_ends_is_replaced_with_its_update(
    sink: Sink, make_reporter: MakeReporter, armed: Armed
) -> None:
    reporter = make_reporter(min_interval=0)
    before = set(threading.enumerate())
    armed.error = Fatal()
    sink.replies.append(Reply(503))
    assert reporter.report(60)
    (first,) = senders(before)
    first.join(10)  # ended by the exception
    assert not first.is_alive()
    assert reporter.flush(10)
    assert [r.status["progressPercentage"] for r in sink.requests] == [60, 60]
    assert (reporter.stats.restarts, reporter.stats.delivered) == (1, 1)
    assert reporter.report(61)
    assert reporter.flush(10)  # and the new thread goes on
    assert sink.requests[-1].status["progressPercentage"] == 61


class HandshakeHolder:
    """Accepts TCP connections on 127.0.0.1 and never completes a TLS handshake: it either
    says nothing, or starts a TLS record and drips it a byte at a time (each byte well
    within any socket timeout, so only a bound on the whole handshake ends it)."""

    def __init__(self, drip: bool) -> None:
        self.drip = drip
        self.accepted = threading.Event()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self._listener.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                continue
            self._held.append(conn)
            self.accepted.set()
            if self.drip:
                # A handshake record header announcing 16 KiB, then its bytes, slowly.
                conn.sendall(b"\x16\x03\x03\x40\x00")
                while not self._stop.wait(0.05):
                    try:
                        conn.sendall(b"\x02")
                    except OSError:
                        break

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self._listener.close()


@pytest.mark.parametrize("drip", [False, True], ids=["silent", "dripping"])
def test_close_cuts_a_handshake_in_progress_and_its_sender_has_ended(
    sink: Sink, drip: bool
) -> None:
    holder = HandshakeHolder(drip)
    try:
        reporter = StatusReporter(
            f"https://127.0.0.1:{holder.port}/status",
            str(sink.token_file),
            str(sink.ca_file),
            timeout=600,  # the socket timeout would hold the thread for ten minutes
            flush_timeout=0.2,
            environ={},
        )
        before = set(threading.enumerate())
        assert reporter.report(10)
        assert holder.accepted.wait(10)
        (sender,) = senders(before)
        reporter.close()
        assert not sender.is_alive()
        stats = reporter.stats
        assert (stats.posts, stats.delivered, stats.dropped) == (1, 0, 1)
    finally:
        holder.close()


def test_a_dripping_handshake_ends_within_the_socket_timeout(sink: Sink) -> None:
    # Not closed: the bound on the whole handshake ends it, the post is retried.
    holder = HandshakeHolder(drip=True)
    try:
        reporter = StatusReporter(
            f"https://127.0.0.1:{holder.port}/status",
            str(sink.token_file),
            str(sink.ca_file),
            timeout=0.3,
            environ={},
        )
        assert reporter.report(10)
        until(lambda: reporter.stats.retries >= 1)  # not ten minutes of dripping
        assert reporter.stats.delivered == 0
        reporter.close(0)
    finally:
        holder.close()


# -- long random runs -------------------------------------------------------------------------

# Each report carries a number never used before (as its ETA), so a post can be told
# from every other one, in any example.
_ids = itertools.count(1)

STEPS = st.lists(
    st.one_of(
        st.just(("report",)),
        st.tuples(st.just("fail"), st.sampled_from([408, 500, 502, 503, 504])),
        st.tuples(
            st.just("retry-after"), st.sampled_from([429, 503]), st.sampled_from(["0", "1", "300"])
        ),
        st.just(("drop",)),
        st.just(("hang",)),
        st.just(("log-raises",)),
        st.tuples(st.just("advance"), st.sampled_from([0.5, 5.0, 60.0, 3600.0])),
        st.tuples(st.just("flush"), st.sampled_from([0.0, 0.01, 0.05])),
        st.just(("pause",)),
    ),
    min_size=1,
    max_size=60,
)

# The reporter's socket timeout; a hung answer comes after it.
_TIMEOUT = 0.1


def _step(
    step: tuple[Any, ...], reporter: StatusReporter, sink: Sink, clock: OffsetClock, armed: Armed
) -> int | None:
    """Runs one step; returns the id of the update it reported, if any."""
    kind = step[0]
    if kind == "report":
        new = next(_ids)
        assert reporter.report(50, new, {"id": new})
        return new
    if kind == "fail":
        sink.replies.append(Reply(step[1]))
    elif kind == "retry-after":
        sink.replies.append(Reply(step[1], headers={"Retry-After": step[2]}))
    elif kind == "drop":
        sink.replies.append(Reply(drop=True))
    elif kind == "hang":
        # A server slower than the client's timeout: the hang is what is tested.
        sink.replies.append(Reply(action=lambda: time.sleep(2 * _TIMEOUT)))
    elif kind == "log-raises":
        armed.error = RuntimeError("handler broke")
    elif kind == "advance":
        clock.offset += step[1]
        reporter.flush(0.0)  # wakes the sender to see the new time
    elif kind == "flush":
        reporter.flush(step[1])
    else:  # "pause": the sender runs on its own a moment between the steps
        time.sleep(0.02)
    return None


@settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=STEPS)
def test_after_any_run_of_failures_the_newest_update_is_delivered_once_the_server_answers(
    sink: Sink, make_reporter: MakeReporter, armed: Armed, steps: list[tuple[Any, ...]]
) -> None:
    sink.replies.clear()
    clock = OffsetClock()
    reporter = make_reporter(min_interval=1.0, timeout=_TIMEOUT, monotonic=clock)
    newest = next(_ids)
    assert reporter.report(50, newest, {"id": newest})
    try:
        for step in steps:
            newest = _step(step, reporter, sink, clock, armed) or newest
        # The server answers from now on; every delay it asked for, or the backoff set,
        # is over. A post in flight may still fail (a hang runs out its timeout) and set
        # a new delay: each try moves past it.
        sink.replies.clear()
        armed.error = None
        delivered = False
        for _ in range(3):
            clock.offset += 3600
            delivered = reporter.flush(10)
            if delivered:
                break
        assert delivered
        ids = [r.status.get("estimatedRemainingSeconds") for r in list(sink.requests)]
        assert newest in ids
    finally:
        reporter.close(0)
