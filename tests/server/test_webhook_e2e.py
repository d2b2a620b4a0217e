"""The whole chain on the devcluster, with no hand-made variable, token or certificate:

certificate bootstrap (Secret, files, caBundle) -> the real server serving them, with
the token authenticator and the injector route -> CA distribution (the ConfigMap) -> a
trainer pod admitted through ``/mutate-pods`` over HTTPS, patched and created -> what
kubelet would mount (a TokenRequest for the projected volume's audience, ``ca.crt`` from
the ConfigMap) -> a post to the injected URL, verifying the server by the Service's
name with that CA -> the TrainJob's status in the API server.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest_asyncio

from trainjob_devcluster import DevCluster
from trainjob_status.contract import CA_CERT_ENV, GROUP, TOKEN_ENV, URL_ENV
from trainjob_status_server.app import StatusServer
from trainjob_status_server.auth import AuthSettings, TokenAuthenticator
from trainjob_status_server.certificates import certs
from trainjob_status_server.certificates.certs import CertBootstrap, CertSettings, WebhookCABundle
from trainjob_status_server.config import Config
from trainjob_status_server.http.webhook import (
    INJECT_PATH,
    InjectorSettings,
    JobSetSteps,
    PodInjector,
)
from trainjob_status_server.kube.client import KubeClient
from trainjob_status_server.pods import injection
from trainjob_status_server.pods.cadistribution import CADistribution

from .test_webhook_support import (
    ANCESTOR,
    NS,
    SERVICE_HOST,
    TJ,
    StandIn,
    apply_patch,
    ca_bundles,
    decoded_patch,
    jobset,
    pod,
    review,
    until,
    webhook_configuration,
)

HERE = "trainjob-status"


@dataclass
class Chain:
    cluster: DevCluster
    standin: StandIn
    server: StatusServer
    bootstrap: CertBootstrap
    distribution: CADistribution
    session: aiohttp.ClientSession
    workdir: Path

    def trust(self, ca_file: Path) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(ca_file))


@pytest_asyncio.fixture
async def chain(devcluster: DevCluster, config: Config, tmp_path: Path) -> AsyncIterator[Chain]:
    devcluster.ensure_namespace(HERE)
    devcluster.create_trainjob(NS, TJ)
    devcluster.create("serviceaccounts", {"metadata": {"name": "trainer"}}, NS)
    standin = await StandIn(tmp_path).start()
    standin.put("jobsets", jobset())
    standin.put("mutatingwebhookconfigurations", webhook_configuration())
    tls_dir = tmp_path / "tls"
    cert_settings = CertSettings(
        namespace=HERE,
        dns_names=certs.dns_names("trainjob-status", HERE),
        cert_file=tls_dir / "tls.crt",
        key_file=tls_dir / "tls.key",
        ca_file=tls_dir / "ca.crt",
    )
    kube = KubeClient(devcluster.kubeconfig_path, qps=1000, burst=1000, timeout=2.0)
    auth = TokenAuthenticator(AuthSettings(issuer=devcluster.issuer, own_token_path=None))
    async with kube, standin.client() as standin_kube:
        bootstrap = CertBootstrap(kube, cert_settings, WebhookCABundle(standin_kube))
        await bootstrap.start()  # before the server: it serves the files this writes
        await auth.start(kube)
        served = replace(
            config, tls_cert_file=cert_settings.cert_file, tls_key_file=cert_settings.key_file
        )
        server = StatusServer(served, auth)
        settings = InjectorSettings()
        steps = JobSetSteps(standin_kube, settings.selector)
        await steps.start()
        # Before it starts: the serving port routes the webhook to the injector it has.
        server.injector = PodInjector(settings, server.trainjobs, steps)
        distribution = CADistribution(kube, server.trainjobs, cert_settings.ca_file)
        async with server:
            await server.trainjobs.wait_synced()
            await auth.wait_ready()
            await distribution.start()
            async with aiohttp.ClientSession() as session:
                yield Chain(devcluster, standin, server, bootstrap, distribution, session, tmp_path)
            await distribution.stop()
        await steps.stop()
        await auth.stop()
        await bootstrap.stop()
    await standin.stop()


async def kubelet_mounts(
    cluster: DevCluster, workdir: Path, stored: dict[str, Any]
) -> tuple[dict[str, str], Path]:
    """What kubelet gives the pod's first container: its environment, and the directory
    the projected volume is mounted at (token from a TokenRequest for the audience the
    volume names, ca.crt from the ConfigMap it names)."""
    container = stored["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == injection.MOUNT_PATH)
    volume = next(v for v in stored["spec"]["volumes"] if v["name"] == mount["name"])
    mounted = workdir / "mounted"
    mounted.mkdir()
    for source in volume["projected"]["sources"]:
        if "serviceAccountToken" in source:
            sat = source["serviceAccountToken"]
            token = cluster.request_token(
                stored["metadata"]["namespace"],
                stored["spec"]["serviceAccountName"],
                [sat["audience"]],
                pod=stored["metadata"]["name"],
                expiration_seconds=sat["expirationSeconds"],
            )
            (mounted / sat["path"]).write_text(token)
        else:
            ref = source["configMap"]
            data = await configmap_data(cluster, stored["metadata"]["namespace"], ref["name"])
            for item in ref["items"]:
                (mounted / item["path"]).write_text(data[item["key"]])
    return env, mounted


async def configmap_data(cluster: DevCluster, namespace: str, name: str) -> dict[str, str]:
    """The ConfigMap's data once it exists (the CA distribution writes it)."""
    await until(lambda: cluster.get("configmaps", namespace, name) is not None)
    found = cluster.get("configmaps", namespace, name)
    assert found is not None
    data: dict[str, str] = found["data"]
    return data


