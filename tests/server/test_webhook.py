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
from aiohttp.test_utils import RawTestServer, TestClient
from prometheus_client import REGISTRY

from trainjob_devcluster import DevCluster
from trainjob_status.contract import URL_ENV
from trainjob_status_server.app import TRAINJOB_ABSENT_SECONDS
from trainjob_status_server.http.serving import ServingHandler
from trainjob_status_server.http.webhook import (
    INJECT_PATH,
    InjectorSettings,
    JobSetSteps,
    PodInjector,
)
from trainjob_status_server.kube.backoff import Backoff
from trainjob_status_server.kube.cache import DEFAULT_BACKOFF, WatchCache
from trainjob_status_server.kube.client import KubeClient
from trainjob_status_server.kube.resources import TRAINJOBS
from trainjob_status_server.kube.store import CacheEvent
from trainjob_status_server.pods import injection
from trainjob_status_server.pods.injection import Selector, Target

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

    @property
    def jobsets(self) -> WatchCache:
        assert self.injector.steps is not None
        return self.injector.steps.jobsets

    async def put_jobset(self, obj: dict[str, Any]) -> None:
        """Serve ``obj`` and wait for the JobSet watch to bring it."""
        meta = obj["metadata"]
        self.standin.put("jobsets", obj)
        assert await self.jobsets.wait_for(meta["namespace"], meta["name"], 10.0) is not None

    async def drop_jobset(self, name: str = TJ) -> None:
        """Delete the JobSet and wait for the watch to say so."""
        gone = asyncio.get_running_loop().create_future()

        def deleted(event: CacheEvent) -> None:
            if event.key == (NS, name) and event.new is None and not gone.done():
                gone.set_result(None)

        self.jobsets.add_listener(deleted)
        self.standin.delete("jobsets", name, NS)
        async with asyncio.timeout(10):
            await gone
        self.jobsets.remove_listener(deleted)


@pytest_asyncio.fixture
async def standin(tmp_path: Path) -> AsyncIterator[StandIn]:
    server = await StandIn(tmp_path).start()
    server.put("jobsets", jobset())
    yield server
    await server.stop()


async def no_status_posts(
    _request: web.BaseRequest, namespace: str, name: str
) -> web.StreamResponse:
    raise AssertionError(f"the webhook's rig serves no status posts ({namespace}/{name})")


async def make_rig(
    cluster: DevCluster,
    standin: StandIn,
    settings: InjectorSettings,
    *,
    steps: bool = True,
    backoff: Backoff = DEFAULT_BACKOFF,
) -> AsyncIterator[Rig]:
    cluster.create_trainjob(NS, TJ)
    async with (
        KubeClient(cluster.kubeconfig_path, qps=1000, burst=1000, timeout=2.0) as kube,
        standin.client() as standin_kube,
    ):
        trainjobs = WatchCache(kube, TRAINJOBS, absent_seconds=TRAINJOB_ABSENT_SECONDS)
        await trainjobs.start()
        await trainjobs.wait_synced()
        # The cache opens its watch after the list that synced it: once that request is
        # in, the cache asks nothing more, and a test may count what admissions cost.
        async with asyncio.timeout(10):
            while cluster.faults.count("watch", "trainjobs") == 0:
                await asyncio.sleep(0.01)
        jobsets = JobSetSteps(standin_kube, settings.selector, backoff=backoff) if steps else None
        if jobsets is not None:
            await jobsets.start()
            if "jobsets" not in standin.stall and "jobsets" not in standin.refuse_list:
                await jobsets.jobsets.wait_synced()
        injector = PodInjector(settings, trainjobs, jobsets)
        serving = ServingHandler(
            no_status_posts, gets={}, posts={INJECT_PATH: injector.handle}, uncounted=[INJECT_PATH]
        )
        async with TestClient(RawTestServer(serving)) as client:
            yield Rig(cluster, standin, injector, client)
        if jobsets is not None:
            await jobsets.stop()
        await trainjobs.stop()


