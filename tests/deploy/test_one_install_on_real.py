"""One install serves the whole cluster (manifests/base/one-install.yaml): on the real
control plane, a second install into another namespace, with kubectl or Helm, after a
first one made either way, is refused with one message naming the first, and the first
keeps every object exactly as it was; Helm records no release for a refused install, so
there is nothing of it to uninstall. Once the first is gone, another installs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_status_server.progress import resource

from .chart import CHART, CI_VALUES, RELEASE, run_helm
from .cluster import Held, Kubectl, existing
from .rendering import OVERLAYS, TARGETS
from .test_applied_for_real import written

pytestmark = pytest.mark.kubectl

FIRST = TARGETS["kubeflow"]


def refusal(namespace: str) -> str:
    return (
        f"trainjob-status is already installed in namespace {namespace}: one install "
        "serves the whole cluster; change that install, or delete it first"
    )


# The policy's own objects: admission policies are never applied to admission policy
# objects, so a refused install re-applies them (its own labels, the same spec).
POLICY = {
    ("ValidatingAdmissionPolicy", "", "trainjob-status-one-install"),
    ("ValidatingAdmissionPolicyBinding", "", "trainjob-status-one-install"),
}


def assert_unchanged(kubectl: Kubectl, before: Held) -> None:
    """Every object as it was, resourceVersion and managedFields included, but the
    policy's own, whose spec is still the same."""
    now = kubectl.held()
    assert set(now) == set(before)
    assert {k: v for k, v in now.items() if k not in POLICY} == {
        k: v for k, v in before.items() if k not in POLICY
    }
    for key in POLICY:
        assert now[key]["spec"] == before[key]["spec"], key


def kustomize_into(kubectl: Kubectl, overlay: Path, *flags: str) -> tuple[int, list[str]]:
    done = kubectl("apply", "--server-side", *flags, "-k", str(overlay), check=False)
    return done.returncode, done.stderr.splitlines()


def wait_until_refused(kubectl: Kubectl, namespace: str) -> None:
    """The API server loads a new policy and its parameter in the background, within a
    second or so: wait until a dry run of a second install is refused."""
    deadline = time.monotonic() + 30
    while True:
        done = kubectl(
            "apply",
            "--server-side",
            "--dry-run=server",
            "-k",
            str(OVERLAYS["quick-start"]),
            check=False,
        )
        if refusal(namespace) in done.stderr:
            return
        assert time.monotonic() < deadline, done.stderr
        time.sleep(0.2)


def assert_refused(code: int, errors: list[str], namespace: str) -> None:
    """Exit 1, and every error is the refusal, or a consequence of the refused
    Namespace (its objects cannot be made in a namespace that does not exist)."""
    assert code == 1
    denied = [line for line in errors if "denied request" in line]
    missing = [line for line in errors if line.endswith('namespaces "trainjob-status" not found')]
    assert denied, errors
    assert set(errors) == set(denied) | set(missing), errors
    for line in denied:
        assert line.startswith("Error from server (Forbidden): "), line
        assert line.endswith(
            "ValidatingAdmissionPolicy 'trainjob-status-one-install' with binding "
            f"'trainjob-status-one-install' denied request: {refusal(namespace)}"
        ), line
    kinds = {line.split('"', 1)[0].split()[-1] for line in denied}
    assert {
        "namespaces",
        "clusterroles.rbac.authorization.k8s.io",
        "clusterrolebindings.rbac.authorization.k8s.io",
        "mutatingwebhookconfigurations.admissionregistration.k8s.io",
    } <= kinds, kinds


def releases(kubectl: Kubectl) -> list[tuple[str, str]]:
    listed = run_helm(
        "list",
        "--all-namespaces",
        "--deployed",
        "--failed",
        "--pending",
        "-o",
        "json",
        "--kubeconfig",
        kubectl.kubeconfig,
    )
    assert listed.returncode == 0, listed.stderr
    return [(r["name"], r["namespace"]) for r in json.loads(listed.stdout)]


def helm_install(kubectl: Kubectl, release: str, namespace: str) -> tuple[int, str]:
    done = run_helm(
        "install",
        release,
        str(CHART),
        "--values",
        str(CI_VALUES / "kubeflow-values.yaml"),
        "--namespace",
        namespace,
        "--kubeconfig",
        kubectl.kubeconfig,
    )
    return done.returncode, done.stderr