def in_container(path: str, mounted: Path) -> Path:
    assert path.startswith(injection.MOUNT_PATH + "/")
    return mounted / path.removeprefix(injection.MOUNT_PATH + "/")


async def test_a_pod_admitted_through_the_webhook_reports_its_status(chain: Chain) -> None:
    ca_file = chain.bootstrap.settings.ca_file
    # The API server would call the webhook with the caBundle the bootstrap put there.
    assert ca_bundles(chain.standin) == [ca_file.read_bytes(), b"other"]

    original = pod()
    async with chain.session.post(
        chain.server.url + INJECT_PATH,
        json=review(original),
        ssl=chain.trust(ca_file),
        server_hostname=SERVICE_HOST,
    ) as response:
        assert response.status == 200
        answer = await response.json()
    assert answer["response"]["allowed"] is True
    patched = apply_patch(original, decoded_patch(answer) or [])
    stored = chain.cluster.create("pods", patched, NS)

    env, mounted = await kubelet_mounts(chain.cluster, chain.workdir, stored)
    url = urlsplit(env[URL_ENV])
    assert (url.scheme, url.hostname, url.port) == ("https", SERVICE_HOST, 10443)
    token = in_container(env[TOKEN_ENV], mounted).read_text()
    pod_ca = in_container(env[CA_CERT_ENV], mounted)
    assert pod_ca.read_bytes() == ca_file.read_bytes()

    update = {
        "trainerStatus": {"progressPercentage": 42, "lastUpdatedTime": "2026-12-02T18:33:25Z"}
    }
    port = urlsplit(chain.server.url).port
    async with chain.session.post(
        f"https://127.0.0.1:{port}{url.path}",
        data=json.dumps(update).encode(),
        headers={"Authorization": f"Bearer {token}"},
        ssl=chain.trust(pod_ca),
        server_hostname=url.hostname,
    ) as response:
        assert response.status == 200, await response.text()

    def written() -> bool:
        obj = chain.cluster.get("trainjobs", NS, TJ, GROUP) or {}
        progress = (obj.get("status") or {}).get("trainerStatus", {}).get("progressPercentage")
        return bool(progress == 42)

    await until(written)


