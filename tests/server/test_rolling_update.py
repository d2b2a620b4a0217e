"""A rolling update loses nothing that was answered 200: on SIGTERM a replica takes no
new update (503 with Retry-After, the connection closed, so the client's retry reaches a
replica that stays), writes what it holds at the drain budget within --drain-timeout,
and what it cannot write (the API down for the whole grace period) is logged per
TrainJob and counted. On both API servers, reached through a link that is slow or down
on demand. Handing over to a replica that stays: test_handover.py."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

import aiohttp
import pytest

from trainjob_devcluster.harness.pytest_plugin import KubeAPI, MakeStatusServer, on_both_servers
from trainjob_status_server.config import Config
from trainjob_status_server.running import shutdown_deadline

from .conftest import NS, ServingCerts, status_path
from .replicas import (
    DIRTY,
    Replica,
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


@on_both_servers
async def test_a_rolling_update_of_two_replicas_loses_no_accepted_update(
    kube_api: KubeAPI,
    config: Config,
    certs: ServingCerts,
    link: SlowLink,
    session: aiohttp.ClientSession,
    make_status_server: MakeStatusServer,
    tmp_path: Path,
    unused_tcp_port_factory: object,
    caplog: pytest.LogCaptureFixture,
) -> None:
    names = [f"tj{i:03d}" for i in range(DIRTY)]
    for name in names:
        kube_api.create_trainjob(NS, name)
    slow = link.kubeconfig(kube_api.kubeconfig_path, tmp_path)
    ports = [unused_tcp_port_factory() for _ in range(3)]  # type: ignore[operator]
    lost_before = lost_count()
    async with make_status_server(kubeconfig=slow) as stays:
        # Long enough for the late post below to land within it on a loaded machine.
        leaving = Replica(replica_config(config, slow, ports, shutdown_delay=5.0))
        await leaving.ready(session)
        for second, progress in ((1, 10), (2, 50)):
            for name in names:
                assert await post(session, leaving.url, name, update(progress, second)) == 200
        # The premise: far more is held than the steady budget (5 writes/s) writes in
        # the drain's 10 s.
        assert await leaving.gauge(session, "trainjob_status_pending_writes") >= 100
        os.kill(os.getpid(), signal.SIGTERM)
        await leaving.ready(session, expected=503)
        # Within --shutdown-delay the Service may still send a post here: not taken, and
        # the connection closed so that the retry opens a new one.
        body = update(60, 3)
        fresh = aiohttp.TCPConnector(ssl=certs.client_context())
        async with (
            aiohttp.ClientSession(connector=fresh) as late,
            late.post(
                leaving.url + status_path(NS, names[0]),
                data=body,
                headers={"Authorization": "Bearer test"},
            ) as refused,
        ):
            assert refused.status == 503
            assert refused.headers["Retry-After"] == "1"
            assert refused.headers["Connection"] == "close"
            assert await refused.json() == {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "The server is shutting down: retry",
                "reason": "ServiceUnavailable",
                "code": 503,
                "details": {"retryAfterSeconds": 1},
            }
        # The client's retry, through the Service, reaches the replica that stays.
        assert await post(session, stays.url, names[0], body) == 200
        assert await asyncio.wait_for(leaving.task, shutdown_deadline(leaving.config)) == 0
        await stays.writer.wait_idle()
    assert lost_count() == lost_before
    assert not [r for r in caplog.records if r.getMessage() == "update lost at shutdown"]
    assert stored_progress(kube_api, names[0]) == 60
    assert {name: stored_progress(kube_api, name) for name in names[1:]} == dict.fromkeys(
        names[1:], 50
    )


@on_both_servers
async def test_with_the_api_down_for_the_whole_drain_each_lost_update_is_logged_and_counted(
    kube_api: KubeAPI,
    config: Config,
    link: SlowLink,
    session: aiohttp.ClientSession,
    tmp_path: Path,
    unused_tcp_port_factory: object,
    caplog: pytest.LogCaptureFixture,
) -> None:
    names = [f"tj{i:02d}" for i in range(20)]
    for name in names:
        kube_api.create_trainjob(NS, name)
    slow = link.kubeconfig(kube_api.kubeconfig_path, tmp_path)
    ports = [unused_tcp_port_factory() for _ in range(3)]  # type: ignore[operator]
    # Nothing is written before SIGTERM (a long minimum interval after a first write).
    leaving = Replica(
        replica_config(config, slow, ports, min_write_interval=600.0, drain_timeout=1.0)
    )
    await leaving.ready(session)
    for name in names:
        assert await post(session, leaving.url, name, update(40, 1)) == 200
    async with asyncio.timeout(30):
        while {stored_progress(kube_api, name) for name in names} != {40}:
            await asyncio.sleep(0.1)  # the API server's objects: polled
    for name in names:
        assert await post(session, leaving.url, name, update(100, 2)) == 200
    lost_before = lost_count()
    link.cut()
    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(leaving.task, shutdown_deadline(leaving.config)) == 0
    lost = [r for r in caplog.records if r.getMessage() == "update lost at shutdown"]
    assert sorted(r.trainjob for r in lost) == [f"{NS}/{name}" for name in names]  # type: ignore[attr-defined]
    assert {r.progress for r in lost} == {100}  # type: ignore[attr-defined]
    assert all(r.levelno == logging.WARNING for r in lost)
    summary = [r for r in caplog.records if r.getMessage() == "shutdown left updates unwritten"]
    assert [r.trainjobs for r in summary] == [len(names)]  # type: ignore[attr-defined]
    assert lost_count() - lost_before == len(names)
    assert {stored_progress(kube_api, name) for name in names} == {40}
