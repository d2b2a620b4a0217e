"""The injector over HTTP: AdmissionReviews in, AdmissionReviews out, against the
devcluster's TrainJobs and a stand-in serving JobSets. Every answer is ``allowed: true``;
each case asserts the exact patch (or none) and the outcome counted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import REGISTRY

from trainjob_status_server import injection
from trainjob_status_server.app import TRAINJOB_ABSENT_SECONDS
from trainjob_status_server.devcluster import DevCluster
from trainjob_status_server.injection import Selector, Target
from trainjob_status_server.kube.cache import WatchCache
from trainjob_status_server.kube.client import KubeClient
from trainjob_status_server.kube.resources import TRAINJOBS
from trainjob_status_server.middleware import status_errors
from trainjob_status_server.webhook import (
    INJECT_PATH,
    InjectorSettings,
    JobSetSteps,
    PodInjector,
)

from .test_webhook_support import (
    ANCESTOR,
    NS,
    TJ,
    StandIn,
    apply_patch,
    decoded_patch,
    jobset,
    pod,
    review,
)


def counted(result: str) -> float:
    value = REGISTRY.get_sample_value("trainjob_status_injections_total", {"result": result})
    return value or 0.0


@dataclass
class Rig:
    cluster: DevCluster
    standin: StandIn
    injector: PodInjector
    client: TestClient[web.Request, web.Application]

    async def admit(self, body: Any, *, raw: bytes | None = None) -> tuple[dict[str, Any], str]:
        """POST a review; the answer and the one outcome counted for it."""
        before = {r: counted(r) for r in injection.RESULTS}
        if raw is None:
            response = await self.client.post(INJECT_PATH, json=body)
        else:
            response = await self.client.post(INJECT_PATH, data=raw)
        assert response.status == 200
        assert response.content_type == "application/json"
        answer = await response.json()
        assert answer["apiVersion"] == "admission.k8s.io/v1"
        assert answer["kind"] == "AdmissionReview"
        assert answer["response"]["allowed"] is True
        moved = [r for r in injection.RESULTS if counted(r) > before[r]]
        assert len(moved) == 1, moved
        return answer, moved[0]


@pytest_asyncio.fixture
async def standin(tmp_path: Path) -> AsyncIterator[StandIn]:
    server = await StandIn(tmp_path).start()
    server.put("jobsets", jobset())
    yield server
    await server.stop()


async def make_rig(
    cluster: DevCluster, standin: StandIn, settings: InjectorSettings, *, steps: bool = True
) -> AsyncIterator[Rig]:
    cluster.create_trainjob(NS, TJ)
    async with (
        KubeClient(cluster.kubeconfig_path, qps=1000, burst=1000, timeout=2.0) as kube,
        standin.client() as standin_kube,
    ):
        trainjobs = WatchCache(kube, TRAINJOBS, absent_seconds=TRAINJOB_ABSENT_SECONDS)
        await trainjobs.start()
        await trainjobs.wait_synced()
        injector = PodInjector(settings, trainjobs, JobSetSteps(standin_kube) if steps else None)
        app = web.Application(middlewares=[status_errors([INJECT_PATH])])
        app.router.add_post(INJECT_PATH, injector.handle)
        async with TestClient(TestServer(app)) as client:
            yield Rig(cluster, standin, injector, client)
        await trainjobs.stop()


@pytest_asyncio.fixture
async def rig(devcluster: DevCluster, standin: StandIn) -> AsyncIterator[Rig]:
    async for r in make_rig(devcluster, standin, InjectorSettings()):
        yield r


async def test_trainer_pod_gets_the_patch_through_its_jobset(rig: Rig) -> None:
    # The pod itself has no ancestor label: the JobSet's replicated job "node" does.
    original = pod()
    answer, outcome = await rig.admit(review(original, uid="u-1"))
    assert outcome == injection.INJECTED
    assert answer["response"]["uid"] == "u-1"
    patch = decoded_patch(answer)
    assert patch == injection.plan(original, NS, TJ, Target()).patch
    result = apply_patch(original, patch)
    env = {e["name"]: e["value"] for e in result["spec"]["containers"][0]["env"]}
    assert env["KUBEFLOW_TRAINER_SERVER_URL"] == (
        "https://trainjob-status.trainjob-status.svc:10443"
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/tj/status"
    )


async def test_initializer_pod_is_not_touched(rig: Rig) -> None:
    answer, outcome = await rig.admit(
        review(pod("tj-dataset-initializer-0-0", rjob="dataset-initializer"))
    )
    assert outcome == injection.NOT_SELECTED
    assert "patch" not in answer["response"]


async def test_the_pods_own_label_is_enough_without_a_jobset(rig: Rig) -> None:
    rig.standin.objects.clear()
    _, outcome = await rig.admit(review(pod(labels={ANCESTOR: "trainer"})))
    assert outcome == injection.INJECTED
    assert rig.standin.requests[("GET", "jobsets")] == 0  # the pod's labels sufficed


async def test_without_a_jobset_a_pod_without_the_label_is_not_selected(rig: Rig) -> None:
    rig.standin.objects.clear()
    answer, outcome = await rig.admit(review(pod()))
    assert outcome == injection.NOT_SELECTED
    assert "patch" not in answer["response"]


async def test_one_jobset_read_serves_a_gang_of_pods(rig: Rig) -> None:
    reviews = [review(pod(f"tj-node-0-{i}"), uid=f"u{i}") for i in range(8)]
    answers = await asyncio.gather(*(rig.admit(r) for r in reviews))
    assert {outcome for _, outcome in answers} == {injection.INJECTED}
    assert rig.standin.requests[("GET", "jobsets")] == 1


async def test_pod_of_no_jobset_is_not_selected(rig: Rig) -> None:
    answer, outcome = await rig.admit(review(pod(trainjob=None, rjob=None)))
    assert outcome == injection.NOT_SELECTED
    assert "patch" not in answer["response"]


async def test_unknown_trainjob_is_left_alone_and_remembered(rig: Rig) -> None:
    rig.standin.put("jobsets", jobset("other"))
    gets = rig.cluster.faults.count("get", "trainjobs")
    for i in range(3):
        answer, outcome = await rig.admit(review(pod(f"other-node-0-{i}", trainjob="other")))
        assert outcome == injection.UNKNOWN_TRAINJOB
        assert "patch" not in answer["response"]
    # One GET said it does not exist; the next pods are answered from memory.
    assert rig.cluster.faults.count("get", "trainjobs") == gets + 1


async def test_pod_with_the_variables_already_set_is_left_alone(rig: Rig) -> None:
    env = [{"name": "KUBEFLOW_TRAINER_SERVER_URL", "value": "https://elsewhere/status"}]
    answer, outcome = await rig.admit(
        review(pod(containers=[{"name": "node", "image": "i", "env": env}]))
    )
    assert outcome == injection.PRESENT
    assert "patch" not in answer["response"]


async def test_reinvocation_adds_nothing(rig: Rig) -> None:
    first, _ = await rig.admit(review(pod()))
    patched = apply_patch(pod(), decoded_patch(first) or [])
    answer, outcome = await rig.admit(review(patched, uid="again"))
    assert outcome == injection.UNCHANGED
    assert "patch" not in answer["response"]


@pytest.mark.parametrize(
    ("raw", "uid"),
    [
        (b"{not json", ""),
        (b"[]", ""),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', ""),
        (
            b'{"request": {"uid": "u-9", "operation": "CREATE", "resource": {"group": "", "resource": "pods"}}}',
            "u-9",
        ),
        (
            b'{"request": {"uid": "u-8", "namespace": "team-a", "operation": "CREATE", "resource": {"group": "", "resource": "pods"}, "object": {"metadata": {"labels": {"jobset.sigs.k8s.io/jobset-name": "tj", "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}}}}}',
            "u-8",
        ),
        (
            b'{"request": {"uid": "u-7", "operation": "CREATE", "resource": {"group": "", "resource": "pods"}, "object": {"metadata": {"labels": {"jobset.sigs.k8s.io/jobset-name": "tj", "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}}, "spec": {"containers": [{"name": "c"}]}}}}',
            "u-7",
        ),
    ],
    ids=[
        "not-json",
        "not-an-object",
        "no-request",
        "no-object",
        "pod-without-spec",
        "no-namespace",
    ],
)
async def test_malformed_review_is_allowed_and_counted(rig: Rig, raw: bytes, uid: str) -> None:
    answer, outcome = await rig.admit(None, raw=raw)
    assert outcome == injection.ERROR
    assert answer["response"] == {"uid": uid, "allowed": True}


@pytest.mark.parametrize(
    "change",
    [
        {"operation": "UPDATE"},
        {"subResource": "status"},
        {"resource": {"group": "", "version": "v1", "resource": "configmaps"}},
    ],
    ids=["update", "subresource", "not-a-pod"],
)
async def test_other_requests_are_ignored(rig: Rig, change: dict[str, Any]) -> None:
    answer, outcome = await rig.admit(review(pod(), **change))
    assert outcome == injection.IGNORED
    assert answer["response"] == {"uid": "uid-1", "allowed": True}


async def test_api_server_failure_admits_the_pod_unchanged(rig: Rig) -> None:
    rig.standin.put("jobsets", jobset("fresh"))
    rig.cluster.faults.fail(500, verb="get", resource="trainjobs", times=None)
    answer, outcome = await rig.admit(review(pod(trainjob="fresh")))
    assert outcome == injection.ERROR
    assert answer["response"] == {"uid": "uid-1", "allowed": True}


async def test_a_slow_jobset_read_admits_the_pod_within_the_timeout(
    devcluster: DevCluster, standin: StandIn
) -> None:
    standin.stall["jobsets"] = 5.0
    async for rig in make_rig(devcluster, standin, InjectorSettings(timeout=0.2)):
        answer, outcome = await rig.admit(review(pod()))
        assert outcome == injection.ERROR
        assert "patch" not in answer["response"]


async def test_override_existing_replaces_another_injection(
    devcluster: DevCluster, standin: StandIn
) -> None:
    env = [{"name": "KUBEFLOW_TRAINER_SERVER_URL", "value": "https://elsewhere/status"}]
    original = pod(containers=[{"name": "node", "image": "i", "env": env}])
    async for rig in make_rig(devcluster, standin, InjectorSettings(override_existing=True)):
        answer, outcome = await rig.admit(review(original))
        assert outcome == injection.OVERRIDDEN
        result = apply_patch(original, decoded_patch(answer) or [])
        # The same pod as one that carried nothing and was injected by us.
        bare = pod(containers=[{"name": "node", "image": "i"}])
        assert result == apply_patch(bare, injection.plan(bare, NS, TJ, Target()).patch)


async def test_a_custom_selector_without_jobset_lookups(
    devcluster: DevCluster, standin: StandIn
) -> None:
    settings = InjectorSettings(selector=Selector.parse("team=a"))
    async for rig in make_rig(devcluster, standin, settings, steps=False):
        _, outcome = await rig.admit(review(pod(labels={"team": "a"}, rjob="anything")))
        assert outcome == injection.INJECTED
        _, outcome = await rig.admit(review(pod(labels={"team": "b"})))
        assert outcome == injection.NOT_SELECTED
    assert standin.requests[("GET", "jobsets")] == 0


async def test_the_route_answers_only_post(rig: Rig) -> None:
    async with rig.client.get(INJECT_PATH) as response:
        assert response.status == 404
        assert (await response.json())["reason"] == "NotFound"
