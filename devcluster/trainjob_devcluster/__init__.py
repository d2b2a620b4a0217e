"""A development Kubernetes API server for tests, benchmarks and the demo.

Never for production: it keeps everything in memory, mints a throwaway CA at start and
trusts one static admin token. It speaks the real HTTP API closely enough that
kubernetes-asyncio and kubectl work against it unchanged.
"""

from importlib import metadata as _metadata

from .common.faults import Faults
from .harness.cluster import DevCluster

# Written once, in devcluster/pyproject.toml; read from the installed metadata.
try:
    __version__ = _metadata.version("trainjob-devcluster")
except _metadata.PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"

__all__ = ["DevCluster", "Faults", "__version__"]
