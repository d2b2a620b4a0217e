"""Mutating admission webhooks called by the devcluster on create, over real HTTPS."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from trainjob_devcluster import DevCluster
from trainjob_devcluster.auth.admission import rule_matches, selects
from trainjob_devcluster.common.resources import default_resources
from trainjob_devcluster.harness.pki import CertificateAuthority
from trainjob_status_server.kube.client import KubeClient
from trainjob_status_server.kube.errors import KubeError
from trainjob_status_server.kube.resources import PODS

NS = "team-a"
HOOK = "pods.example.org"


class Webhook:
    """An HTTPS admission webhook that records each review and answers ``reply``."""

    def __init__(self, ca: CertificateAuthority, workdir: Path) -> None:
        cert, key = ca.issue_server_cert(["hooks.webhooks.svc"], ["127.0.0.1"])
        (workdir / "hook.crt").write_bytes(cert)
        (workdir / "hook.key").write_bytes(key)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(workdir / "hook.crt", workdir / "hook.key")
        self.reviews: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.reply: dict[str, Any] = {"allowed": True}
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        review = await request.json()
        self.reviews.append(review)
        self.paths.append(request.path_qs)
        response = {"uid": review["request"]["uid"], **self.reply}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )


def add_env_patch() -> dict[str, Any]:
    ops = [{"op": "add", "path": "/metadata/labels/injected", "value": "yes"}]
    return {
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": base64.b64encode(json.dumps(ops).encode()).decode(),
    }


@pytest_asyncio.fixture
async def hook(devcluster: DevCluster, tmp_path: Path) -> AsyncIterator[Webhook]:
    ca = CertificateAuthority()
    served = Webhook(ca, tmp_path)
    app = web.Application()
    app.router.add_post("/mutate", served.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=served.context)
    await site.start()
    served.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    devcluster.ensure_namespace("webhooks")
    devcluster.create(
        "services",
        {
            "metadata": {"name": "hooks"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": "https"}]},
        },
        "webhooks",
    )
    devcluster.route_service("webhooks", "hooks", "127.0.0.1", {"https": served.port})
    devcluster.create(
        "mutatingwebhookconfigurations",
        configuration(base64.b64encode(ca.cert_pem).decode()),
        group="admissionregistration.k8s.io",
    )
    yield served
    await runner.cleanup()


def configuration(ca_bundle: str, **changes: Any) -> dict[str, Any]:
    webhook = {
        "name": HOOK,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 3,
        "clientConfig": {
            "caBundle": ca_bundle,
            "service": {"namespace": "webhooks", "name": "hooks", "path": "/mutate", "port": 443},
        },
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ],
        "objectSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
        "namespaceSelector": {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["webhooks"]}
            ]
        },
        **changes,
    }
    return {"metadata": {"name": "example"}, "webhooks": [webhook]}


def pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


@pytest_asyncio.fixture
async def kube(devcluster: DevCluster) -> AsyncIterator[KubeClient]:
    devcluster.ensure_namespace(NS)
    async with KubeClient(devcluster.kubeconfig_path, qps=100, burst=100) as client:
        yield client


def set_webhook(devcluster: DevCluster, **changes: Any) -> None:
    stored = devcluster.get(
        "mutatingwebhookconfigurations", "", "example", "admissionregistration.k8s.io"
    )
    assert stored is not None
    bundle = stored["webhooks"][0]["clientConfig"]["caBundle"]
    devcluster.delete(
        "mutatingwebhookconfigurations", "", "example", "admissionregistration.k8s.io"
    )
    devcluster.create(
        "mutatingwebhookconfigurations",
        configuration(bundle, **changes),
        group="admissionregistration.k8s.io",
    )


def test_label_selectors_and_rules() -> None:
    assert selects(None, {})
    assert selects({"matchLabels": {"a": "1"}}, {"a": "1"})
    assert not selects({"matchLabels": {"a": "1"}}, {"a": "2"})
    expressions = {
        "matchExpressions": [
            {"key": "a", "operator": "In", "values": ["1", "2"]},
            {"key": "b", "operator": "DoesNotExist"},
        ]
    }
    assert selects(expressions, {"a": "2"})
    assert not selects(expressions, {"a": "2", "b": ""})
    with pytest.raises(ValueError, match="unknown selector operator 'Near'"):
        selects({"matchExpressions": [{"key": "a", "operator": "Near"}]}, {})
    pods = next(r for r in default_resources() if r.plural == "pods")
    rule = {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["pods"],
    }
    assert rule_matches(rule, "CREATE", pods)
    assert not rule_matches({**rule, "operations": ["UPDATE"]}, "CREATE", pods)
    assert not rule_matches({**rule, "scope": "Cluster"}, "CREATE", pods)
    assert rule_matches({**rule, "apiGroups": ["*"], "resources": ["*"]}, "CREATE", pods)
    assert not rule_matches({**rule, "resources": ["services"]}, "CREATE", pods)


async def test_a_matching_create_is_patched_by_the_webhook(
    devcluster: DevCluster, kube: KubeClient, hook: Webhook
) -> None:
    hook.reply = add_env_patch()
    created = await kube.create(PODS, NS, pod("p1", {"app": "x"}))
    assert created["metadata"]["labels"] == {"app": "x", "injected": "yes"}
    stored = devcluster.get("pods", NS, "p1")
    assert stored is not None
    assert stored["metadata"]["labels"]["injected"] == "yes"
    assert hook.paths == ["/mutate?timeout=3s"]
    request = hook.reviews[0]["request"]
    assert (request["operation"], request["namespace"], request["name"]) == ("CREATE", NS, "p1")
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert request["userInfo"]["username"] == "devcluster-admin"
    assert request["object"]["metadata"]["labels"] == {"app": "x"}
    assert devcluster.app.admission.calls == [(HOOK, "patched")]


async def test_selectors_keep_other_creates_away_from_the_webhook(
    devcluster: DevCluster, kube: KubeClient, hook: Webhook
) -> None:
    created = await kube.create(PODS, NS, pod("plain", {"role": "db"}))
    assert created["metadata"]["labels"] == {"role": "db"}
    await kube.create(PODS, "webhooks", pod("own", {"app": "x"}))
    assert hook.reviews == []


async def test_a_denial_refuses_the_create(
    devcluster: DevCluster, kube: KubeClient, hook: Webhook
) -> None:
    hook.reply = {"allowed": False, "status": {"message": "no thanks", "code": 403}}
    with pytest.raises(KubeError) as caught:
        await kube.create(PODS, NS, pod("p2", {"app": "x"}))
    assert caught.value.status == 403
    assert caught.value.message == f'admission webhook "{HOOK}" denied the request: no thanks'
    assert devcluster.get("pods", NS, "p2") is None


async def test_failure_policy_decides_when_the_webhook_cannot_be_called(
    devcluster: DevCluster, kube: KubeClient, hook: Webhook
) -> None:
    devcluster.route_service("webhooks", "hooks", "127.0.0.1", {})  # no endpoints
    with pytest.raises(KubeError) as caught:
        await kube.create(PODS, NS, pod("p3", {"app": "x"}))
    assert caught.value.status == 500
    assert caught.value.message == (
        f'Internal error occurred: failed calling webhook "{HOOK}": '
        'no endpoints available for service "hooks"'
    )
    assert devcluster.get("pods", NS, "p3") is None

    set_webhook(devcluster, failurePolicy="Ignore")
    created = await kube.create(PODS, NS, pod("p4", {"app": "x"}))
    assert created["metadata"]["labels"] == {"app": "x"}
    assert devcluster.app.admission.calls[-1] == (
        HOOK,
        'ignored: no endpoints available for service "hooks"',
    )


async def test_the_webhook_is_verified_with_its_ca_bundle(
    devcluster: DevCluster, kube: KubeClient, hook: Webhook
) -> None:
    other = base64.b64encode(CertificateAuthority().cert_pem).decode()
    devcluster.delete(
        "mutatingwebhookconfigurations", "", "example", "admissionregistration.k8s.io"
    )
    devcluster.create(
        "mutatingwebhookconfigurations",
        configuration(other, failurePolicy="Ignore"),
        group="admissionregistration.k8s.io",
    )
    hook.reply = add_env_patch()
    created = await kube.create(PODS, NS, pod("p5", {"app": "x"}))
    assert "injected" not in created["metadata"]["labels"]
    assert hook.reviews == []
    name, outcome = devcluster.app.admission.calls[-1]
    assert name == HOOK
    assert outcome.startswith('ignored: failed to call webhook: Post "https://127.0.0.1:')
    assert "CERTIFICATE_VERIFY_FAILED" in outcome
