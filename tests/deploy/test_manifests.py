"""Every overlay, alone and with every combination of the components, rendered with
``kubectl kustomize``: schemas, least privilege (the RBAC rules pinned exactly), the
hardened pod, probes, ports, the never-blocking webhook, one namespace named everywhere,
and agreement with the code's own names (Secret, ConfigMap, webhook path, Service)."""

from __future__ import annotations

import collections
import itertools
import os
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any

import pytest
import yaml

from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_status.contract import GROUP
from trainjob_status_server.certificates import certs
from trainjob_status_server.cli import build_parser
from trainjob_status_server.config import Config, from_args
from trainjob_status_server.http import webhook
from trainjob_status_server.pods import injection
from trainjob_status_server.pods.injection import Selector, Target
from trainjob_status_server.progress import frontproxy, resource
from trainjob_status_server.running import shutdown_deadline

from .rendering import (
    MANIFESTS,
    OVERLAYS,
    ROOT,
    TARGETS,
    Doc,
    combinations,
    names,
    one,
    render,
    render_text,
)

NS = "trainjob-status"
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
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "watch"]},
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
# The other replicas, for the hand-over at shutdown: the Service's EndpointSlices.
PEER_RULES = [
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}
]
TOKEN_REVIEW_RULES = [
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}
]
METRICS_AUTH_RULES = [
    *TOKEN_REVIEW_RULES,
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["subjectaccessreviews"],
        "verbs": ["create"],
    },
]
# Bound by the platform team to its Prometheus, never to the server.
SCRAPER_ROLE = ("ClusterRole", "trainjob-status-metrics-reader")
SCRAPER_RULES = [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
# components/progress-api: the server asks whether a reader may read the TrainJobs, and
# (bootstrap only) keeps its APIService's caBundle.
PROGRESS_API_RULES = [
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["subjectaccessreviews"],
        "verbs": ["create"],
    }
]
APISERVICE_CA_RULES = [
    {
        "apiGroups": ["apiregistration.k8s.io"],
        "resources": ["apiservices"],
        "resourceNames": [resource.APISERVICE],
        "verbs": ["get", "patch"],
    }
]
# The front proxy's CA and names: a Role Kubernetes defines in kube-system, bound there.
AUTHENTICATION_READER = ("Role", "extension-apiserver-authentication-reader")
AUTHENTICATION_BINDING = "trainjob-status-authentication-reader"
# Aggregated into the roles users hold, never bound to the server.
READER_ROLE = ("ClusterRole", "trainjob-status-progress-reader")
READER_RULES = [
    {"apiGroups": [resource.GROUP], "resources": [resource.RESOURCE], "verbs": ["get", "list"]}
]
AGGREGATED_INTO = {
    "rbac.authorization.k8s.io/aggregate-to-view": "true",
    "rbac.authorization.k8s.io/aggregate-to-edit": "true",
    "rbac.authorization.k8s.io/aggregate-to-admin": "true",
    "rbac.authorization.kubeflow.org/aggregate-to-kubeflow-view": "true",
}
PROGRESS_API_PORT = 8445
# Overlays that serve secure metrics without being asked.
SECURE_BY_DEFAULT = {"kubeflow"}


