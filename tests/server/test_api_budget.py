"""The Kubernetes API budget against strangers and floods: admissions cost no request,
a request that cannot get its budget in time is refused at once with Retry-After, and
status writes and token checks spend separate budgets. Request counts come from the
devcluster; clocks are injected where a bucket must not refill."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client import REGISTRY

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.acceptall import AcceptAll
from trainjob_status_server.app import StatusServer
from trainjob_status_server.budgets import Budgets
from trainjob_status_server.config import Config
from trainjob_status_server.failures import Unavailable
from trainjob_status_server.http.errors import BUDGET_SPENT_MESSAGE, answer_for
from trainjob_status_server.http.webhook import INJECT_PATH
from trainjob_status_server.kube.client import KubeClient
from trainjob_status_server.kube.errors import KubeBudgetExhausted, KubeUnavailable
from trainjob_status_server.kube.ratelimit import TokenBucket
from trainjob_status_server.pods import injection

from .conftest import GROUP, NS, ServingCerts, settled, status_path, with_changes
from .test_auth_support import FakeClock, add_pod, claims_of, mint, tampered, unsigned, until
from .test_auth_support import running as running_with_tokens
from .test_webhook_support import ANCESTOR, pod, review

TJ = "tj"
LUT = "2026-12-04T10:00:00Z"


def update(progress: int, second: int = 0) -> dict[str, Any]:
    stamp = f"2026-12-04T10:00:{second:02d}Z"
    return {"trainerStatus": {"progressPercentage": progress, "lastUpdatedTime": stamp}}


def stored_progress(cluster: DevCluster, name: str = TJ) -> int | None:
    obj = cluster.get("trainjobs", NS, name, GROUP) or {}
    progress = (obj.get("status") or {}).get("trainerStatus", {}).get("progressPercentage")
    return progress if isinstance(progress, int) else None


def injections(result: str) -> float:
    value = REGISTRY.get_sample_value("trainjob_status_injections_total", {"result": result})
    return value or 0.0


@pytest_asyncio.fixture
async def session(certs: ServingCerts) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(ssl=certs.client_context(), limit=0)
    async with aiohttp.ClientSession(connector=connector) as client:
        yield client


async def post(
    session: aiohttp.ClientSession, server: StatusServer, body: Any, token: str = "test"
) -> tuple[int, Any, dict[str, str]]:
    async with session.post(
        server.url + status_path(NS, TJ),
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}"},
    ) as response:
        return response.status, json.loads(await response.read()), dict(response.headers)


# -- the bucket and the lanes, alone ---------------------------------------------------------


def test_reserve_within_takes_nothing_when_the_wait_would_be_too_long() -> None:
    clock = FakeClock(0.0)
    bucket = TokenBucket(2.0, 1, clock)
    assert bucket.reserve_within(0.0) == 0.0
    assert bucket.reserve_within(0.4) is None  # the next token is 0.5 s away
    assert bucket.delay() == 0.5  # and nothing was taken: still 0.5 s away
    assert bucket.reserve_within(0.5) == 0.5
    assert bucket.reserve_within(0.5) is None  # one borrowed already: 1 s now
    clock.advance(1.0)
    assert bucket.reserve_within(0.0) == 0.0


async def test_a_lane_refuses_at_once_and_sends_nothing_and_others_are_untouched(
    devcluster: DevCluster,
) -> None:
    clock = FakeClock(0.0)
    kube = KubeClient(devcluster.kubeconfig_path, qps=1.0, burst=1, timeout=2.0, clock=clock)
    writes = kube.lane("writes", qps=1.0, burst=1, max_wait=0.5)
    auth = kube.lane("auth", qps=1.0, burst=1, max_wait=0.5)
    async with kube:
        before = devcluster.faults.count("get", "trainjobs")
        assert await writes.get_trainjob(NS, "absent") is None
        with pytest.raises(KubeBudgetExhausted) as refused:
            await writes.get_trainjob(NS, "absent")
        assert (refused.value.budget, refused.value.retry_after) == ("writes", 1.0)
        assert devcluster.faults.count("get", "trainjobs") == before + 1
        # The other lanes have budgets of their own.
        assert await auth.get_trainjob(NS, "absent") is None
        assert await kube.get_trainjob(NS, "absent") is None
        assert devcluster.faults.count("get", "trainjobs") == before + 3
        clock.advance(1.0)
        assert await writes.get_trainjob(NS, "absent") is None
        assert devcluster.faults.count("get", "trainjobs") == before + 4


def test_the_server_builds_four_budgets_from_its_flags() -> None:
    config = Config(
        kube_api_qps=5,
        kube_api_burst=10,
        kube_auth_qps=2,
        kube_auth_burst=5,
        kube_watch_qps=3,
        kube_watch_burst=7,
        kube_metrics_qps=0.5,
        kube_metrics_burst=3,
        kube_api_timeout=4.0,
    )
    budgets = Budgets.for_config(config)
    lanes = (budgets.writes, budgets.auth, budgets.watch, budgets.metrics)
    shape = {
        lane.budget_name: (lane.budget.rate, lane.budget.burst, lane.max_wait) for lane in lanes
    }
    assert shape == {
        "writes": (5, 10, 4.0),
        "auth": (2, 5, 4.0),
        "watch": (3, 7, None),
        "metrics": (0.5, 3, 4.0),
    }
    assert len({id(lane.budget) for lane in lanes}) == 4
    assert (Config().kube_metrics_qps, Config().kube_metrics_burst) == (1.0, 4)


def test_a_spent_budget_is_a_503_with_its_wait_as_retry_after() -> None:
    answer = answer_for(Unavailable.of(KubeBudgetExhausted("writes", 41.2)))
    assert (answer.code, answer.reason, answer.message) == (
        503,
        "ServiceUnavailable",
        BUDGET_SPENT_MESSAGE,
    )
    assert answer.headers == {"Retry-After": "42"}
    assert answer.details == {"retryAfterSeconds": 42}
    plain = answer_for(Unavailable.of(KubeUnavailable("GET /x: no answer within 5s")))
    assert (plain.code, plain.message, plain.headers) == (
        503,
        "The Kubernetes API server is unavailable",
        {"Retry-After": "1"},
    )


# -- over HTTP -------------------------------------------------------------------------------


async def test_a_flood_of_admissions_naming_unknown_jobs_costs_no_request_and_delays_no_write(
    devcluster: DevCluster, config: Config, session: aiohttp.ClientSession
) -> None:
    devcluster.create_trainjob(NS, TJ)
    # The Trainer's budget and less: a handful of lookups would hold the write back.
    tight = with_changes(config, kube_api_qps=1.0, kube_api_burst=1)
    async with StatusServer(tight, AcceptAll()) as server:
        await settled(server)
        before = {verb: devcluster.faults.count(verb) for verb in ("get", "list", "create")}
        unknown = injections(injection.UNKNOWN_TRAINJOB)

        async def admit(i: int) -> None:
            # Half name a TrainJob no one made, half need a JobSet no one made.
            labels = {ANCESTOR: "trainer"} if i % 2 else {}
            body = review(pod(f"ghost-{i}-0", trainjob=f"ghost-{i}", labels=labels))
            async with session.post(server.url + INJECT_PATH, json=body) as response:
                assert response.status == 200
                assert (await response.json())["response"]["allowed"] is True

        flood = asyncio.gather(*(admit(i) for i in range(150)))
        async with asyncio.timeout(60):  # a hang guard, not a measurement
            code, body, _ = await post(session, server, update(42))
            assert (code, body) == (200, update(42))
            await server.writer.wait_idle()
            await flood
        assert stored_progress(devcluster) == 42
        assert injections(injection.UNKNOWN_TRAINJOB) - unknown == 75
        assert {verb: devcluster.faults.count(verb) for verb in before} == before


async def test_a_post_whose_write_cannot_get_budget_in_time_is_refused_at_once(
    devcluster: DevCluster, config: Config, session: aiohttp.ClientSession
) -> None:
    devcluster.create_trainjob(NS, TJ)
    # One write now, the next in 1,000 s: far past --kube-api-timeout.
    direct = with_changes(config, write_mode="direct", kube_api_qps=0.001, kube_api_burst=1)
    async with StatusServer(direct, AcceptAll()) as server:
        await server.trainjobs.wait_synced()
        assert (await post(session, server, update(10)))[0] == 200
        patches = devcluster.faults.count("patch", "trainjobs/status")
        async with asyncio.timeout(20):  # a hang guard, not a measurement
            code, body, headers = await post(session, server, update(20, 1))
        assert code == 503
        retry_after = int(headers["Retry-After"])
        assert 900 < retry_after <= 1000
        assert body == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": BUDGET_SPENT_MESSAGE,
            "reason": "ServiceUnavailable",
            "code": 503,
            "details": {"retryAfterSeconds": retry_after},
        }
        assert devcluster.faults.count("patch", "trainjobs/status") == patches
        assert stored_progress(devcluster) == 10


# -- token checks and status writes do not starve each other ----------------------------------


@pytest.fixture
def cluster(devcluster: DevCluster) -> DevCluster:
    devcluster.create_trainjob(NS, TJ)
    add_pod(devcluster)
    return devcluster


def forged(token: str, i: int) -> str:
    """The token with one claim changed: every claim still passes, the signature not."""
    return tampered(token, lambda claims: claims.update(jti=f"forged-{i}"))


async def test_forged_tokens_cannot_starve_status_writes_in_token_review_mode(
    cluster: DevCluster, config: Config, certs: ServingCerts
) -> None:
    tight = with_changes(
        config, kube_api_qps=0.01, kube_api_burst=20, kube_auth_qps=0.01, kube_auth_burst=3
    )
    async with running_with_tokens(
        cluster, tight, certs, token_review=True, server_budgets=True
    ) as rig:
        token = mint(cluster)
        assert (await rig.post(token))[0] == 200  # reviewed once, then cached
        reviews = cluster.faults.count("create", "tokenreviews")
        codes = []
        for i in range(20):
            code, body, response = await rig.post(forged(token, i))
            codes.append(code)
            if code == 503:
                assert body["message"] == BUDGET_SPENT_MESSAGE
                assert int(response.headers["Retry-After"]) >= 1
        # The token budget's burst went to two forgeries; the rest were refused at once.
        assert codes == [401, 401] + [503] * 18
        assert cluster.faults.count("create", "tokenreviews") == reviews + 2
        patches = cluster.faults.count("patch", "trainjobs/status")
        async with asyncio.timeout(20):  # a hang guard, not a measurement
            code, body, _ = await rig.post(token, body=update(77))
        assert (code, body) == (200, update(77))
        assert cluster.faults.count("patch", "trainjobs/status") == patches + 1
        assert stored_progress(cluster) == 77


async def test_reviews_of_unverified_tokens_are_charged_to_their_source_address(
    cluster: DevCluster, config: Config, certs: ServingCerts, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trainjob_status_server.auth.verifier")
    async with running_with_tokens(
        cluster,
        config,
        certs,
        token_review=True,
        review_source_rate=0.001,
        review_source_burst=3,
    ) as rig:
        token = mint(cluster)
        reviews = cluster.faults.count("create", "tokenreviews")
        answers = []
        for i in range(10):
            code, body, response = await rig.post(forged(token, i))
            answers.append((code, body["reason"], response.headers.get("Retry-After")))
        wait = str(math.ceil(1 / 0.001))
        assert answers == [(401, "Unauthorized", None)] * 3 + [(429, "TooManyRequests", wait)] * 7
        assert cluster.faults.count("create", "tokenreviews") == reviews + 3
        limited = [r for r in caplog.records if r.getMessage().startswith("post rate-limited")]
        assert [r.getMessage() for r in limited] == [
            "post rate-limited: reviews of its source address"
        ] * 7
        # The subject is the sender's unverified word: not logged, not charged.
        assert not any(hasattr(r, "subject") for r in limited)
        # A refusal remembered for its digest costs neither a review nor a post's token.
        code, _, _ = await rig.post(forged(token, 0))
        assert code == 401
        assert cluster.faults.count("create", "tokenreviews") == reviews + 3
        # The window opens again: one more review, for one more post.
        rig.monotonic.advance(1000.0)
        assert (await rig.post(forged(token, 11)))[0] == 401
        assert cluster.faults.count("create", "tokenreviews") == reviews + 4


async def test_one_forged_token_costs_one_review_however_often_it_is_sent(
    cluster: DevCluster, config: Config, certs: ServingCerts
) -> None:
    async with running_with_tokens(cluster, config, certs, token_review=True) as rig:
        fake = forged(mint(cluster), 1)
        reviews = cluster.faults.count("create", "tokenreviews")
        for _ in range(5):
            assert (await rig.post(fake))[0] == 401
        assert cluster.faults.count("create", "tokenreviews") == reviews + 1
        # Past the negative cache's time it is asked about again, once.
        rig.monotonic.advance(rig.auth.settings.negative_cache_seconds + 1)
        for _ in range(3):
            assert (await rig.post(fake))[0] == 401
        assert cluster.faults.count("create", "tokenreviews") == reviews + 2


# -- what a stranger can reach --------------------------------------------------------------


async def test_nothing_a_client_without_a_valid_token_sends_reaches_the_api(
    cluster: DevCluster, config: Config, certs: ServingCerts
) -> None:
    async with running_with_tokens(cluster, config, certs, server_budgets=True) as rig:
        token = mint(cluster)
        other = mint(
            cluster, aud="trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/x/status"
        )
        # Start-up done: the TrainJob, pod and JobSet watches open, and the owner
        # chain's Job watch (its JobSets are the injector's cache).
        steps = rig.server.jobset_steps
        assert steps is not None
        assert rig.auth.binding is not None
        owners = rig.auth.binding.owners
        assert owners is not None
        await until(
            lambda: (
                cluster.faults.count("watch") >= 4
                and steps.jobsets.synced.is_set()
                and owners.noted == "ownership"
            )
        )
        # Every request the cluster serves from now on (open watches aside) is counted.
        seen = cluster.faults.stall(0.0, times=None, path=".*")
        posts = {
            "no token": None,
            "not a JWT": "garbage",
            "alg none": unsigned({"alg": "none", "typ": "JWT"}, claims_of(token)),
            "bad signature": forged(token, 1),
            "another TrainJob's audience": other,
        }
        for what, bearer in posts.items():
            code, _, _ = await rig.post(bearer)
            assert code in (401, 403), what
        server = rig.server
        for method, url in [
            ("GET", server.url + "/healthz"),
            ("GET", server.url + "/readyz"),
            ("GET", server.url + status_path(NS, TJ)),
            ("PUT", server.url + "/api/v1/namespaces/team-a/pods"),
            ("GET", server.metrics_url + "/metrics"),
            ("GET", server.metrics_url + "/healthz"),
            ("GET", server.metrics_url + "/readyz"),
        ]:
            async with rig.session.request(method, url) as response:
                await response.read()
                assert response.status in (200, 404), (method, url)
        for i, labels in enumerate([{ANCESTOR: "trainer"}, {}]):
            body = review(pod(f"ghost-{i}-0", trainjob=f"ghost-{i}", labels=labels))
            async with rig.session.post(server.url + INJECT_PATH, json=body) as response:
                assert response.status == 200
        assert seen.hits == 0


async def test_the_jobset_cache_size_is_exported(
    devcluster: DevCluster, server: StatusServer, session: aiohttp.ClientSession
) -> None:
    steps = server.jobset_steps
    assert steps is not None
    devcluster.ensure_namespace(NS)
    jobset = {"metadata": {"name": "js"}, "spec": {"replicatedJobs": [{"name": "node"}]}}
    devcluster.create("jobsets", jobset, NS, "jobset.x-k8s.io")
    await until(lambda: len(steps.jobsets) == 1)
    async with session.get(server.metrics_url + "/metrics") as response:
        text = await response.text()
    assert 'trainjob_status_cache_objects{resource="jobsets"} 1.0' in text.splitlines()


async def test_a_forged_token_naming_no_live_pod_costs_no_review(
    cluster: DevCluster, config: Config, certs: ServingCerts
) -> None:
    async with running_with_tokens(cluster, config, certs, token_review=True) as rig:
        token = mint(cluster)

        def ghost(claims: dict[str, Any]) -> None:
            claims["kubernetes.io"]["pod"] = {"name": "ghost", "uid": "0000-ghost"}

        reviews = cluster.faults.count("create", "tokenreviews")
        assert await rig.refused(tampered(token, ghost)) == (401, "Unauthorized", "pod_gone")
        assert cluster.faults.count("create", "tokenreviews") == reviews
        # The real pod with its real uid does cost one (the signature is still forged).
        assert await rig.refused(forged(token, 1)) == (401, "Unauthorized", "signature")
        assert cluster.faults.count("create", "tokenreviews") == reviews + 1
