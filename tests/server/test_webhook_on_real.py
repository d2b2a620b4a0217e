"""The injector called by kube-apiserver itself: a trainer pod created through the real
API server is sent to ``/mutate-pods`` over HTTPS (verified with the caBundle), stored
patched, and the pod's post with what kubelet would mount is written.

The webhook is reached by URL on loopback: on a test machine nothing routes a Service's
cluster IP, which the rendered configuration names (its caBundle patch by the bootstrap
is tested on both servers in test_certs.py).
"""

from __future__ import annotations

import base64
import json
import ssl
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_status.contract import CA_CERT_ENV, GROUP, JOBSET_NAME_LABEL, TOKEN_ENV, URL_ENV
from trainjob_status_server.app import StatusServer
from trainjob_status_server.auth import AuthSettings, TokenAuthenticator
from trainjob_status_server.certificates import certs
from trainjob_status_server.certificates.certs import CertBootstrap, CertSettings
from trainjob_status_server.config import Config
from trainjob_status_server.http.webhook import (
    INJECT_PATH,
    InjectorSettings,
    JobSetSteps,
    PodInjector,
)
from trainjob_status_server.kube.client import KubeClient
from trainjob_status_server.kube.resources import PODS
from trainjob_status_server.pods.cadistribution import CADistribution

from .test_webhook_e2e import in_container, kubelet_mounts
from .test_webhook_support import NS, SERVICE_HOST, TJ, jobset, pod, until

HERE = "trainjob-status"
ADMISSION = "admissionregistration.k8s.io"


def webhook(port: int, ca_pem: bytes) -> dict[str, object]:
    return {
        "metadata": {"name": "trainjob-status"},
        "webhooks": [
            {
                "name": "pods.trainjob-status.kubeflow.org",
                "clientConfig": {
                    "url": f"https://localhost:{port}{INJECT_PATH}",
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
                "objectSelector": {
                    "matchExpressions": [{"key": JOBSET_NAME_LABEL, "operator": "Exists"}]
                },
                # Fail: a webhook the API server cannot call fails the test, not hides.
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
            }
        ],
    }


@pytest.mark.parametrize("kube_api", ["real"], indirect=True)
async def test_kube_apiserver_calls_the_injector_and_the_pod_reports(
    kube_api: RealCluster, config: Config, tmp_path: Path
) -> None:
    kube_api.ensure_namespace(HERE)
    kube_api.create_trainjob(NS, TJ)
    kube_api.create("serviceaccounts", {"metadata": {"name": "trainer"}}, NS)
    kube_api.create("jobsets", jobset(), NS, "jobset.x-k8s.io")
    tls_dir = tmp_path / "tls"
    cert_settings = CertSettings(
        namespace=HERE,
        # localhost too: the API server calls the webhook by that name here.
        dns_names=[*certs.dns_names("trainjob-status", HERE), "localhost"],
        cert_file=tls_dir / "tls.crt",
        key_file=tls_dir / "tls.key",
        ca_file=tls_dir / "ca.crt",
    )
    kube = KubeClient(kube_api.kubeconfig_path, qps=1000, burst=1000, timeout=5.0)
    auth = TokenAuthenticator(AuthSettings(issuer=kube_api.issuer, own_token_path=None))
    async with kube:
        bootstrap = CertBootstrap(kube, cert_settings)
        await bootstrap.start()
        await auth.start(kube)
        served = replace(
            config, tls_cert_file=cert_settings.cert_file, tls_key_file=cert_settings.key_file
        )
        server = StatusServer(served, auth)
        settings = InjectorSettings()
        steps = JobSetSteps(kube, settings.selector)
        await steps.start()
        server.injector = PodInjector(settings, server.trainjobs, steps)
        distribution = CADistribution(kube, server.trainjobs, cert_settings.ca_file)
        try:
            async with server:
                await server.trainjobs.wait_synced()
                await auth.wait_ready()
                await distribution.start()
                port = urlsplit(server.url).port
                assert port is not None
                ca_pem = cert_settings.ca_file.read_bytes()
                kube_api.create(
                    "mutatingwebhookconfigurations", webhook(port, ca_pem), group=ADMISSION
                )
                # Through the API without blocking this loop: the webhook answers on it.
                stored = await kube.create(PODS, NS, pod())
                env, mounted = await kubelet_mounts(kube_api, tmp_path, stored)
                url = urlsplit(env[URL_ENV])
                assert (url.hostname, url.port) == (SERVICE_HOST, 10443)
                token = in_container(env[TOKEN_ENV], mounted).read_text()
                pod_ca = in_container(env[CA_CERT_ENV], mounted)
                assert pod_ca.read_bytes() == ca_pem
                update = {
                    "trainerStatus": {
                        "progressPercentage": 42,
                        "lastUpdatedTime": "2026-12-02T18:33:25Z",
                    }
                }
                async with (
                    aiohttp.ClientSession() as session,
                    session.post(
                        f"https://127.0.0.1:{port}{url.path}",
                        data=json.dumps(update).encode(),
                        headers={"Authorization": f"Bearer {token}"},
                        ssl=ssl.create_default_context(cafile=str(pod_ca)),
                        server_hostname=url.hostname,
                    ) as answer,
                ):
                    assert answer.status == 200, await answer.text()

                def written() -> bool:
                    found = kube_api.get("trainjobs", NS, TJ, GROUP) or {}
                    held = (found.get("status") or {}).get("trainerStatus")
                    return bool(held == update["trainerStatus"])

                await until(written)
                await distribution.stop()
        finally:
            await steps.stop()
            await auth.stop()
            await bootstrap.stop()
