"""Replicas as the Deployment runs them, for the rolling-update and hand-over tests: a
server run by ``serve`` until SIGTERM, its API reached through a link that is slow or
down on demand."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client import REGISTRY

from trainjob_devcluster.harness import testing
from trainjob_devcluster.harness.acceptall import AcceptAll
from trainjob_devcluster.harness.pytest_plugin import KubeAPI
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_status_server.auth import AuthSettings, TokenAuthenticator
from trainjob_status_server.auth.claims import PEER_AUDIENCE
from trainjob_status_server.config import Config
from trainjob_status_server.running import serve_until_signalled

from .conftest import GROUP, NS, ServingCerts, status_path, with_changes
from .slowlink import SlowLink

# The defaults' Service namespace (the test certificates name the Service).
SERVER_NS = Config.service_namespace
DIRTY = 150
HANDED = "trainjob_status_peer_updates_total"
LOST = "trainjob_status_updates_dropped_total"


def update(progress: int, second: int) -> bytes:
    return json.dumps(
        {
            "trainerStatus": {
                "progressPercentage": progress,
                "lastUpdatedTime": f"2026-12-01T10:00:{second:02d}Z",
            }
        }
    ).encode()


def stored_progress(kube_api: KubeAPI, name: str) -> int | None:
    obj = kube_api.get("trainjobs", NS, name, GROUP)
    assert obj is not None
    status = (obj.get("status") or {}).get("trainerStatus") or {}
    value = status.get("progressPercentage")
    return value if isinstance(value, int) else None


def lost_count() -> float:
    return REGISTRY.get_sample_value(LOST, {"reason": "shutdown"}) or 0.0


def handed_count(direction: str) -> float:
    return REGISTRY.get_sample_value(HANDED, {"direction": direction}) or 0.0


@pytest_asyncio.fixture
async def link(kube_api: KubeAPI) -> AsyncIterator[SlowLink]:
    """The API reached with 50 ms more each way on every chunk: a slow API server."""
    async with SlowLink(kube_api.url, delay=0.05) as slow:
        yield slow


@pytest_asyncio.fixture
async def session(certs: ServingCerts) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(ssl=certs.client_context())
    async with aiohttp.ClientSession(connector=connector) as client:
        yield client


class Replica:
    """A server run as the Deployment runs it (``serve``, until SIGTERM), at the default
    write budget."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.url = f"https://127.0.0.1:{config.port}"
        self.metrics_url = f"http://127.0.0.1:{config.metrics_port}"
        self.task = asyncio.create_task(serve_until_signalled(config, AcceptAll()))

    async def ready(self, session: aiohttp.ClientSession, expected: int = 200) -> None:
        async with asyncio.timeout(10):
            while True:
                try:
                    async with session.get(self.metrics_url + "/readyz") as answer:
                        if answer.status == expected:
                            return
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.02)

    async def gauge(self, session: aiohttp.ClientSession, name: str) -> float:
        async with session.get(self.metrics_url + "/metrics") as answer:
            for line in (await answer.text()).splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise AssertionError(f"{name} is not on the page")


def replica_config(config: Config, kubeconfig: Path, ports: list[int], **changes: object) -> Config:
    """As deployed: the default write budget and interval, unless ``changes`` say."""
    deployed: dict[str, object] = {
        "kube_api_qps": Config.kube_api_qps,
        "kube_api_burst": Config.kube_api_burst,
        "min_write_interval": Config.min_write_interval,
    }
    return with_changes(
        config,
        kubeconfig=kubeconfig,
        port=ports[0],
        metrics_port=ports[1],
        probe_port=ports[2],
        webhook_port=0,
        **{**deployed, **changes},
    )


async def post(session: aiohttp.ClientSession, url: str, name: str, body: bytes) -> int:
    async with session.post(
        url + status_path(NS, name), data=body, headers={"Authorization": "Bearer test"}
    ) as answer:
        return answer.status


def machine_address() -> str:
    """This machine's address on its default route: an endpoint needs one."""
    address = testing.machine_address()
    if address is None:
        pytest.fail("this machine has no address but loopback: an endpoint needs one")
    return address


# The defaults' ServiceAccount: the replicas' peer tokens are its.
SERVER_SA = Config.service_account


def server_account(kube_api: RealCluster) -> None:
    kube_api.ensure_namespace(SERVER_NS)
    if kube_api.get("serviceaccounts", SERVER_NS, SERVER_SA) is None:
        kube_api.create("serviceaccounts", {"metadata": {"name": SERVER_SA}}, SERVER_NS)


def token_file(
    kube_api: RealCluster,
    folder: Path,
    *,
    account: str = SERVER_SA,
    audiences: tuple[str, ...] = (PEER_AUDIENCE,),
) -> Path:
    """A token as the Deployment's projected volume holds it."""
    path = folder / f"{account}-{len(list(folder.glob('*.token')))}.token"
    path.write_text(kube_api.request_token(SERVER_NS, account, list(audiences)))
    return path


def endpoint_slice(kube_api: RealCluster, name: str, address: str, port: int) -> None:
    """One replica's endpoint, ready, as the EndpointSlice controller lists it."""
    kube_api.call(
        "POST",
        f"/apis/discovery.k8s.io/v1/namespaces/{SERVER_NS}/endpointslices",
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/service-name": Config.service_name,
                    "endpointslice.kubernetes.io/managed-by": "tests.trainjob-status",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": "status-server", "port": port, "protocol": "TCP"}],
        },
    )


def checking_tokens(kube_api: RealCluster, *, token_review: bool = False) -> TokenAuthenticator:
    """Token authentication as deployed: it checks a replica's token too."""
    return TokenAuthenticator(
        AuthSettings(issuer=kube_api.issuer, own_token_path=None, token_review=token_review)
    )
