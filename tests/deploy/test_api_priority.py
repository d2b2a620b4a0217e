"""The API Priority and Fairness component (components/api-priority), rendered with
``kubectl kustomize`` into every overlay and another namespace: a Limited priority level
with a nominal share and queuing, and a FlowSchema that matches exactly the server's
ServiceAccount, both cluster-scoped, in ``flowcontrol.apiserver.k8s.io/v1``, valid
against the Kubernetes schemas."""

from __future__ import annotations

import os

import pytest
import yaml

from .rendering import MANIFESTS, OVERLAYS, TARGETS, Doc, one, render

FLOWCONTROL = "flowcontrol.apiserver.k8s.io/v1"
# The built-in FlowSchemas ours must sit between: the control plane's own service
# accounts (kube-system-service-accounts) and every other service account.
KUBE_SYSTEM_SERVICE_ACCOUNTS, SERVICE_ACCOUNTS = 900, 9000


@pytest.fixture(params=[(o, None) for o in OVERLAYS] + [("kubeflow", "ml-platform")], ids=str)
def rendered(request: pytest.FixtureRequest) -> tuple[list[Doc], str]:
    overlay, namespace = request.param
    return render(overlay, "api-priority", namespace=namespace), namespace or TARGETS[overlay]


def test_a_flowschema_matches_the_servers_service_account_only(
    rendered: tuple[list[Doc], str],
) -> None:
    docs, namespace = rendered
    account = one(docs, "ServiceAccount")
    schema = one(docs, "FlowSchema")
    assert schema["apiVersion"] == FLOWCONTROL
    assert "namespace" not in schema["metadata"]  # cluster-scoped
    spec = schema["spec"]
    assert spec["priorityLevelConfiguration"] == {"name": "trainjob-status"}
    assert KUBE_SYSTEM_SERVICE_ACCOUNTS < spec["matchingPrecedence"] < SERVICE_ACCOUNTS
    (rule,) = spec["rules"]
    assert rule["subjects"] == [
        {
            "kind": "ServiceAccount",
            "serviceAccount": {"name": account["metadata"]["name"], "namespace": namespace},
        }
    ]
    assert account["metadata"]["namespace"] == namespace
    # Every request the server makes: resources anywhere, and the issuer's documents.
    assert rule["resourceRules"] == [
        {
            "verbs": ["*"],
            "apiGroups": ["*"],
            "resources": ["*"],
            "clusterScope": True,
            "namespaces": ["*"],
        }
    ]
    assert rule["nonResourceRules"] == [{"verbs": ["*"], "nonResourceURLs": ["*"]}]


def test_its_priority_level_is_limited_queued_and_never_borrows(
    rendered: tuple[list[Doc], str],
) -> None:
    docs, _ = rendered
    level = one(docs, "PriorityLevelConfiguration")
    assert level["apiVersion"] == FLOWCONTROL
    assert "namespace" not in level["metadata"]
    assert level["spec"]["type"] == "Limited"
    limited = level["spec"]["limited"]
    assert limited["nominalConcurrencyShares"] == 10
    assert limited["borrowingLimitPercent"] == 0
    assert 0 <= limited["lendablePercent"] <= 100
    assert limited["limitResponse"]["type"] == "Queue"
    queuing = limited["limitResponse"]["queuing"]
    assert 1 <= queuing["handSize"] <= queuing["queues"]
    assert queuing["queueLengthLimit"] > 0


def test_without_the_component_there_is_no_flowcontrol_object() -> None:
    for overlay in OVERLAYS:
        kinds = {d["kind"] for d in render(overlay)}
        assert not kinds & {"FlowSchema", "PriorityLevelConfiguration"}, overlay


@pytest.mark.parametrize("version", ["1.30.0", "latest"])
def test_both_validate_against_the_kubernetes_schemas(
    rendered: tuple[list[Doc], str], version: str
) -> None:
    try:
        import kubernetes_validate  # type: ignore[import-untyped]  # ships no types
    except ImportError:
        if os.environ.get("TRAINJOB_STATUS_CI"):
            pytest.fail("kubernetes-validate is required in CI (the test extra)")
        pytest.skip("kubernetes-validate is not installed")
    docs, _ = rendered
    target = kubernetes_validate.latest_version() if version == "latest" else version
    for kind in ("FlowSchema", "PriorityLevelConfiguration"):
        kubernetes_validate.validate(one(docs, kind), target, strict=True)


def test_the_kubeflow_overlay_names_the_component() -> None:
    text = (OVERLAYS["kubeflow"] / "kustomization.yaml").read_text()
    assert "#     - ../../components/api-priority" in text
    component = yaml.safe_load(
        (MANIFESTS / "components/api-priority/kustomization.yaml").read_text()
    )
    assert component["kind"] == "Component"
