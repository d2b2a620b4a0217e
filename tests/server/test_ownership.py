"""Binding by ownership: a post's pod must be owned by a Job, owned by a JobSet, owned by
the post's TrainJob, uid by uid. A pod that labels itself into another TrainJob of its
namespace is refused (403, nothing written); where Jobs or JobSets cannot be listed the
label is the fallback only once that lasts (undecided until then: 503), a token accepted
for a TrainJob is judged again for a TrainJob recreated under its name, and the mode in
force is logged and exported."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from prometheus_client import REGISTRY

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_real_server
from trainjob_devcluster.harness.testing import eventually
from trainjob_status.contract import JOBSET_NAME_LABEL, audience
from trainjob_status_server.auth.ownership import controller_of, owned_through
from trainjob_status_server.config import Config

from .conftest import GROUP, NS, ServingCerts, with_changes
from .test_auth_support import SA, Rig, add_pod, mint, relabel
from .test_auth_support import running as running_with_tokens

VICTIM = "victim"
MINE = "mine"


def ref(kind: str, name: str, uid: str, controller: bool = True) -> dict[str, Any]:
    return {"kind": kind, "name": name, "uid": uid, "controller": controller}


def obj(uid: str, *owners: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "ownerReferences": list(owners)}}


JOB = obj("job-uid", ref("JobSet", "tj", "set-uid"))
JOBSET = obj("set-uid", ref("TrainJob", "tj", "tj-uid"))
POD = obj("pod-uid", ref("Job", "tj-node-0", "job-uid"))


def chain(pod: dict[str, Any], trainjob: str = "tj", trainjob_uid: str | None = "tj-uid") -> bool:
    return owned_through(
        pod,
        trainjob,
        trainjob_uid,
        lambda name: JOB if name == "tj-node-0" else None,
        lambda name: JOBSET if name == "tj" else None,
    )


def test_the_controller_reference_is_the_one_marked_controller() -> None:
    owned = obj("u", ref("ReplicaSet", "rs", "r", controller=False), ref("Job", "j", "ju"))
    assert controller_of(owned) == ("Job", "j", "ju")
    assert controller_of(obj("u", ref("Job", "j", "ju", controller=False))) is None
    assert controller_of({"metadata": {}}) is None


@pytest.mark.parametrize(
    ("pod", "trainjob", "trainjob_uid", "owned"),
    [
        (POD, "tj", "tj-uid", True),
        (POD, "other", "tj-uid", False),  # the chain leads to another TrainJob
        (POD, "tj", "recreated-uid", False),  # a TrainJob of that name, not that one
        (POD, "tj", None, False),  # the TrainJob is not in the cache
        (obj("p"), "tj", "tj-uid", False),  # no controller
        (obj("p", ref("Job", "tj-node-0", "forged-uid")), "tj", "tj-uid", False),
        (obj("p", ref("Job", "absent", "job-uid")), "tj", "tj-uid", False),
        (obj("p", ref("ReplicaSet", "tj-node-0", "job-uid")), "tj", "tj-uid", False),
    ],
)
def test_owned_through_follows_the_chain_uid_by_uid(
    pod: dict[str, Any], trainjob: str, trainjob_uid: str | None, owned: bool
) -> None:
    assert chain(pod, trainjob, trainjob_uid) is owned


async def noted(rig: Rig) -> str:
    """The binding mode, once the server has noted it (its caches listed or not)."""
    assert rig.auth.binding is not None
    owners = rig.auth.binding.owners
    assert owners is not None

    async def known() -> str | None:
        return owners.noted

    return await eventually(known, "the binding mode to be noted")


def mode(value: str) -> float:
    return REGISTRY.get_sample_value("trainjob_status_pod_binding_mode", {"mode": value}) or 0.0


def stored(cluster: KubeAPI, name: str) -> Any:
    found = cluster.get("trainjobs", NS, name, GROUP) or {}
    return (found.get("status") or {}).get("trainerStatus")


@on_real_server
async def test_a_pod_labelled_into_another_trainjob_is_refused_by_ownership(
    kube_api: KubeAPI, config: Config, certs: ServingCerts, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trainjob_status_server.auth.ownership")
    for name in (VICTIM, MINE):
        kube_api.create_trainjob(NS, name)
    add_pod(kube_api, "victim-node-0-0", job=VICTIM)
    # A pod of its own TrainJob, labelled into the victim's; and one with no owner.
    intruder = kube_api.create_trainjob_pod(NS, MINE, "intruder", service_account=SA)
    kube_api.create_pod(NS, "stray", service_account=SA, labels={JOBSET_NAME_LABEL: VICTIM})
    relabel(kube_api, "intruder", {**intruder["metadata"]["labels"], JOBSET_NAME_LABEL: VICTIM})
    async with running_with_tokens(kube_api, config, certs, server_budgets=True) as rig:
        await noted(rig)
        # One JobSet watch: the owner chain reads the injector's cache.
        assert rig.server.jobset_steps is not None
        assert rig.auth.binding is not None
        assert rig.auth.binding.owners is not None
        assert rig.auth.binding.owners.jobsets is rig.server.jobset_steps.jobsets
        for pod in ("intruder", "stray"):
            token = mint(kube_api, pod=pod, aud=audience(NS, VICTIM))
            assert await rig.refused(token, name=VICTIM) == (403, "Forbidden", "not_owned")
        assert stored(kube_api, VICTIM) is None
        genuine = mint(kube_api, pod="victim-node-0-0", aud=audience(NS, VICTIM))
        assert (await rig.post(genuine, name=VICTIM))[0] == 200
        assert stored(kube_api, VICTIM) is not None
    assert (mode("ownership"), mode("labels")) == (1.0, 0.0)
    lines = [r for r in caplog.records if r.getMessage() == "pod binding mode"]
    assert [r.__dict__["mode"] for r in lines] == ["ownership"]


@on_real_server
async def test_a_pod_of_a_trainjob_that_is_gone_gets_not_found(
    kube_api: KubeAPI, config: Config, certs: ServingCerts
) -> None:
    # The TrainJob was deleted while its pod still runs: no chain can lead to it, and the
    # answer is the 404 a post for a missing TrainJob gets, not a credential refusal.
    kube_api.create_trainjob(NS, VICTIM)
    add_pod(kube_api, "victim-node-0-0", job=VICTIM)
    token = mint(kube_api, pod="victim-node-0-0", aud=audience(NS, VICTIM))
    kube_api.delete("trainjobs", NS, VICTIM, GROUP)
    async with running_with_tokens(kube_api, config, certs, server_budgets=True) as rig:
        assert await noted(rig) == "ownership"
        code, body, _ = await rig.post(token, name=VICTIM)
        assert (code, body["reason"], body["message"]) == (404, "NotFound", "Train job not found")
    assert kube_api.get("trainjobs", NS, VICTIM, GROUP) is None


async def test_where_jobsets_cannot_be_listed_the_label_binds_only_once_that_lasts(
    devcluster: DevCluster, config: Config, certs: ServingCerts, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trainjob_status_server.auth.ownership")
    devcluster.create_trainjob(NS, VICTIM)
    devcluster.create_pod(NS, "stray", service_account=SA, labels={JOBSET_NAME_LABEL: VICTIM})
    # As a cluster without the JobSet CRD answers (RBAC without the rule: 403).
    devcluster.faults.fail(404, times=None, verb="list", resource="jobsets")
    async with running_with_tokens(
        devcluster, config, certs, server_budgets=True, binding_labels_after=1.0
    ) as rig:
        assert await noted(rig) == "undecided"
        token = mint(devcluster, pod="stray", aud=audience(NS, VICTIM))
        # Not told yet: retried later, never let through on the label meanwhile.
        code, body, response = await rig.post(token, name=VICTIM)
        assert (code, body["reason"], response.headers["Retry-After"]) == (
            503,
            "ServiceUnavailable",
            "1",
        )
        assert stored(devcluster, VICTIM) is None
        assert (mode("ownership"), mode("labels"), mode("undecided")) == (0.0, 0.0, 1.0)
        await until_mode(rig, "labels")
        assert (await rig.post(token, name=VICTIM))[0] == 200
    assert (mode("ownership"), mode("labels"), mode("undecided")) == (0.0, 1.0, 0.0)
    noted_lines = [r for r in caplog.records if r.getMessage() == "pod binding mode"]
    assert [(r.__dict__["mode"], r.__dict__["unlisted"], r.levelname) for r in noted_lines] == [
        ("undecided", ["jobsets.jobset.x-k8s.io"], "WARNING"),
        ("labels", ["jobsets.jobset.x-k8s.io"], "WARNING"),
    ]


async def until_mode(rig: Rig, wanted: str) -> None:
    assert rig.auth.binding is not None
    owners = rig.auth.binding.owners
    assert owners is not None

    async def reached() -> bool | None:
        return owners.noted == wanted or None

    await eventually(reached, f"the binding mode {wanted}")


async def test_a_refused_watch_keeps_ownership_until_the_refusal_lasts(
    devcluster: DevCluster, config: Config, certs: ServingCerts
) -> None:
    """A JobSet watch refused once (a 403 while RBAC rolls out) does not bind by label:
    a chain the caches still show passes, any other post is 503 and nothing is written."""
    devcluster.create_trainjob(NS, VICTIM)
    add_pod(devcluster, "victim-node-0-0", job=VICTIM)
    devcluster.create_pod(NS, "stray", service_account=SA, labels={JOBSET_NAME_LABEL: VICTIM})
    async with running_with_tokens(devcluster, config, certs, server_budgets=True) as rig:
        assert await noted(rig) == "ownership"
        devcluster.faults.fail(403, times=None, resource="jobsets")
        devcluster.drop_watches("jobsets", "jobset.x-k8s.io")
        await until_mode(rig, "undecided")
        stray = mint(devcluster, pod="stray", aud=audience(NS, VICTIM))
        code, body, _ = await rig.post(stray, name=VICTIM)
        assert (code, body["reason"]) == (503, "ServiceUnavailable")
        assert stored(devcluster, VICTIM) is None
        genuine = mint(devcluster, pod="victim-node-0-0", aud=audience(NS, VICTIM))
        assert (await rig.post(genuine, name=VICTIM))[0] == 200
        assert (mode("ownership"), mode("labels"), mode("undecided")) == (0.0, 0.0, 1.0)
        devcluster.faults.clear()
        await until_mode(rig, "ownership")
        assert await rig.refused(stray, name=VICTIM) == (403, "Forbidden", "not_owned")


@on_real_server
async def test_a_token_accepted_for_a_trainjob_is_checked_again_once_it_is_recreated(
    kube_api: KubeAPI, config: Config, certs: ServingCerts
) -> None:
    kube_api.create_trainjob(NS, VICTIM)
    add_pod(kube_api, "victim-node-0-0", job=VICTIM)
    token = mint(kube_api, pod="victim-node-0-0", aud=audience(NS, VICTIM))
    async with running_with_tokens(kube_api, config, certs, server_budgets=True) as rig:
        assert await noted(rig) == "ownership"
        assert (await rig.post(token, name=VICTIM))[0] == 200
        old_uid = kube_api.get("trainjobs", NS, VICTIM, GROUP)["metadata"]["uid"]  # type: ignore[index]
        # Deleted and created again under its name; the old pod (and its Job and JobSet,
        # owned by the old TrainJob) left behind.
        kube_api.delete("trainjobs", NS, VICTIM, GROUP)
        kube_api.create_trainjob(NS, VICTIM)
        new_uid = kube_api.get("trainjobs", NS, VICTIM, GROUP)["metadata"]["uid"]  # type: ignore[index]
        assert new_uid != old_uid
        assert rig.auth.binding is not None
        owners = rig.auth.binding.owners
        assert owners is not None

        async def recreated() -> bool | None:
            return owners.trainjob_uid(NS, VICTIM) == new_uid or None

        await eventually(recreated, "the TrainJob cache to show the new incarnation")
        assert await rig.refused(token, name=VICTIM) == (403, "Forbidden", "not_owned")
        assert stored(kube_api, VICTIM) is None


@on_real_server
async def test_without_the_injector_the_chain_watches_jobsets_itself(
    kube_api: KubeAPI, config: Config, certs: ServingCerts
) -> None:
    kube_api.create_trainjob(NS, VICTIM)
    add_pod(kube_api, "victim-node-0-0", job=VICTIM)
    kube_api.create_pod(NS, "stray", service_account=SA, labels={JOBSET_NAME_LABEL: VICTIM})
    alone = with_changes(config, inject_pods=False)
    async with running_with_tokens(kube_api, alone, certs, server_budgets=True) as rig:
        assert await noted(rig) == "ownership"
        assert rig.server.jobset_steps is None
        stray = mint(kube_api, pod="stray", aud=audience(NS, VICTIM))
        assert await rig.refused(stray, name=VICTIM) == (403, "Forbidden", "not_owned")
        genuine = mint(kube_api, pod="victim-node-0-0", aud=audience(NS, VICTIM))
        assert (await rig.post(genuine, name=VICTIM))[0] == 200
