"""The ``devcluster`` pytest fixture: a fresh development cluster per test.

Enable with ``pytest_plugins = ["trainjob_devcluster.pytest_plugin"]``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from .cluster import DevCluster


@pytest_asyncio.fixture
async def devcluster() -> AsyncIterator[DevCluster]:
    """A running DevCluster: ``.url``, ``.kubeconfig_path``, ``.faults``, ``.store`` ..."""
    async with DevCluster() as cluster:
        yield cluster
