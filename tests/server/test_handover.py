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
import datetime as dt
import json
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from trainjob_devcluster.harness.pytest_plugin import MakeStatusServer, on_real_server
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_devcluster.harness.testing import eventually
from trainjob_status.contract import audience
from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config
from trainjob_status_server.peers.batch import HANDOVER_PATH
from trainjob_status_server.peers.ring import Peer, ranked
from trainjob_status_server.running import shutdown_deadline
from trainjob_status_server.status.validation import EncodedStatus, parse_trainer_status
from trainjob_status_server.status.writer import HANDOVER_SECONDS, CoalescingWriter

from .conftest import NS
from .replicas import (
    DIRTY,
    Replica,
    checking_tokens,
    endpoint_slice,
    handed_count,
    link,
    lost_count,
    machine_address,
    post,
    replica_config,
    server_account,
    session,
    stored_progress,
    token_file,
    update,
)
from .slowlink import SlowLink

__all__ = ["link", "session"]  # fixtures


ENDPOINTSLICES = 'trainjob_status_cache_objects{resource="endpointslices"}'


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


@on_real_server
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
    lost_before, given_before, taken_before, kept_before = (
        lost_count(),
        handed_count("given"),
        handed_count("taken"),
        handed_count("kept"),
    )
    address = machine_address()
    async with make_status_server(host=address, authenticator=checking_tokens(kube_api)) as stays:
        endpoint_slice(kube_api, "leaving", address, ports[0])
        staying_url = stays.url
        endpoint_slice(kube_api, "staying", address, port_of(stays))
        leaving = leaving_replica(
            config,
            slow,
            ports,
            address,
            peer_token_file=token_file(kube_api, tmp_path),
            kube_api_qps=1.0,  # a write a second while it posts: its share stays held
            kube_api_burst=1,
        )
        await leaving.ready(session)
        await listing(leaving, session, 2)
        for second, progress in ((1, 10), (2, 50)):
            for name in names:
                assert await post(session, leaving.url, name, update(progress, second)) == 200
        await stop(leaving)
        await stays.writer.wait_idle()
    given = handed_count("given") - given_before
    taken = handed_count("taken") - taken_before
    # Given as posted (the staying replica's share) and at shutdown: all taken.
    assert given == taken
    assert handed_count("kept") == kept_before
    assert lost_count() == lost_before
    assert not [r for r in caplog.records if r.getMessage() == "update lost at shutdown"]
    # What the staying replica owns was given to it as posted; the leaving one held its
    # own share, far more than its drain wrote (2 s at 5 writes/s), and handed it over.
    handed = [r for r in caplog.records if r.getMessage() == "updates handed over"]
    assert {r.replica for r in handed} == {staying_url}  # type: ignore[attr-defined]
    assert sum(r.trainjobs for r in handed) >= DIRTY / 4 - 15  # type: ignore[attr-defined]
    assert {name: stored_progress(kube_api, name) for name in names} == dict.fromkeys(names, 50)


@on_real_server
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
    kept = [
        r for r in caplog.records if r.getMessage() == "updates kept: their owner did not take them"
    ]
    # Each of the four replicas ranks first for about a quarter of the TrainJobs: the
    # leaving replica gives each its share as posted (the two that cannot take theirs
    # leave them to it), and at shutdown hands over what it holds, past those two.
    assert {(r.replica, r.error) for r in failed} == {  # type: ignore[attr-defined]
        (f"https://{address}:{ports[3]}", "ClientConnectorError")
    }
    assert {(r.replica, r.code) for r in refused} == {(refusing_url, 404)}  # type: ignore[attr-defined]
    assert {r.replica for r in kept} == {f"https://{address}:{ports[3]}", refusing_url}  # type: ignore[attr-defined]
    assert lost_count() == lost_before
    assert {name: stored_progress(kube_api, name) for name in names} == dict.fromkeys(names, 70)


