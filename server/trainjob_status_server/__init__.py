"""Status ingest server, pod injector and Prometheus exporter for Kubeflow Trainer TrainJobs."""

from importlib import metadata as _metadata

# The version is written once, in server/pyproject.toml; this reads the installed
# metadata, which is what pip and trainjob-devcluster's ``==`` pin see too.
try:
    __version__ = _metadata.version("trainjob-status-server")
except _metadata.PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
