"""What a review costs and who may cause one: the metrics port's reviews spend a budget of
their own, each source address may cause only a few (429 beyond), refusals never push a
scraper's approval out, an approval outlives a spent budget by one TTL; in
``--token-review`` mode a post's reviews are limited per source address too, and a
token naming a live pod with the wrong uid is refused before any review."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from trainjob_devcluster import DevCluster
from trainjob_status_server.config import Config

from .conftest import NS, ServingCerts, with_changes
from .test_api_budget import TJ, forged, update
from .test_auth_support import add_pod, mint, tampered
from .test_auth_support import running as running_with_tokens
from .test_metrics_secure import grant_metrics_reader, token_for


@pytest.fixture
def cluster(devcluster: DevCluster) -> DevCluster:
    devcluster.create_trainjob(NS, TJ)
    add_pod(devcluster)
    return devcluster


def reviews(cluster: DevCluster) -> int:
    return cluster.faults.count("create", "tokenreviews")


async def sessions(certs: ServingCerts, sources: list[str]) -> AsyncIterator[aiohttp.ClientSession]:
    for source in sources:
        connector = aiohttp.TCPConnector(ssl=certs.client_context(), local_addr=(source, 0))
        async with aiohttp.ClientSession(connector=connector) as session:
            yield session


async def scrape(session: aiohttp.ClientSession, url: str, token: str) -> tuple[int, Any]:
    async with session.get(url + "/metrics", headers={"Authorization": f"Bearer {token}"}) as got:
        body = await got.read()
        retry = got.headers.get("Retry-After")
        return got.status, (retry if got.status == 429 else body[:0])


async def scrape_until(
    session: aiohttp.ClientSession,
    url: str,
    token: str,
    done: Callable[[int], bool],
    what: str,
    within: float = 10.0,
) -> tuple[list[int], float]:
    """Scrape every 0.05 s until ``done(code)`` holds: the codes answered, and when the
    last scrape began (``time.monotonic()``, the clock of the server's approvals)."""
    deadline = time.monotonic() + within
    codes: list[int] = []
    while True:
        began = time.monotonic()
        codes.append((await scrape(session, url, token))[0])
        if done(codes[-1]):
            return codes, began
        assert time.monotonic() < deadline, f"{what}: not within {within} s; answers {codes}"
        await asyncio.sleep(0.05)


async def test_a_source_address_may_cause_only_a_few_metrics_reviews(
    cluster: DevCluster, config: Config, certs: ServingCerts, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trainjob_status_server.http.metricsauth")
    secure = with_changes(config, metrics_secure=True)
    async with running_with_tokens(cluster, secure, certs, server_budgets=True) as rig:
        url = rig.server.metrics_url
        before = reviews(cluster)
        async for session in sessions(certs, ["127.0.5.1"]):
            answers = [await scrape(session, url, f"garbage-{i}") for i in range(6)]
            assert answers == [(401, b"")] * 4 + [(429, "30")] * 2
            assert reviews(cluster) == before + 4
            # A refusal already judged costs nothing and is answered as before.
            assert await scrape(session, url, "garbage-0") == (401, b"")
        async for session in sessions(certs, ["127.0.5.2"]):
            # Another address has its own allowance.
            assert await scrape(session, url, "garbage-9") == (401, b"")
        assert reviews(cluster) == before + 5
        limited = [
            r
            for r in caplog.records
            if r.getMessage() == "metrics review refused: source over its rate"
        ]
        assert [r.__dict__["source"] for r in limited] == ["127.0.5.1"] * 2


async def test_a_flood_of_garbage_tokens_leaves_scrapes_and_a_new_pods_first_post_answered(
    cluster: DevCluster, config: Config, certs: ServingCerts
) -> None:
    prometheus = token_for(cluster, "prometheus")
    grant_metrics_reader(cluster, "prometheus")
    # The defaults' metrics budget, and a TTL that runs out while the flood goes on.
    secure = with_changes(
        config,
        metrics_secure=True,
        metrics_auth_cache_ttl=3.0,
        kube_metrics_qps=Config().kube_metrics_qps,
        kube_metrics_burst=Config().kube_metrics_burst,
    )
    async with running_with_tokens(
        cluster, secure, certs, token_review=True, server_budgets=True
    ) as rig:
        url = rig.server.metrics_url
        scraper = rig.session
        assert (await scrape(scraper, url, prometheus))[0] == 200

        async def flood(source: str) -> list[int]:
            codes = []
            async for session in sessions(certs, [source]):
                for i in range(8):
                    codes.append((await scrape(session, url, f"garbage-{source}-{i}"))[0])
            return codes

        # Twelve connections from twelve addresses, every token a new one.
        flooding = asyncio.gather(*(flood(f"127.0.6.{i}") for i in range(1, 13)))
        scrapes = []
        for _ in range(10):
            scrapes.append((await scrape(scraper, url, prometheus))[0])
            await asyncio.sleep(0.5)  # past the approval's TTL before the loop ends
        # A new pod's first post: its token has never been reviewed.
        add_pod(cluster, "tj-node-0-1")
        code, _, _ = await rig.post(mint(cluster, pod="tj-node-0-1"))
        flooded = await flooding
    assert scrapes == [200] * 10
    assert code == 200
    for codes in flooded:
        # Each address: its four reviews (refused, or 503 once the budget is spent), then 429.
        assert set(codes[:4]) <= {401, 503}
        assert codes[4:] == [429] * 4


async def test_a_token_naming_a_live_pod_with_the_wrong_uid_costs_no_review(
    cluster: DevCluster, config: Config, certs: ServingCerts
) -> None:
    async with running_with_tokens(cluster, config, certs, token_review=True) as rig:
        token = mint(cluster)

        def wrong_uid(claims: dict[str, Any]) -> None:
            claims["kubernetes.io"]["pod"]["uid"] = "0000-not-the-pods-uid"

        before = reviews(cluster)
        assert await rig.refused(tampered(token, wrong_uid)) == (401, "Unauthorized", "pod_uid")
        assert reviews(cluster) == before
        # The pod's own token is reviewed and passes.
        assert (await rig.post(token))[0] == 200
        assert reviews(cluster) == before + 1


async def test_a_source_address_may_cause_only_so_many_post_reviews(
    cluster: DevCluster, config: Config, certs: ServingCerts, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trainjob_status_server.auth.verifier")
    async with running_with_tokens(
        cluster, config, certs, token_review=True, review_source_burst=2, review_source_rate=0.001
    ) as rig:
        token = mint(cluster)
        before = reviews(cluster)
        assert (await rig.post(token))[0] == 200  # one review of the two
        answers = []
        for i in range(3):
            code, body, response = await rig.post(forged(token, i))
            answers.append((code, body["reason"], response.headers.get("Retry-After")))
        assert answers == [(401, "Unauthorized", None)] + [(429, "TooManyRequests", "1000")] * 2
        assert reviews(cluster) == before + 2
        limited = [
            r
            for r in caplog.records
            if r.getMessage() == "post rate-limited: reviews of its source address"
        ]
        assert [r.__dict__["source"] for r in limited] == ["127.0.0.1"] * 2
        # A token already vouched for needs no review: the address's limit is no matter.
        assert (await rig.post(token, body=update(5)))[0] == 200
        assert reviews(cluster) == before + 2


async def test_an_approval_is_reused_one_ttl_past_its_expiry_while_no_review_can_be_had(
    cluster: DevCluster, config: Config, certs: ServingCerts, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trainjob_status_server.http.metricsauth")
    prometheus = token_for(cluster, "prometheus")
    grant_metrics_reader(cluster, "prometheus")
    # Two calls of budget: the first approval (TokenReview, SubjectAccessReview) spends it.
    secure = with_changes(
        config,
        metrics_secure=True,
        metrics_auth_cache_ttl=1.0,
        kube_metrics_qps=0.001,
        kube_metrics_burst=2,
    )

    def reused() -> int:
        message = "metrics review unavailable: the last approval reused"
        return sum(r.getMessage() == message for r in caplog.records)

    async with running_with_tokens(cluster, secure, certs, server_budgets=True) as rig:
        url = rig.server.metrics_url
        approved = time.monotonic()
        assert (await scrape(rig.session, url, prometheus))[0] == 200
        # Answered from the approval until it expires; the first scrape after finds the
        # budget spent and reuses it.
        codes, began = await scrape_until(
            rig.session,
            url,
            prometheus,
            lambda code: code != 200 or reused() > 0,
            "the approval reused once expired",
        )
        assert set(codes) == {200}
        assert reused() == 1
        assert began >= approved + 1.0
        # Reused for one more TTL; past it, a budget still spent is a 503.
        codes, began = await scrape_until(
            rig.session, url, prometheus, lambda code: code != 200, "a 503 past one more TTL"
        )
        assert codes[-1] == 503
        assert reused() == len(codes)
        assert began >= approved + 2.0


async def test_forged_tokens_naming_a_pod_do_not_spend_its_service_accounts_rate(
    cluster: DevCluster, config: Config, certs: ServingCerts
) -> None:
    """Until a review vouches for a token, what it claims is the sender's word: the
    review is charged to the sender's address, and the claimed account's bucket pays
    only for verified posts."""
    async with running_with_tokens(
        cluster,
        config,
        certs,
        token_review=True,
        sa_rate_limit=0.001,
        sa_rate_burst=3,
        review_source_burst=1000,
        review_source_rate=1000.0,
    ) as rig:
        token = mint(cluster)
        forgeries = [(await rig.post(forged(token, i)))[0] for i in range(10)]
        assert forgeries == [401] * 10
        # The pod's own posts: the whole burst of its account, then its rate.
        codes = [(await rig.post(token, body=update(p, p)))[0] for p in (1, 2, 3, 4)]
        assert codes == [200, 200, 200, 429]
