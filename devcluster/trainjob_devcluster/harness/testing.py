"""Test tooling shared by the suite and the benchmarks: serving certificates, a status
server configured for tests and started against a cluster, polling helpers, free ports,
and a cluster plus server on an event loop of their own for synchronous callers.

Importable without pytest; the fixtures built on it are in :mod:`.pytest_plugin`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from aiohttp import web

from trainjob_status import contract
from trainjob_status_server.app import StatusServer
from trainjob_status_server.auth.authenticator import Authenticator
from trainjob_status_server.config import Config
from trainjob_status_server.kube.cache import WatchCache
from trainjob_status_server.metrics.exporter import Exporter

from .acceptall import AcceptAll
from .cluster import DevCluster
from .pki import CertificateAuthority

T = TypeVar("T")


status_path = contract.status_path


def free_port() -> int:
    """A TCP port nothing listens on at the moment of asking (on 127.0.0.1)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# -- certificates -------------------------------------------------------------------------


SERVICE_NAME = "trainjob-status.trainjob-status.svc"
"""The Service name of the default configuration (its name in its namespace)."""


@dataclass
class ServingCerts:
    """A CA of its own and a serving pair for localhost / 127.0.0.1 in two PEM files,
    also named as the default Service (``SERVICE_NAME``): the name replicas check in each
    other's certificate when one hands updates to another."""

    ca: CertificateAuthority
    cert_file: Path
    key_file: Path

    @classmethod
    def create(cls, directory: Path) -> ServingCerts:
        """A fresh CA and pair written to ``directory``/tls.crt, tls.key and ca.crt."""
        serving = cls(CertificateAuthority(), directory / "tls.crt", directory / "tls.key")
        serving.rotate()
        serving.ca_file.write_bytes(serving.ca.cert_pem)
        return serving

    @property
    def ca_file(self) -> Path:
        """The CA certificate (PEM) next to the pair, as a client's trust file."""
        return self.cert_file.with_name("ca.crt")

    def rotate(self) -> bytes:
        """Write a fresh pair in place; returns the new certificate PEM."""
        cert, key = self.ca.issue_server_cert(["localhost", SERVICE_NAME], ["127.0.0.1"])
        self.key_file.write_bytes(key)
        self.cert_file.write_bytes(cert)
        return cert

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts this CA only."""
        return ssl.create_default_context(cadata=self.ca.cert_pem.decode())


# -- the status server --------------------------------------------------------------------


def server_config(kubeconfig: Path, certs: ServingCerts, **changes: Any) -> Config:
    """A server config for tests: loopback, every port chosen by the system, the serving
    pair of ``certs``, an API budget that never throttles a test, and writes back to back
    (the coalescing tests set their own interval); ``changes`` override any field."""
    config = Config(
        host="127.0.0.1",
        port=0,
        metrics_port=0,
        probe_port=0,
        webhook_port=0,
        tls_cert_file=certs.cert_file,
        tls_key_file=certs.key_file,
        tls_reload_interval=0.05,
        kubeconfig=kubeconfig,
        kube_api_timeout=2.0,
        kube_api_qps=1000.0,
        kube_api_burst=1000,
        kube_metrics_qps=1000.0,
        kube_metrics_burst=1000,
        shutdown_timeout=5.0,
        shutdown_delay=0.0,
        min_write_interval=0.0,
    )
    return replace(config, **changes)


@contextlib.asynccontextmanager
async def running_server(
    config: Config, authenticator: Authenticator | None = None
) -> AsyncIterator[StatusServer]:
    """A started server (accept-all authentication unless given) whose TrainJob cache has
    loaded its first list; stopped on exit."""
    async with StatusServer(config, authenticator or AcceptAll()) as server:
        await server.trainjobs.synced.wait()
        yield server


async def settled(server: StatusServer, within: float = 10.0) -> None:
    """Until every cache the server started has loaded its first list (or, for an
    optional resource the cluster does not serve, given up on it): from then on the
    server lists nothing more, and a caller may count the requests something else costs."""

    def done() -> bool:
        steps = server.jobset_steps
        jobsets = steps is None or steps.jobsets.synced.is_set() or steps.jobsets.unavailable
        return server.trainjobs.synced.is_set() and jobsets

    async with asyncio.timeout(within):
        # Three caches' flags, no one event: polled.
        while not done():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def eventually(
    check: Callable[[], Awaitable[T]], what: str = "", within: float = 20.0, every: float = 0.1
) -> T:
    """Await ``check()`` every ``every`` seconds until it returns something truthy, and
    return that; AssertionError naming ``what`` after ``within`` seconds."""
    try:
        async with asyncio.timeout(within):
            while True:
                result = await check()
                if result:
                    return result
                await asyncio.sleep(every)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what or check}") from None


@contextlib.asynccontextmanager
async def exporter_on_a_port(trainjobs: WatchCache, max_series: int) -> AsyncIterator[str]:
    """An exporter over ``trainjobs`` with ``max_series`` series at most, serving
    ``/metrics`` in plain HTTP on a loopback port of its own; yields its host:port."""
    exporter = Exporter(trainjobs, max_series=max_series)
    exporter.start()
    app = web.Application()
    app.router.add_get("/metrics", exporter.handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield f"127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
        exporter.stop()


# -- on a loop of their own ---------------------------------------------------------------


class ApiServer(Protocol):
    """An API server someone else runs (the real control plane's handle)."""

    @property
    def kubeconfig_path(self) -> Path: ...


class BackgroundStack:
    """A development cluster (or ``cluster``, the real control plane, which the caller
    owns) and a status server on an event loop in a thread of their own, so synchronous
    code (a hypothesis test, a benchmark) drives them over real sockets. ``changes``
    override :func:`server_config`'s fields."""

    def __init__(
        self,
        certs: ServingCerts,
        timeout: float = 60.0,
        cluster: ApiServer | None = None,
        **changes: Any,
    ) -> None:
        self.certs = certs
        self.timeout = timeout
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.cluster: DevCluster | ApiServer = cluster or self.run(DevCluster().start())
        config = server_config(self.cluster.kubeconfig_path, certs, **changes)
        try:
            self.server: StatusServer = self.run(self._start_server(config))
        except BaseException:
            self._stop_cluster()
            self._stop_loop()
            raise

    @staticmethod
    async def _start_server(config: Config) -> StatusServer:
        server = await StatusServer(config, AcceptAll()).start()
        await server.trainjobs.synced.wait()
        return server

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the stack's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(self.timeout)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` run on the stack's loop: what changes the cluster's
        store (creates, deletes) must, as the store notifies watches from there."""

        async def call() -> T:
            return fn(*args, **kwargs)

        return self.run(call())

    def close(self) -> None:
        self.run(self.server.stop())
        self._stop_cluster()
        self._stop_loop()

    def _stop_cluster(self) -> None:
        if isinstance(self.cluster, DevCluster):
            self.run(self.cluster.stop())

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def machine_address() -> str | None:
    """This machine's address on its default route (no packet is sent), None where it has
    none but loopback: what an endpoint others reach it at must name (kube-apiserver
    refuses loopback endpoints)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 9))
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") else address
