"""Accepted means stored, even when a replica stops with more than its drain can write:
what it could not write goes to a replica that stays (the ready endpoints of the
Service's EndpointSlices), which writes it. Only another replica may hand updates over:
a token of the server's ServiceAccount for the peers' audience, vouched for by
TokenReview; anything else is refused before its body is read, and nothing is written.

On the real control plane: EndpointSlices, TokenRequest and TokenReview as a cluster
serves them. The replicas are two servers on this machine's address (the API server
refuses loopback endpoints), told apart by their ports: each has an EndpointSlice of its
own, as pods of one Deployment share one port but not an address.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from trainjob_devcluster.harness.pytest_plugin import MakeStatusServer
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_devcluster.harness.testing import eventually
from trainjob_status.contract import audience
from trainjob_status_server.app import StatusServer
from trainjob_status_server.auth import AuthSettings, TokenAuthenticator
from trainjob_status_server.auth.claims import PEER_AUDIENCE
from trainjob_status_server.config import Config
from trainjob_status_server.peers.batch import HANDOVER_PATH
from trainjob_status_server.running import shutdown_deadline
from trainjob_status_server.status.writer import HANDOVER_SECONDS, CoalescingWriter

from .conftest import NS
from .replicas import (
    DIRTY,
    Replica,
    handed_count,
    link,
    lost_count,
    post,
    replica_config,
    session,
    stored_progress,
    update,
)
from .slowlink import SlowLink

__all__ = ["link", "session"]  # fixtures

on_the_real_server = pytest.mark.parametrize("kube_api", ["real"], indirect=True)

# The defaults' Service and ServiceAccount (the test certificates name the Service).
SERVER_NS = Config.service_namespace
SERVER_SA = Config.service_account
ENDPOINTSLICES = 'trainjob_status_cache_objects{resource="endpointslices"}'


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


def machine_address() -> str:
    """This machine's address on its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 9))
            address = str(probe.getsockname()[0])
        except OSError:
            address = "127.0.0.1"
    if address.startswith("127."):
        pytest.fail("this machine has no address but loopback: an endpoint needs one")
    return address


def checking_tokens(kube_api: RealCluster, *, token_review: bool = False) -> TokenAuthenticator:
    """Token authentication as deployed: it checks a replica's token too."""
    return TokenAuthenticator(
        AuthSettings(issuer=kube_api.issuer, own_token_path=None, token_review=token_review)
    )


