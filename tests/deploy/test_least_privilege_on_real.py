"""Least privilege on the real control plane: the quick start's rendered RBAC (with the
secure-metrics component) applied to kube-apiserver, the server run with the
Deployment's own args as its ServiceAccount (a token from a real TokenRequest), a pod's
post written and read back, and the metrics port judging scrapers through the real
TokenReview and SubjectAccessReview after ``kubectl create clusterrolebinding``.

The MutatingWebhookConfiguration is left out here: the real API server would call the
webhook at its Service's cluster IP, which nothing routes to on a test machine.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from trainjob_devcluster.harness.pytest_plugin import require_binary
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_status.contract import GROUP, audience

from .rehearsal import Container, load, start, wait_ready
from .rendering import one, render
from .test_rehearsal import flag, until

pytestmark = pytest.mark.kubectl

TEAM = "team-a"
JOB = "llama"
POD = f"{JOB}-node-0-0"
MONITORING = "monitoring"


async def kubectl(cluster: RealCluster, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        require_binary("kubectl"),
        "--kubeconfig",
        str(cluster.kubeconfig_path),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


async def test_the_deployment_runs_as_its_service_account_on_the_real_api_server(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    docs = render("quick-start", "secure-metrics")
    container = Container(one(docs, "Deployment"))
    host = f"trainjob-status.{container.namespace}.svc"
    load(real_cluster, [d for d in docs if d["kind"] != "MutatingWebhookConfiguration"])
    real_cluster.create_trainjob(TEAM, JOB)
    real_cluster.create_trainjob_pod(TEAM, JOB, POD, service_account="trainer")
    real_cluster.ensure_namespace(MONITORING)
    for account in ("prometheus", "stranger"):
        real_cluster.create("serviceaccounts", {"metadata": {"name": account}}, MONITORING)

    root = tmp_path / "container"
    server = start(real_cluster, container, root)
    try:
        startup = container.spec["startupProbe"]
        await wait_ready(server, container, startup["periodSeconds"] * startup["failureThreshold"])
        trust = ssl.create_default_context(
            cafile=str(flag(container, "tls-cert-file", root).with_name("ca.crt"))
        )
        token = real_cluster.request_token(TEAM, "trainer", [audience(TEAM, JOB)], pod=POD)
        update = {
            "trainerStatus": {"progressPercentage": 42, "lastUpdatedTime": "2026-12-02T18:33:25Z"}
        }
        port = container.port("status-server")
        path = f"/apis/{GROUP}/v1alpha1/namespaces/{TEAM}/trainjobs/{JOB}/status"
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"https://127.0.0.1:{port}{path}",
                data=json.dumps(update).encode(),
                headers={"Authorization": f"Bearer {token}"},
                ssl=trust,
                server_hostname=host,
            ) as answer:
                assert answer.status == 200, await answer.text()

            def written() -> bool:
                found = real_cluster.get("trainjobs", TEAM, JOB, GROUP) or {}
                return bool(
                    (found.get("status") or {}).get("trainerStatus") == update["trainerStatus"]
                )

            await until(written, "the post's status in the TrainJob")

            # What docs/kubeflow.md asks a platform team to run for its Prometheus.
            await kubectl(
                real_cluster,
                "create",
                "clusterrolebinding",
                "prometheus-reads-trainjob-status",
                "--clusterrole=trainjob-status-metrics-reader",
                f"--serviceaccount={MONITORING}:prometheus",
            )

            async def scrape(account: str | None) -> tuple[int, Any]:
                headers = {}
                if account is not None:
                    minted = real_cluster.request_token(MONITORING, account, [real_cluster.issuer])
                    headers["Authorization"] = f"Bearer {minted}"
                async with session.get(
                    f"https://127.0.0.1:{container.port('metrics')}/metrics",
                    headers=headers,
                    ssl=trust,
                    server_hostname=host,
                ) as got:
                    text = await got.text()
                    return got.status, json.loads(text) if got.status != 200 else text

            # The gauges follow the TrainJob's watch, a moment after the write.
            gauge = 'trainjob_progress_ratio{namespace="team-a",trainjob="llama"} 0.42'
            async with asyncio.timeout(20):
                while True:
                    code, page = await scrape("prometheus")
                    assert code == 200
                    if gauge in page:
                        break
                    await asyncio.sleep(0.1)
            code, status = await scrape("stranger")
            assert (code, status["reason"], status["message"]) == (
                403,
                "Forbidden",
                'forbidden: User "system:serviceaccount:monitoring:stranger" cannot get path "/metrics"',
            )
            code, status = await scrape(None)
            assert (code, status["reason"]) == (401, "Unauthorized")
    finally:
        exit_code = server.stop()
    log = server.log_text()
    assert exit_code == 0, log
    assert "Traceback" not in log
    assert [line for line in server.log_lines() if line["level"] in ("error", "critical")] == []
