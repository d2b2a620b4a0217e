"""Pytest fixtures: a fresh development cluster per test, serving certificates, and a
factory of status servers against that cluster.

Enable with ``pytest_plugins = ["trainjob_devcluster.pytest_plugin"]``. The helpers they
are built on (:mod:`.testing`) import without pytest.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import pytest
import pytest_asyncio

from trainjob_status_server.app import StatusServer
from trainjob_status_server.auth.authenticator import Authenticator
from trainjob_status_server.config import Config

from .cluster import DevCluster
from .testing import ServingCerts, running_server, server_config


def require_binary(name: str, package: str | None = None) -> str:
    """The path of executable ``name``; skips the calling test when it is missing, unless
    CI runs it (TRAINJOB_STATUS_CI=1): there a missing binary fails the test. ``package``
    is the Debian package that has it (``name`` by default)."""
    path = shutil.which(name)
    if path is not None:
        return path
    install = f"apt-get install -y {package or name}"
    if os.environ.get("TRAINJOB_STATUS_CI") == "1":
        pytest.fail(f"{name} is not installed (CI installs it: {install})")
    pytest.skip(f"{name} is not installed ({install})")


@pytest_asyncio.fixture
async def devcluster() -> AsyncIterator[DevCluster]:
    """A running DevCluster: ``.url``, ``.kubeconfig_path``, ``.faults``, ``.store`` ..."""
    async with DevCluster() as cluster:
        yield cluster


@pytest.fixture
def serving_certs(tmp_path: Path) -> ServingCerts:
    """A CA of its own and a localhost serving pair in ``tmp_path`` (tls.crt, tls.key,
    ca.crt)."""
    return ServingCerts.create(tmp_path)


@pytest.fixture
def status_config(devcluster: DevCluster, serving_certs: ServingCerts) -> Config:
    """:func:`.testing.server_config` against the ``devcluster`` with ``serving_certs``."""
    return server_config(devcluster.kubeconfig_path, serving_certs)


class MakeStatusServer(Protocol):
    """The type of the ``make_status_server`` fixture."""

    def __call__(
        self,
        config: Config | None = None,
        authenticator: Authenticator | None = None,
        **changes: Any,
    ) -> contextlib.AbstractAsyncContextManager[StatusServer]: ...


@pytest.fixture
def make_status_server(status_config: Config) -> MakeStatusServer:
    """``async with make_status_server(write_mode="direct") as server``: a started server
    whose TrainJob cache is synced, from ``config`` (``status_config`` by default) with
    ``changes``; accept-all authentication unless an ``authenticator`` is given."""

    def make(
        config: Config | None = None,
        authenticator: Authenticator | None = None,
        **changes: Any,
    ) -> contextlib.AbstractAsyncContextManager[StatusServer]:
        return running_server(replace(config or status_config, **changes), authenticator)

    return make
