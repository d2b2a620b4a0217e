"""The secure-metrics component's RBAC, loaded into the devcluster and into the real
control plane, is what ``--metrics-secure`` needs: a server holding its ServiceAccount's
token answers a scraper bound to the rendered scraper ClusterRole with the metrics, one
that is not with 403; the same server without the component's RBAC cannot ask (503)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from trainjob_devcluster.harness.kubeconfig import write_kubeconfig
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_both_servers
from trainjob_devcluster.harness.testing import ServingCerts, running_server, server_config

from .rendering import render
from .test_rbac_on_devcluster import PLURALS

NS = "trainjob-status"
RBAC = "rbac.authorization.k8s.io"


def load_rbac(cluster: KubeAPI, *components: str) -> None:
    for doc in render("quick-start", *components):
        if doc["kind"] in PLURALS:
            plural, group = PLURALS[doc["kind"]]
            cluster.create(plural, doc, doc["metadata"].get("namespace", ""), group)


def scraper_token(cluster: KubeAPI, name: str, *, bound: bool) -> str:
    cluster.ensure_namespace("monitoring")
    cluster.create("serviceaccounts", {"metadata": {"name": name}}, "monitoring")
    if bound:
        # What the platform team runs: kubectl create clusterrolebinding ...
        cluster.create(
            "clusterrolebindings",
            {
                "metadata": {"name": f"{name}-reads-trainjob-status"},
                "roleRef": {
                    "apiGroup": RBAC,
                    "kind": "ClusterRole",
                    "name": "trainjob-status-metrics-reader",
                },
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "monitoring"}],
            },
            group=RBAC,
        )
    return cluster.request_token("monitoring", name, [cluster.issuer])


async def scrape(
    cluster: KubeAPI, tmp_path: Path, tokens: list[str]
) -> AsyncIterator[tuple[int, Any]]:
    """Runs the server as its ServiceAccount with --metrics-secure; (code, body) per token."""
    server_token = cluster.request_token(NS, "trainjob-status", [cluster.issuer])
    kubeconfig = write_kubeconfig(
        tmp_path / "server.kubeconfig", cluster.url, cluster.ca.cert_pem, server_token
    )
    certs = ServingCerts.create(tmp_path)
    config = server_config(kubeconfig, certs, metrics_secure=True)
    async with running_server(config) as running:
        connector = aiohttp.TCPConnector(ssl=certs.client_context())
        async with aiohttp.ClientSession(connector=connector) as session:
            for token in tokens:
                headers = {"Authorization": f"Bearer {token}"}
                async with session.get(running.metrics_url + "/metrics", headers=headers) as got:
                    text = await got.text()
                    body = json.loads(text) if got.content_type == "application/json" else text
                    yield got.status, body


@on_both_servers
async def test_the_components_rbac_lets_the_server_judge_scrapers(
    kube_api: KubeAPI, tmp_path: Path
) -> None:
    load_rbac(kube_api, "secure-metrics")
    allowed = scraper_token(kube_api, "prometheus", bound=True)
    stranger = scraper_token(kube_api, "stranger", bound=False)
    answers = [answer async for answer in scrape(kube_api, tmp_path, [allowed, stranger])]
    (code, page), (refused, status) = answers
    assert code == 200
    assert "trainjob_status_requests_total" in page
    assert (refused, status["reason"], status["message"]) == (
        403,
        "Forbidden",
        'forbidden: User "system:serviceaccount:monitoring:stranger" cannot get path "/metrics"',
    )


@on_both_servers
@pytest.mark.parametrize("component", [None, "token-review"])
async def test_without_the_components_rbac_the_server_cannot_ask(
    kube_api: KubeAPI, tmp_path: Path, component: str | None
) -> None:
    load_rbac(kube_api, *([component] if component else []))
    allowed = scraper_token(kube_api, "prometheus", bound=False)
    [(code, status)] = [answer async for answer in scrape(kube_api, tmp_path, [allowed])]
    assert (code, status["reason"]) == (503, "ServiceUnavailable")
