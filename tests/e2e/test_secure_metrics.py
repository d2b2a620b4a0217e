"""A real Prometheus scraping ``--metrics-secure`` as the secure-metrics component's
ServiceMonitor has it scrape: HTTPS checked against the server's CA, a ServiceAccount
token from a file. The job whose account is bound to the scraper ClusterRole is up and
stores the TrainJob's progress; the job whose account is not is down with 403."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio
import yaml

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.pytest_plugin import MakeStatusServer
from trainjob_devcluster.harness.testing import ServingCerts, eventually

from .conftest import JOB, Prometheus, Stack

ROOT = Path(__file__).resolve().parents[2]
SCRAPER_ROLE = ROOT / "manifests" / "components" / "secure-metrics" / "rbac.yaml"
NS = "team-a"
MON = "monitoring"
RBAC = "rbac.authorization.k8s.io"


def scraper_role() -> dict[str, Any]:
    """The shipped scraper ClusterRole, as the component defines it."""
    for doc in yaml.safe_load_all(SCRAPER_ROLE.read_text()):
        if doc["metadata"]["name"] == "trainjob-status-metrics-reader":
            role: dict[str, Any] = doc
            return role
    raise AssertionError("no scraper ClusterRole in the component")


def account_token(cluster: DevCluster, name: str) -> str:
    cluster.ensure_namespace(MON)
    cluster.create("serviceaccounts", {"metadata": {"name": name}}, MON)
    return cluster.request_token(MON, name, [cluster.issuer])


@pytest_asyncio.fixture
async def secure_stack(
    serving_certs: ServingCerts, make_status_server: MakeStatusServer
) -> AsyncIterator[Stack]:
    async with make_status_server(metrics_secure=True) as server:
        trust = serving_certs.client_context()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust)) as session:
            stack = Stack(server, server.exporter, server.metrics_url + "/metrics")
            stack.session = session
            yield stack


def job(name: str, target: str, token_file: Path, ca_file: Path) -> dict[str, Any]:
    """A scrape job as the Prometheus Operator renders the component's ServiceMonitor."""
    return {
        "job_name": name,
        "scheme": "https",
        "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
        "tls_config": {"ca_file": str(ca_file)},
        "static_configs": [{"targets": [target]}],
    }


async def test_prometheus_scrapes_with_a_token_that_may_and_not_with_one_that_may_not(
    secure_stack: Stack,
    serving_certs: ServingCerts,
    prometheus: Prometheus,
    devcluster: DevCluster,
    tmp_path: Path,
) -> None:
    devcluster.create("clusterroles", scraper_role(), group=RBAC)
    devcluster.create(
        "clusterrolebindings",
        {
            "metadata": {"name": "prometheus-reads-trainjob-status"},
            "roleRef": {
                "apiGroup": RBAC,
                "kind": "ClusterRole",
                "name": "trainjob-status-metrics-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": MON}],
        },
        group=RBAC,
    )
    (tmp_path / "allowed.token").write_text(account_token(devcluster, "prometheus"))
    (tmp_path / "refused.token").write_text(account_token(devcluster, "stranger"))
    devcluster.create_trainjob(NS, "tj")
    target = secure_stack.metrics_url.removeprefix("https://").removesuffix("/metrics")
    ca_file = serving_certs.ca_file
    await prometheus.start(
        target,
        scrape_configs=[
            job(JOB, target, tmp_path / "allowed.token", ca_file),
            job("stranger", target, tmp_path / "refused.token", ca_file),
        ],
    )
    await secure_stack.post(NS, "tj", {"progressPercentage": 42})

    async def progress() -> list[dict[str, Any]]:
        return await prometheus.query(f'trainjob_progress_ratio{{job="{JOB}", trainjob="tj"}}')

    [found] = await eventually(progress, what="progress scraped over HTTPS")
    assert found["value"] == 0.42

    async def both_scraped() -> dict[str, tuple[str, str]] | None:
        targets = (await prometheus.api("targets"))["activeTargets"]
        health = {t["labels"]["job"]: (t["health"], t["lastError"]) for t in targets}
        return health if "unknown" not in {h for h, _ in health.values()} else None

    health = await eventually(both_scraped, what="both jobs scraped")
    assert health == {
        JOB: ("up", ""),
        "stranger": ("down", "server returned HTTP status 403 Forbidden"),
    }
    # Nothing of the stranger's job was stored.
    assert await prometheus.query('trainjob_progress_ratio{job="stranger"}') == []
    assert await prometheus.query('up{job="stranger"}') == [
        {"labels": {"__name__": "up", "instance": target, "job": "stranger"}, "value": 0.0}
    ]
