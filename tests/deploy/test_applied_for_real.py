"""Every overlay and every combination of the components applied with ``kubectl apply
--server-side`` to the real control plane (kube-apiserver and etcd), after the CRDs the
components need, taken from their projects' Go modules: nothing refused, the cluster
holds exactly what was rendered beside what it held before, and ``kubectl delete -k``
removes exactly that. Then the Helm chart installed (after ``--dry-run=server``),
upgraded from one overlay's values to another's, and uninstalled the same way.

A platform team installs into a cluster that already holds other things in the target
namespace; a ConfigMap and a ClusterRole stand for them and must survive every step.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import tomllib
from pathlib import Path

import pytest
import yaml

from trainjob_devcluster.harness.realcluster import RealCluster

from .assets import crd_files
from .chart import CHART, CI_VALUES, RELEASE, RELEASE_NAMESPACES, run_helm, template, variants
from .cluster import Held, Kubectl, existing, identities, identity
from .rendering import (
    COMPONENTS,
    EXTRA_COMPONENTS,
    ROOT,
    TARGETS,
    Doc,
    kustomization,
    render,
)

pytestmark = pytest.mark.kubectl

# The chart's version is the project's (server/pyproject.toml).
VERSION: str = tomllib.loads((ROOT / "server" / "pyproject.toml").read_text())["project"]["version"]


def dropped(rendered: object, stored: object, path: str = "") -> list[str]:
    """Every field of ``rendered`` that ``stored`` lacks or holds otherwise: what the API
    server refused silently (an unknown or pruned field). What it adds (defaults,
    metadata of its own) is not looked at."""
    if isinstance(rendered, dict) and isinstance(stored, dict):
        found: list[str] = []
        for key, value in rendered.items():
            if key not in stored:
                found.append(f"{path}.{key}: dropped")
            else:
                found.extend(dropped(value, stored[key], f"{path}.{key}"))
        return found
    if isinstance(rendered, list) and isinstance(stored, list) and len(rendered) == len(stored):
        return [
            line
            for i, pair in enumerate(zip(rendered, stored, strict=True))
            for line in dropped(*pair, f"{path}[{i}]")
        ]
    return [] if rendered == stored else [f"{path}: rendered {rendered!r}, stored {stored!r}"]


def assert_installed(kubectl: Kubectl, before: Held, docs: list[Doc]) -> None:
    """The cluster holds what it held ``before`` (unchanged) and ``docs``, each with
    every field as rendered, and nothing else."""
    now = kubectl.held()
    assert set(now) == set(before) | identities(docs)
    for key, obj in before.items():
        assert now[key]["metadata"]["uid"] == obj["metadata"]["uid"], key
    found = [f"{identity(d)}{line}" for d in docs for line in dropped(d, now[identity(d)])]
    assert found == []


def written(overlay: str, components: tuple[str, ...], scratch: Path) -> Path:
    """The overlay with ``components`` added, as a platform team's own kustomization."""
    doc = kustomization(overlay)
    doc["components"] = [
        *doc.get("components", []),
        *(str({**COMPONENTS, **EXTRA_COMPONENTS}[c]) for c in components),
    ]
    for key in ("resources", "components", "transformers"):
        doc[key] = [os.path.relpath(p, scratch) for p in doc.get(key) or []]
    (scratch / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    return scratch


def assert_removed(kubectl: Kubectl, before: Held, docs: list[Doc]) -> None:
    """What is left once ``docs`` are deleted: ``before`` again; a Namespace the install
    created is on its way out (no namespace controller runs here to finish it)."""
    namespaces = {name for kind, _, name in identities(docs) if kind == "Namespace"}
    now = kubectl.held()
    assert set(now) - {("Namespace", "", name) for name in namespaces} == set(before)
    for key, obj in before.items():
        assert now[key]["metadata"]["uid"] == obj["metadata"]["uid"], key
    for name in namespaces:
        answer = json.loads(kubectl("get", "namespace", name, "-o", "json").stdout)
        assert answer["status"]["phase"] == "Terminating"


@pytest.mark.parametrize("overlay", sorted(TARGETS))
def test_every_combination_applies_and_deletes_cleanly(
    overlay: str, kubectl: Kubectl, real_cluster: RealCluster
) -> None:
    if overlay != "quick-start":
        existing(real_cluster, kubectl, TARGETS[overlay])
    for components in [c for o, c in variants() if o == overlay]:
        before = kubectl.held()
        docs = render(overlay, *components)
        with tempfile.TemporaryDirectory() as scratch:
            folder = str(written(overlay, components, Path(scratch)))
            applied = kubectl("apply", "--server-side", "-k", folder)
            assert applied.stderr == "", (components, applied.stderr)
            assert_installed(kubectl, before, docs)
            kubectl("delete", "-k", folder, "--wait=false")
        assert_removed(kubectl, before, docs)
        if overlay == "quick-start":
            # The next combination creates the namespace again: finish this one's
            # deletion as the namespace controller would.
            finalize(kubectl, TARGETS[overlay])


def finalize(kubectl: Kubectl, name: str) -> None:
    answer = json.loads(kubectl("get", "namespace", name, "-o", "json").stdout)
    answer["spec"]["finalizers"] = []
    with tempfile.NamedTemporaryFile("w", suffix=".json") as body:
        json.dump(answer, body)
        body.flush()
        kubectl("replace", "--raw", f"/api/v1/namespaces/{name}/finalize", "-f", body.name)
    gone = kubectl("get", "namespace", name, "--ignore-not-found", "-o", "name")
    assert gone.stdout == ""


@pytest.mark.parametrize("values_file", sorted(CI_VALUES.glob("*.yaml")), ids=lambda p: p.name)
def test_helm_install_and_uninstall(
    values_file: Path, kubectl: Kubectl, real_cluster: RealCluster
) -> None:
    overlay = "quick-start" if values_file.name.startswith("quick-start") else "kubeflow"
    namespace = RELEASE_NAMESPACES[overlay]
    existing(real_cluster, kubectl, namespace)
    docs = template(namespace=namespace, values_file=values_file)
    before = kubectl.held()
    common = ["--namespace", namespace, "--kubeconfig", kubectl.kubeconfig]
    install = ["install", RELEASE, str(CHART), "--values", str(values_file), *common]
    # The check docs/kubeflow.md runs first: the API server admits every object, and
    # nothing is installed.
    checked = run_helm(*install, "--dry-run=server")
    assert checked.returncode == 0, checked.stderr
    assert "STATUS: pending-install" in checked.stdout
    assert set(kubectl.held()) == set(before)
    installed = run_helm(*install)
    assert installed.returncode == 0, installed.stderr
    assert "STATUS: deployed" in installed.stdout
    server_namespace = TARGETS[overlay]
    assert (
        f"kubectl -n {server_namespace} rollout status deploy/trainjob-status" in installed.stdout
    )
    secure = "--clusterrole=trainjob-status-metrics-reader" in installed.stdout
    assert secure == (overlay == "kubeflow")
    token_secret = "Secret trainjob-status-metrics-scraper-token" in installed.stdout
    assert token_secret == (values_file.name == "kubeflow-token-secret-values.yaml")
    assert_installed(kubectl, before, docs)
    listed = json.loads(run_helm("list", "--output", "json", *common).stdout)
    assert [(r["name"], r["status"], r["chart"]) for r in listed] == [
        (RELEASE, "deployed", f"trainjob-status-{VERSION}")
    ]
    uninstalled = run_helm("uninstall", RELEASE, *common)
    assert uninstalled.returncode == 0, uninstalled.stderr
    assert_removed(kubectl, before, docs)


def test_helm_upgrade_between_overlays_keeps_exactly_the_new_objects(
    kubectl: Kubectl, real_cluster: RealCluster
) -> None:
    """Upgrading a release from the bootstrap to cert-manager and every other component,
    to scrapes with the token Secret, and back: Helm removes what the new values no
    longer render (the bootstrap's RBAC, the cert-manager objects, then the scraper
    account and the Prometheus objects) and nothing else."""
    namespace = RELEASE_NAMESPACES["kubeflow"]
    existing(real_cluster, kubectl, namespace)
    before = kubectl.held()
    common = ["--namespace", namespace, "--kubeconfig", kubectl.kubeconfig]
    steps = [
        "kubeflow-values.yaml",
        "kubeflow-all-values.yaml",
        "kubeflow-token-secret-values.yaml",
        "kubeflow-values.yaml",
    ]
    for revision, name in enumerate(steps, start=1):
        values = CI_VALUES / name
        verb = "install" if revision == 1 else "upgrade"
        done = run_helm(verb, RELEASE, str(CHART), "--values", str(values), *common)
        assert done.returncode == 0, done.stderr
        assert f"REVISION: {revision}" in done.stdout
        assert_installed(kubectl, before, template(namespace=namespace, values_file=values))
    done = run_helm("uninstall", RELEASE, *common)
    assert done.returncode == 0, done.stderr
    assert_removed(kubectl, before, [])


def test_the_crds_define_every_custom_kind_rendered() -> None:
    """Each kind the overlays render that Kubernetes does not define has its CRD in
    tools/crds/crds.txt, serving the version the manifests use."""
    served = set()
    for crd in crd_files():
        spec = yaml.safe_load(crd.read_text())["spec"]
        for version in spec["versions"]:
            if version["served"]:
                served.add((f"{spec['group']}/{version['name']}", spec["names"]["kind"]))
    rendered = {
        (d["apiVersion"], d["kind"])
        for overlay, components in variants()
        for d in render(overlay, *components)
        if "." in d["apiVersion"].split("/")[0]
        and not d["apiVersion"].split("/")[0].endswith("k8s.io")
    }
    assert rendered == {
        ("cert-manager.io/v1", "Certificate"),
        ("cert-manager.io/v1", "Issuer"),
        ("monitoring.coreos.com/v1", "ServiceMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
    }
    assert rendered <= served


def readme_check_lines() -> list[str]:
    """docs/install.md's lines, from its "Deploying" section, that check the quick-start
    against a cluster before installing it (the namespace first, then the dry run)."""
    readme = (Path(__file__).resolve().parents[2] / "docs" / "install.md").read_text()
    section = readme.split("\n## Deploying\n", 1)[1].split("\n## ", 1)[0]
    lines = [line.split("#", 1)[0].strip() for line in section.splitlines()]
    start = lines.index("kubectl create namespace trainjob-status")
    check = lines[start : start + 2]
    assert check[1] == "kubectl apply -k manifests/overlays/quick-start --dry-run=server"
    return check


def test_the_readmes_check_before_install_passes_on_a_fresh_cluster(kubectl: Kubectl) -> None:
    """Run as written (cwd the repository, kubectl's own flags added), on a control plane
    that has never held the quick-start."""
    root = Path(__file__).resolve().parents[2]
    before = kubectl.held()
    for line in readme_check_lines():
        command = line.split()
        assert command[0] == "kubectl"
        done = subprocess.run(
            [kubectl.binary, "--kubeconfig", kubectl.kubeconfig, *command[1:]],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            cwd=root,
        )
        assert done.returncode == 0, f"{line}: {done.stderr}"
    # The dry run stored nothing: only the namespace the first line made is new.
    assert set(kubectl.held()) - set(before) == {("Namespace", "", "trainjob-status")}