def test_a_second_install_after_kubectl_is_refused_and_changes_nothing(
    kubectl: Kubectl, real_cluster: RealCluster
) -> None:
    existing(real_cluster, kubectl, FIRST)
    real_cluster.ensure_namespace("second")
    code, errors = kustomize_into(kubectl, OVERLAYS["kubeflow"])
    assert (code, errors) == (0, [])
    wait_until_refused(kubectl, FIRST)
    before = kubectl.held()

    code, errors = kustomize_into(kubectl, OVERLAYS["quick-start"])
    assert_refused(code, errors, FIRST)
    assert_unchanged(kubectl, before)

    code, stderr = helm_install(kubectl, RELEASE, "second")
    assert code == 1
    assert stderr.strip() == (
        "Error: INSTALLATION FAILED: execution error at "
        "(trainjob-status/templates/one-install.yaml:25:4): "
        f"trainjob-status is already installed in namespace {FIRST} (with kubectl): one "
        "install serves the whole cluster; change that install, or delete it first"
    )
    assert releases(kubectl) == []
    assert_unchanged(kubectl, before)

    # Applying the first again is an upgrade, not a second install.
    code, errors = kustomize_into(kubectl, OVERLAYS["kubeflow"])
    assert (code, errors) == (0, [])


def test_a_second_install_after_helm_is_refused_and_the_first_uninstalls_cleanly(
    kubectl: Kubectl, real_cluster: RealCluster
) -> None:
    existing(real_cluster, kubectl, FIRST)
    real_cluster.ensure_namespace("second")
    code, stderr = helm_install(kubectl, RELEASE, FIRST)
    assert code == 0, stderr
    wait_until_refused(kubectl, FIRST)
    before = kubectl.held()

    for release, namespace in ((RELEASE, "second"), ("another", FIRST)):
        code, stderr = helm_install(kubectl, release, namespace)
        assert code == 1
        assert stderr.strip().endswith(
            f"trainjob-status is already installed in namespace {FIRST} (as Helm release "
            f"{RELEASE} in namespace {FIRST}): one install serves the whole cluster; "
            "change that install, or delete it first"
        ), stderr
    # Helm owns the first's fields, so kubectl's apply conflicts first; forced, it meets
    # the policy.
    code, errors = kustomize_into(kubectl, OVERLAYS["quick-start"])
    assert code == 1
    assert 'Apply failed with 1 conflict: conflict with "helm": .subjects' in errors
    assert_unchanged(kubectl, before)
    code, errors = kustomize_into(kubectl, OVERLAYS["quick-start"], "--force-conflicts")
    assert_refused(code, errors, FIRST)
    assert releases(kubectl) == [(RELEASE, FIRST)]
    assert_unchanged(kubectl, before)

    done = run_helm("uninstall", RELEASE, "--namespace", FIRST, "--kubeconfig", kubectl.kubeconfig)
    assert done.returncode == 0, done.stderr
    # With the first gone (its webhook last), the quick-start installs.
    deadline = time.monotonic() + 30
    while True:
        code, errors = kustomize_into(kubectl, OVERLAYS["quick-start"])
        if code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert (code, errors) == (0, [])
    webhook = json.loads(
        kubectl("get", "mutatingwebhookconfiguration", "trainjob-status", "-o", "json").stdout
    )
    assert webhook["webhooks"][0]["clientConfig"]["service"]["namespace"] == "trainjob-status"


def test_with_the_progress_api_a_second_install_is_refused_and_the_first_reapplies(
    kubectl: Kubectl, real_cluster: RealCluster, tmp_path: Path
) -> None:
    """components/progress-api's objects are covered too: the cluster-scoped APIService
    (its Service's namespace) and the RoleBinding in kube-system (its ServiceAccount's),
    which belongs to the first install when it applies again."""
    existing(real_cluster, kubectl, FIRST)
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first = written("kubeflow", ("progress-api",), tmp_path / "first")
    second = written("quick-start", ("progress-api",), tmp_path / "second")
    code, errors = kustomize_into(kubectl, first)
    assert (code, errors) == (0, [])
    wait_until_refused(kubectl, FIRST)
    before = kubectl.held()

    code, errors = kustomize_into(kubectl, second)
    assert_refused(code, errors, FIRST)
    denied = {line.split(" is forbidden: ", 1)[0] for line in errors if "denied request" in line}
    assert {
        'Error from server (Forbidden): apiservices.apiregistration.k8s.io "'
        + resource.APISERVICE
        + '"',
        'Error from server (Forbidden): rolebindings.rbac.authorization.k8s.io "'
        + "trainjob-status-authentication-reader"
        + '"',
    } <= denied, denied
    assert_unchanged(kubectl, before)

    code, errors = kustomize_into(kubectl, first)
    assert (code, errors) == (0, [])
