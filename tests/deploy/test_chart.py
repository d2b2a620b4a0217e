"""The Helm chart: ``helm lint`` and ``helm template`` for every values file, its schema
refusing bad values, and its objects agreeing field by field with what the kustomize
overlays render, for every overlay and every combination of the components."""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainjob_status_server import __version__
from trainjob_status_server.cli import build_parser
from trainjob_status_server.config import from_args

from .assets import helm, helm_version
from .chart import (
    CHART,
    CI_VALUES,
    RELEASE_NAMESPACES,
    differences,
    key,
    run_helm,
    template,
    values_for,
    variants,
    without_helm_labels,
)
from .rendering import ROOT, TARGETS, Doc, one, render

VERSION: str = tomllib.loads((ROOT / "server" / "pyproject.toml").read_text())["project"]["version"]
VALUES_FILES = sorted(CI_VALUES.glob("*.yaml"))
# Each file in ci/ and the overlay and components it stands for (with an image, if set).
CI_OVERLAYS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "quick-start-values.yaml": ("quick-start", (), None),
    "quick-start-all-values.yaml": (
        "quick-start",
        (
            "cert-manager",
            "token-review",
            "prometheus",
            "override-existing",
            "api-priority",
            "progress-api",
        ),
        f"registry.example.com/ml/trainjob-status:{VERSION}-rc1",
    ),
    "kubeflow-values.yaml": ("kubeflow", (), None),
    "kubeflow-all-values.yaml": (
        "kubeflow",
        ("cert-manager", "token-review", "prometheus", "progress-api"),
        None,
    ),
    "kubeflow-token-secret-values.yaml": ("kubeflow", ("prometheus", "metrics-token-secret"), None),
    "kubeflow-progress-api-values.yaml": ("kubeflow", ("progress-api",), None),
}


def assert_same_objects(kustomized: list[Doc], helmed: list[Doc]) -> None:
    # The server's flags too, in their order: each has a fixed place in both.
    want = {key(d): d for d in kustomized}
    got = {key(d): without_helm_labels(d) for d in helmed}
    assert sorted(got) == sorted(want)
    found = [f"{k}{line}" for k in sorted(want) for line in differences(want[k], got[k])]
    assert found == []


@pytest.mark.kubectl
@pytest.mark.parametrize("values_file", VALUES_FILES, ids=lambda p: p.name)
def test_every_values_file_is_covered_and_renders_its_overlay(values_file: Path) -> None:
    overlay, components, image = CI_OVERLAYS[values_file.name]
    helmed = template(namespace=RELEASE_NAMESPACES[overlay], values_file=values_file)
    assert_same_objects(render(overlay, *components, image=image), helmed)


@pytest.mark.kubectl
@pytest.mark.parametrize(
    ("overlay", "components"),
    variants(),
    ids=lambda v: v if isinstance(v, str) else "+".join(v) or "none",
)
def test_the_chart_renders_what_kustomize_renders(
    overlay: str, components: tuple[str, ...]
) -> None:
    helmed = template(values_for(overlay, *components), namespace=RELEASE_NAMESPACES[overlay])
    assert_same_objects(render(overlay, *components), helmed)


@pytest.mark.kubectl
def test_another_namespace_moves_every_reference() -> None:
    """namespace.name is the overlays' ``namespace:``: every reference follows it."""
    components = ("cert-manager", "prometheus", "metrics-token-secret")
    values = values_for("kubeflow", *components)
    helmed = template({**values, "namespace": {"name": "ml-platform"}}, namespace="kubeflow-system")
    kustomized = render("kubeflow", *components, namespace="ml-platform")
    assert_same_objects(kustomized, helmed)


