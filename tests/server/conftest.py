"""A running status server against the devcluster, and an HTTPS client that trusts it."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from cryptography.hazmat.primitives.serialization import Encoding

from trainjob_devcluster import DevCluster
from trainjob_devcluster.acceptall import AcceptAll
from trainjob_devcluster.pki import CertificateAuthority
from trainjob_status import contract
from trainjob_status.contract import status_path
from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config

NS = "team-a"
GROUP = contract.GROUP


@dataclass
class ServingCerts:
    ca: CertificateAuthority
    cert_file: Path
    key_file: Path

    def rotate(self) -> bytes:
        """Write a fresh pair in place; returns the new certificate PEM."""
        cert, key = self.ca.issue_server_cert(["localhost"], ["127.0.0.1"])
        self.key_file.write_bytes(key)
        self.cert_file.write_bytes(cert)
        return cert

    def client_context(self) -> ssl.SSLContext:
        pem = self.ca.certificate.public_bytes(Encoding.PEM).decode()
        return ssl.create_default_context(cadata=pem)


@pytest.fixture
def certs(tmp_path: Path) -> ServingCerts:
    serving = ServingCerts(CertificateAuthority(), tmp_path / "tls.crt", tmp_path / "tls.key")
    serving.rotate()
    return serving


@pytest.fixture
def config(devcluster: DevCluster, certs: ServingCerts) -> Config:
    return Config(
        host="127.0.0.1",
        port=0,
        metrics_port=0,
        probe_port=0,
        tls_cert_file=certs.cert_file,
        tls_key_file=certs.key_file,
        tls_reload_interval=0.05,
        kubeconfig=devcluster.kubeconfig_path,
        kube_api_timeout=2.0,
        kube_api_qps=1000.0,
        kube_api_burst=1000,
        shutdown_timeout=5.0,
        # Tests write back to back; the coalescing tests set their own interval.
        min_write_interval=0.0,
    )


@pytest_asyncio.fixture
async def server(config: Config) -> AsyncIterator[StatusServer]:
    async with StatusServer(config, AcceptAll()) as running:
        await running.trainjobs.synced.wait()
        yield running


class Poster:
    """Posts to the server over HTTPS keep-alive, verifying its certificate."""

    def __init__(self, server: StatusServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session

    async def request(
        self,
        method: str,
        path: str,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, aiohttp.ClientResponse]:
        async with self.session.request(
            method, self.server.url + path, data=data, headers=headers or {}
        ) as response:
            raw = await response.read()
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
            return response.status, body, response

    async def post(
        self, name: str, body: Any, *, namespace: str = NS, raw: bytes | None = None
    ) -> tuple[int, Any]:
        data = raw if raw is not None else json.dumps(body).encode()
        code, parsed, _ = await self.request(
            "POST",
            status_path(namespace, name),
            data,
            {"Authorization": "Bearer test"},
        )
        # A post is answered once queued; tests look at the API after the write.
        await self.server.writer.wait_idle()
        return code, parsed


@pytest_asyncio.fixture
async def poster(server: StatusServer, certs: ServingCerts) -> AsyncIterator[Poster]:
    connector = aiohttp.TCPConnector(ssl=certs.client_context())
    async with aiohttp.ClientSession(connector=connector) as session:
        yield Poster(server, session)


def with_changes(config: Config, **changes: Any) -> Config:
    return replace(config, **changes)


@pytest_asyncio.fixture
async def direct_poster(config: Config, certs: ServingCerts) -> AsyncIterator[Poster]:
    """A server in ``--write-mode direct``: one write per post, answered with its outcome."""
    async with StatusServer(with_changes(config, write_mode="direct"), AcceptAll()) as running:
        await running.trainjobs.synced.wait()
        connector = aiohttp.TCPConnector(ssl=certs.client_context())
        async with aiohttp.ClientSession(connector=connector) as session:
            yield Poster(running, session)


async def settled(server: StatusServer, within: float = 10.0) -> None:
    """Until every cache the server started has loaded its first list (or, for an
    optional resource the cluster does not serve, given up on it): from then on the
    server lists nothing more, and a test may count the requests something else costs."""

    def done() -> bool:
        steps = server.jobset_steps
        jobsets = steps is None or steps.jobsets.synced.is_set() or steps.jobsets.unavailable
        return server.trainjobs.synced.is_set() and jobsets

    async with asyncio.timeout(within):
        while not done():
            await asyncio.sleep(0.01)
