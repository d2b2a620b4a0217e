"""The sender's schedule (pure, fake times): throttle window, retry delays, Retry-After;
and the step-based progress and ETA of the framework callbacks."""

from __future__ import annotations

import email.utils
import math

import pytest

from trainjob_status.integrations.progress import StepProgress
from trainjob_status.pacing import MAX_RETRY_AFTER, Pacer, parse_retry_after


def test_first_request_may_go_at_once_then_one_per_interval() -> None:
    pacer = Pacer(min_interval=5.0)
    assert pacer.ready_at(flushing=False) == -math.inf
    pacer.started(100.0)
    pacer.succeeded()
    assert pacer.ready_at(flushing=False) == 105.0


def test_flush_ignores_the_throttle_window_but_not_a_retry_delay() -> None:
    pacer = Pacer(min_interval=5.0)
    pacer.started(100.0)
    assert pacer.ready_at(flushing=True) == -math.inf
    pacer.failed(100.5, retry_after=2.0)
    assert pacer.ready_at(flushing=True) == 102.5
    assert pacer.ready_at(flushing=False) == 105.0  # the window is the later of the two


def test_retry_after_wins_over_backoff_and_is_capped() -> None:
    pacer = Pacer(min_interval=0.0)
    assert pacer.failed(0.0, retry_after=7.0) == 7.0
    assert pacer.failed(0.0, retry_after=10_000.0) == MAX_RETRY_AFTER
    assert pacer.failed(0.0, retry_after=-3.0) == 0.0


def test_backoff_doubles_up_to_the_cap_with_jitter_and_resets_on_success() -> None:
    pacer = Pacer(min_interval=0.0, backoff_initial=0.5, backoff_max=4.0, random=lambda: 1.0)
    assert [pacer.failed(0.0, None) for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    pacer.succeeded()
    assert pacer.failed(0.0, None) == 0.5
    low = Pacer(min_interval=0.0, backoff_initial=0.5, random=lambda: 0.0)
    assert low.failed(0.0, None) == 0.25  # never less than half the step


@pytest.mark.parametrize("failures", [1_025, 10**6, 10**100])
def test_backoff_stays_at_its_cap_however_long_the_outage(failures: int) -> None:
    # 0.5 * 2**1024 overflows a float: the exponent is capped before it is used.
    pacer = Pacer(min_interval=0.0, failures=failures - 1, random=lambda: 1.0)
    assert pacer.failed(0.0, None) == 60.0
    assert pacer.failures == failures


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("3", 3.0),
        (" 0 ", 0.0),
        ("0.25", 0.25),
        (None, None),
        ("", None),
        ("-1", None),
        ("soon", None),
        (email.utils.formatdate(1_000_030, usegmt=True), 30.0),
        (email.utils.formatdate(999_000, usegmt=True), 0.0),  # in the past
        ("Mon, 01 Jan 99999999999 00:00:00 GMT", None),  # a year past any date type
        ("9" * 400, math.inf),  # read as inf; the Pacer caps it
    ],
)
def test_parse_retry_after(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header, now=1_000_000.0) == seconds


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_step_progress_caps_at_99_and_measures_eta_from_the_start() -> None:
    clock = FakeClock()
    progress = StepProgress(clock)
    progress.start(step=100)  # resumed from a checkpoint at step 100
    assert progress.eta(100, 1000) is None  # no rate yet
    clock.now = 10.0
    assert progress.eta(150, 1000) == 170  # 50 steps in 10 s, 850 to go
    assert progress.percent(150, 1000) == 15
    assert progress.percent(1000, 1000) == 99
    assert progress.percent(5, None) is None
    assert progress.percent(5, 0) is None
    assert progress.eta(150, math.inf) is None
