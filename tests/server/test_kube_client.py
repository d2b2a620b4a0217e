"""The Kubernetes client against the devcluster over real sockets: server-side apply of
trainerStatus, error mapping, timeouts, the request budget; and its pure parts."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.kubeconfig import write_kubeconfig
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_real_server
from trainjob_status.contract import GROUP
from trainjob_status_server.kube import (
    TRAINJOBS,
    KubeClient,
    KubeConfigError,
    KubeError,
    KubeUnavailable,
    TokenBucket,
)
from trainjob_status_server.kube.client import parse_watch_line
from trainjob_status_server.kube.errors import error_from_response, parse_retry_after

NS = "team-a"
STATUS = "trainjobs/status"
T0 = "2026-12-02T18:33:57Z"


@pytest_asyncio.fixture
async def kube(kube_api: KubeAPI) -> AsyncIterator[KubeClient]:
    async with KubeClient(kube_api.kubeconfig_path, qps=1000, burst=1000, timeout=5) as client:
        yield client


def stored(cluster: KubeAPI, name: str) -> dict[str, Any]:
    found = cluster.get("trainjobs", NS, name, GROUP)
    assert found is not None
    return found


# -- server-side apply ---------------------------------------------------------------------


@on_real_server
async def test_apply_writes_trainer_status_as_its_field_manager(
    kube: KubeClient, kube_api: KubeAPI
) -> None:
    kube_api.create_trainjob(NS, "tj")
    status = {"progressPercentage": 40, "estimatedRemainingSeconds": 600, "lastUpdatedTime": T0}

    answer = await kube.apply_trainjob_status(NS, "tj", status)

    assert answer["status"]["trainerStatus"] == status
    assert stored(kube_api, "tj")["status"]["trainerStatus"] == status
    entries = [
        (m["manager"], m["operation"], m.get("subresource"))
        for m in answer["metadata"]["managedFields"]
    ]
    # Operation "Apply" is recorded only for an application/apply-patch+yaml body.
    assert ("trainer-status", "Apply", "status") in entries


async def test_apply_is_one_request_with_no_read_first(
    kube: KubeClient, devcluster: DevCluster
) -> None:
    """Counted where requests can be counted: the development cluster."""
    devcluster.create_trainjob(NS, "tj")
    status = {"progressPercentage": 40, "lastUpdatedTime": T0}
    await kube.apply_trainjob_status(NS, "tj", status)
    assert devcluster.faults.count("patch", STATUS) == 1
    assert devcluster.faults.count("get") == 0


@on_real_server
async def test_a_second_apply_without_a_field_removes_it(
    kube: KubeClient, kube_api: KubeAPI
) -> None:
    kube_api.create_trainjob(NS, "tj")
    metrics = [{"name": "loss", "value": "0.25"}]
    await kube.apply_trainjob_status(
        NS,
        "tj",
        {
            "progressPercentage": 40,
            "estimatedRemainingSeconds": 600,
            "metrics": metrics,
            "lastUpdatedTime": T0,
        },
    )

    await kube.apply_trainjob_status(NS, "tj", {"progressPercentage": 41, "lastUpdatedTime": T0})

    assert stored(kube_api, "tj")["status"]["trainerStatus"] == {
        "progressPercentage": 41,
        "lastUpdatedTime": T0,
    }


@on_real_server
async def test_a_conditional_apply_on_a_changed_object_is_409_and_writes_nothing(
    kube: KubeClient, kube_api: KubeAPI
) -> None:
    created = kube_api.create_trainjob(NS, "tj")
    first = {"progressPercentage": 1, "lastUpdatedTime": T0}
    written = await kube.apply_trainjob_status(
        NS, "tj", first, resource_version=created["metadata"]["resourceVersion"]
    )
    with pytest.raises(KubeError) as caught:
        await kube.apply_trainjob_status(
            NS,
            "tj",
            {"progressPercentage": 2, "lastUpdatedTime": T0},
            resource_version=created["metadata"]["resourceVersion"],
        )
    error = caught.value
    assert (error.status, error.reason) == (409, "Conflict")
    assert error.message == (
        'Operation cannot be fulfilled on trainjobs.trainer.kubeflow.org "tj": the object has '
        "been modified; please apply your changes to the latest version and try again"
    )
    assert (
        stored(kube_api, "tj")["metadata"]["resourceVersion"]
        == (written["metadata"]["resourceVersion"])
    )
    assert stored(kube_api, "tj")["status"]["trainerStatus"] == first


@on_real_server
async def test_apply_to_a_missing_trainjob_is_404_and_creates_nothing(
    kube: KubeClient, kube_api: KubeAPI
) -> None:
    kube_api.ensure_namespace(NS)
    with pytest.raises(KubeError) as caught:
        await kube.apply_trainjob_status(
            NS, "nope", {"progressPercentage": 1, "lastUpdatedTime": T0}
        )
    assert (caught.value.status, caught.value.reason) == (404, "NotFound")
    assert caught.value.message == 'trainjobs.trainer.kubeflow.org "nope" not found'
    assert caught.value.body["kind"] == "Status"
    assert kube_api.get("trainjobs", NS, "nope", GROUP) is None


@on_real_server
async def test_an_invalid_status_is_422_with_the_api_servers_message(
    kube: KubeClient, kube_api: KubeAPI
) -> None:
    created = kube_api.create_trainjob(NS, "tj")
    with pytest.raises(KubeError) as caught:
        await kube.apply_trainjob_status(
            NS, "tj", {"progressPercentage": 101, "lastUpdatedTime": T0}
        )
    error = caught.value
    assert (error.status, error.reason) == (422, "Invalid")
    assert error.message.startswith('TrainJob.trainer.kubeflow.org "tj" is invalid: ')
    assert "status.trainerStatus.progressPercentage" in error.message
    assert error.details["causes"][0]["field"] == "status.trainerStatus.progressPercentage"
    assert error.retry_after is None
    assert (
        stored(kube_api, "tj")["metadata"]["resourceVersion"]
        == (created["metadata"]["resourceVersion"])
    )


@pytest.mark.parametrize(
    ("code", "reason", "retry_after"),
    [
        (500, "InternalError", None),
        (503, "ServiceUnavailable", None),
        (429, "TooManyRequests", 7),
    ],
)
async def test_api_failures_map_to_kube_error(
    kube: KubeClient,
    devcluster: DevCluster,
    code: int,
    reason: str,
    retry_after: int | None,
) -> None:
    created = devcluster.create_trainjob(NS, "tj")
    devcluster.faults.fail(code, retry_after=retry_after, verb="patch", resource=STATUS)
    with pytest.raises(KubeError) as caught:
        await kube.apply_trainjob_status(NS, "tj", {"progressPercentage": 1, "lastUpdatedTime": T0})
    error = caught.value
    assert (error.status, error.reason, error.retry_after) == (code, reason, retry_after)
    assert error.body["code"] == code
    assert (
        stored(devcluster, "tj")["metadata"]["resourceVersion"]
        == (created["metadata"]["resourceVersion"])
    )


# -- reads ---------------------------------------------------------------------------------


async def test_get_trainjob_answers_the_object_or_none(
    kube: KubeClient, devcluster: DevCluster
) -> None:
    devcluster.create_trainjob(NS, "tj")
    found = await kube.get_trainjob(NS, "tj")
    assert found is not None
    assert found["metadata"]["name"] == "tj"
    assert await kube.get_trainjob(NS, "missing") is None
    assert devcluster.faults.count("get", "trainjobs") == 2


async def test_list_reads_every_page_and_the_first_pages_version(
    kube: KubeClient, devcluster: DevCluster
) -> None:
    for i in range(5):
        devcluster.create_trainjob(NS, f"tj-{i}")
    rv = str(devcluster.store.rv)

    listed = await kube.list(TRAINJOBS, namespace=NS, page_size=2)

    assert [o["metadata"]["name"] for o in listed.items] == [f"tj-{i}" for i in range(5)]
    assert listed.resource_version == rv
    assert devcluster.faults.count("list", "trainjobs") == 3


# -- no answer -----------------------------------------------------------------------------


async def test_a_stalled_api_server_is_unavailable_within_the_timeout(
    devcluster: DevCluster,
) -> None:
    devcluster.create_trainjob(NS, "tj")
    # Short stall: the devcluster's stop waits for the stalled handler.
    devcluster.faults.stall(2.0, verb="patch", resource=STATUS)
    async with KubeClient(devcluster.kubeconfig_path, timeout=0.2) as client:
        async with asyncio.timeout(1.5):
            with pytest.raises(KubeUnavailable, match=r"no answer within 0\.2s"):
                await client.apply_trainjob_status(
                    NS, "tj", {"progressPercentage": 1, "lastUpdatedTime": T0}
                )


async def test_an_unreachable_api_server_is_unavailable(
    devcluster: DevCluster, tmp_path: Path
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig",
        f"https://127.0.0.1:{closed_port}",
        devcluster.ca.cert_pem,
        devcluster.admin_token,
    )
    async with KubeClient(kubeconfig, timeout=2) as client:
        async with asyncio.timeout(5):
            with pytest.raises(KubeUnavailable):
                await client.get_trainjob(NS, "tj")


# -- configuration -------------------------------------------------------------------------


async def test_a_missing_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError):
        await KubeClient(tmp_path / "absent").start()


async def test_in_cluster_config_outside_a_pod_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeConfigError, match="in-cluster"):
        await KubeClient().start()


async def test_a_client_used_before_start_says_so() -> None:
    with pytest.raises(RuntimeError, match="before start"):
        await KubeClient().get_trainjob(NS, "tj")


# -- the request budget --------------------------------------------------------------------


async def test_every_call_takes_a_token_from_the_budget(devcluster: DevCluster) -> None:
    devcluster.create_trainjob(NS, "tj")
    now = [100.0]
    # The clock stands still: no token is earned back, the third call borrows one.
    async with KubeClient(devcluster.kubeconfig_path, qps=100, burst=2, clock=lambda: now[0]) as c:
        for _ in range(3):
            assert await c.get_trainjob(NS, "tj") is not None
        assert c.budget.tokens == pytest.approx(-1.0)
    assert devcluster.faults.count("get", "trainjobs") == 3


def test_bucket_starts_full_and_refills_at_its_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(5, 10, clock=lambda: now[0])
    assert [bucket.try_take() for _ in range(11)] == [True] * 10 + [False]
    assert bucket.delay() == pytest.approx(0.2)
    now[0] += 0.2
    assert bucket.try_take()
    now[0] += 100
    assert bucket.tokens == 10  # never more than the burst


@settings(max_examples=300, deadline=None, database=None)
@given(
    st.floats(min_value=0.1, max_value=100),
    st.integers(min_value=1, max_value=20),
    st.lists(st.floats(min_value=-5, max_value=5), max_size=40),
)
def test_try_take_is_a_refill_then_one_token_if_there_is_one(
    rate: float, burst: int, steps: list[float]
) -> None:
    now = [0.0]
    bucket = TokenBucket(rate, burst, clock=lambda: now[0])
    reference = TokenBucket(rate, burst, clock=lambda: now[0])
    for step in steps:  # the clock may go back: nothing is earned then
        now[0] += step
        available = reference.delay() == 0.0
        if available:
            reference.reserve()
        assert bucket.try_take() == available
        assert bucket.tokens == reference.tokens


def test_bucket_reservations_queue_in_order() -> None:
    now = [0.0]
    bucket = TokenBucket(4, 1, clock=lambda: now[0])
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.25, 0.5]
    bucket.cancel()  # the last waiter gave up: the next one waits no longer than it would
    assert bucket.reserve() == pytest.approx(0.5)
    now[0] += 0.5  # two reservations still owed, two tokens earned
    assert bucket.tokens == pytest.approx(0.0)


def test_bucket_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="rate"):
        TokenBucket(0, 1)
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(1, 0)


# -- error decoding (pure) -----------------------------------------------------------------


def test_an_error_that_is_not_a_status_keeps_the_http_reason() -> None:
    error = error_from_response(502, "Bad Gateway", {}, b"<html>upstream down</html>")
    assert (error.status, error.reason, error.message, error.body) == (
        502,
        "Bad Gateway",
        "<html>upstream down</html>",
        {},
    )


def test_retry_after_comes_from_the_header_or_the_status_details() -> None:
    body = b'{"kind":"Status","code":429,"reason":"TooManyRequests","message":"slow down","details":{"retryAfterSeconds":3}}'
    assert error_from_response(429, "", {}, body).retry_after == 3
    assert error_from_response(429, "", {"Retry-After": "9"}, body).retry_after == 9
    assert parse_retry_after(" 12 ") == 12
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert parse_retry_after(None) is None


def test_watch_lines_parse_to_events_or_errors() -> None:
    event = parse_watch_line(b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"7"}}}')
    assert (event.type, event.object["metadata"]["resourceVersion"]) == ("BOOKMARK", "7")
    expired = b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version: 1 (5)"}}'
    with pytest.raises(KubeError) as caught:
        parse_watch_line(expired)
    assert (caught.value.status, caught.value.reason) == (410, "Expired")
    for garbage in (b"[]", b'{"type":"ADDED"}', b'{"type":"NEW","object":{}}'):
        with pytest.raises(ValueError, match="watch"):
            parse_watch_line(garbage)
