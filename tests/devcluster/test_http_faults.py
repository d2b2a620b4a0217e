"""Fault injection and request accounting over HTTP."""

import asyncio

from trainjob_devcluster import DevCluster
from trainjob_devcluster.common.faults import Fault, Faults, RequestInfo
from trainjob_devcluster.harness.testing import eventually

from .conftest import TJ, Api

NS = "rec"
PATCH = "application/merge-patch+json"
BODY = {
    "status": {
        "trainerStatus": {"progressPercentage": 1, "lastUpdatedTime": "2026-12-02T18:33:57Z"}
    }
}


async def test_next_requests_fail_with_the_given_code(api: Api, devcluster: DevCluster) -> None:
    devcluster.create_trainjob(NS, "tj")
    path = f"{TJ}/namespaces/{NS}/trainjobs/tj/status"
    devcluster.faults.fail(429, times=2, retry_after=3, verb="patch", resource="trainjobs/status")
    devcluster.faults.fail(503, times=1, verb="get", resource="trainjobs")
    for _ in range(2):
        code, body, response = await api.call("PATCH", path, BODY, content_type=PATCH)
        assert (code, body["reason"], response.headers["Retry-After"]) == (
            429,
            "TooManyRequests",
            "3",
        )
        # The API server says it in the Status too.
        assert body["details"] == {"retryAfterSeconds": 3}
        assert body["message"] == "Too many requests, please try again later."
    code, _, _ = await api.call("PATCH", path, BODY, content_type=PATCH)
    assert code == 200
    code, body, _ = await api.call("GET", f"{TJ}/namespaces/{NS}/trainjobs/tj")
    assert (code, body["reason"]) == (503, "ServiceUnavailable")
    code, _, _ = await api.call("GET", f"{TJ}/namespaces/{NS}/trainjobs/tj")
    assert code == 200
    assert devcluster.faults.count("patch", "trainjobs/status") == 3
    assert devcluster.faults.count("get", "trainjobs") == 2
    # Counted by the media type of their body too (parameters and case aside).
    assert devcluster.faults.count("patch", "trainjobs/status", PATCH) == 3
    assert devcluster.faults.count("patch", content_type="application/json") == 0
    assert devcluster.faults.count("get", "trainjobs", content_type="") == 2
    stored = devcluster.get("trainjobs", NS, "tj", "trainer.kubeflow.org")
    assert stored is not None
    assert stored["status"]["trainerStatus"]["progressPercentage"] == 1


async def test_an_injected_410_is_expired_as_the_api_server_says_it(
    api: Api, devcluster: DevCluster
) -> None:
    devcluster.faults.fail(410, verb="list", resource="trainjobs")
    code, body, _ = await api.call("GET", f"{TJ}/namespaces/{NS}/trainjobs")
    assert (code, body["reason"], body["status"]) == (410, "Expired", "Failure")
    assert body["message"].startswith("too old resource version")


async def test_failed_write_stores_nothing(api: Api, devcluster: DevCluster) -> None:
    created = devcluster.create_trainjob(NS, "tj")
    devcluster.faults.fail(500, path=f"{TJ}/namespaces/{NS}/trainjobs/tj/status", method="PATCH")
    code, body, _ = await api.call(
        "PATCH", f"{TJ}/namespaces/{NS}/trainjobs/tj/status", BODY, content_type=PATCH
    )
    assert (code, body["reason"]) == (500, "InternalError")
    stored = devcluster.get("trainjobs", NS, "tj", "trainer.kubeflow.org")
    assert stored is not None
    assert stored["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def held(rule: Fault) -> None:
    """Until a request has met the stall ``rule`` (and is being held)."""

    async def hit() -> bool:
        return rule.hits > 0

    await eventually(hit, "the request held by the stall", within=10, every=0.01)


async def test_stall_delays_only_matching_requests(api: Api, devcluster: DevCluster) -> None:
    devcluster.create_trainjob(NS, "tj")
    rule = devcluster.faults.stall(30, times=1, verb="get", resource="trainjobs", name="tj")
    stalled = asyncio.create_task(api.call("GET", f"{TJ}/namespaces/{NS}/trainjobs/tj"))
    await held(rule)
    # Other requests are served meanwhile; the stalled one is still waiting.
    code, _, _ = await api.call("GET", f"{TJ}/namespaces/{NS}/trainjobs")
    assert code == 200
    assert not stalled.done()
    stalled.cancel()
    assert (rule.hits, rule.remaining) == (1, 0)
    code, _, _ = await api.call("GET", f"{TJ}/namespaces/{NS}/trainjobs/tj")
    assert code == 200


async def test_stopping_the_cluster_ends_a_stall_at_once(api: Api, devcluster: DevCluster) -> None:
    devcluster.create_trainjob(NS, "tj")
    rule = devcluster.faults.stall(60, verb="get", resource="trainjobs")
    stalled = asyncio.create_task(api.call("GET", f"{TJ}/namespaces/{NS}/trainjobs/tj"))
    await held(rule)
    assert not stalled.done()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await devcluster.stop()
    assert loop.time() - started < 5
    stalled.cancel()


def test_counts_by_media_type_ignore_parameters_and_case() -> None:
    faults = Faults()
    info = RequestInfo("PATCH", "/x", "patch", "trainjobs", "status", "ns", "tj")
    faults.record(info, "Application/Apply-Patch+YAML; charset=utf-8")
    faults.record(info, "application/merge-patch+json")
    faults.record(RequestInfo("GET", "/y", "get", "pods", "", "ns", "p"))
    assert faults.count("patch", "trainjobs/status", "application/apply-patch+yaml") == 1
    assert faults.count(content_type="application/merge-patch+json") == 1
    assert faults.count(content_type="") == 1
    assert faults.count() == 3
    faults.reset_counts()
    assert faults.count(content_type="") == 0
