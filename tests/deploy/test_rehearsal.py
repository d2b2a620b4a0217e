"""The deployment rehearsal: the rendered manifests loaded into the devcluster (which
enforces RBAC and calls admission webhooks), and ``trainjob-status-server`` run exactly as
the Deployment's container runs it, at the default log level, as its ServiceAccount.

It must get ready, bootstrap its CA and serving certificate, keep the webhook's caBundle
and the CA ConfigMap current, inject a trainer pod created afterwards through the API, and
accept that pod's post made with what kubelet would mount. A change to the manifests or
the flags that breaks start-up fails here.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.workloads import controller_reference
from trainjob_status.contract import CA_CERT_ENV, GROUP, TOKEN_ENV, URL_ENV
from trainjob_status.contract import ENV_NAMES as ENV
from trainjob_status_server.kube.client import KubeClient
from trainjob_status_server.kube.resources import PODS

from .rehearsal import Container, load, start, under, wait_ready
from .rendering import Doc, one, render

TEAM = "team-a"
JOB = "llama"


async def until(condition: Callable[[], bool], what: str, within: float = 20.0) -> None:
    try:
        async with asyncio.timeout(within):
            while not condition():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"not within {within:g}s: {what}") from None


def flag(container: Container, name: str, root: Path) -> Path:
    for arg in container.spec.get("args") or []:
        if arg.startswith(f"--{name}="):
            return Path(under(root, arg).split("=", 1)[1])
    raise AssertionError(f"the container sets no --{name}")


def trainer_pod(job: Doc) -> Doc:
    """A trainer pod as JobSet's Job ``job`` creates it for a TrainJob whose runtime
    labels its step."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{JOB}-node-0-0-abcde",
            "ownerReferences": [controller_reference(job)],
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": JOB,
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "trainer.kubeflow.org/trainjob-ancestor-step": "trainer",
            },
        },
        "spec": {
            "serviceAccountName": "trainer",
            "containers": [{"name": "node", "image": "pytorch/pytorch"}],
        },
    }