def expected_roles(
    components: tuple[str, ...], secure: bool = False
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Every role an overlay with ``components`` grants the server, with its rules:
    nothing else (``secure``: it serves secure metrics)."""
    roles = {
        ("ClusterRole", "trainjob-status"): CORE_RULES,
        ("Role", "trainjob-status-peers"): PEER_RULES,
    }
    if secure:
        roles[("ClusterRole", "trainjob-status-metrics-auth")] = METRICS_AUTH_RULES
    progress_api = "progress-api" in components
    if "cert-manager" not in components:
        # The bootstrap keeps every caBundle that trusts its CA.
        ca_rules = WEBHOOK_CA_RULES + (APISERVICE_CA_RULES if progress_api else [])
        roles[("ClusterRole", "trainjob-status-webhook-ca")] = ca_rules
        roles[("Role", "trainjob-status-certs")] = CERT_RULES
    if "token-review" in components:
        roles[("ClusterRole", "trainjob-status-token-review")] = TOKEN_REVIEW_RULES
    if progress_api:
        roles[("ClusterRole", "trainjob-status-progress-api")] = PROGRESS_API_RULES
    return roles


@dataclass(frozen=True)
class Variant:
    """An overlay with some components, as rendered."""

    overlay: str
    components: tuple[str, ...]

    @property
    def namespace(self) -> str:
        return TARGETS[self.overlay]

    @property
    def docs(self) -> list[Doc]:
        return render(self.overlay, *self.components)

    @property
    def secure(self) -> bool:
        """Whether it serves secure metrics."""
        return self.overlay in SECURE_BY_DEFAULT or "secure-metrics" in self.components

    @property
    def progress_api(self) -> bool:
        """Whether it serves the aggregated API."""
        return "progress-api" in self.components

    def __str__(self) -> str:
        return "+".join((self.overlay, *self.components))


VARIANTS = [Variant(overlay, subset) for overlay in OVERLAYS for subset in combinations()]
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "APIService",
}


@pytest.fixture(params=VARIANTS, ids=str)
def variant(request: pytest.FixtureRequest) -> Variant:
    chosen: Variant = request.param
    return chosen


@pytest.fixture
def docs(variant: Variant) -> list[Doc]:
    return variant.docs


def deployment(docs: list[Doc]) -> Doc:
    return one(docs, "Deployment")


def pod_spec(docs: list[Doc]) -> Doc:
    spec: Doc = deployment(docs)["spec"]["template"]["spec"]
    return spec


def server(docs: list[Doc]) -> Doc:
    (container,) = pod_spec(docs)["containers"]
    assert container["name"] == "server"
    return dict(container)


def in_kube_system(doc: Doc) -> bool:
    """The one object that belongs in kube-system: the binding to the Role there that
    reads the front proxy's CA (components/progress-api)."""
    return (doc["kind"], doc["metadata"]["name"]) == ("RoleBinding", AUTHENTICATION_BINDING)


def test_every_object_is_ours_and_in_the_target_namespace(variant: Variant) -> None:
    for doc in variant.docs:
        meta = doc["metadata"]
        assert meta["labels"]["app.kubernetes.io/name"] == "trainjob-status", doc["kind"]
        cluster_scoped = doc["kind"] in CLUSTER_SCOPED
        wanted = None if cluster_scoped else variant.namespace
        if in_kube_system(doc):
            wanted = "kube-system"
        assert meta.get("namespace") == wanted, (doc["kind"], meta["name"])
    kube_system = [d for d in variant.docs if d["metadata"].get("namespace") == "kube-system"]
    assert len(kube_system) == variant.progress_api


def test_only_the_quick_start_creates_its_namespace(variant: Variant) -> None:
    """The base and the kubeflow overlay go into a namespace that exists, so deleting
    them (``kubectl delete -k``) can never delete it."""
    created = names(variant.docs, "Namespace")
    assert created == ({NS} if variant.overlay == "quick-start" else set())
    if created:
        labels = one(variant.docs, "Namespace", NS)["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def references(docs: list[Doc]) -> Iterator[tuple[str, str]]:
    """(where, value) for every place outside metadata.namespace that names a namespace."""
    for doc in docs:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        for subject in doc.get("subjects") or []:
            yield f"{where} subject", subject["namespace"]
        for hook in doc.get("webhooks") or []:
            yield f"{where} service", hook["clientConfig"]["service"]["namespace"]
            (excluded,) = hook["namespaceSelector"]["matchExpressions"]
            assert excluded["key"] == "kubernetes.io/metadata.name"
            assert excluded["operator"] == "NotIn"
            assert excluded["values"][0] == "kube-system"
            yield f"{where} namespaceSelector", excluded["values"][1]
        if doc["kind"] == "APIService":
            yield f"{where} service", doc["spec"]["service"]["namespace"]
        inject = (doc["metadata"].get("annotations") or {}).get("cert-manager.io/inject-ca-from")
        if inject is not None:
            namespace, _, name = inject.partition("/")
            assert name == "trainjob-status"
            yield f"{where} inject-ca-from", namespace
        if doc["kind"] == "Certificate" and doc["metadata"]["name"] == "trainjob-status":
            # The names the server itself would put in a bootstrapped certificate.
            dns = doc["spec"]["dnsNames"]
            namespace = dns[1].split(".")[1]
            assert tuple(dns) == certs.dns_names("trainjob-status", namespace), dns
            yield f"{where} dnsNames", namespace
        if doc["kind"] == "ServiceMonitor":
            for namespace in doc["spec"]["namespaceSelector"]["matchNames"]:
                yield f"{where} namespaceSelector", namespace


def test_every_reference_follows_the_target_namespace(variant: Variant) -> None:
    found = dict(references(variant.docs))
    assert found, "no references found"
    assert dict.fromkeys(found, variant.namespace) == found
    wanted = {"subject", "service", "namespaceSelector"}
    if "cert-manager" in variant.components:
        wanted |= {"inject-ca-from", "dnsNames"}
    assert {where.rsplit(" ", 1)[1] for where in found} == wanted
    # The server learns its namespace (injected URLs, its Secret, its certificate's
    # names) from the pod it runs in.
    (entry,) = [e for e in server(variant.docs)["env"] if "SERVICE_NAMESPACE" in e["name"]]
    assert entry == {
        "name": "TRAINJOB_STATUS_SERVICE_NAMESPACE",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
    }


def namespace_fields(node: Any) -> Iterator[str]:
    """Every value of a field called namespace, at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "namespace" and isinstance(value, str):
                yield value
            else:
                yield from namespace_fields(value)
    elif isinstance(node, list):
        for item in node:
            yield from namespace_fields(item)


def test_changing_the_overlays_namespace_moves_everything() -> None:
    """A platform team's own overlay changes only the ``namespace:`` line: no object and
    no reference keeps the old name, and the one object of kube-system stays there."""
    docs = render(
        "kubeflow",
        "cert-manager",
        "token-review",
        "prometheus",
        "progress-api",
        namespace="ml-platform",
    )
    found = dict(references(docs))
    assert len(found) >= 9
    assert dict.fromkeys(found, "ml-platform") == found
    (binding,) = [d for d in docs if in_kube_system(d)]
    assert binding["metadata"]["namespace"] == "kube-system"
    assert set(namespace_fields([binding["subjects"]])) == {"ml-platform"}
    assert set(namespace_fields([d for d in docs if not in_kube_system(d)])) == {"ml-platform"}
    text = yaml.safe_dump_all(docs)
    for old in (
        "kubeflow-system",
        "trainjob-status.trainjob-status",
        "trainjob-status/trainjob-status",
    ):
        assert old not in text


def test_the_kubeflow_overlay_carries_kubeflows_labels() -> None:
    docs = render("kubeflow", "cert-manager", "token-review", "prometheus", "progress-api")
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "kubeflow", doc["kind"]
        assert labels["app.kubernetes.io/name"] == "trainjob-status"
        assert labels["app.kubernetes.io/component"] in ("server", "monitoring")
    template = deployment(docs)["spec"]["template"]["metadata"]["labels"]
    assert template["app.kubernetes.io/part-of"] == "kubeflow"
    # Selectors are immutable: relabelling must not change them.
    assert deployment(docs)["spec"]["selector"] == deployment(render("base"))["spec"]["selector"]


def test_the_image_is_pinned_and_an_images_entry_overrides_it() -> None:
    version = tomllib.loads((ROOT / "server" / "pyproject.toml").read_text())["project"]["version"]
    for overlay in OVERLAYS:
        assert server(render(overlay))["image"] == f"trainjob-status:{version}"
    custom = "registry.example.com/ml/trainjob-status:2.0.1"
    moved = render("kubeflow", "cert-manager", image=custom)
    assert server(moved)["image"] == custom


@pytest.mark.parametrize("overlay", ["kubeflow", "quick-start"])
def test_each_switch_keeps_its_place_whichever_components_are_listed(overlay: str) -> None:
    secure = overlay in SECURE_BY_DEFAULT
    assert server(render(overlay))["args"][2:] == [
        "--cert-bootstrap",
        "--distribute-ca",
        "--metrics-secure" if secure else "--no-metrics-secure",
        "--no-token-review",
        "--no-override-existing",
    ]
    for order in (("override-existing", "cert-manager"), ("cert-manager", "override-existing")):
        args = server(render(overlay, "token-review", *order))["args"]
        assert args[2:] == [
            "--no-cert-bootstrap",
            "--distribute-ca",
            "--metrics-secure" if secure else "--no-metrics-secure",
            "--token-review",
            "--override-existing",
        ]
        config = from_args(build_parser().parse_args(["serve", *args]), environ={})
        assert (config.override_existing, config.token_review, config.cert_bootstrap) == (
            True,
            True,
            False,
        )
        assert config.metrics_secure is secure
        assert config.progress_api_port is None


@pytest.mark.parametrize("overlay", ["kubeflow", "quick-start"])
def test_the_progress_api_flag_goes_last_whichever_components_are_listed(overlay: str) -> None:
    """The one argument a component adds rather than switches: after every switch, in
    any order of the components."""
    fixed = server(render(overlay, "token-review", "cert-manager"))["args"]
    for order in (
        ("progress-api", "token-review", "cert-manager"),
        ("token-review", "cert-manager", "progress-api"),
    ):
        args = server(render(overlay, *order))["args"]
        assert args == [*fixed, f"--progress-api-port={PROGRESS_API_PORT}"]
        config = from_args(build_parser().parse_args(["serve", *args]), environ={})
        assert config.progress_api_port == PROGRESS_API_PORT
        assert config.check() == []


# The kubeflow overlay (secure metrics its own) and every other component: the rendering
# of each of their orders.
EVERY_OTHER_COMPONENT = (
    "cert-manager",
    "token-review",
    "prometheus",
    "override-existing",
    "metrics-token-secret",
    "api-priority",
)


def test_every_order_of_the_components_renders_the_same_bytes() -> None:
    """All 720 orders of six components, each with the seventh (progress-api) at one of
    its seven places in turn, each rendered by kubectl kustomize: one output, byte for
    byte, so that listing the components otherwise never rolls the Deployment out. (All
    5,040 orders of the seven would take seven times as long; progress-api still comes
    before and after each other component, and at every place, in hundreds of them.)"""
    orders = [
        (*order[:i], "progress-api", *order[i:])
        for n, order in enumerate(itertools.permutations(EVERY_OTHER_COMPONENT))
        for i in [n % (len(order) + 1)]
    ]
    with ThreadPoolExecutor(4) as pool:
        outputs = collections.Counter(pool.map(lambda o: render_text("kubeflow", o), orders))
    assert len(orders) == 720
    assert {order.index("progress-api") for order in orders} == set(range(7))
    for other in EVERY_OTHER_COMPONENT:
        places = {order.index("progress-api") < order.index(other) for order in orders}
        assert places == {True, False}, other
    assert len(outputs) == 1, list(outputs.values())


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


def test_rbac_is_exactly_what_the_server_needs(variant: Variant) -> None:
    docs = variant.docs
    granted = {
        (d["kind"], d["metadata"]["name"]): d["rules"]
        for d in docs
        if d["kind"] in ("ClusterRole", "Role")
    }
    scraper = granted.pop(SCRAPER_ROLE, None)
    assert scraper == (SCRAPER_RULES if variant.secure else None)
    reader = granted.pop(READER_ROLE, None)
    assert reader == (READER_RULES if variant.progress_api else None)
    assert granted == expected_roles(variant.components, variant.secure)
    bindings = [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    # With progress-api, one more: the Role Kubernetes defines in kube-system.
    assert len(bindings) == len(granted) + variant.progress_api
    subject = {"kind": "ServiceAccount", "name": "trainjob-status", "namespace": variant.namespace}
    for binding in bindings:
        assert binding["subjects"] == [subject]
        role = (binding["roleRef"]["kind"], binding["roleRef"]["name"])
        if role == AUTHENTICATION_READER:
            assert variant.progress_api
            assert binding["metadata"]["namespace"] == "kube-system"
            continue
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


def test_probes_ports_and_service(variant: Variant) -> None:
    docs = variant.docs
    container = server(docs)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    progress = {"progress-api": PROGRESS_API_PORT} if variant.progress_api else {}
    assert ports == {
        "status-server": 10443,
        "webhook": 9443,
        "metrics": 9090,
        "probes": 8081,
        **progress,
    }
    # The ports the server listens on by default are the ones the container declares.
    defaults = Config()
    assert (defaults.port, defaults.webhook_port, defaults.metrics_port, defaults.probe_port) == (
        10443,
        9443,
        9090,
        8081,
    )
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    service = one(docs, "Service")
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        ("status-server", 10443, "status-server"),
        ("webhook", 9443, "webhook"),
        ("metrics", 9090, "metrics"),
        *[(name, port, name) for name, port in progress.items()],
    ]
    labels = deployment(docs)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert deployment(docs)["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # What the injector puts in URLs is this Service.
    target = Target()
    assert (target.service, target.namespace, target.port) == ("trainjob-status", NS, 10443)


def test_the_webhook_never_blocks_a_pod(variant: Variant) -> None:
    config = one(variant.docs, "MutatingWebhookConfiguration")
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
        "namespace": variant.namespace,
        "path": webhook.INJECT_PATH,
        # The webhook's own port: its connection slots are apart from the status posts'.
        "port": 9443,
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
    assert set(excluded["values"]) == {"kube-system", variant.namespace}


def test_disruption_budget_and_network_policy(variant: Variant) -> None:
    docs = variant.docs
    pdb = one(docs, "PodDisruptionBudget")
    # Never one that forbids every eviction: with a single replica a drain goes on.
    assert pdb["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": NS}
    policy = one(docs, "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": NS}
    assert policy["policyTypes"] == ["Ingress"]
    status_rule, metrics_rule = policy["ingress"]
    # What the API server calls (the webhook, the aggregated API) is open to every source
    # with the status port: the API server's address is not one a selector can name.
    progress = [{"port": "progress-api", "protocol": "TCP"}] if variant.progress_api else []
    assert status_rule == {
        "ports": [
            {"port": "status-server", "protocol": "TCP"},
            {"port": "webhook", "protocol": "TCP"},
            *progress,
        ]
    }
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
    secret_rule = CERT_RULES[1]
    assert secret_rule["resourceNames"] == [
        next(f.default for f in fields(certs.CertSettings) if f.name == "secret_name")
    ]
    assert WEBHOOK_CA_RULES[0]["resourceNames"] == [
        one(docs, "MutatingWebhookConfiguration")["metadata"]["name"]
    ]
    assert certs.WebhookCABundle.__init__.__defaults__ == ("trainjob-status",)
    assert CORE_RULES[-1]["resourceNames"] == [injection.CA_CONFIGMAP]
    # The APIService the bootstrap patches (app.py gives it resource.APISERVICE).
    assert APISERVICE_CA_RULES[0]["resourceNames"] == [resource.APISERVICE]


@pytest.mark.parametrize(
    "variant", [v for v in VARIANTS if "cert-manager" in v.components], ids=str
)
def test_the_cert_manager_component_replaces_the_bootstrap(variant: Variant) -> None:
    docs = variant.docs
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
    assert tuple(certificate["dnsNames"]) == certs.dns_names("trainjob-status", variant.namespace)
    assert certificate["issuerRef"] == {"kind": "Issuer", "name": "trainjob-status-ca"}
    assert one(docs, "Certificate", "trainjob-status-ca")["spec"]["isCA"] is True
    assert one(docs, "Issuer", "trainjob-status-ca")["spec"] == {
        "ca": {"secretName": "trainjob-status-ca"}
    }
    annotations = one(docs, "MutatingWebhookConfiguration")["metadata"]["annotations"]
    assert annotations["cert-manager.io/inject-ca-from"] == f"{variant.namespace}/trainjob-status"
    if variant.progress_api:
        # cainjector fills the APIService's caBundle from the same Certificate.
        apiservice = one(docs, "APIService", resource.APISERVICE)["metadata"]
        assert apiservice["annotations"] == annotations
    # Every other component's arguments stay.
    assert ("--token-review" in args) == ("token-review" in variant.components)


def test_the_token_review_component_turns_it_on(variant: Variant) -> None:
    args = server(variant.docs)["args"]
    assert ("--token-review" in args) == ("token-review" in variant.components)
    assert ("--cert-bootstrap" in args) == ("cert-manager" not in variant.components)


@pytest.mark.parametrize("overlay", list(OVERLAYS))
def test_the_prometheus_component_scrapes_the_metrics_port(overlay: str) -> None:
    docs = render(overlay, "prometheus")
    monitor = one(docs, "ServiceMonitor")["spec"]
    service = one(docs, "Service")
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["namespaceSelector"]["matchNames"] == [TARGETS[overlay]]
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["endpoints"]} <= port_names
    assert names(docs, "PrometheusRule") == {"trainjob-status"}
    # Everything the base has is still there, unchanged.
    base = {(d["kind"], d["metadata"]["name"]): d for d in render(overlay)}
    assert all(base[key] == d for d in docs if (key := (d["kind"], d["metadata"]["name"])) in base)


HTTPS_ENDPOINT = {  # the ServiceMonitor's endpoint with secure metrics
    "port": "metrics",
    "path": "/metrics",
    "scheme": "https",
    "interval": "30s",
    "scrapeTimeout": "10s",
    "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
    "tlsConfig": {
        "serverName": "trainjob-status",
        "ca": {"secret": {"name": "trainjob-status-tls", "key": "ca.crt"}},
    },
}


def test_secure_metrics_switch_the_server_and_its_monitor(variant: Variant) -> None:
    docs = variant.docs
    args = server(docs)["args"]
    assert ("--metrics-secure" in args) == variant.secure
    if "prometheus" in variant.components:
        (endpoint,) = one(docs, "ServiceMonitor")["spec"]["endpoints"]
        if variant.secure:
            assert endpoint == HTTPS_ENDPOINT
        else:
            assert endpoint["scheme"] == "http"
            assert "tlsConfig" not in endpoint
    # Probes stay plain on their own port, whatever the metrics port speaks.
    container = server(docs)
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] == "probes"
        assert container[probe]["httpGet"].get("scheme", "HTTP") == "HTTP"
    # Nothing grants the scraper role to anyone: the platform team binds its Prometheus.
    bindings = [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert all(b["roleRef"]["name"] != SCRAPER_ROLE[1] for b in bindings)


# The components that decide how the ServiceMonitor scrapes, and the objects they add.
MONITOR_COMPONENTS = ("prometheus", "secure-metrics", "metrics-token-secret")
TOKEN_SECRET = "trainjob-status-metrics-scraper-token"
SECRET_ENDPOINT = {
    **{k: v for k, v in HTTPS_ENDPOINT.items() if k != "bearerTokenFile"},
    "authorization": {"type": "Bearer", "credentials": {"name": TOKEN_SECRET, "key": "token"}},
}
HTTP_ENDPOINT = {
    k: v
    for k, v in HTTPS_ENDPOINT.items()
    if k not in ("bearerTokenFile", "tlsConfig", "authorization")
} | {"scheme": "http"}


def orders() -> list[tuple[str, ...]]:
    """Every order of every combination of the monitor components."""
    return [
        order
        for size in range(len(MONITOR_COMPONENTS) + 1)
        for order in itertools.permutations(MONITOR_COMPONENTS, size)
    ]


def _keyed(docs: list[Doc]) -> dict[tuple[str, str], Doc]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


@pytest.mark.parametrize("overlay", list(OVERLAYS))
@pytest.mark.parametrize("order", orders(), ids="+".join)
def test_in_any_order_the_monitor_scrapes_as_the_server_serves(
    overlay: str, order: tuple[str, ...]
) -> None:
    """The ServiceMonitor's scheme and credentials follow the server's --metrics-secure,
    and the whole rendering is the same whatever the order the components are listed in."""
    if overlay in SECURE_BY_DEFAULT:
        # Its own secure-metrics, at every place in the order.
        order = order if "secure-metrics" in order else ("secure-metrics", *order)
    docs = render(overlay, *order, exactly=True)
    assert _keyed(docs) == _keyed(render(overlay, *sorted(order), exactly=True))
    secure = "--metrics-secure" in server(docs)["args"]
    assert secure == (overlay in SECURE_BY_DEFAULT or "secure-metrics" in order)
    with_secret = "metrics-token-secret" in order
    assert (TOKEN_SECRET in names(docs, "Secret")) == with_secret
    if "prometheus" not in order:
        assert names(docs, "ServiceMonitor") == set()
        return
    (endpoint,) = one(docs, "ServiceMonitor")["spec"]["endpoints"]
    if not secure:
        # No credentials over plain HTTP, whatever else is listed.
        assert endpoint == HTTP_ENDPOINT
    else:
        assert endpoint == (SECRET_ENDPOINT if with_secret else HTTPS_ENDPOINT)


@pytest.mark.parametrize("overlay", list(OVERLAYS))
def test_the_token_secret_belongs_to_a_scraper_that_may_read_metrics_only(overlay: str) -> None:
    docs = render(overlay, "secure-metrics", "metrics-token-secret", "prometheus", exactly=True)
    namespace = TARGETS[overlay]
    secret = one(docs, "Secret", TOKEN_SECRET)
    account = one(docs, "ServiceAccount", "trainjob-status-metrics-scraper")
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert (
        secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
        == (account["metadata"]["name"])
    )
    # The Prometheus Operator reads the Secret from the ServiceMonitor's namespace.
    assert secret["metadata"]["namespace"] == namespace
    assert one(docs, "ServiceMonitor")["metadata"]["namespace"] == namespace
    assert account["metadata"]["namespace"] == namespace
    binding = one(docs, "ClusterRoleBinding", "trainjob-status-metrics-scraper")
    assert binding["roleRef"]["name"] == SCRAPER_ROLE[1]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "trainjob-status-metrics-scraper",
            "namespace": namespace,
        }
    ]
    assert one(docs, "ClusterRole", SCRAPER_ROLE[1])["rules"] == SCRAPER_RULES


@pytest.mark.parametrize(
    "component", ["cert-manager", "token-review", "override-existing", "progress-api"]
)
def test_the_other_components_leave_the_monitor_and_the_service_alone(component: str) -> None:
    """So the orders above cover every component: these cannot change how it scrapes
    (progress-api adds a port to the Service, and nothing else)."""
    for overlay in ("quick-start", "kubeflow"):
        plain = _keyed(render(overlay, "prometheus", "metrics-token-secret"))
        added = _keyed(render(overlay, component, "prometheus", "metrics-token-secret"))
        if component == "progress-api":
            service = added[("Service", "trainjob-status")]
            ports = [p for p in service["spec"]["ports"] if p["name"] != "progress-api"]
            added[("Service", "trainjob-status")] = {
                **service,
                "spec": {**service["spec"], "ports": ports},
            }
        for key in (("ServiceMonitor", "trainjob-status"), ("Service", "trainjob-status")):
            assert added[key] == plain[key], (overlay, component, key)


def test_the_monitors_ca_and_name_are_the_servers() -> None:
    """The CA Prometheus trusts is in the Secret both certificate modes write, and the
    name it checks is one every serving certificate carries."""
    tls = HTTPS_ENDPOINT["tlsConfig"]
    secret = next(f.default for f in fields(certs.CertSettings) if f.name == "secret_name")
    assert tls["ca"]["secret"]["name"] == secret
    managed = render("kubeflow", "cert-manager")
    assert one(managed, "Certificate")["spec"]["secretName"] == secret
    for namespace in (NS, "kubeflow-system"):
        assert tls["serverName"] in certs.dns_names("trainjob-status", namespace)


def test_the_progress_api_component_registers_the_aggregated_api(variant: Variant) -> None:
    """The APIService names the Service's port that reaches the server's
    --progress-api-port, for the group and version the server serves; who fills its
    caBundle follows the certificates; readers get a role aggregated into theirs."""
    docs = variant.docs
    args = server(docs)["args"]
    flag = f"--progress-api-port={PROGRESS_API_PORT}"
    if not variant.progress_api:
        assert names(docs, "APIService") == set()
        assert not any(a.startswith("--progress-api-port") for a in args)
        return
    assert args[-1] == flag
    apiservice = one(docs, "APIService", resource.APISERVICE)
    assert apiservice["apiVersion"] == "apiregistration.k8s.io/v1"
    assert apiservice["spec"] == {
        "group": resource.GROUP,
        "version": resource.VERSION,
        "service": {
            "name": "trainjob-status",
            "namespace": variant.namespace,
            "port": PROGRESS_API_PORT,
        },
        "groupPriorityMinimum": 100,
        "versionPriority": 100,
    }
    assert apiservice["metadata"]["name"] == f"{resource.VERSION}.{resource.GROUP}"
    # No caBundle in the manifests (filled in on the cluster), never an unchecked one.
    if "cert-manager" in variant.components:
        assert apiservice["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": f"{variant.namespace}/trainjob-status"
        }
    else:
        assert "annotations" not in apiservice["metadata"]
        assert "--cert-bootstrap" in args
    # The Service's port reaches the flag's.
    (port,) = [p for p in one(docs, "Service")["spec"]["ports"] if p["name"] == "progress-api"]
    assert port["port"] == apiservice["spec"]["service"]["port"]
    (target,) = [p for p in server(docs)["ports"] if p["name"] == port["targetPort"]]
    assert target["containerPort"] == PROGRESS_API_PORT
    # Readers: the role aggregated into the users' roles, bound to nobody here.
    reader = one(docs, *READER_ROLE)
    assert reader["metadata"]["labels"].items() >= AGGREGATED_INTO.items()
    bindings = [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert all(b["roleRef"]["name"] != READER_ROLE[1] for b in bindings)
    # The front proxy's ConfigMap is the one the built-in Role reads.
    binding = one(docs, "RoleBinding", AUTHENTICATION_BINDING)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": AUTHENTICATION_READER[0],
        "name": AUTHENTICATION_READER[1],
    }
    assert (
        binding["metadata"]["namespace"],
        "extension-apiserver-authentication",
    ) == (frontproxy.CONFIGMAP_NAMESPACE, frontproxy.CONFIGMAP_NAME)


def test_container_args_are_flags_the_server_takes(variant: Variant) -> None:
    container = server(variant.docs)
    env = {e["name"]: variant.namespace for e in container.get("env", [])}
    args = build_parser().parse_args(["serve", *container["args"]])
    config = from_args(args, environ=env)
    assert config.check() == []
    assert getattr(config, "service_namespace") == variant.namespace  # noqa: B009


def test_the_grace_period_covers_the_servers_drain(variant: Variant) -> None:
    """The kubelet kills the container terminationGracePeriodSeconds after SIGTERM: the
    server's delay, in-flight requests and drain (as its args set them) must fit, or a
    rolling update cuts the writes of updates already answered 200."""
    container = server(variant.docs)
    env = {e["name"]: variant.namespace for e in container.get("env", [])}
    config = from_args(build_parser().parse_args(["serve", *container["args"]]), environ=env)
    grace = pod_spec(variant.docs)["terminationGracePeriodSeconds"]
    assert grace >= shutdown_deadline(config), (grace, shutdown_deadline(config))


# -- examples -------------------------------------------------------------------------------


def load(name: str) -> Doc:
    doc: Doc = yaml.safe_load((MANIFESTS / "examples" / name).read_text())
    return doc


def test_example_runtime_and_trainjob_need_nothing_from_us(real_cluster: RealCluster) -> None:
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
    # The TrainJob is valid as the CRD says (kube-apiserver validates it).
    namespace = trainjob["metadata"]["namespace"]
    real_cluster.ensure_namespace(namespace)
    created = real_cluster.create("trainjobs", trainjob, namespace, GROUP)
    assert created["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"]