async def test_a_token_for_another_trainjob_cannot_use_the_injected_url(chain: Chain) -> None:
    # The second TrainJob's pod is injected with its own audience; its token is refused
    # at the first TrainJob's URL.
    chain.cluster.create_trainjob(NS, "tj2")
    chain.standin.put("jobsets", jobset("tj2"))
    original = pod("tj2-node-0-0", trainjob="tj2")
    async with chain.session.post(
        chain.server.url + INJECT_PATH,
        json=review(original),
        ssl=chain.trust(chain.bootstrap.settings.ca_file),
        server_hostname=SERVICE_HOST,
    ) as response:
        answer = await response.json()
    stored = chain.cluster.create("pods", apply_patch(original, decoded_patch(answer) or []), NS)
    env, mounted = await kubelet_mounts(chain.cluster, chain.workdir, stored)
    token = in_container(env[TOKEN_ENV], mounted).read_text()
    assert "/trainjobs/tj2/status" in env[URL_ENV]
    other_path = urlsplit(env[URL_ENV]).path.replace("/tj2/", f"/{TJ}/")
    async with chain.session.post(
        chain.server.url + other_path,
        data=b'{"trainerStatus": {"progressPercentage": 1}}',
        headers={"Authorization": f"Bearer {token}"},
        ssl=chain.trust(chain.bootstrap.settings.ca_file),
        server_hostname=SERVICE_HOST,
    ) as response:
        assert response.status == 403


async def test_the_wired_server_bootstraps_distributes_and_injects(
    devcluster: DevCluster, config: Config, tmp_path: Path
) -> None:
    """The same chain through StatusServer as app.py wires it, with no stand-in: the pod
    carries the step label itself (no JobSet made it) and no webhook configuration is
    installed, so the caBundle has nowhere to go (tests/deploy/test_rehearsal.py runs the
    chain with the manifests' configuration)."""
    devcluster.ensure_namespace(HERE)
    devcluster.create_trainjob(NS, TJ)
    # Its JobSet and Job, in the server's caches by the time the pod posts.
    job = devcluster.create_trainjob_job(NS, TJ)
    devcluster.create("serviceaccounts", {"metadata": {"name": "trainer"}}, NS)
    tls_dir = tmp_path / "tls"
    wired = replace(
        config,
        tls_cert_file=tls_dir / "tls.crt",
        tls_key_file=tls_dir / "tls.key",
        cert_bootstrap=True,  # type: ignore[call-arg]  # fields the wiring adds
        distribute_ca=True,
        service_namespace=HERE,
    )
    assert wired.check() == []
    auth = TokenAuthenticator(AuthSettings(issuer=devcluster.issuer, own_token_path=None))
    async with StatusServer(wired, auth) as server, aiohttp.ClientSession() as session:
        await auth.wait_ready()
        ca = ssl.create_default_context(cafile=str(tls_dir / "ca.crt"))
        original = pod(labels={ANCESTOR: "trainer"}, owner=job)
        async with session.post(
            server.url + INJECT_PATH, json=review(original), ssl=ca, server_hostname=SERVICE_HOST
        ) as response:
            answer = await response.json()
        stored = devcluster.create("pods", apply_patch(original, decoded_patch(answer) or []), NS)
        env, mounted = await kubelet_mounts(devcluster, tmp_path, stored)
        url = urlsplit(env[URL_ENV])
        token = in_container(env[TOKEN_ENV], mounted).read_text()
        pod_ca = ssl.create_default_context(cafile=str(in_container(env[CA_CERT_ENV], mounted)))
        update = {"trainerStatus": {"progressPercentage": 77}}
        async with session.post(
            f"https://127.0.0.1:{urlsplit(server.url).port}{url.path}",
            json=update,
            headers={"Authorization": f"Bearer {token}"},
            ssl=pod_ca,
            server_hostname=url.hostname,
        ) as response:
            assert response.status == 200, await response.text()

        def written() -> bool:
            obj = devcluster.get("trainjobs", NS, TJ, GROUP) or {}
            progress = (obj.get("status") or {}).get("trainerStatus", {}).get("progressPercentage")
            return bool(progress == 77)

        await until(written)
    assert devcluster.get("secrets", HERE, "trainjob-status-tls") is not None
