"""``--metrics-secure``: the metrics port speaks HTTPS with the serving certificate, and
every request is authenticated (TokenReview) and authorized (SubjectAccessReview on the
non-resource URL) against the devcluster's RBAC; verdicts are reused for their TTL;
probes stay plain on their own port."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.acceptall import AcceptAll
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_both_servers
from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config

from .conftest import ServingCerts, with_changes

MON = "mon"
RBAC = "rbac.authorization.k8s.io"


def grant_metrics_reader(cluster: KubeAPI, account: str) -> None:
    """The scraper ClusterRole of the secure-metrics component, bound to ``account``."""
    cluster.create(
        "clusterroles",
        {
            "metadata": {"name": "metrics-reader"},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
        group=RBAC,
    )
    cluster.create(
        "clusterrolebindings",
        {
            "metadata": {"name": "metrics-reader"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "metrics-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": MON}],
        },
        group=RBAC,
    )


def token_for(cluster: KubeAPI, account: str) -> str:
    cluster.ensure_namespace(MON)
    if cluster.get("serviceaccounts", MON, account) is None:
        cluster.create("serviceaccounts", {"metadata": {"name": account}}, MON)
    return cluster.request_token(MON, account, [cluster.issuer])


def reviews(cluster: DevCluster) -> tuple[int, int]:
    return (
        cluster.faults.count("create", "tokenreviews"),
        cluster.faults.count("create", "subjectaccessreviews"),
    )


class Scraper:
    def __init__(self, server: StatusServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session

    async def get(
        self, token: str | None, path: str = "/metrics", header: str | None = None
    ) -> tuple[int, Any]:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        if header is not None:
            headers["Authorization"] = header
        async with self.session.get(self.server.metrics_url + path, headers=headers) as answer:
            raw = await answer.read()
            if answer.content_type == "application/json":
                return answer.status, json.loads(raw)
            return answer.status, raw.decode()


async def scraper_for(config: Config, certs: ServingCerts) -> AsyncIterator[Scraper]:
    async with StatusServer(config, AcceptAll()) as running:
        await running.trainjobs.synced.wait()
        connector = aiohttp.TCPConnector(ssl=certs.client_context())
        async with aiohttp.ClientSession(connector=connector) as session:
            yield Scraper(running, session)


@pytest_asyncio.fixture
async def scraper(config: Config, certs: ServingCerts) -> AsyncIterator[Scraper]:
    async for found in scraper_for(with_changes(config, metrics_secure=True), certs):
        yield found


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


UNAUTHORIZED = status(401, "Unauthorized", "Unauthorized")


@on_both_servers
async def test_a_token_rbac_allows_is_served_over_https(
    scraper: Scraper, kube_api: KubeAPI
) -> None:
    token = token_for(kube_api, "prometheus")
    grant_metrics_reader(kube_api, "prometheus")
    assert scraper.server.metrics_url.startswith("https://")
    code, body = await scraper.get(token)
    assert code == 200
    assert "trainjob_status_requests_total" in body


@on_both_servers
async def test_a_token_rbac_does_not_allow_is_forbidden(
    scraper: Scraper, kube_api: KubeAPI
) -> None:
    grant_metrics_reader(kube_api, "prometheus")
    refused = token_for(kube_api, "stranger")
    code, body = await scraper.get(refused)
    assert (code, body) == (
        403,
        status(
            403,
            "Forbidden",
            'forbidden: User "system:serviceaccount:mon:stranger" cannot get path "/metrics"',
        ),
    )
    # Each path is asked about as itself: /healthz is every user's under the cluster's
    # default policy, and the ClusterRole names /metrics alone.
    assert await scraper.get(refused, "/healthz") == (200, "ok")


@pytest.mark.parametrize(
    "header",
    [None, "Bearer not-a-token", "Basic dXNlcjpwYXNz", "Bearer", "Bearer a b"],
    ids=["none", "garbage", "basic", "empty", "two"],
)
@on_both_servers
async def test_no_token_or_one_the_api_server_rejects_is_unauthorized(
    scraper: Scraper, kube_api: KubeAPI, header: str | None
) -> None:
    counted = isinstance(kube_api, DevCluster)  # reviews are counted there only
    before = reviews(kube_api) if counted else (0, 0)
    code, body = await scraper.get(None, header=header)
    assert (code, body) == (401, UNAUTHORIZED)
    if counted:
        # A token the API server does not accept is never asked about access.
        after = reviews(kube_api)
        assert after[1] == before[1]
        assert after[0] == before[0] + (1 if header == "Bearer not-a-token" else 0)


@on_both_servers
async def test_a_token_for_another_audience_is_unauthorized(
    scraper: Scraper, kube_api: KubeAPI
) -> None:
    token_for(kube_api, "prometheus")
    grant_metrics_reader(kube_api, "prometheus")
    token = kube_api.request_token(MON, "prometheus", ["somewhere-else"])
    assert await scraper.get(token) == (401, UNAUTHORIZED)


async def test_verdicts_are_reused_for_their_ttl(scraper: Scraper, devcluster: DevCluster) -> None:
    allowed = token_for(devcluster, "prometheus")
    grant_metrics_reader(devcluster, "prometheus")
    refused = token_for(devcluster, "stranger")
    before = reviews(devcluster)
    for _ in range(3):
        assert (await scraper.get(allowed))[0] == 200
        assert (await scraper.get(refused))[0] == 403
        assert await scraper.get(None, header="Bearer not-a-token") == (401, UNAUTHORIZED)
    after = reviews(devcluster)
    # One TokenReview per token, one SubjectAccessReview per authenticated one.
    assert (after[0] - before[0], after[1] - before[1]) == (3, 2)
    # A verdict is for its path: another one is asked about.
    assert await scraper.get(refused, "/healthz") == (200, "ok")
    assert reviews(devcluster) == (after[0] + 1, after[1] + 1)


async def test_paths_the_port_does_not_serve_cost_no_review(
    scraper: Scraper, devcluster: DevCluster
) -> None:
    before = reviews(devcluster)
    for path in ("/debug", "/metrics/x", "/a", "/b"):
        code, _ = await scraper.get(f"forged-{path}", path)
        assert code == 404, path
    async with scraper.session.post(
        scraper.server.metrics_url + "/metrics", headers={"Authorization": "Bearer forged"}
    ) as answer:
        assert answer.status == 405
    assert reviews(devcluster) == before


async def test_a_ttl_of_zero_asks_for_every_request(
    config: Config, certs: ServingCerts, devcluster: DevCluster
) -> None:
    allowed = token_for(devcluster, "prometheus")
    grant_metrics_reader(devcluster, "prometheus")
    secure = with_changes(config, metrics_secure=True, metrics_auth_cache_ttl=0.0)
    async for scraper in scraper_for(secure, certs):
        before = reviews(devcluster)
        for _ in range(3):
            assert (await scraper.get(allowed))[0] == 200
        after = reviews(devcluster)
        assert (after[0] - before[0], after[1] - before[1]) == (3, 3)


async def test_an_api_server_that_cannot_answer_is_a_503_never_remembered(
    scraper: Scraper, devcluster: DevCluster
) -> None:
    allowed = token_for(devcluster, "prometheus")
    grant_metrics_reader(devcluster, "prometheus")
    devcluster.faults.fail(403, times=None, resource="subjectaccessreviews")
    code, body = await scraper.get(allowed)
    assert (code, body["reason"]) == (503, "ServiceUnavailable")
    devcluster.faults.clear()
    assert (await scraper.get(allowed))[0] == 200


async def test_the_metrics_port_refuses_plain_http(
    scraper: Scraper, devcluster: DevCluster
) -> None:
    plain = scraper.server.metrics_url.replace("https://", "http://")
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.get(plain + "/metrics") as answer:
                await answer.read()


async def test_probes_stay_plain_and_open(scraper: Scraper) -> None:
    assert scraper.server.probe_url.startswith("http://")
    async with aiohttp.ClientSession() as session:
        for path in ("/healthz", "/readyz"):
            async with session.get(scraper.server.probe_url + path) as answer:
                assert (answer.status, await answer.text()) == (200, "ok")


def test_secure_metrics_needs_the_serving_certificate(config: Config) -> None:
    plain = with_changes(
        config, metrics_secure=True, insecure_http=True, tls_cert_file=None, tls_key_file=None
    )
    assert plain.check() == ["--metrics-secure needs the serving certificate: not --insecure-http"]
    assert with_changes(config, metrics_auth_cache_ttl=-1.0).check() == [
        "--metrics-auth-cache-ttl must be >= 0"
    ]


async def test_strangers_reviews_stop_at_their_share_of_the_metrics_budget(
    config: Config, certs: ServingCerts, devcluster: DevCluster
) -> None:
    """Strangers' tokens cost a review each until their share of the metrics port's own
    budget (half its burst) is spent; then 503 with Retry-After, and nothing more reaches
    the API server."""
    tight = with_changes(config, metrics_secure=True, kube_metrics_qps=0.01, kube_metrics_burst=4)
    async for scraper in scraper_for(tight, certs):
        before = reviews(devcluster)
        for forged in ("a", "b"):
            assert await scraper.get(f"forged-{forged}") == (401, UNAUTHORIZED)
        async with scraper.session.get(
            scraper.server.metrics_url + "/metrics", headers={"Authorization": "Bearer forged-c"}
        ) as answer:
            body = await answer.json()
            assert (answer.status, body["reason"]) == (503, "ServiceUnavailable")
            assert body["message"] == "The Kubernetes API budget is spent: retry later"
            assert int(answer.headers["Retry-After"]) >= 1
        assert reviews(devcluster) == (before[0] + 2, before[1])
        # A refusal already judged costs nothing, budget or not.
        assert await scraper.get("forged-a") == (401, UNAUTHORIZED)


async def test_concurrent_requests_with_one_token_share_one_review(
    scraper: Scraper, devcluster: DevCluster
) -> None:
    allowed = token_for(devcluster, "prometheus")
    grant_metrics_reader(devcluster, "prometheus")
    # Held long enough for every request to arrive while the first review is out.
    devcluster.faults.stall(1.0, verb="create", resource="tokenreviews")
    before = reviews(devcluster)
    answers = await asyncio.gather(*(scraper.get(allowed) for _ in range(4)))
    assert [code for code, _ in answers] == [200] * 4
    assert reviews(devcluster) == (before[0] + 1, before[1] + 1)
