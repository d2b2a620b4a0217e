"""PyTorch Lightning: ``TrainJobStatusCallback``, a ``lightning.pytorch.Callback``
(``pytorch_lightning.Callback`` with the older package name) when Lightning is importable.

Hooks take Lightning's documented arguments and read only documented ``Trainer``
attributes: ``is_global_zero``, ``global_step``, ``estimated_stepping_batches``,
``current_epoch``, ``max_epochs``, ``sanity_checking`` and ``callback_metrics``.
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..reporter import StatusReporter
from ..shared import default_reporter
from .progress import RUNNING_MAX_PERCENT, StepProgress


def _lightning_callback_class() -> type:
    for module in ("lightning.pytorch", "pytorch_lightning"):
        try:
            base = importlib.import_module(module).Callback
        except (ImportError, AttributeError):
            continue
        if isinstance(base, type):
            return base
    return object


if TYPE_CHECKING:
    _Base = object
else:
    _Base = _lightning_callback_class()


class TrainJobStatusCallback(_Base):
    """Reports a Lightning ``Trainer``'s progress to the TrainJob (global rank zero).

    Progress is ``global_step / estimated_stepping_batches`` (else epochs done /
    ``max_epochs``), at most 99 until train end, then 100 and ETA 0. Metrics are
    ``step``, ``epoch``, ``total_steps`` and the scalar ``callback_metrics``, read at
    epoch and validation end and otherwise at most once per ``metrics_interval`` seconds
    (reading a GPU tensor waits for the device; default: the reporter's
    ``min_interval``). Train end and an exception flush, bounded by ``flush_timeout`` and
    by the reporter's one wait for exit (docs/client.md).
    """

    def __init__(
        self,
        reporter: StatusReporter | None = None,
        *,
        flush_timeout: float | None = None,
        metrics_interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reporter = reporter
        self.flush_timeout = flush_timeout
        self.metrics_interval = metrics_interval
        self._clock = clock
        self._progress = StepProgress(clock)
        self._metrics: dict[str, object] = {}
        self._metrics_at = -math.inf
        self._total: float | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.is_global_zero:
            return
        self._total = _total_steps(trainer)
        self._progress.start(trainer.global_step)
        self._metrics = {} if self._total is None else {"total_steps": int(self._total)}
        self._send(trainer, self._percent(trainer) or 0, None)

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not trainer.is_global_zero:
            return
        if self._clock() - self._metrics_at >= self._interval():
            self._collect(trainer)
        self._send_progress(trainer)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.is_global_zero:
            self._collect(trainer)
            self._send_progress(trainer)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.is_global_zero and not getattr(trainer, "sanity_checking", False):
            self._collect(trainer)
            self._send_progress(trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.is_global_zero:
            return
        reporter = self._reporter()
        if reporter is not None:
            self._collect(trainer)
            self._send(trainer, 100, 0)
            reporter.flush(self.flush_timeout, within_budget=True)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        reporter = self._reporter()
        if trainer.is_global_zero and reporter is not None:
            reporter.flush(self.flush_timeout, within_budget=True)

    def _percent(self, trainer: Any) -> int | None:
        percent = self._progress.percent(trainer.global_step, self._total)
        if percent is not None:
            return percent
        max_epochs = getattr(trainer, "max_epochs", None)
        if isinstance(max_epochs, int) and max_epochs > 0:
            return min(
                RUNNING_MAX_PERCENT, math.floor(100 * int(trainer.current_epoch) / max_epochs)
            )
        return None

    def _send_progress(self, trainer: Any) -> None:
        eta = self._progress.eta(trainer.global_step, self._total)
        self._send(trainer, self._percent(trainer), eta)

    def _send(self, trainer: Any, percent: int | None, eta: int | None) -> None:
        reporter = self._reporter()
        if reporter is not None:
            reporter.report(
                percent, eta, self._metrics, step=trainer.global_step, epoch=trainer.current_epoch
            )

    def _collect(self, trainer: Any) -> None:
        self._metrics_at = self._clock()
        for name, value in dict(getattr(trainer, "callback_metrics", None) or {}).items():
            scalar = _scalar(value)
            if scalar is not None and name not in ("step", "epoch"):
                self._metrics[str(name)] = scalar

    def _interval(self) -> float:
        if self.metrics_interval is not None:
            return self.metrics_interval
        reporter = self._reporter()
        return reporter.min_interval if reporter is not None else 5.0

    def _reporter(self) -> StatusReporter | None:
        if self.reporter is None:
            self.reporter = default_reporter()
        return self.reporter


def _total_steps(trainer: Any) -> float | None:
    try:
        total = float(trainer.estimated_stepping_batches)
    except Exception:  # Lightning raises when it cannot size the dataloader
        return None
    return total if math.isfinite(total) and total > 0 else None


def _scalar(value: Any) -> float | int | None:
    """A logged value as a Python number: numbers as they are, one-element tensors (or
    numpy arrays) through ``item()``; anything else is skipped."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    try:
        count = value.numel() if hasattr(value, "numel") else value.size
        if count != 1:
            return None
        item = value.item()
    except Exception:
        return None
    return item if isinstance(item, (int, float)) and not isinstance(item, bool) else None
