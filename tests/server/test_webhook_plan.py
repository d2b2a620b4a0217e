"""The injector's decisions (``injection.py``, pure): exact patches, applied to the pod
and compared with the pod we expect, for every shape of pod the issue names."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from trainjob_status.contract import CA_CERT_ENV, TOKEN_ENV, URL_ENV, audience, status_path
from trainjob_status_server.pods import injection
from trainjob_status_server.pods.injection import Selector, Target, plan

from .test_webhook_support import ANCESTOR, NS, TJ, apply_patch, jobset, pod

URL = "https://trainjob-status.trainjob-status.svc:10443" + status_path("team-a", "tj")
AUDIENCE = audience("team-a", "tj")
ENV = [
    {"name": URL_ENV, "value": URL},
    {"name": CA_CERT_ENV, "value": "/var/run/secrets/kubeflow/trainer/ca.crt"},
    {"name": TOKEN_ENV, "value": "/var/run/secrets/kubeflow/trainer/token"},
]
MOUNT = {
    "name": "kubeflow-trainer-token",
    "mountPath": "/var/run/secrets/kubeflow/trainer",
    "readOnly": True,
}
VOLUME = {
    "name": "kubeflow-trainer-token",
    "projected": {
        "sources": [
            {
                "serviceAccountToken": {
                    "audience": AUDIENCE,
                    "expirationSeconds": 3600,
                    "path": "token",
                }
            },
            {
                "configMap": {
                    "name": "trainjob-status-ca",
                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                }
            },
        ]
    },
}
TARGET = Target()


def injected(p: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = apply_patch(p, plan(p, NS, TJ, TARGET).patch)
    return result


def test_bare_trainer_pod_gets_the_exact_patch() -> None:
    bare = pod()
    decided = plan(bare, NS, TJ, TARGET)
    assert decided.outcome == injection.INJECTED
    assert decided.patch == [
        {"op": "add", "path": "/spec/volumes", "value": [VOLUME]},
        {"op": "add", "path": "/spec/containers/0/env", "value": ENV},
        {"op": "add", "path": "/spec/containers/0/volumeMounts", "value": [MOUNT]},
    ]
    expected = copy.deepcopy(bare)
    expected["spec"]["volumes"] = [VOLUME]
    expected["spec"]["containers"][0] |= {"env": ENV, "volumeMounts": [MOUNT]}
    assert apply_patch(bare, decided.patch) == expected


def test_user_fields_are_kept_and_ours_appended() -> None:
    user_env = [{"name": "EPOCHS", "value": "3"}, {"name": "HF_TOKEN", "valueFrom": {"x": 1}}]
    user_mount = {"name": "data", "mountPath": "/data"}
    user_volume = {"name": "data", "emptyDir": {}}
    container = {"name": "node", "image": "i", "env": user_env, "volumeMounts": [user_mount]}
    original = pod(containers=[container], volumes=[user_volume])
    decided = plan(original, NS, TJ, TARGET)
    assert decided.patch == [
        {"op": "add", "path": "/spec/volumes/-", "value": VOLUME},
        *({"op": "add", "path": "/spec/containers/0/env/-", "value": e} for e in ENV),
        {"op": "add", "path": "/spec/containers/0/volumeMounts/-", "value": MOUNT},
    ]
    result = apply_patch(original, decided.patch)
    assert result["spec"]["volumes"] == [user_volume, VOLUME]
    assert result["spec"]["containers"][0]["env"] == user_env + ENV
    assert result["spec"]["containers"][0]["volumeMounts"] == [user_mount, MOUNT]
    assert all(op["op"] == "add" for op in decided.patch)


def test_every_container_gets_the_variables_and_the_mount() -> None:
    sidecar = {"name": "sidecar", "image": "s", "env": [{"name": "A", "value": "1"}]}
    original = pod(containers=[{"name": "node", "image": "n"}, sidecar])
    result = injected(original)
    for container in result["spec"]["containers"]:
        assert container["env"][-3:] == ENV
        assert container["volumeMounts"] == [MOUNT]
    assert result["spec"]["containers"][1]["env"][0] == {"name": "A", "value": "1"}
    assert result["spec"]["volumes"] == [VOLUME]


def test_reinvocation_adds_nothing_twice() -> None:
    once = injected(pod())
    again = plan(once, NS, TJ, TARGET)
    assert again == injection.Plan(injection.UNCHANGED, [])
    # With --override-existing too: our own values are not someone else's.
    assert plan(once, NS, TJ, TARGET, override_existing=True).patch == []


def test_reinvocation_completes_a_container_added_since() -> None:
    once = injected(pod())
    once["spec"]["containers"].append({"name": "late", "image": "l"})
    again = plan(once, NS, TJ, TARGET)
    assert again.outcome == injection.INJECTED
    assert again.patch == [
        {"op": "add", "path": "/spec/containers/1/env", "value": ENV},
        {"op": "add", "path": "/spec/containers/1/volumeMounts", "value": [MOUNT]},
    ]


def test_defaults_the_api_server_added_do_not_make_it_foreign() -> None:
    once = injected(pod())
    once["spec"]["volumes"][0]["projected"]["defaultMode"] = 420
    assert plan(once, NS, TJ, TARGET).outcome == injection.UNCHANGED


def peer_injected() -> dict[str, Any]:
    """A pod as the Trainer's own TrainJobStatus plugin leaves it."""
    peer_url = (
        "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:10443"
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/tj/status"
    )
    env = [dict(ENV[0], value=peer_url), ENV[1], ENV[2]]
    volume: dict[str, Any] = copy.deepcopy(VOLUME)
    volume["projected"]["sources"][1]["configMap"]["name"] = "tj-tls-config"
    container = {"name": "node", "image": "pytorch/pytorch", "env": env, "volumeMounts": [MOUNT]}
    return pod(containers=[container], volumes=[volume])