@pytest.mark.parametrize(
    "values_file", [None, *VALUES_FILES], ids=lambda p: p.name if p else "default"
)
def test_lint(values_file: Path | None) -> None:
    args = ["lint", "--strict", str(CHART), "--namespace", "default"]
    if values_file is not None:
        args += ["--values", str(values_file)]
    done = run_helm(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_the_values_a_platform_team_sets_reach_the_pods() -> None:
    values: dict[str, Any] = {
        "imagePullSecrets": [{"name": "registry"}],
        "podLabels": {"team": "ml-platform"},
        "podAnnotations": {"example.com/scrape": "false"},
        "nodeSelector": {"node-role.example.com/system": "true"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "arch", "operator": "In", "values": ["amd64"]}
                            ]
                        }
                    ]
                }
            }
        },
        "priorityClassName": "system-cluster-critical",
        "topologySpreadConstraints": [
            {
                "maxSkew": 2,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
            }
        ],
        "serviceAccount": {"annotations": {"iam.example.com/role": "trainjob-status"}},
    }
    docs = template(values, namespace=TARGETS["base"])
    pod = one(docs, "Deployment")["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "ml-platform"
    assert pod["metadata"]["annotations"] == values["podAnnotations"]
    for field in ("imagePullSecrets", "nodeSelector", "tolerations", "affinity"):
        assert pod["spec"][field] == values[field], field
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    assert pod["spec"]["topologySpreadConstraints"] == values["topologySpreadConstraints"]
    account = one(docs, "ServiceAccount")
    assert account["metadata"]["annotations"] == values["serviceAccount"]["annotations"]
    # Pod labels stay off the selector.
    selector = one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/name": "trainjob-status"}


def test_the_servers_settings_reach_its_flags() -> None:
    values: dict[str, Any] = {
        "server": {
            "logLevel": "debug",
            "logFormat": "text",
            "kubeApiQps": 20,
            "kubeApiBurst": 1000000,
            "targetFreshness": 2.5,
            "extraArgs": ["--write-mode=direct", "--sa-rate-limit=0.5"],
        }
    }
    args = one(template(values, namespace=TARGETS["base"]), "Deployment")["spec"]["template"][
        "spec"
    ]["containers"][0]["args"]
    assert args[7:] == [
        "--log-level=debug",
        "--log-format=text",
        "--kube-api-qps=20",
        "--kube-api-burst=1000000",
        "--target-freshness=2.5",
        "--write-mode=direct",
        "--sa-rate-limit=0.5",
    ]
    config = from_args(build_parser().parse_args(["serve", *args]), environ={})
    assert (config.log_level, config.log_format, config.kube_api_qps, config.kube_api_burst) == (
        "debug",
        "text",
        20.0,
        1000000,
    )
    assert (config.target_freshness, config.write_mode, config.sa_rate_limit) == (
        2.5,
        "direct",
        0.5,
    )
    # Unset, the server keeps its own defaults: no flag at all.
    default = one(template({}, namespace=TARGETS["base"]), "Deployment")
    assert len(default["spec"]["template"]["spec"]["containers"][0]["args"]) == 7


def test_security_context_keys_replace_the_defaults_one_by_one() -> None:
    values: dict[str, Any] = {
        "podSecurityContext": {"runAsUser": 1000, "fsGroup": None},
        "securityContext": {"runAsUser": 1000, "readOnlyRootFilesystem": None},
    }
    pod = one(template(values, namespace=TARGETS["base"]), "Deployment")["spec"]["template"]
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["spec"]["containers"][0]["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 65532,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_by_default_the_replicas_spread_across_nodes_and_zones() -> None:
    spread = one(template({}, namespace=TARGETS["base"]), "Deployment")["spec"]["template"]
    keys = [c["topologyKey"] for c in spread["spec"]["topologySpreadConstraints"]]
    assert keys == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]


def test_a_single_replica_can_still_be_drained() -> None:
    docs = template({"replicas": 1}, namespace=TARGETS["base"])
    assert one(docs, "Deployment")["spec"]["replicas"] == 1
    assert one(docs, "PodDisruptionBudget")["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": "trainjob-status"}},
    }