def port_of(server: StatusServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def leaving_replica(
    config: Config, kubeconfig: Path, ports: list[int], address: str, **changes: Any
) -> Replica:
    """A replica as deployed at ``address`` (its Pod IP), that keeps a drain far too short
    for what it will hold: 4 s at 5 writes/s, the last HANDOVER_SECONDS of it kept for
    the hand-over."""
    settings: dict[str, Any] = {
        "host": "0.0.0.0",
        "pod_ip": address,
        "drain_timeout": 2 * HANDOVER_SECONDS,
        "drain_kube_api_qps": 5.0,
        "shutdown_delay": 0.5,
    }
    return Replica(replica_config(config, kubeconfig, ports, **{**settings, **changes}))


async def listing(replica: Replica, session: aiohttp.ClientSession, slices: int) -> None:
    async def listed() -> bool:
        return await replica.gauge(session, ENDPOINTSLICES) == slices

    await eventually(listed, f"the replica lists {slices} EndpointSlices")


async def stop(replica: Replica) -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(replica.task, shutdown_deadline(replica.config)) == 0


@on_the_real_server
async def test_what_the_drain_cannot_write_is_handed_to_a_replica_that_stays(
    kube_api: RealCluster,
    config: Config,
    link: SlowLink,
    session: aiohttp.ClientSession,
    make_status_server: MakeStatusServer,
    tmp_path: Path,
    unused_tcp_port_factory: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server_account(kube_api)
    names = [f"tj{i:03d}" for i in range(DIRTY)]
    for name in names:
        kube_api.create_trainjob(NS, name)
    slow = link.kubeconfig(kube_api.kubeconfig_path, tmp_path)
    ports = [unused_tcp_port_factory() for _ in range(3)]
    lost_before, given_before, taken_before = (
        lost_count(),
        handed_count("given"),
        handed_count("taken"),
    )
    address = machine_address()
    async with make_status_server(host=address, authenticator=checking_tokens(kube_api)) as stays:
        endpoint_slice(kube_api, "leaving", address, ports[0])
        staying_url = stays.url
        endpoint_slice(kube_api, "staying", address, port_of(stays))
        leaving = leaving_replica(
            config, slow, ports, address, peer_token_file=token_file(kube_api, tmp_path)
        )
        await leaving.ready(session)
        await listing(leaving, session, 2)
        for second, progress in ((1, 10), (2, 50)):
            for name in names:
                assert await post(session, leaving.url, name, update(progress, second)) == 200
        assert await leaving.gauge(session, "trainjob_status_pending_writes") >= 100
        await stop(leaving)
        await stays.writer.wait_idle()
    given = handed_count("given") - given_before
    taken = handed_count("taken") - taken_before
    # The premise: the drain wrote a fraction; the replica that stays took the rest.
    assert given == taken >= 100
    assert lost_count() == lost_before
    assert not [r for r in caplog.records if r.getMessage() == "update lost at shutdown"]
    handed = [r for r in caplog.records if r.getMessage() == "updates handed over"]
    assert handed
    assert {r.replica for r in handed} == {staying_url}  # type: ignore[attr-defined]
    assert {name: stored_progress(kube_api, name) for name in names} == dict.fromkeys(names, 50)


@on_the_real_server
async def test_a_replica_that_cannot_take_them_is_passed_over_for_the_next(
    kube_api: RealCluster,
    config: Config,
    link: SlowLink,
    session: aiohttp.ClientSession,
    make_status_server: MakeStatusServer,
    tmp_path: Path,
    unused_tcp_port_factory: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server_account(kube_api)
    names = [f"tj{i:02d}" for i in range(60)]
    for name in names:
        kube_api.create_trainjob(NS, name)
    slow = link.kubeconfig(kube_api.kubeconfig_path, tmp_path)
    ports = [unused_tcp_port_factory() for _ in range(4)]
    address = machine_address()
    lost_before = lost_count()
    async with (
        make_status_server(host=address, authenticator=checking_tokens(kube_api)) as stays,
        # Without token authentication a server takes no hand-over: its answer is 404.
        make_status_server(host=address) as refusing,
    ):
        endpoint_slice(kube_api, "leaving", address, ports[0])
        endpoint_slice(kube_api, "staying", address, port_of(stays))
        refusing_url = refusing.url
        endpoint_slice(kube_api, "refusing", address, port_of(refusing))
        endpoint_slice(kube_api, "gone", address, ports[3])  # nobody listens there
        leaving = leaving_replica(
            config, slow, ports[:3], address, peer_token_file=token_file(kube_api, tmp_path)
        )
        await leaving.ready(session)
        await listing(leaving, session, 4)
        for name in names:
            assert await post(session, leaving.url, name, update(70, 1)) == 200
        await stop(leaving)
        await stays.writer.wait_idle()
    failed = [r for r in caplog.records if r.getMessage() == "hand-over to a replica failed"]
    refused = [r for r in caplog.records if r.getMessage() == "hand-over refused by a replica"]
    # Each of the three replicas ranks first for about a third of the TrainJobs.
    assert [(r.replica, r.error) for r in failed] == [  # type: ignore[attr-defined]
        (f"https://{address}:{ports[3]}", "ClientConnectorError")
    ]
    assert [(r.replica, r.code) for r in refused] == [(refusing_url, 404)]  # type: ignore[attr-defined]
    assert lost_count() == lost_before
    assert {name: stored_progress(kube_api, name) for name in names} == dict.fromkeys(names, 70)


@on_the_real_server
async def test_without_its_token_or_ca_a_replica_hands_nothing_over_and_counts_the_loss(
    kube_api: RealCluster,
    config: Config,
    link: SlowLink,
    session: aiohttp.ClientSession,
    make_status_server: MakeStatusServer,
    tmp_path: Path,
    unused_tcp_port_factory: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server_account(kube_api)
    names = [f"tj{i}" for i in range(5)]
    for name in names:
        kube_api.create_trainjob(NS, name)
    slow = link.kubeconfig(kube_api.kubeconfig_path, tmp_path)
    ports = [unused_tcp_port_factory() for _ in range(3)]
    address = machine_address()
    token = token_file(kube_api, tmp_path)
    lost_before = lost_count()
    async with make_status_server(host=address, authenticator=checking_tokens(kube_api)) as stays:
        endpoint_slice(kube_api, "leaving", address, ports[0])
        endpoint_slice(kube_api, "staying", address, port_of(stays))
        leaving = leaving_replica(
            config,
            slow,
            ports,
            address,
            peer_token_file=token,
            ca_file=tmp_path / "no-such-ca.crt",
            min_write_interval=600.0,
        )
        await leaving.ready(session)
        await listing(leaving, session, 2)
        for name in names:
            assert await post(session, leaving.url, name, update(20, 1)) == 200
        async with asyncio.timeout(30):
            while {stored_progress(kube_api, name) for name in names} != {20}:
                await asyncio.sleep(0.1)  # the API server's objects: polled
        for name in names:
            assert await post(session, leaving.url, name, update(80, 2)) == 200
        token.unlink()  # as if its projected volume were gone
        link.cut()
        await stop(leaving)
    impossible = "hand-over impossible: the CA file"
    assert [r.levelname for r in caplog.records if r.getMessage() == impossible] == ["WARNING"]
    [nobody] = [r for r in caplog.records if r.getMessage() == "no replica to hand updates over to"]
    assert (nobody.trainjobs, nobody.replicas, nobody.token, nobody.ca) == (5, 1, False, False)  # type: ignore[attr-defined]
    assert lost_count() - lost_before == len(names)
    assert {stored_progress(kube_api, name) for name in names} == {20}


def batch(progress: int, name: str = "tj") -> bytes:
    return json.dumps(
        {
            "updates": [
                {
                    "namespace": NS,
                    "name": name,
                    "received": "2026-12-01T10:00:05Z",
                    "trainerStatus": {
                        "progressPercentage": progress,
                        "lastUpdatedTime": "2026-12-01T10:00:04Z",
                    },
                }
            ]
        }
    ).encode()


async def hand(
    session: aiohttp.ClientSession, server: StatusServer, body: bytes, token: str | None
) -> tuple[int, Any]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with session.post(server.url + HANDOVER_PATH, data=body, headers=headers) as answer:
        return answer.status, await answer.json()


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


@on_the_real_server
@pytest.mark.parametrize("token_review", [False, True], ids=["jwks", "token-review"])
async def test_only_a_replica_may_hand_updates_over(
    kube_api: RealCluster,
    session: aiohttp.ClientSession,
    make_status_server: MakeStatusServer,
    tmp_path: Path,
    token_review: bool,
) -> None:
    server_account(kube_api)
    kube_api.create_trainjob(NS, "tj")
    replica = token_file(kube_api, tmp_path).read_text()
    other_account = token_file(kube_api, tmp_path, account="default").read_text()
    other_audience = token_file(kube_api, tmp_path, audiences=(audience(NS, "tj"),)).read_text()
    head, claims, signature = replica.split(".")
    forged = f"{head}.{claims}.{signature[::-1]}"
    tokens = checking_tokens(kube_api, token_review=token_review)
    async with make_status_server(authenticator=tokens) as server:
        async with asyncio.timeout(10):
            await tokens.wait_ready()
        assert await hand(session, server, batch(30), None) == (
            401,
            status(401, "Unauthorized", "Unauthorized"),
        )
        assert await hand(session, server, batch(30), forged) == (
            401,
            status(401, "Unauthorized", "Unauthorized"),
        )
        for token in (other_account, other_audience):
            assert await hand(session, server, batch(30), token) == (
                403,
                status(403, "Forbidden", "Forbidden"),
            )
        code, answer = await hand(session, server, b'{"updates": [{"name": 1}]}', replica)
        assert (code, answer["message"]) == (
            422,
            "Invalid payload: updates[0].namespace: not a name",
        )
        assert isinstance(server.writer, CoalescingWriter)
        assert server.writer.pending == 0
        assert stored_progress(kube_api, "tj") is None
        # A replica's batch is taken and written, with the time its post was received.
        assert await hand(session, server, batch(30), replica) == (200, {"taken": 1})
        await server.writer.wait_idle()
    assert stored_progress(kube_api, "tj") == 30