def test_a_pod_the_trainer_already_injected_is_left_alone() -> None:
    assert plan(peer_injected(), NS, TJ, TARGET) == injection.Plan(injection.PRESENT, [])


def test_override_existing_replaces_only_what_differs() -> None:
    original = peer_injected()
    decided = plan(original, NS, TJ, TARGET, override_existing=True)
    assert decided.outcome == injection.OVERRIDDEN
    assert decided.patch == [
        {"op": "replace", "path": "/spec/volumes/0", "value": VOLUME},
        {"op": "replace", "path": "/spec/containers/0/env/0", "value": ENV[0]},
    ]
    # The same pod as one only we injected.
    assert apply_patch(original, decided.patch) == injected(pod())


@pytest.mark.parametrize(
    "container",
    [
        {
            "name": "node",
            "image": "n",
            "env": [{"name": URL_ENV, "value": "u"}],
        },
        {
            "name": "node",
            "image": "n",
            "env": [{"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": {}}}],
        },
        {
            "name": "node",
            "image": "n",
            "volumeMounts": [{"name": "mine", "mountPath": "/var/run/secrets/kubeflow/trainer"}],
        },
    ],
    ids=["user-url", "user-token-from-secret", "user-mount-at-our-path"],
)
def test_what_the_user_set_is_never_changed(container: dict[str, Any]) -> None:
    original = pod(containers=[container])
    assert plan(original, NS, TJ, TARGET) == injection.Plan(injection.PRESENT, [])


def test_a_user_volume_with_our_name_is_never_changed() -> None:
    original = pod(volumes=[{"name": "kubeflow-trainer-token", "emptyDir": {}}])
    assert plan(original, NS, TJ, TARGET).outcome == injection.PRESENT


def test_target_changes_the_url_and_configmap() -> None:
    target = Target(service="status", namespace="infra", port=8443, ca_configmap="my-ca")
    result = apply_patch(pod(), plan(pod(), NS, TJ, target).patch)
    env = result["spec"]["containers"][0]["env"]
    assert env[0]["value"] == (
        "https://status.infra.svc:8443"
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/tj/status"
    )
    sources = result["spec"]["volumes"][0]["projected"]["sources"]
    assert sources[1]["configMap"]["name"] == "my-ca"


def test_a_pod_without_containers_is_an_error() -> None:
    with pytest.raises(ValueError, match="no containers"):
        plan({"spec": {"containers": []}}, NS, TJ, TARGET)


# -- selectors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        ("", {}, True),
        ("a=b", {"a": "b"}, True),
        ("a==b", {"a": "c"}, False),
        ("a!=b", {}, True),
        ("a!=b", {"a": "b"}, False),
        ("a", {"a": ""}, True),
        ("!a", {"a": "x"}, False),
        ("!a", {}, True),
        ("a in (x, y)", {"a": "y"}, True),
        ("a in (x,y),b", {"a": "y"}, False),
        ("a notin (x,y)", {}, True),
        ("a notin (x,y)", {"a": "x"}, False),
        (
            "trainer.kubeflow.org/trainjob-ancestor-step=trainer",
            {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"},
            True,
        ),
    ],
)
def test_selector(text: str, labels: dict[str, str], matches: bool) -> None:
    assert Selector.parse(text).matches(labels) is matches


@pytest.mark.parametrize("text", ["a=b=c", "a in ()", "a in (x", "=b", "a b"])
def test_selector_that_does_not_parse(text: str) -> None:
    with pytest.raises(ValueError, match="label selector"):
        Selector.parse(text)


def test_step_labels_come_from_the_replicated_job() -> None:
    assert injection.step_labels(jobset(), "node") == {ANCESTOR: "trainer"}
    assert injection.step_labels(jobset(), "dataset-initializer") == {
        ANCESTOR: "dataset-initializer"
    }
    assert injection.step_labels(jobset(), "nope") == {}
    assert injection.step_labels({}, "node") == {}


def test_the_jobset_cache_keeps_only_what_the_selector_reads() -> None:
    selector = Selector.parse("trainer.kubeflow.org/trainjob-ancestor-step=trainer,team notin (x)")
    assert selector.keys == {ANCESTOR, "team"}
    full = jobset()
    full["metadata"] |= {"uid": "u-1", "resourceVersion": "7", "annotations": {"a": "b"}}
    full["spec"]["replicatedJobs"][1]["template"]["metadata"]["labels"]["other"] = "dropped"
    full["spec"]["replicatedJobs"].append({"template": {}})  # no name: nothing to match
    view = injection.jobset_view(full, selector.keys)
    assert view == {
        "metadata": {"name": TJ, "namespace": NS, "uid": "u-1", "resourceVersion": "7"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "dataset-initializer",
                    "template": {"metadata": {"labels": {ANCESTOR: "dataset-initializer"}}},
                },
                {"name": "node", "template": {"metadata": {"labels": {ANCESTOR: "trainer"}}}},
            ]
        },
    }
    assert injection.step_labels(view, "node") == {ANCESTOR: "trainer"}
    # Its controller (the TrainJob) is kept too, for the pod binding's owner chain.
    owner = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": TJ}
    full["metadata"]["ownerReferences"] = [
        {**owner, "uid": "t-0", "controller": False},
        {**owner, "uid": "t-1", "controller": True, "blockOwnerDeletion": True},
    ]
    assert injection.jobset_view(full, selector.keys)["metadata"]["ownerReferences"] == [
        {"kind": "TrainJob", "name": TJ, "uid": "t-1", "controller": True}
    ]