def test_values_the_overlays_leave_to_patches() -> None:
    """Replicas, resources, pull policy, the scrapers' namespace and Prometheus's
    selector labels, which an overlay would change with patches of its own."""
    resources = {
        "requests": {"cpu": "250m", "memory": "256Mi"},
        "limits": {"cpu": "2", "memory": "1Gi"},
    }
    values: dict[str, Any] = {
        "replicas": 3,
        "resources": resources,
        "image": {"pullPolicy": "Always"},
        "metrics": {"scraperNamespace": "observability"},
        "prometheus": {
            "labels": {"release": "kube-prometheus-stack"},
            "serviceMonitor": {"enabled": True},
            "prometheusRule": {"enabled": True},
        },
    }
    docs = template(values, namespace=TARGETS["base"])
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    (server,) = deployment["spec"]["template"]["spec"]["containers"]
    assert server["resources"] == resources
    assert server["imagePullPolicy"] == "Always"
    assert server["image"] == f"trainjob-status:{VERSION}"
    (_, metrics) = one(docs, "NetworkPolicy")["spec"]["ingress"]
    assert metrics["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}}
    ]
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert one(docs, kind)["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert "ConfigMap" not in {d["kind"] for d in docs}


def test_helm_labels_stay_off_selectors_and_pods() -> None:
    """Upgrading the chart must not change a selector (immutable) or restart pods."""
    deployment = one(template(namespace=TARGETS["base"]), "Deployment")
    assert deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert deployment["metadata"]["labels"]["helm.sh/chart"] == f"trainjob-status-{VERSION}"
    assert deployment["spec"]["selector"] == {
        "matchLabels": {"app.kubernetes.io/name": "trainjob-status"}
    }
    assert deployment["spec"]["template"]["metadata"]["labels"] == {
        "app.kubernetes.io/name": "trainjob-status",
        "app.kubernetes.io/component": "server",
    }


SCHEMA_ERROR = (
    "Error: values don't meet the specifications of the schema(s) in the following"
    " chart(s):\ntrainjob-status:\n"
)


@pytest.mark.parametrize(
    ("given", "refusal"),
    [
        (
            [
                "server.logLevel=loud",
                "server.kubeApiQps=0",
                "server.extraArgs={write-mode=direct}",
                "server.port=1",
            ],
            "- at '/server/logLevel': value must be one of 'debug', 'info', 'warning',"
            " 'error', <nil>\n"
            "- at '/server/kubeApiQps': exclusiveMinimum: got 0, want 0\n"
            "- at '/server/extraArgs/0': 'write-mode=direct' does not match pattern '^--[a-z]'\n"
            "- at '/server': additional properties 'port' not allowed\n",
        ),
        (
            ["certificates.source=letsencrypt"],
            "- at '/certificates/source': value must be one of 'bootstrap', 'cert-manager'\n",
        ),
        (["replica=3"], "- at '': additional properties 'replica' not allowed\n"),
        (
            ["replicas=-1", "tokenReview=yes"],
            "- at '/replicas': minimum: got -1, want 0\n"
            "- at '/tokenReview': got string, want boolean\n",
        ),
        (
            ["metrics.scrapeToken=token"],
            "- at '/metrics/scrapeToken': value must be one of 'file', 'secret'\n",
        ),
        (
            ["namespace.name=Bad_NS"],
            "- at '/namespace/name': 'anyOf' failed\n"
            "  - at '/namespace/name': value must be ''\n"
            "  - at '/namespace/name': 'Bad_NS' does not match pattern"
            " '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'\n",
        ),
        (
            ["apiPriority.nominalConcurrencyShares=0"],
            "- at '/apiPriority/nominalConcurrencyShares': minimum: got 0, want 1\n",
        ),
        (
            ["progressAPI.port=9090", "progressAPI.enabled=on"],
            "- at '/progressAPI/port': 'not' failed\n"
            "- at '/progressAPI/enabled': got string, want boolean\n",
        ),
        (
            ["imagePullSecrets[0].secret=registry"],
            "- at '/imagePullSecrets/0': missing property 'name'\n"
            "- at '/imagePullSecrets/0': additional properties 'secret' not allowed\n",
        ),
    ],
    ids=[
        "server-settings",
        "source",
        "unknown-key",
        "types",
        "scrape-token",
        "namespace",
        "api-priority-shares",
        "progress-api",
        "pull-secret",
    ],
)
def test_the_schema_refuses_bad_values(given: list[str], refusal: str) -> None:
    sets = [arg for value in given for arg in ("--set", value)]
    done = run_helm("template", "trainjob-status", str(CHART), *sets)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(SCHEMA_ERROR)
    assert done.stderr.endswith("\n\n")
    # Helm lists the values that fail in no stable order: every line, in any order.
    given_lines = done.stderr.removeprefix(SCHEMA_ERROR).removesuffix("\n").splitlines()
    assert sorted(given_lines) == sorted(refusal.splitlines())


def test_a_created_namespace_cannot_hold_its_own_release() -> None:
    done = run_helm(
        "template",
        "trainjob-status",
        str(CHART),
        "--namespace",
        "trainjob-status",
        "--set",
        "namespace.create=true",
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "Error: execution error at (trainjob-status/templates/namespace.yaml:3:4):"
        " namespace.create: Helm keeps the release record in the release's namespace, so"
        " that namespace must exist first: install the release into another namespace, or"
        " leave namespace.create off and give --create-namespace\n\n"
        "Use --debug flag to render out invalid YAML\n"
    )


def test_the_scrape_token_secret_needs_secure_metrics() -> None:
    """Plain HTTP scrapes send no token: a scraper account for them is refused, not
    rendered unused."""
    done = run_helm(
        "template", "trainjob-status", str(CHART), "--set", "metrics.scrapeToken=secret"
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "Error: execution error at (trainjob-status/templates/metrics-scraper.yaml:3:4):"
        " metrics.scrapeToken: secret needs metrics.secure: plain HTTP metrics take no"
        " token\n\n"
        "Use --debug flag to render out invalid YAML\n"
    )


def test_helm_is_the_pinned_version() -> None:
    done = run_helm("version", "--template", "{{ .Version }}")
    assert done.stdout == helm_version()


def test_the_chart_carries_the_projects_version() -> None:
    """The chart, its appVersion (the image tag it runs by default) and the packages
    share one version."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)


def documented_helm_commands() -> list[tuple[str, list[str]]]:
    """Every ``helm install`` in docs/install.md and docs/kubeflow.md, as (where, arguments)."""
    found = []
    for doc in ("docs/install.md", "docs/kubeflow.md"):
        text = (ROOT / doc).read_text().replace("\\\n", " ")
        for line in text.splitlines():
            if line.startswith("helm install "):
                found.append((doc, shlex.split(line, comments=True)[1:]))
    return found


def test_the_documented_helm_commands_work() -> None:
    """What docs/install.md and docs/kubeflow.md tell a platform engineer to run renders (as
    ``helm template``, with the same arguments; the real install is tested against
    kube-apiserver), and what it renders is the kubeflow overlay with its image."""
    commands = documented_helm_commands()
    assert {doc for doc, _ in commands} == {"docs/install.md", "docs/kubeflow.md"}
    for doc, args in commands:
        assert args[:3] == ["install", "trainjob-status", "charts/trainjob-status"], doc
        args = [a for a in args[1:] if a != "--dry-run=server"]
        done = subprocess.run(
            [helm(), "template", *args],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
            timeout=60,
        )
        assert done.returncode == 0, (doc, done.stderr)
        docs = [d for d in yaml.safe_load_all(done.stdout) if d]
        image = f"registry.example.com/ml/trainjob-status:{VERSION}"
        assert_same_objects(render("kubeflow", image=image), docs)


def value_paths(values: Any, prefix: str = "") -> list[str]:
    """The dotted path of every leaf of values.yaml (an empty map or list is a leaf)."""
    if isinstance(values, dict) and values:
        return [p for k, v in values.items() for p in value_paths(v, f"{prefix}{k}.")]
    return [prefix.removesuffix(".")]


def test_the_charts_readme_documents_every_value() -> None:
    """`helm show readme` is the chart's README: each value of values.yaml is in its table."""
    readme = run_helm("show", "readme", str(CHART))
    assert readme.returncode == 0, readme.stderr
    rows = [line for line in readme.stdout.splitlines() if line.startswith("| `")]
    documented = {name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])}
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    # A value documented whole (a securityContext) documents the keys of its default.
    undocumented = [
        path
        for path in value_paths(values)
        if not any(path == name or path.startswith(f"{name}.") for name in documented)
    ]
    assert sorted(undocumented) == []
