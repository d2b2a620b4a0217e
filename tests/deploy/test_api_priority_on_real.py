"""The API Priority and Fairness component on the real control plane: kube-apiserver
takes the rendered FlowSchema and PriorityLevelConfiguration, names our FlowSchema in
the ``X-Kubernetes-PF-FlowSchema-UID`` header of the status write the server makes (the
same server-side apply, as its ServiceAccount, dry run), and counts the requests of the
server, run with the Deployment's args as that ServiceAccount, under our FlowSchema and
none under the built-in ``service-accounts`` one while it writes a pod's post.
"""

from __future__ import annotations

import http.client
import json
import re
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_status.contract import GROUP, audience

from .rehearsal import Container, load, start, wait_ready
from .rendering import one, render
from .test_rehearsal import flag, until

pytestmark = pytest.mark.kubectl

FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"
TEAM = "team-a"
JOB = "llama"
POD = f"{JOB}-node-0-0"


def request(
    cluster: RealCluster, method: str, path: str, token: str, body: bytes | None = None
) -> tuple[int, dict[str, str], Any]:
    """One request to kube-apiserver with its response headers (lower-cased names)."""
    address = urlsplit(cluster.url)
    assert address.hostname is not None
    connection = http.client.HTTPSConnection(
        address.hostname, address.port, context=cluster.client_ssl_context(), timeout=30
    )
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/apply-patch+yaml"
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    named = {name.lower(): value for name, value in response.getheaders()}
    return response.status, named, json.loads(raw) if raw.startswith(b"{") else raw.decode()


def dispatched(cluster: RealCluster) -> dict[str, float]:
    """kube-apiserver's ``apiserver_flowcontrol_dispatched_requests_total`` by FlowSchema."""
    code, text = cluster.plane.request("GET", "/metrics")
    assert code == 200
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("apiserver_flowcontrol_dispatched_requests_total{"):
            schema = re.search(r'flow_schema="([^"]*)"', line)
            assert schema is not None
            totals[schema.group(1)] = totals.get(schema.group(1), 0.0) + float(line.split()[-1])
    return totals


async def test_the_servers_writes_are_classified_by_our_flowschema(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    docs = render("quick-start", "api-priority")
    container = Container(one(docs, "Deployment"))
    load(real_cluster, [d for d in docs if d["kind"] != "MutatingWebhookConfiguration"])
    level = real_cluster.call(
        "POST",
        f"{FLOWCONTROL}/prioritylevelconfigurations",
        one(docs, "PriorityLevelConfiguration"),
    )
    schema = real_cluster.call("POST", f"{FLOWCONTROL}/flowschemas", one(docs, "FlowSchema"))
    real_cluster.create_trainjob(TEAM, JOB)
    real_cluster.create_trainjob_pod(TEAM, JOB, POD, service_account="trainer")

    # The status write the server makes, as its ServiceAccount, not persisted (dryRun).
    account = real_cluster.request_token(
        container.namespace, container.service_account, [real_cluster.issuer]
    )
    write = (
        f"/apis/{GROUP}/v1alpha1/namespaces/{TEAM}/trainjobs/{JOB}/status"
        "?fieldManager=trainer-status&force=true&dryRun=All"
    )
    body = json.dumps(
        {
            "apiVersion": f"{GROUP}/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": JOB, "namespace": TEAM},
            "status": {"trainerStatus": {"lastUpdatedTime": "2026-12-02T18:33:25Z"}},
        }
    ).encode()
    answers: list[tuple[int, dict[str, str], Any]] = []

    def classified() -> bool:
        # The API server's APF configuration takes the new objects a moment after they
        # are stored.
        answers.append(request(real_cluster, "PATCH", write, account, body))
        code, headers, _ = answers[-1]
        return (
            code == 200
            and headers.get("x-kubernetes-pf-flowschema-uid") == (schema["metadata"]["uid"])
        )

    await until(classified, "the write classified by our FlowSchema")
    _, headers, answer = answers[-1]
    assert headers["x-kubernetes-pf-prioritylevel-uid"] == level["metadata"]["uid"]
    assert answer["status"]["trainerStatus"] == {"lastUpdatedTime": "2026-12-02T18:33:25Z"}
    assert "trainerStatus" not in (real_cluster.get("trainjobs", TEAM, JOB, GROUP) or {}).get(
        "status", {}
    )

    root = tmp_path / "container"
    server = start(real_cluster, container, root)
    try:
        startup = container.spec["startupProbe"]
        await wait_ready(server, container, startup["periodSeconds"] * startup["failureThreshold"])
        before = dispatched(real_cluster)
        trust = ssl.create_default_context(
            cafile=str(flag(container, "tls-cert-file", root).with_name("ca.crt"))
        )
        token = real_cluster.request_token(TEAM, "trainer", [audience(TEAM, JOB)], pod=POD)
        update = {
            "trainerStatus": {"progressPercentage": 100, "lastUpdatedTime": "2026-12-02T18:33:25Z"}
        }
        path = f"/apis/{GROUP}/v1alpha1/namespaces/{TEAM}/trainjobs/{JOB}/status"
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"https://127.0.0.1:{container.port('status-server')}{path}",
                data=json.dumps(update).encode(),
                headers={"Authorization": f"Bearer {token}"},
                ssl=trust,
                server_hostname=f"trainjob-status.{container.namespace}.svc",
            ) as posted,
        ):
            assert posted.status == 200, await posted.text()

        def written() -> bool:
            found = real_cluster.get("trainjobs", TEAM, JOB, GROUP) or {}
            return (found.get("status") or {}).get("trainerStatus") == update["trainerStatus"]

        await until(written, "the post's status in the TrainJob")
        after = dispatched(real_cluster)
    finally:
        exit_code = server.stop()
    assert exit_code == 0, server.log_text()
    # The server's write (and anything else it sent meanwhile) went through our level;
    # the built-in schema for service accounts saw none of it.
    assert after.get("trainjob-status", 0.0) - before.get("trainjob-status", 0.0) >= 1
    assert after.get("service-accounts", 0.0) == before.get("service-accounts", 0.0)
