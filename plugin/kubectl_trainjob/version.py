"""The installed distribution's version (``kubectl trainjob --version``)."""

from importlib import metadata as _metadata

# The version is written once, in plugin/pyproject.toml; this reads the installed
# metadata, which is what pip sees too.
try:
    __version__ = _metadata.version("kubectl-trainjob")
except _metadata.PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
