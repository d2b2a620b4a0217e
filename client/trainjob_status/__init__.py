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

from importlib import metadata as _metadata

from .reporter import Stats, StatusReporter
from .shared import default_reporter, update_trainjob_status

# The distribution's own metadata is the one place the version is written down
# (client/pyproject.toml); pip and the server's ``==`` pin read the same. A source tree on
# sys.path that was never installed has none.
try:
    __version__ = _metadata.version("trainjob-status")
except _metadata.PackageNotFoundError:
    __version__ = "0+unknown"

__all__ = ["Stats", "StatusReporter", "__version__", "default_reporter", "update_trainjob_status"]
