"""Hugging Face Transformers: ``TrainJobStatusCallback`` and ``attach(trainer)``.

Transformers ships its own ``KubeflowCallback``, switched on when
``KUBEFLOW_TRAINER_SERVER_URL`` is set and ``report_to`` covers it (the default "all").
Both posting would double the requests and interleave their figures, so
``attach(trainer)`` removes it from the trainer when it adds ours (and logs that). A
callback given to ``Trainer(callbacks=[...])`` instead cannot reach the trainer's list; it
warns at train begin when ``report_to`` names ``kubeflow``.

Hooks take the documented ``TrainerCallback`` arguments (``args``, ``state``, ``control``,
keyword extras) and read only documented fields: ``state.global_step``,
``state.max_steps``, ``state.epoch``, ``state.is_world_process_zero``,
``args.report_to``.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..reporter import StatusReporter
from ..shared import default_reporter
from .progress import StepProgress

log = logging.getLogger("trainjob_status")

KUBEFLOW_CALLBACK = "KubeflowCallback"
# Sent from the trainer state (``epoch`` unrounded), never from the logs.
_OWN_METRICS = frozenset({"step", "epoch"})


def _trainer_callback_class() -> type:
    try:
        base = importlib.import_module("transformers").TrainerCallback
    except (ImportError, AttributeError):
        return object
    return base if isinstance(base, type) else object


if TYPE_CHECKING:
    _Base = object
else:
    _Base = _trainer_callback_class()


class TrainJobStatusCallback(_Base):
    """Reports a Transformers ``Trainer``'s progress to the TrainJob (world process zero).

    Progress is ``global_step / max_steps`` (at most 99 until train end, then 100 and ETA
    0), the ETA comes from the step rate since train begin, metrics are ``step``,
    ``epoch``, ``total_steps`` and every numeric value logged (``loss``,
    ``learning_rate``, ``grad_norm``, ``eval_*`` ...). Train end flushes, bounded by
    ``flush_timeout`` (default: the reporter's) and by the reporter's one wait for exit
    (docs/client.md). ``reporter`` defaults to the shared one.
    """

    def __init__(
        self,
        reporter: StatusReporter | None = None,
        *,
        flush_timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reporter = reporter
        self.flush_timeout = flush_timeout
        self.attached = False
        self._progress = StepProgress(clock)
        self._metrics: dict[str, object] = {}
        self._warned = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        self._warn_if_doubled(args)
        self._progress.start(state.global_step)
        self._metrics = {"total_steps": state.max_steps}
        self._send(state, self._progress.percent(state.global_step, state.max_steps) or 0, None)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self._send_progress(state)

    def on_log(
        self,
        args: Any,
        state: Any,
        control: Any,
        logs: Mapping[str, object] | None = None,
        **kwargs: Any,
    ) -> None:
        if not state.is_world_process_zero or not logs:
            return
        for name, value in logs.items():
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if numeric and name not in _OWN_METRICS:
                self._metrics[name] = value
        self._send_progress(state)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        reporter = self._reporter()
        if reporter is not None:
            self._send(state, 100, 0)
            reporter.flush(self.flush_timeout, within_budget=True)

    def _send_progress(self, state: Any) -> None:
        step, total = state.global_step, state.max_steps
        self._send(state, self._progress.percent(step, total), self._progress.eta(step, total))

    def _send(self, state: Any, percent: int | None, eta: int | None) -> None:
        reporter = self._reporter()
        if reporter is not None:
            reporter.report(percent, eta, self._metrics, step=state.global_step, epoch=state.epoch)

    def _reporter(self) -> StatusReporter | None:
        if self.reporter is None:
            self.reporter = default_reporter()
        return self.reporter

    def _warn_if_doubled(self, args: Any) -> None:
        report_to = getattr(args, "report_to", None)
        names = [report_to] if isinstance(report_to, str) else list(report_to or ())
        if self.attached or self._warned or not {"kubeflow", "all"} & set(names):
            return
        self._warned = True
        log.warning(
            "transformers' KubeflowCallback may also be posting this TrainJob's status: "
            "add TrainJobStatusCallback with trainjob_status.integrations.transformers."
            "attach(trainer), leave 'kubeflow' out of report_to, or set "
            "DISABLE_KUBEFLOW_INTEGRATION=true before TrainingArguments are built"
        )


def attach(trainer: Any, callback: TrainJobStatusCallback | None = None) -> TrainJobStatusCallback:
    """Add ``callback`` (a new one by default) to ``trainer`` and remove Transformers'
    ``KubeflowCallback`` from it, so the TrainJob gets one reporter. Returns the callback."""
    callback = callback if callback is not None else TrainJobStatusCallback()
    handler = getattr(trainer, "callback_handler", None)
    present = list(getattr(handler, "callbacks", ()))
    for existing in present:
        if type(existing).__name__ == KUBEFLOW_CALLBACK:
            trainer.remove_callback(existing)
            log.info(
                "removed transformers' KubeflowCallback from the trainer: "
                "TrainJobStatusCallback reports this TrainJob's status"
            )
    if callback not in present:
        trainer.add_callback(callback)
    callback.attached = True
    return callback
