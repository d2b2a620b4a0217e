"""manifests/prometheus: the kustomize component builds (through kubectl's kustomize), the
PrometheusRule carries exactly the rule file's groups, the ServiceMonitor finds the
Service, the dashboard is well formed, and every metric name the rules and the
dashboard use is one the server exports."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainjob_status_server.metrics.exporter import server_registry
from trainjob_status_server.metrics.series import FAMILIES

from .conftest import DASHBOARD, MANIFESTS, RULES

RUNBOOKS = Path(__file__).parents[2] / "docs" / "runbooks.md"

LABELS = {"app.kubernetes.io/name": "trainjob-status"}


def load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((MANIFESTS / name).read_text())
    return loaded


def test_prometheusrule_carries_the_rule_files_groups() -> None:
    rule = load("prometheusrule.yaml")
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["metadata"]["namespace"] == "trainjob-status"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert alerts == [
        "TrainJobStalled",
        "TrainJobExportedSeriesDropped",
        "TrainJobStatusServerDown",
        "TrainJobStatusReplicaDown",
        "TrainJobStatusHighAuthFailureRate",
        "TrainJobStatusWriteErrors",
        "TrainJobStatusPendingWritesGrowing",
    ]
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            assert r["labels"]["severity"] in ("info", "warning", "critical")
            assert r["annotations"]["summary"]
            assert r["annotations"]["description"]


def runbook_sections() -> set[str]:
    """The anchors of docs/runbooks.md's sections, as GitHub makes them of a heading."""
    text = RUNBOOKS.read_text()
    return {
        re.sub(r"[^a-z0-9 _-]", "", heading.lower()).replace(" ", "-")
        for heading in re.findall(r"^#{2,3} (.+)$", text, flags=re.MULTILINE)
    }


def test_every_alert_links_its_own_runbook_section() -> None:
    sections = runbook_sections()
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        assert url == f"docs/runbooks.md#{rule['alert'].lower()}"
        assert url.split("#")[1] in sections


def test_servicemonitor_scrapes_the_services_metrics_port() -> None:
    monitor = load("servicemonitor.yaml")
    assert (monitor["apiVersion"], monitor["kind"]) == (
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
    )
    assert monitor["metadata"]["namespace"] == "trainjob-status"
    assert monitor["spec"]["selector"] == {"matchLabels": LABELS}
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["trainjob-status"]}
    assert [(e["port"], e["path"], e["scheme"]) for e in monitor["spec"]["endpoints"]] == [
        ("metrics", "/metrics", "http")
    ]


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def test_dashboard_is_well_formed_with_a_datasource_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert (variables["datasource"]["type"], variables["datasource"]["query"]) == (
        "datasource",
        "prometheus",
    )
    assert set(variables) == {"datasource", "cluster", "namespace", "trainjob", "metric"}
    # "All" clusters matches series with no cluster label too (one Prometheus per cluster).
    assert (variables["cluster"]["includeAll"], variables["cluster"]["allValue"]) == (True, ".*")
    panels = all_panels(dashboard)
    assert len({p["id"] for p in panels}) == len(panels)
    titles = [p["title"] for p in panels if p["type"] != "row"]
    wanted = {"Progress", "Progress over time", "Estimated time remaining", "$metric"}
    wanted |= {"Time since last update", "Replicas up", "Status posts by code"}
    wanted |= {"TrainJobs by state", "TrainJobs by runtime"}
    wanted |= {"Complete, failed and suspended by runtime"}
    assert wanted <= set(titles)
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs)
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            assert target["expr"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def selectors(expr: str) -> list[tuple[str, str]]:
    """(metric name, its matchers as written) of each series selector in ``expr``."""
    found = re.findall(r"\b(trainjob_[a-z_]+|process_[a-z_]+|up)\b(\{[^}]*\})?", expr)
    return [(name, matchers) for name, matchers in found]


def test_every_dashboard_query_follows_the_cluster_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [t["expr"] for p in all_panels(dashboard) for t in p.get("targets", [])]
    expressions += [
        v["query"]["query"]
        for v in dashboard["templating"]["list"]
        if v["type"] == "query" and v["name"] != "cluster"
    ]
    for expr in expressions:
        found = selectors(expr)
        assert found, expr
        for name, matchers in found:
            assert matchers.startswith('{cluster=~"$cluster"'), (name, expr)
        # Per TrainJob: never merged across clusters.
        assert "by (namespace, trainjob" not in expr


def exported_names() -> set[str]:
    """Every sample name the metrics page can carry, plus Prometheus' own ``up``."""
    names = {f.name for f in FAMILIES} | {"up"}
    for family in server_registry().collect():
        suffixes = {
            "counter": ("_total", "_created"),
            "histogram": ("_bucket", "_count", "_sum", "_created"),
            "info": ("_info",),
        }.get(family.type, ("",))
        names |= {family.name + suffix for suffix in suffixes}
    return names


def used_names(expr: str) -> set[str]:
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    return set(
        re.findall(r"\b(trainjob_[a-z_]+|process_[a-z_]+|python_[a-z_]+|up)\b", without_strings)
    )


def test_rules_and_dashboard_use_only_names_the_server_exports() -> None:
    exported = exported_names()
    expressions = [
        r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
    ]
    dashboard = json.loads(DASHBOARD.read_text())
    expressions += [t["expr"] for p in all_panels(dashboard) for t in p.get("targets", [])]
    expressions += [
        v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"
    ]
    used = set().union(*(used_names(e) for e in expressions))
    assert used - exported == set()
    # Every per-TrainJob family and the server's key signals are on the dashboard or in an alert.
    for name in (
        *(f.name for f in FAMILIES),
        "trainjob_status_requests_total",
        "trainjob_status_auth_failures_total",
        "trainjob_status_api_writes_total",
        "trainjob_status_pending_writes",
    ):
        assert name in used


async def kustomize(overlay: Path) -> list[dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "kustomize",
        str(overlay),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return [doc for doc in yaml.safe_load_all(out) if doc]


def overlay(tmp_path: Path, **fields: Any) -> Path:
    path = tmp_path / "overlay"
    path.mkdir()
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "components": [os.path.relpath(MANIFESTS, path)],
        **fields,
    }
    (path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return path


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_the_component_builds_with_kubectl_kustomize(tmp_path: Path) -> None:
    built = await kustomize(overlay(tmp_path))
    assert sorted(
        (d["kind"], d["metadata"]["namespace"], d["metadata"]["name"]) for d in built
    ) == [
        ("ConfigMap", "trainjob-status", "trainjob-status-dashboard"),
        ("PrometheusRule", "trainjob-status", "trainjob-status"),
        ("ServiceMonitor", "trainjob-status", "trainjob-status"),
    ]
    [configmap] = [d for d in built if d["kind"] == "ConfigMap"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["data"] == {"trainjob-status.json": DASHBOARD.read_text()}
    [rule] = [d for d in built if d["kind"] == "PrometheusRule"]
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_an_overlay_can_move_and_label_it(tmp_path: Path) -> None:
    built = await kustomize(
        overlay(tmp_path, namespace="monitoring", labels=[{"pairs": {"release": "kps"}}])
    )
    assert {d["metadata"]["namespace"] for d in built} == {"monitoring"}
    assert {d["metadata"]["labels"]["release"] for d in built} == {"kps"}