@on_real_server
async def test_without_the_ca_a_replica_hands_nothing_over_and_counts_the_loss(
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
        link.cut()
        await stop(leaving)
    impossible = "hand-over impossible: the CA file"
    assert [r.levelname for r in caplog.records if r.getMessage() == impossible] == ["WARNING"]
    [nobody] = [r for r in caplog.records if r.getMessage() == "no replica to hand updates over to"]
    assert (nobody.trainjobs, nobody.replicas, nobody.token, nobody.ca) == (5, 1, True, False)  # type: ignore[attr-defined]
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


@on_real_server
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


def progress_series(page: bytes) -> dict[str, float]:
    """The TrainJobs of a metrics page's ``trainjob_progress_ratio``, with their value."""
    found = {}
    for line in page.decode().splitlines():
        if line.startswith("trainjob_progress_ratio{"):
            labels, value = line.rsplit(" ", 1)
            found[labels.split('trainjob="', 1)[1].split('"', 1)[0]] = float(value)
    return found


def accepted(progress: int, second: int) -> EncodedStatus:
    """An update as a post that passed its checks hands it to the server's writer."""
    received = dt.datetime(2026, 12, 1, 10, 0, second, tzinfo=dt.UTC)
    payload = json.loads(update(progress, second))
    status = parse_trainer_status(payload, trainjob="tj", received=received)
    assert status is not None
    return status.encoded(received)


@on_real_server
async def test_each_trainjob_is_written_by_its_owner_whichever_replica_takes_its_posts(
    kube_api: RealCluster,
    make_status_server: MakeStatusServer,
    tmp_path: Path,
    unused_tcp_port_factory: Any,
) -> None:
    server_account(kube_api)
    names = [f"tj{i:02d}" for i in range(40)]
    for name in names:
        kube_api.create_trainjob(NS, name)
    address = machine_address()
    ports = [unused_tcp_port_factory() for _ in range(2)]
    token = token_file(kube_api, tmp_path)
    tokens = [checking_tokens(kube_api) for _ in ports]
    for port in ports:
        endpoint_slice(kube_api, f"replica-{port}", address, port)
    async with (
        make_status_server(
            host=address,
            port=ports[0],
            pod_ip=address,
            peer_token_file=token,
            authenticator=tokens[0],
        ) as first,
        make_status_server(
            host=address,
            port=ports[1],
            pod_ip=address,
            peer_token_file=token,
            authenticator=tokens[1],
        ) as second,
    ):
        replicas = (first, second)
        for server, checks in zip(replicas, tokens, strict=True):
            assert server.replicas is not None
            listed = server.replicas.endpoints

            async def both_listed(listed: Any = listed) -> bool:
                return len(listed) == 2

            await eventually(both_listed, "each replica lists both endpoints")
            async with asyncio.timeout(10):
                await checks.wait_ready()
        # Every TrainJob's posts reach both replicas, as the Service spreads them.
        for second_, progress in ((1, 10), (2, 20), (3, 30)):
            for i, name in enumerate(names):
                taking = replicas[(i + second_) % 2]
                assert taking.forwarder is not None
                await taking.forwarder.write(NS, name, accepted(progress, second_))

        async def settled() -> bool:
            for server in replicas:
                assert server.forwarder is not None
                assert isinstance(server.writer, CoalescingWriter)
                await server.writer.wait_idle()
            return all(s.forwarder is not None and s.forwarder.queued == 0 for s in replicas)

        await eventually(settled, "what each replica was given is written")
        for server in replicas:
            await server.writer.wait_idle()
        exported = [progress_series(server.exporter.render()[0]) for server in replicas]
        written = [
            server.writer.writing
            for server in replicas
            if isinstance(server.writer, CoalescingWriter)
        ]
    peers = [Peer(address, port) for port in ports]
    owners = {(NS, name): ranked((NS, name), peers)[0] for name in names}
    assert written == [{key for key, owner in owners.items() if owner == peer} for peer in peers]
    assert all(written)  # both own some
    # And each exports those it owns: one series per TrainJob across the replicas.
    assert exported == [
        {name: 0.3 for (_, name), owner in owners.items() if owner == peer} for peer in peers
    ]
    assert {name: stored_progress(kube_api, name) for name in names} == dict.fromkeys(names, 30)
