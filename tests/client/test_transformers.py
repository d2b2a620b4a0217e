"""The Transformers callback, driven through Transformers' documented callback interface
(stand-ins in ``frameworks.py``)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from trainjob_status.contract import URL_ENV
from trainjob_status.integrations.transformers import TrainJobStatusCallback, attach

from .conftest import MakeReporter
from .frameworks import KubeflowCallback, Trainer, TrainingArguments
from .sink import Sink


class RecordingReporter:
    """Stands in for StatusReporter (passed to the callback's constructor)."""

    min_interval = 5.0

    def __init__(self) -> None:
        self.reports: list[tuple[Any, ...]] = []
        self.flushes = 0
        self.within_budget: list[bool] = []  # per flush: bounded by the shared budget?

    def report(
        self,
        progress_percent: Any = None,
        estimated_remaining_seconds: Any = None,
        metrics: Any = None,
        *,
        step: Any = None,
        epoch: Any = None,
    ) -> bool:
        self.reports.append(
            (progress_percent, estimated_remaining_seconds, dict(metrics or {}), step, epoch)
        )
        return True

    def flush(self, timeout: float | None = None, *, within_budget: bool = False) -> bool:
        self.flushes += 1
        self.within_budget.append(within_budget)
        return True


class Clock:
    """Advanced by half a second at each step begin (a callback placed first)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.now += 0.5


def run(reporter: Any, *, zero: bool = True, report_to: list[str] | None = None) -> Trainer:
    clock = Clock()
    callback = TrainJobStatusCallback(reporter, clock=clock)
    trainer = Trainer(
        TrainingArguments(report_to=report_to or []),
        max_steps=20,
        steps_per_epoch=10,
        callbacks=[clock, callback],
        is_world_process_zero=zero,
    )
    trainer.train()
    return trainer


def test_progress_eta_and_metrics_through_a_run() -> None:
    reporter = RecordingReporter()
    run(reporter)
    first, *steps, last = reporter.reports
    assert first == (0, None, {"total_steps": 20}, 0, None)
    by_step = {report[3]: report for report in steps}
    progress, eta, metrics, _, epoch = by_step[10]
    assert (progress, eta, epoch) == (50, 5, 1.0)  # 10 steps in 5 s, 10 to go
    assert metrics == {
        "total_steps": 20,
        "loss": 0.2,
        "grad_norm": 1.5,
        "learning_rate": 5e-05,
        "eval_loss": 0.5,
        "eval_runtime": 1.25,
    }
    assert by_step[20][0] == 99  # never 100 before train end
    assert last[:2] == (100, 0)
    assert last[2]["eval_loss"] == 0.5
    assert last[3] == 20
    assert reporter.flushes == 1
    assert reporter.within_budget == [True]  # train end is a wait on the way out


def test_a_run_against_the_sink_ends_with_100_percent(
    sink: Sink, make_reporter: MakeReporter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "trainjob_status")
    run(make_reporter(min_interval=60))
    # The train-begin update goes at once unless later ones already replaced it; the
    # rest wait for the 60 s window, and train end flushes the last.
    assert len(sink.requests) <= 2
    last = sink.requests[-1].status
    assert (last["progressPercentage"], last["estimatedRemainingSeconds"]) == (100, 0)
    assert last["metrics"] == [
        {"name": "step", "value": "20"},
        {"name": "epoch", "value": "2"},
        {"name": "total_steps", "value": "20"},
        {"name": "loss", "value": "0.1"},
        {"name": "grad_norm", "value": "1.5"},
        {"name": "learning_rate", "value": "5e-05"},
        {"name": "eval_loss", "value": "0.5"},
        {"name": "eval_runtime", "value": "1.25"},
    ]
    assert caplog.text == ""  # nothing had to be fitted


def test_only_world_process_zero_reports() -> None:
    reporter = RecordingReporter()
    run(reporter, zero=False)
    assert reporter.reports == []
    assert reporter.flushes == 0


def test_attach_removes_transformers_kubeflow_callback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "trainjob_status")
    theirs = KubeflowCallback()
    trainer = Trainer(
        TrainingArguments(report_to=["kubeflow"]),
        max_steps=2,
        steps_per_epoch=2,
        default_callbacks=[theirs],
    )
    reporter = RecordingReporter()
    ours = attach(trainer, TrainJobStatusCallback(reporter))
    assert trainer.callback_handler.callbacks == [ours]
    assert attach(trainer, ours) is ours
    assert trainer.callback_handler.callbacks == [ours]
    assert "removed transformers' KubeflowCallback" in caplog.text
    trainer.train()
    assert theirs.events == []
    assert reporter.reports[-1][0] == 100
    assert "may also be posting" not in caplog.text


def test_a_callback_not_attached_warns_when_kubeflow_reporting_is_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "trainjob_status")
    run(RecordingReporter(), report_to=["tensorboard", "kubeflow"])
    assert caplog.text.count("KubeflowCallback may also be posting") == 1


def test_outside_a_trainjob_the_callback_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    trainer = Trainer(TrainingArguments(), max_steps=3, steps_per_epoch=3)
    callback = attach(trainer)
    trainer.train()
    assert callback.reporter is None