@pytest_asyncio.fixture
async def rig(devcluster: DevCluster, standin: StandIn) -> AsyncIterator[Rig]:
    # A name no cache holds is waited for this long: short, since most tests name none.
    async for r in make_rig(devcluster, standin, InjectorSettings(watch_grace=0.05)):
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
    assert env[URL_ENV] == (
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
    await rig.drop_jobset()
    _, outcome = await rig.admit(review(pod(labels={ANCESTOR: "trainer"})))
    assert outcome == injection.INJECTED
    assert rig.standin.requests[("GET", "jobsets")] == 0  # the pod's labels sufficed


async def test_without_a_jobset_a_pod_without_the_label_is_not_selected(rig: Rig) -> None:
    await rig.drop_jobset()
    answer, outcome = await rig.admit(review(pod()))
    assert outcome == injection.NOT_SELECTED
    assert "patch" not in answer["response"]


async def test_a_gang_of_pods_is_served_from_the_jobset_watch(rig: Rig) -> None:
    reviews = [review(pod(f"tj-node-0-{i}"), uid=f"u{i}") for i in range(8)]
    answers = await asyncio.gather(*(rig.admit(r) for r in reviews))
    assert {outcome for _, outcome in answers} == {injection.INJECTED}
    assert rig.standin.requests[("GET", "jobsets")] == 0
    assert rig.standin.requests[("LIST", "jobsets")] == 1


async def test_pod_of_no_jobset_is_not_selected(rig: Rig) -> None:
    answer, outcome = await rig.admit(review(pod(trainjob=None, rjob=None)))
    assert outcome == injection.NOT_SELECTED
    assert "patch" not in answer["response"]


async def test_unknown_trainjob_is_left_alone_without_an_api_request(rig: Rig) -> None:
    await rig.put_jobset(jobset("other"))
    before = rig.cluster.faults.count()
    for i in range(3):
        answer, outcome = await rig.admit(review(pod(f"other-node-0-{i}", trainjob="other")))
        assert outcome == injection.UNKNOWN_TRAINJOB
        assert "patch" not in answer["response"]
    assert rig.cluster.faults.count() == before


async def test_pod_with_the_variables_already_set_is_left_alone(rig: Rig) -> None:
    env = [{"name": URL_ENV, "value": "https://elsewhere/status"}]
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


async def test_a_jobset_list_still_loading_admits_the_pod_within_the_timeout(
    devcluster: DevCluster, standin: StandIn
) -> None:
    standin.stall["jobsets"] = 5.0
    async for rig in make_rig(devcluster, standin, InjectorSettings(timeout=0.2)):
        answer, outcome = await rig.admit(review(pod()))
        # The JobSet is not known in time: only the pod's own labels were matched.
        assert outcome == injection.NOT_SELECTED
        assert "patch" not in answer["response"]


async def test_override_existing_replaces_another_injection(
    devcluster: DevCluster, standin: StandIn
) -> None:
    env = [{"name": URL_ENV, "value": "https://elsewhere/status"}]
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


# -- no API request per admission -------------------------------------------------------------


async def test_admissions_naming_unknown_trainjobs_and_jobsets_cost_no_request(rig: Rig) -> None:
    cluster_before = rig.cluster.faults.count()
    listed = rig.standin.requests[("LIST", "jobsets")]
    outcomes = []
    for i in range(20):
        # Selected by its own label, of a TrainJob no one made; or in need of a JobSet
        # no one made.
        labels = {ANCESTOR: "trainer"} if i % 2 else {}
        _, outcome = await rig.admit(
            review(pod(f"ghost-{i}-0", trainjob=f"ghost-{i}", labels=labels))
        )
        outcomes.append(outcome)
    assert outcomes == [injection.NOT_SELECTED, injection.UNKNOWN_TRAINJOB] * 10
    assert rig.cluster.faults.count() == cluster_before
    assert rig.standin.requests[("GET", "jobsets")] == 0
    assert rig.standin.requests[("LIST", "jobsets")] == listed


async def test_pods_admitted_just_after_their_trainjob_wait_for_the_watch(
    devcluster: DevCluster, standin: StandIn
) -> None:
    settings = InjectorSettings(watch_grace=30.0, timeout=60.0)
    async for rig in make_rig(devcluster, standin, settings):
        before = rig.cluster.faults.count()
        admitted = asyncio.create_task(rig.admit(review(pod("late-node-0-0", trainjob="late"))))
        # Both the TrainJob and its JobSet appear while the review waits for them.
        await until_waiting(rig)
        rig.standin.put("jobsets", jobset("late"))
        devcluster.create_trainjob(NS, "late")
        async with asyncio.timeout(30):  # a hang guard, not a measurement
            answer, outcome = await admitted
        assert outcome == injection.INJECTED
        assert decoded_patch(answer) is not None
        assert rig.cluster.faults.count() == before
        assert rig.standin.requests[("GET", "jobsets")] == 0


async def until_waiting(rig: Rig) -> None:
    """Until the review waits in one of the caches (it asked no one: it can only wait)."""
    async with asyncio.timeout(10):
        while not (rig.jobsets.waiting or rig.injector.trainjobs.waiting):
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("code", [404, 403], ids=["no-crd", "no-rbac"])
async def test_without_jobsets_to_list_the_pods_own_labels_decide(
    devcluster: DevCluster, standin: StandIn, code: int, caplog: pytest.LogCaptureFixture
) -> None:
    standin.refuse_list["jobsets"] = code
    # A grace the reviews would exhaust the timeout with, if they waited for JobSets.
    settings = InjectorSettings(watch_grace=30.0, timeout=60.0)
    quick = Backoff(base=0.01, cap=0.01)
    async for rig in make_rig(devcluster, standin, settings, backoff=quick):
        await until_unavailable(rig)
        async with asyncio.timeout(10):  # a hang guard, not a measurement
            _, outcome = await rig.admit(review(pod()))
            assert outcome == injection.NOT_SELECTED
            _, outcome = await rig.admit(review(pod(labels={ANCESTOR: "trainer"})))
            assert outcome == injection.INJECTED
    assert standin.requests[("GET", "jobsets")] == 0
    warnings = [r for r in caplog.records if "optional resource" in r.getMessage()]
    assert len(warnings) == 1


async def until_unavailable(rig: Rig) -> None:
    """Until the JobSet list has been refused a few times (each retry logs nothing)."""
    async with asyncio.timeout(10):
        while not rig.jobsets.unavailable or rig.standin.requests[("LIST", "jobsets")] < 3:
            await asyncio.sleep(0.01)
