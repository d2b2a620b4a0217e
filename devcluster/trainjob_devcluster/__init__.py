"""A development Kubernetes API server for tests, benchmarks and the demo.

Never for production: it keeps everything in memory, mints a throwaway CA at start and
trusts one static admin token. It speaks the real HTTP API closely enough that
kubernetes-asyncio and kubectl work against it unchanged.
"""

from .cluster import DevCluster
from .faults import Faults

__all__ = ["DevCluster", "Faults"]
