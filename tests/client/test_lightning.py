"""The Lightning callback, driven through Lightning's documented hook signatures and
Trainer attributes (stand-ins in ``frameworks.py``)."""

from __future__ import annotations

import math

import pytest

from trainjob_status.integrations.lightning import TrainJobStatusCallback

from .conftest import MakeReporter
from .frameworks import LightningTrainer
from .sink import Sink
from .test_transformers import RecordingReporter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fit(
    reporter: RecordingReporter | object,
    *,
    interval: float = math.inf,
    zero: bool = True,
    sized: bool = True,
    fail_at: int | None = None,
) -> tuple[LightningTrainer, Clock]:
    clock = Clock()
    callback = TrainJobStatusCallback(reporter, clock=clock, metrics_interval=interval)

    class Ticker:
        """Placed before the callback: each batch takes one second."""

        def __getattr__(self, hook: str) -> object:
            def call(trainer: LightningTrainer, *args: object) -> None:
                if hook == "on_train_batch_end":
                    clock.now += 1.0

            return call

    trainer = LightningTrainer(
        [Ticker(), callback], max_epochs=2, batches_per_epoch=5, is_global_zero=zero, sized=sized
    )
    trainer.fit(fail_at=fail_at)
    return trainer, clock


def test_progress_eta_and_metrics_through_a_fit() -> None:
    reporter = RecordingReporter()
    fit(reporter)
    first, *middle, last = reporter.reports
    assert first == (0, None, {"total_steps": 10}, 0, 0)
    step_four = [r for r in middle if r[3] == 4][-1]
    assert step_four[:2] == (40, 6)  # 4 steps in 4 s, 6 to go
    # Metrics are read at epoch end (not per batch with an infinite interval); the
    # sanity check's val_loss and a many-element tensor are not taken.
    assert step_four[2] == {"total_steps": 10, "train_loss": 1.0}
    after_epoch = [r for r in middle if r[3] == 5][-1]
    assert after_epoch[2] == {"total_steps": 10, "train_loss": 0.2, "val_loss": 0.5}
    assert last[:2] == (100, 0)
    assert last[2]["val_loss"] == 0.25
    assert reporter.flushes == 1
    assert reporter.within_budget == [True]  # a wait on the way out


def test_metrics_are_read_at_most_once_per_interval() -> None:
    reporter = RecordingReporter()
    fit(reporter, interval=2.0)
    by_step = {r[3]: r[2].get("train_loss") for r in reporter.reports[1:] if r[3] < 5}
    # Read at step 1 (first chance), then whenever 2 s have passed.
    assert by_step == {1: 1.0, 2: 1.0, 3: pytest.approx(1 / 3), 4: pytest.approx(1 / 3)}


def test_without_a_sized_dataloader_progress_comes_from_epochs() -> None:
    reporter = RecordingReporter()
    fit(reporter, sized=False)
    assert reporter.reports[0] == (0, None, {}, 0, 0)
    in_second_epoch = [r for r in reporter.reports if r[4] == 1 and r[0] is not None]
    assert in_second_epoch[0][:2] == (50, None)
    assert reporter.reports[-1][:2] == (100, 0)


def test_only_global_zero_reports() -> None:
    reporter = RecordingReporter()
    fit(reporter, zero=False)
    assert reporter.reports == []
    assert reporter.flushes == 0


def test_an_exception_flushes_what_was_reported() -> None:
    reporter = RecordingReporter()
    with pytest.raises(RuntimeError):
        fit(reporter, fail_at=3)
    assert reporter.flushes == 1
    assert reporter.within_budget == [True]  # a wait on the way out
    assert reporter.reports[-1][0] == 20  # not 100: training did not finish


def test_a_fit_against_the_sink_ends_with_100_percent(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    fit(make_reporter(min_interval=60))
    last = sink.requests[-1].status
    assert (last["progressPercentage"], last["estimatedRemainingSeconds"]) == (100, 0)
    assert last["metrics"] == [
        {"name": "step", "value": "10"},
        {"name": "epoch", "value": "1"},
        {"name": "total_steps", "value": "10"},
        {"name": "train_loss", "value": "0.1"},
        {"name": "val_loss", "value": "0.25"},
    ]
