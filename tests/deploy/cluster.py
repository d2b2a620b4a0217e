"""kubectl on the real control plane (kube-apiserver and etcd), as its admin, and what
the cluster holds of the kinds the overlays and the chart make."""

from __future__ import annotations

import json
import subprocess

from trainjob_devcluster.harness.pytest_plugin import require_binary
from trainjob_devcluster.harness.realcluster import RealCluster

from .rendering import Doc

# The kinds the overlays and the chart make, as `kubectl get` names them.
KINDS = (
    "namespaces",
    "serviceaccounts",
    "secrets",
    "configmaps",
    "services",
    "deployments.apps",
    "poddisruptionbudgets.policy",
    "networkpolicies.networking.k8s.io",
    "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
    "clusterroles.rbac.authorization.k8s.io",
    "clusterrolebindings.rbac.authorization.k8s.io",
    "mutatingwebhookconfigurations.admissionregistration.k8s.io",
    "validatingadmissionpolicies.admissionregistration.k8s.io",
    "validatingadmissionpolicybindings.admissionregistration.k8s.io",
    "flowschemas.flowcontrol.apiserver.k8s.io",
    "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io",
    "apiservices.apiregistration.k8s.io",
    "certificates.cert-manager.io",
    "issuers.cert-manager.io",
    "servicemonitors.monitoring.coreos.com",
    "prometheusrules.monitoring.coreos.com",
)
# The type of the Secrets in which Helm keeps each revision of a release.
HELM_RELEASE_RECORD = "helm.sh/release.v1"
# (kind, namespace, name) of each object the cluster holds.
Held = dict[tuple[str, str, str], Doc]


class Kubectl:
    """The real kubectl against the control plane, as its admin."""

    def __init__(self, cluster: RealCluster) -> None:
        self.binary = require_binary("kubectl")
        self.kubeconfig = str(cluster.kubeconfig_path)

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self.binary, "--kubeconfig", self.kubeconfig, *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done

    def held(self) -> Held:
        """Every object of :data:`KINDS` in the cluster but Helm's release records
        (Secrets Helm keeps beside what it installs)."""
        answer = json.loads(self("get", ",".join(KINDS), "--all-namespaces", "-o", "json").stdout)
        return {
            identity(item): item
            for item in answer["items"]
            if item.get("type") != HELM_RELEASE_RECORD
        }


def identity(doc: Doc) -> tuple[str, str, str]:
    return (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])


def identities(docs: list[Doc]) -> set[tuple[str, str, str]]:
    return {identity(d) for d in docs}


def existing(cluster: RealCluster, kubectl: Kubectl, namespace: str) -> None:
    """``namespace`` made beforehand, as overlays that create none expect, holding
    something of another's."""
    cluster.ensure_namespace(namespace)
    kubectl("create", "configmap", "bystander", "-n", namespace, "--from-literal=a=b")
