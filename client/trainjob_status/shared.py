"""The process-wide reporter behind ``update_trainjob_status`` (the Kubeflow SDK's call).

Built from the environment on first use. Until ``KUBEFLOW_TRAINER_SERVER_URL`` is set no
reporter is built, so every call answers False at the cost of one environment lookup.
A forked child starts without one (the parent's sending thread did not follow it).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from .contract import URL_ENV
from .reporter import StatusReporter

_lock = threading.Lock()
_reporter: StatusReporter | None = None


def default_reporter() -> StatusReporter | None:
    """The shared reporter, built from the environment on first use; None when
    ``KUBEFLOW_TRAINER_SERVER_URL`` is unset (not in a TrainJob)."""
    global _reporter
    reporter = _reporter
    if reporter is not None:
        return reporter
    if not os.environ.get(URL_ENV):
        return None
    with _lock:
        if _reporter is None:
            _reporter = StatusReporter()
        return _reporter


def update_trainjob_status(
    progress_percent: float | None = None,
    estimated_remaining_seconds: float | None = None,
    metrics: Mapping[str, object] | None = None,
) -> bool:
    """Report the TrainJob's progress (0..100), estimated remaining seconds and metrics.

    The Kubeflow SDK's signature and meaning: False when not running in a TrainJob
    (``KUBEFLOW_TRAINER_SERVER_URL`` unset) or not global rank 0 in a distributed launch,
    True when the update was taken. Safe at every step and from any thread: it returns in
    microseconds and never raises; a background thread posts the latest update (at most
    one request per 5 s, the last update delivered at exit).
    """
    try:
        reporter = _reporter or default_reporter()
    except Exception:  # never into the training loop
        return False
    if reporter is None:
        return False
    return reporter.report(progress_percent, estimated_remaining_seconds, metrics)


def _forget_in_child() -> None:
    global _reporter, _lock
    _reporter = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
