"""In-pod client for TrainJob status: progress, ETA and metrics, reported without slowing
training and without losing the last update. Standard library only.

``update_trainjob_status`` has the Kubeflow SDK's signature and meaning::

    from trainjob_status import update_trainjob_status

    for step in range(total):
        ...
        update_trainjob_status(100 * step / total, eta_seconds, {"loss": loss})

``StatusReporter`` is the object behind it (its own URL, files, interval and timeouts).
Framework callbacks: ``trainjob_status.integrations.transformers.attach(trainer)`` and
``trainjob_status.integrations.lightning.TrainJobStatusCallback()``. From a shell:
``trainjob-status report --progress 40 --eta 300 --metric loss=0.31``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .reporter import Stats, StatusReporter
from .shared import default_reporter, update_trainjob_status

__all__ = ["Stats", "StatusReporter", "__version__", "default_reporter", "update_trainjob_status"]

if TYPE_CHECKING:
    __version__: str

_version: str | None = None


def __getattr__(name: str) -> Any:
    # ``__version__`` is read from the distribution's metadata (client/pyproject.toml is
    # the one place it is written; pip and the server's ``==`` pin read the same) only
    # when asked for: importing importlib.metadata is most of what ``import
    # trainjob_status`` would otherwise cost a training script.
    global _version
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _version is None:
        from importlib import metadata

        try:
            _version = metadata.version("trainjob-status")
        except metadata.PackageNotFoundError:
            # A source tree on sys.path that was never installed.
            _version = "0+unknown"
    return _version
