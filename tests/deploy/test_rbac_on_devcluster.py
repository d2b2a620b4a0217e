"""Least privilege, enforced: the rendered ServiceAccount, roles and bindings loaded into
the devcluster (which authorizes service accounts by RBAC, resourceNames included) and
into the real control plane, and
the server's components run with that account's token. What they need works; the
neighbouring requests they must not be able to make are refused."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from trainjob_devcluster.harness.kubeconfig import write_kubeconfig
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_both_servers
from trainjob_status.contract import JOBSET_NAME_LABEL
from trainjob_status_server.certificates import certs, pki
from trainjob_status_server.certificates.certs import CertBootstrap, CertSettings
from trainjob_status_server.kube.cache import WatchCache
from trainjob_status_server.kube.client import KubeClient
from trainjob_status_server.kube.errors import KubeError
from trainjob_status_server.kube.resources import CONFIGMAPS, PODS, SECRETS, TRAINJOBS, Resource
from trainjob_status_server.pods.cadistribution import CADistribution

from .rendering import render

NS = "trainjob-status"
PLURALS = {
    "Namespace": ("namespaces", ""),
    "ServiceAccount": ("serviceaccounts", ""),
    "ClusterRole": ("clusterroles", "rbac.authorization.k8s.io"),
    "ClusterRoleBinding": ("clusterrolebindings", "rbac.authorization.k8s.io"),
    "Role": ("roles", "rbac.authorization.k8s.io"),
    "RoleBinding": ("rolebindings", "rbac.authorization.k8s.io"),
}
TOKENREVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview")


async def as_server(cluster: KubeAPI, component: str | None, workdir: Path) -> KubeClient:
    """A KubeClient holding the server's service-account token, with the quick start's
    RBAC and that of ``component``."""
    for doc in render("quick-start", *([component] if component else [])):
        if doc["kind"] in PLURALS:
            plural, group = PLURALS[doc["kind"]]
            cluster.create(plural, doc, doc["metadata"].get("namespace", ""), group)
    token = cluster.request_token(NS, "trainjob-status", [cluster.issuer])
    path = write_kubeconfig(workdir / "server.kubeconfig", cluster.url, cluster.ca.cert_pem, token)
    return await KubeClient(path, qps=1000, burst=1000, timeout=2.0).start()


@pytest_asyncio.fixture
async def kube(kube_api: KubeAPI, tmp_path: Path) -> AsyncIterator[KubeClient]:
    client = await as_server(kube_api, None, tmp_path)
    yield client
    await client.close()


async def refused(call: object) -> int:
    with pytest.raises(KubeError) as caught:
        await call  # type: ignore[misc]
    return caught.value.status


@on_both_servers
async def test_the_certificate_bootstrap_works_with_its_role_only(
    kube_api: KubeAPI, kube: KubeClient, tmp_path: Path
) -> None:
    clock = time.time
    settings = CertSettings(
        namespace=NS,
        dns_names=certs.dns_names("trainjob-status", NS),
        cert_file=tmp_path / "tls.crt",
        key_file=tmp_path / "tls.key",
        ca_file=tmp_path / "ca.crt",
        policy=pki.Policy(cert_validity=dt.timedelta(hours=3)),
    )
    later = [0.0]
    bootstrap = CertBootstrap(kube, settings, clock=lambda: clock() + later[0])
    await bootstrap.start()  # create + get
    later[0] = 2.5 * 3600
    await bootstrap.ensure()  # update (renewal)
    await bootstrap.stop()
    assert bootstrap.renewals == 2
    # Any other Secret, here or elsewhere, is out of reach.
    kube_api.create("secrets", {"metadata": {"name": "other"}, "data": {}}, NS)
    assert await refused(kube.get(SECRETS, NS, "other")) == 403
    assert await refused(kube.get(SECRETS, "default", "trainjob-status-tls")) == 403
    assert await refused(kube.list(SECRETS, namespace=NS)) == 403


@on_both_servers
async def test_caches_status_writes_and_ca_distribution_work(
    kube_api: KubeAPI, kube: KubeClient, tmp_path: Path
) -> None:
    kube_api.create_trainjob("team-a", "tj")
    kube_api.create_pod("team-a", "tj-node-0-0", labels={JOBSET_NAME_LABEL: "tj"})
    trainjobs, pods = WatchCache(kube, TRAINJOBS), WatchCache(kube, PODS)
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(pki.new_bundle(["x"], dt.datetime.now(dt.UTC), pki.Policy()).ca_pem)
    distribution = CADistribution(kube, trainjobs, ca_file)
    try:
        await trainjobs.start()
        await pods.start()
        await trainjobs.wait_synced()
        await pods.wait_synced()
        assert len(trainjobs) == 1
        assert len(pods) == 1
        assert await kube.get(PODS, "team-a", "tj-node-0-0") is not None
        status = {"progressPercentage": 5, "lastUpdatedTime": "2026-12-02T18:33:25Z"}
        await kube.apply_trainjob_status("team-a", "tj", status)
        await distribution.start()
        async with asyncio.timeout(10):
            while "team-a" not in distribution.applied:
                await asyncio.sleep(0.01)
    finally:
        await distribution.stop()
        await pods.stop()
        await trainjobs.stop()
    # Only the CA ConfigMap: no other may be patched, none read.
    kube_api.create("configmaps", {"metadata": {"name": "app-config"}, "data": {}}, "team-a")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config"}}
    assert (
        await refused(kube.apply(CONFIGMAPS, "team-a", "app-config", body, field_manager="x"))
        == 403
    )
    assert await refused(kube.get(CONFIGMAPS, "team-a", "trainjob-status-ca")) == 403
    # The TrainJob's spec is not ours to change; nor is deleting a pod.
    spec = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj"},
    }
    assert await refused(kube.apply(TRAINJOBS, "team-a", "tj", spec, field_manager="x")) == 403
    assert await refused(kube.patch(PODS, "team-a", "tj-node-0-0", [])) == 403


@on_both_servers
@pytest.mark.parametrize(("component", "allowed"), [(None, False), ("token-review", True)])
async def test_tokenreview_only_with_its_component(
    kube_api: KubeAPI, tmp_path: Path, component: str | None, allowed: bool
) -> None:
    kube = await as_server(kube_api, component, tmp_path)
    review = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "not-a-token"},
    }
    try:
        if allowed:
            answer = await kube.create(TOKENREVIEWS, None, review)
            assert answer["status"].get("authenticated") is not True
        else:
            assert await refused(kube.create(TOKENREVIEWS, None, review)) == 403
    finally:
        await kube.close()
