"""Every overlay rendered with ``kubectl kustomize``: schemas, least privilege (the RBAC
rules pinned exactly), the hardened pod, probes, ports, the never-blocking webhook, and
agreement with the code's own names (Secret, ConfigMap, webhook path, Service)."""

from __future__ import annotations

import os
from dataclasses import fields
from typing import Any

import pytest
import yaml

from trainjob_status_server import certs, injection, webhook
from trainjob_status_server.cli import build_parser
from trainjob_status_server.config import from_args
from trainjob_status_server.devcluster import DevCluster
from trainjob_status_server.injection import Selector, Target

from .rendering import MANIFESTS, OVERLAYS, Doc, names, one, render

NS = "trainjob-status"
SA_SUBJECT = [{"kind": "ServiceAccount", "name": "trainjob-status", "namespace": NS}]
# Kinds the Kubernetes schemas do not describe (cert-manager, the Prometheus Operator).
CUSTOM_KINDS = {"Issuer", "Certificate", "ServiceMonitor", "PrometheusRule"}

CORE_RULES = [
    {
        "apiGroups": ["trainer.kubeflow.org"],
        "resources": ["trainjobs"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": ["trainjob-status-ca"],
        "verbs": ["patch"],
    },
]
CERT_RULES = [
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    {
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": ["trainjob-status-tls"],
        "verbs": ["get", "update"],
    },
]
WEBHOOK_CA_RULES = [
    {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["mutatingwebhookconfigurations"],
        "resourceNames": ["trainjob-status"],
        "verbs": ["get", "patch"],
    }
]
TOKEN_REVIEW_RULES = [
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}
]
# Every role each overlay grants, with its rules: nothing else exists.
ROLES: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {
    "base": {
        ("ClusterRole", "trainjob-status"): CORE_RULES,
        ("ClusterRole", "trainjob-status-webhook-ca"): WEBHOOK_CA_RULES,
        ("Role", "trainjob-status-certs"): CERT_RULES,
    },
    "cert-manager": {("ClusterRole", "trainjob-status"): CORE_RULES},
    "token-review": {
        ("ClusterRole", "trainjob-status"): CORE_RULES,
        ("ClusterRole", "trainjob-status-webhook-ca"): WEBHOOK_CA_RULES,
        ("Role", "trainjob-status-certs"): CERT_RULES,
        ("ClusterRole", "trainjob-status-token-review"): TOKEN_REVIEW_RULES,
    },
}
ROLES["prometheus"] = ROLES["base"]


@pytest.fixture(params=list(OVERLAYS))
def docs(request: pytest.FixtureRequest) -> list[Doc]:
    return render(request.param)


def deployment(docs: list[Doc]) -> Doc:
    return one(docs, "Deployment")


def pod_spec(docs: list[Doc]) -> Doc:
    spec: Doc = deployment(docs)["spec"]["template"]["spec"]
    return spec


def server(docs: list[Doc]) -> Doc:
    (container,) = pod_spec(docs)["containers"]
    assert container["name"] == "server"
    return dict(container)


def test_every_object_is_ours_and_in_our_namespace(docs: list[Doc]) -> None:
    for doc in docs:
        meta = doc["metadata"]
        assert meta["labels"]["app.kubernetes.io/name"] == "trainjob-status", doc["kind"]
        cluster_scoped = doc["kind"] in (
            "Namespace",
            "ClusterRole",
            "ClusterRoleBinding",
            "MutatingWebhookConfiguration",
        )
        assert meta.get("namespace") == (None if cluster_scoped else NS), doc["kind"]


@pytest.mark.parametrize("version", ["1.30.0", "latest"])
def test_objects_validate_against_the_kubernetes_schemas(docs: list[Doc], version: str) -> None:
    try:
        import kubernetes_validate  # type: ignore[import-untyped]  # ships no types
    except ImportError:
        if os.environ.get("TRAINJOB_STATUS_CI"):
            pytest.fail("kubernetes-validate is required in CI (the test extra)")
        pytest.skip("kubernetes-validate is not installed")
    target = kubernetes_validate.latest_version() if version == "latest" else version
    for doc in docs:
        if doc["kind"] in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(doc, target, strict=True)


