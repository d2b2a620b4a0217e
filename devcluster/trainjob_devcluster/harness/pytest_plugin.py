"""Pytest fixtures: a fresh development cluster per test, the real control plane
(kube-apiserver and etcd, one per session, emptied between tests), serving certificates,
and a factory of status servers against either.

A test runs on both API servers with ``@on_both_servers`` and the ``kube_api`` fixture:
``kube_api`` is the development cluster unless that mark asks for the real one too (or
``@on_real_server`` for the real one alone), and
``status_config`` (so ``make_status_server``) follows it.

Enable with ``pytest_plugins = ["trainjob_devcluster.harness.pytest_plugin"]``. The helpers they
are built on (:mod:`.testing`) import without pytest.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import pytest
import pytest_asyncio

from trainjob_status_server.app import StatusServer
from trainjob_status_server.auth.authenticator import Authenticator
from trainjob_status_server.config import Config

from .cluster import DevCluster
from .controlplane import AssetsMissing, ControlPlane, find_assets
from .realcluster import RealCluster
from .testing import ServingCerts, running_server, server_config

KubeAPI = DevCluster | RealCluster

# The two API servers a test marked with it runs on (ids: "devcluster", "real").
on_both_servers = pytest.mark.parametrize("kube_api", ["devcluster", "real"], indirect=True)
# For what only the real API server answers as the reference (validation, SSA's fine print).
on_real_server = pytest.mark.parametrize("kube_api", ["real"], indirect=True)


def _in_ci() -> bool:
    return os.environ.get("TRAINJOB_STATUS_CI") == "1"


def require_binary(name: str, package: str | None = None) -> str:
    """The path of executable ``name``; skips the calling test when it is missing, unless
    CI runs it (TRAINJOB_STATUS_CI=1): there a missing binary fails the test. ``package``
    is the Debian package that has it (``name`` by default)."""
    path = shutil.which(name)
    if path is not None:
        return path
    install = f"apt-get install -y {package or name}"
    if _in_ci():
        pytest.fail(f"{name} is not installed (CI installs it: {install})")
    pytest.skip(f"{name} is not installed ({install})")


@pytest_asyncio.fixture
async def devcluster() -> AsyncIterator[DevCluster]:
    """A running DevCluster: ``.url``, ``.kubeconfig_path``, ``.faults``, ``.store`` ..."""
    async with DevCluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def control_plane() -> Iterator[RealCluster]:
    """etcd and kube-apiserver for the whole session (their start costs seconds), with
    the TrainJob and JobSet CRDs. Skipped where ``KUBEBUILDER_ASSETS`` has no binaries,
    except under CI (TRAINJOB_STATUS_CI=1), where that fails."""
    try:
        assets = find_assets()
    except AssetsMissing as missing:
        if _in_ci():
            pytest.fail(str(missing))
        pytest.skip(str(missing))
    with ControlPlane(assets) as plane:
        cluster = RealCluster(plane)
        cluster.mark_baseline()
        yield cluster


@pytest.fixture
def real_cluster(control_plane: RealCluster) -> RealCluster:
    """The session's control plane, emptied of what earlier tests made."""
    control_plane.reset()
    return control_plane


@pytest.fixture
def kube_api(request: pytest.FixtureRequest) -> KubeAPI:
    """The API server a test talks to: the development cluster, or with
    ``@on_both_servers`` each of it and the real control plane in turn."""
    which = getattr(request, "param", "devcluster")
    found: KubeAPI = request.getfixturevalue("real_cluster" if which == "real" else "devcluster")
    return found


@pytest.fixture
def serving_certs(tmp_path: Path) -> ServingCerts:
    """A CA of its own and a localhost serving pair in ``tmp_path`` (tls.crt, tls.key,
    ca.crt)."""
    return ServingCerts.create(tmp_path)


@pytest.fixture
def status_config(kube_api: KubeAPI, serving_certs: ServingCerts) -> Config:
    """:func:`.testing.server_config` against ``kube_api`` with ``serving_certs``."""
    return server_config(kube_api.kubeconfig_path, serving_certs)


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