def kubelet_mounts(cluster: DevCluster, pod: Doc, root: Path) -> tuple[dict[str, str], Path]:
    """The first container's environment, and its files as kubelet would mount them
    (the projected token for the audience the volume names, ca.crt from the ConfigMap)
    under ``root``."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        if "projected" not in volume:
            continue
        directory = root / mount["mountPath"].lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        for source in volume["projected"]["sources"]:
            if "serviceAccountToken" in source:
                sat = source["serviceAccountToken"]
                token = cluster.request_token(
                    namespace,
                    pod["spec"]["serviceAccountName"],
                    [sat["audience"]],
                    pod=name,
                    expiration_seconds=sat["expirationSeconds"],
                )
                (directory / sat["path"]).write_text(token)
            if "configMap" in source:
                ref = source["configMap"]
                found = cluster.get("configmaps", namespace, ref["name"])
                assert found is not None, f"ConfigMap {ref['name']} is missing"
                for item in ref["items"]:
                    (directory / item["path"]).write_text(found["data"][item["key"]])
    return env, root


def service_target(docs: list[Doc], container: Container, host: str, port: int) -> int:
    """The container port the Service ``host`` (name.namespace.svc) sends ``port`` to."""
    name, namespace = host.split(".")[:2]
    service = one(docs, "Service", name)
    assert service["metadata"]["namespace"] == namespace
    entry = next(p for p in service["spec"]["ports"] if p["port"] == port)
    return container.port(entry.get("targetPort", port))


@pytest.mark.parametrize("overlay", ["base", "kubeflow"])
async def test_the_deployment_starts_injects_and_serves(
    devcluster: DevCluster, tmp_path: Path, overlay: str
) -> None:
    docs = render(overlay)
    container = Container(one(docs, "Deployment"))
    here = container.namespace
    load(devcluster, docs)
    devcluster.route_service(here, "trainjob-status", "127.0.0.1", container.ports())
    devcluster.create_trainjob(TEAM, JOB)
    # Its JobSet and Job (the trainer pod's owners), in the server's caches by the time
    # the pod posts.
    job = devcluster.create_trainjob_job(TEAM, JOB)
    devcluster.create("serviceaccounts", {"metadata": {"name": "trainer"}}, TEAM)

    root = tmp_path / "container"
    server = start(devcluster, container, root)
    try:
        startup = container.spec["startupProbe"]
        await wait_ready(server, container, startup["periodSeconds"] * startup["failureThreshold"])

        # The bootstrap's CA and serving pair: in the Secret and in the files served.
        ca_file = flag(container, "tls-cert-file", root).with_name("ca.crt")
        ca_pem = ca_file.read_bytes()
        secret = devcluster.get("secrets", here, "trainjob-status-tls")
        assert secret is not None
        assert base64.b64decode(secret["data"]["ca.crt"]) == ca_pem
        assert flag(container, "tls-key-file", root).stat().st_mode & 0o077 == 0

        def ca_bundles() -> list[bytes]:
            hooks = devcluster.get(
                "mutatingwebhookconfigurations",
                "",
                "trainjob-status",
                "admissionregistration.k8s.io",
            )
            assert hooks is not None
            return [
                base64.b64decode(h["clientConfig"].get("caBundle", "")) for h in hooks["webhooks"]
            ]

        await until(lambda: ca_bundles() == [ca_pem], "the webhook's caBundle is the CA")

        def distributed() -> bool:
            found = devcluster.get("configmaps", TEAM, "trainjob-status-ca")
            return found is not None and found["data"]["ca.crt"] == ca_pem.decode()

        await until(distributed, "the CA ConfigMap in the TrainJob's namespace")

        # A trainer pod created through the API afterwards: the API server calls the
        # webhook over HTTPS with the caBundle, and stores the patched pod.
        async with KubeClient(devcluster.kubeconfig_path) as admin:
            stored = await admin.create(PODS, TEAM, trainer_pod(job))
        assert [outcome for _, outcome in devcluster.app.admission.calls] == ["patched"]
        # The server's own namespace, whichever the overlay chose, is never sent to it.
        devcluster.create_trainjob(here, JOB)
        devcluster.create("serviceaccounts", {"metadata": {"name": "trainer"}}, here)
        async with KubeClient(devcluster.kubeconfig_path) as admin:
            own = await admin.create(
                PODS, here, trainer_pod(devcluster.create_trainjob_job(here, JOB))
            )
        assert [outcome for _, outcome in devcluster.app.admission.calls] == ["patched"]
        assert "env" not in own["spec"]["containers"][0]
        env, mounted = kubelet_mounts(devcluster, stored, tmp_path / "pod")
        assert set(ENV) <= set(env)
        url = urlsplit(env[URL_ENV])
        assert url.hostname == f"trainjob-status.{here}.svc"
        token = (mounted / env[TOKEN_ENV].lstrip("/")).read_text()
        pod_ca = mounted / env[CA_CERT_ENV].lstrip("/")
        assert pod_ca.read_bytes() == ca_pem

        # The pod's post, to the Service's name, verified with the mounted CA.
        port = service_target(docs, container, url.hostname, url.port or 443)
        update = {
            "trainerStatus": {
                "progressPercentage": 42,
                "metrics": [{"name": "loss", "value": "0.5"}],
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
            body: Any = await answer.json()
            assert answer.status == 200, body
        assert body["trainerStatus"]["progressPercentage"] == 42

        def written() -> bool:
            found = devcluster.get("trainjobs", TEAM, JOB, GROUP) or {}
            stored_status = (found.get("status") or {}).get("trainerStatus") or {}
            return bool(stored_status.get("progressPercentage") == 42)

        await until(written, "the post's status in the TrainJob")
    finally:
        code = server.stop()
    log = server.log_text()
    assert code == 0, log
    assert "Traceback" not in log
    lines = server.log_lines()
    assert [line for line in lines if line["level"] in ("error", "critical")] == []
    events = {line["msg"] for line in lines}
    assert {"serving", "webhook caBundle updated", "stopped"} <= events, events
    assert not any(level == "debug" for level in (line["level"] for line in lines))
