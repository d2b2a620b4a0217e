"""CA distribution against the devcluster (and, where marked, the real control plane): ``trainjob-status-ca`` in every namespace with
TrainJobs (and only there), written by server-side apply, rewritten when the CA file
changes, shared by replicas without conflict."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_both_servers, on_real_server
from trainjob_status_server.certificates import pki
from trainjob_status_server.kube.cache import WatchCache
from trainjob_status_server.kube.client import KubeClient
from trainjob_status_server.kube.resources import TRAINJOBS
from trainjob_status_server.pods.cadistribution import LABELS, CADistribution

from .test_webhook_support import until

NOW = dt.datetime.now(dt.UTC)


def new_ca_pem() -> bytes:
    return pki.new_bundle(["x"], NOW, pki.Policy()).ca_pem


@pytest_asyncio.fixture
async def kube(kube_api: KubeAPI) -> AsyncIterator[KubeClient]:
    async with KubeClient(kube_api.kubeconfig_path, qps=1000, burst=1000, timeout=2.0) as k:
        yield k


@pytest_asyncio.fixture
async def trainjobs(kube: KubeClient) -> AsyncIterator[WatchCache]:
    cache = WatchCache(kube, TRAINJOBS)
    await cache.start()
    await cache.wait_synced()
    yield cache
    await cache.stop()


def ca_in(cluster: KubeAPI, namespace: str) -> bytes | None:
    found = cluster.get("configmaps", namespace, "trainjob-status-ca")
    if found is None or "ca.crt" not in found.get("data", {}):
        return None
    assert found["metadata"]["labels"] == LABELS
    return str(found["data"]["ca.crt"]).encode()


async def distribution(kube: KubeClient, trainjobs: WatchCache, ca_file: Path) -> CADistribution:
    d = CADistribution(kube, trainjobs, ca_file, poll_interval=0.05)
    await d.start()
    return d


async def test_every_namespace_with_trainjobs_gets_the_ca(
    devcluster: DevCluster, kube: KubeClient, trainjobs: WatchCache, tmp_path: Path
) -> None:
    devcluster.create_trainjob("team-a", "tj1")
    devcluster.create_trainjob("team-a", "tj2")
    devcluster.create_trainjob("team-b", "tj1")
    devcluster.ensure_namespace("quiet")
    ca = new_ca_pem()
    (tmp_path / "ca.crt").write_bytes(ca)
    await until(lambda: len(trainjobs) == 3)
    d = await distribution(kube, trainjobs, tmp_path / "ca.crt")
    try:
        await until(lambda: ca_in(devcluster, "team-a") == ca and ca_in(devcluster, "team-b") == ca)
        await until(lambda: d.idle)
        assert ca_in(devcluster, "quiet") is None
        # One write per namespace, whatever the number of TrainJobs in it.
        assert devcluster.faults.count("patch", "configmaps") == 2

        # A TrainJob in a new namespace: its CA is there without a restart.
        devcluster.create_trainjob("team-c", "tj")
        await until(lambda: ca_in(devcluster, "team-c") == ca)
        # Another TrainJob where the CA already is: no write.
        devcluster.create_trainjob("team-c", "tj-2")
        await until(lambda: len(trainjobs) == 5)
        await until(lambda: d.idle)
        assert devcluster.faults.count("patch", "configmaps") == 3
    finally:
        await d.stop()


@on_both_servers
async def test_a_rotated_ca_reaches_every_namespace(
    kube_api: KubeAPI, kube: KubeClient, trainjobs: WatchCache, tmp_path: Path
) -> None:
    for namespace in ("team-a", "team-b"):
        kube_api.create_trainjob(namespace, "tj")
    ca_file = tmp_path / "ca.crt"
    first = new_ca_pem()
    ca_file.write_bytes(first)
    d = await distribution(kube, trainjobs, ca_file)
    try:
        await until(lambda: ca_in(kube_api, "team-a") == first == ca_in(kube_api, "team-b"))
        # A half-written file is not distributed; the complete one is.
        ca_file.write_bytes(b"-----BEGIN CERTIFICATE-----\nMIIB")
        rotated = new_ca_pem() + first
        assert not await d.refresh()
        ca_file.write_bytes(rotated)
        await until(lambda: ca_in(kube_api, "team-a") == rotated == ca_in(kube_api, "team-b"))
    finally:
        await d.stop()


@on_both_servers
async def test_the_ca_may_come_later(
    kube_api: KubeAPI, kube: KubeClient, trainjobs: WatchCache, tmp_path: Path
) -> None:
    kube_api.create_trainjob("team-a", "tj")
    ca_file = tmp_path / "ca.crt"
    d = await distribution(kube, trainjobs, ca_file)
    try:
        await until(lambda: len(trainjobs) == 1)
        assert ca_in(kube_api, "team-a") is None
        ca = new_ca_pem()
        ca_file.write_bytes(ca)  # what the bootstrap or cert-manager's Secret brings
        await until(lambda: ca_in(kube_api, "team-a") == ca)
    finally:
        await d.stop()


@on_real_server
async def test_replicas_share_the_configmap(
    kube_api: KubeAPI, kube: KubeClient, trainjobs: WatchCache, tmp_path: Path
) -> None:
    kube_api.create_trainjob("team-a", "tj")
    ca = new_ca_pem()
    (tmp_path / "ca.crt").write_bytes(ca)
    a = await distribution(kube, trainjobs, tmp_path / "ca.crt")
    b = await distribution(kube, trainjobs, tmp_path / "ca.crt")
    try:
        await until(lambda: "team-a" in a.applied and "team-a" in b.applied)
        assert ca_in(kube_api, "team-a") == ca
        found = kube_api.get("configmaps", "team-a", "trainjob-status-ca")
        assert found is not None
        managers = {m["manager"] for m in found["metadata"].get("managedFields", [])}
        assert managers == {"trainjob-status-ca"}
    finally:
        await a.stop()
        await b.stop()


async def test_failures_are_retried_and_fields_of_others_kept(
    devcluster: DevCluster, kube: KubeClient, trainjobs: WatchCache, tmp_path: Path
) -> None:
    devcluster.create_trainjob("team-a", "tj")
    devcluster.create(
        "configmaps",
        {"metadata": {"name": "trainjob-status-ca"}, "data": {"note": "kept"}},
        "team-a",
    )
    devcluster.faults.fail(500, verb="patch", resource="configmaps", times=1)
    ca = new_ca_pem()
    (tmp_path / "ca.crt").write_bytes(ca)
    d = CADistribution(kube, trainjobs, tmp_path / "ca.crt", rand=lambda: 0.0)
    await d.start()
    try:
        await until(lambda: ca_in(devcluster, "team-a") == ca)
        assert devcluster.faults.count("patch", "configmaps") == 2
        found = devcluster.get("configmaps", "team-a", "trainjob-status-ca")
        assert found is not None
        assert found["data"]["note"] == "kept"
    finally:
        await d.stop()