@pytest.mark.parametrize("overlay", list(OVERLAYS))
def test_rbac_is_exactly_what_the_server_needs(overlay: str) -> None:
    docs = render(overlay)
    granted = {
        (d["kind"], d["metadata"]["name"]): d["rules"]
        for d in docs
        if d["kind"] in ("ClusterRole", "Role")
    }
    assert granted == ROLES[overlay]
    bindings = [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert len(bindings) == len(granted)
    for binding in bindings:
        assert binding["subjects"] == SA_SUBJECT
        role = (binding["roleRef"]["kind"], binding["roleRef"]["name"])
        assert role in granted
        # A Role is bound in its namespace; a ClusterRole cluster-wide.
        assert binding["kind"] == ("RoleBinding" if role[0] == "Role" else "ClusterRoleBinding")
    for rules in granted.values():
        for rule in rules:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key]
    # Secrets only through the namespaced Role, never cluster-wide.
    for (kind, _), rules in granted.items():
        if kind == "ClusterRole":
            assert all("secrets" not in rule["resources"] for rule in rules)


def test_the_pod_is_hardened(docs: list[Doc]) -> None:
    spec = pod_spec(docs)
    assert deployment(docs)["spec"]["replicas"] == 2
    assert spec["serviceAccountName"] == "trainjob-status"
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(key)
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True
    assert pod["runAsUser"] == 65532
    assert pod["runAsGroup"] == 65532
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    ctx = server(docs)["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["runAsNonRoot"] is True
    assert ctx.get("privileged", False) is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    resources = server(docs)["resources"]
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}
    spread = {c["topologyKey"] for c in spec["topologySpreadConstraints"]}
    assert spread == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    for constraint in spec["topologySpreadConstraints"]:
        assert constraint["labelSelector"]["matchLabels"] == {"app.kubernetes.io/name": NS}
    # A read-only root: everything written goes to a volume.
    mounts = {m["mountPath"] for m in server(docs)["volumeMounts"]}
    assert {"/tmp", "/var/run/trainjob-status/tls"} <= mounts


def test_probes_ports_and_service(docs: list[Doc]) -> None:
    container = server(docs)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"status-server": 10443, "metrics": 9090, "probes": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    service = one(docs, "Service")
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        ("status-server", 10443, "status-server"),
        ("metrics", 9090, "metrics"),
    ]
    labels = deployment(docs)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert deployment(docs)["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # What the injector puts in URLs is this Service.
    target = Target()
    assert (target.service, target.namespace, target.port) == ("trainjob-status", NS, 10443)


def test_the_webhook_never_blocks_a_pod(docs: list[Doc]) -> None:
    config = one(docs, "MutatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore"
    assert 1 <= hook["timeoutSeconds"] <= 5
    assert hook["timeoutSeconds"] > webhook.InjectorSettings().timeout  # we answer first
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert "caBundle" not in hook["clientConfig"]  # filled in by the server or cainjector
    assert hook["clientConfig"]["service"] == {
        "name": "trainjob-status",
        "namespace": NS,
        "path": webhook.INJECT_PATH,
        "port": 10443,
    }
    assert hook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert hook["objectSelector"] == {
        "matchExpressions": [{"key": injection.JOBSET_NAME_LABEL, "operator": "Exists"}]
    }
    excluded = hook["namespaceSelector"]["matchExpressions"][0]
    assert excluded["operator"] == "NotIn"
    assert set(excluded["values"]) == {"kube-system", NS}


def test_disruption_budget_and_network_policy(docs: list[Doc]) -> None:
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": NS}
    policy = one(docs, "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": NS}
    assert policy["policyTypes"] == ["Ingress"]
    status_rule, metrics_rule = policy["ingress"]
    assert status_rule == {"ports": [{"port": "status-server", "protocol": "TCP"}]}
    assert metrics_rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert metrics_rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]


def test_bootstrap_mode_matches_the_code() -> None:
    docs = render("base")
    args = server(docs)["args"]
    assert "--cert-bootstrap" in args
    assert "--distribute-ca" in args
    tls = next(v for v in pod_spec(docs)["volumes"] if v["name"] == "tls")
    assert tls["emptyDir"]["medium"] == "Memory"
    # The names the code uses are the names RBAC allows.
    secret_rule = ROLES["base"][("Role", "trainjob-status-certs")][1]
    assert secret_rule["resourceNames"] == [
        next(f.default for f in fields(certs.CertSettings) if f.name == "secret_name")
    ]
    assert WEBHOOK_CA_RULES[0]["resourceNames"] == [
        one(docs, "MutatingWebhookConfiguration")["metadata"]["name"]
    ]
    assert certs.WebhookCABundle.__init__.__defaults__ == ("trainjob-status",)
    assert CORE_RULES[-1]["resourceNames"] == [injection.CA_CONFIGMAP]


def test_cert_manager_overlay_replaces_the_bootstrap() -> None:
    docs = render("cert-manager")
    args = server(docs)["args"]
    assert "--cert-bootstrap" not in args
    assert "--distribute-ca" in args
    tls = next(v for v in pod_spec(docs)["volumes"] if v["name"] == "tls")
    assert tls == {
        "name": "tls",
        "secret": {"secretName": "trainjob-status-tls", "defaultMode": 0o440},
    }
    mount = next(m for m in server(docs)["volumeMounts"] if m["name"] == "tls")
    assert mount["readOnly"] is True
    certificate = one(docs, "Certificate")["spec"]
    assert certificate["secretName"] == "trainjob-status-tls"
    assert tuple(certificate["dnsNames"]) == certs.dns_names("trainjob-status", NS)
    assert certificate["issuerRef"] == {"kind": "Issuer", "name": "trainjob-status-ca"}
    assert one(docs, "Certificate", "trainjob-status-ca")["spec"]["isCA"] is True
    assert one(docs, "Issuer", "trainjob-status-ca")["spec"] == {
        "ca": {"secretName": "trainjob-status-ca"}
    }
    annotations = one(docs, "MutatingWebhookConfiguration")["metadata"]["annotations"]
    assert annotations["cert-manager.io/inject-ca-from"] == f"{NS}/trainjob-status"


def test_token_review_overlay_turns_it_on() -> None:
    args = server(render("token-review"))["args"]
    assert args[-1] == "--token-review"
    assert "--token-review" not in server(render("base"))["args"]


def test_prometheus_overlay_scrapes_the_metrics_port() -> None:
    docs = render("prometheus")
    monitor = one(docs, "ServiceMonitor")["spec"]
    service = one(docs, "Service")
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["namespaceSelector"]["matchNames"] == [NS]
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["endpoints"]} <= port_names
    assert names(docs, "PrometheusRule") == {"trainjob-status"}
    # Everything the base has is still there, unchanged.
    base = {(d["kind"], d["metadata"]["name"]): d for d in render("base")}
    assert all(base[key] == d for d in docs if (key := (d["kind"], d["metadata"]["name"])) in base)


@pytest.mark.parametrize("overlay", list(OVERLAYS))
def test_container_args_are_flags_the_server_takes(overlay: str) -> None:
    container = server(render(overlay))
    env = {e["name"]: "trainjob-status" for e in container.get("env", [])}
    args = build_parser().parse_args(["serve", *container["args"]])
    config = from_args(args, environ=env)
    assert config.check() == []
    assert getattr(config, "service_namespace") == NS  # noqa: B009 - field added by wiring


# -- examples -------------------------------------------------------------------------------


def load(name: str) -> Doc:
    doc: Doc = yaml.safe_load((MANIFESTS / "examples" / name).read_text())
    return doc


def test_example_runtime_and_trainjob_need_nothing_from_us(devcluster: DevCluster) -> None:
    runtime = load("clustertrainingruntime.yaml")
    trainjob = load("trainjob.yaml")
    for doc in (runtime, trainjob):
        text = yaml.safe_dump(doc)
        assert "KUBEFLOW_TRAINER_SERVER" not in text
        assert "trainjob-status" not in text
        assert "/var/run/secrets/kubeflow" not in text
    # The runtime's trainer step is what the injector's default selector picks, through
    # the labels the JobSet's replicated job carries (what the Trainer copies from here).
    selector = Selector.parse(injection.DEFAULT_SELECTOR)
    jobset_like = {"spec": runtime["spec"]["template"]["spec"]}
    assert selector.matches(injection.step_labels(jobset_like, "node"))
    # The TrainJob is valid as the CRD says (the devcluster serves the real CRD schema).
    namespace = trainjob["metadata"]["namespace"]
    devcluster.ensure_namespace(namespace)
    created = devcluster.create("trainjobs", trainjob, namespace, "trainer.kubeflow.org")
    assert created["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"]
