"""A real Prometheus scraping the exporter (it asks for OpenMetrics): a TrainJob's progress
arrives with its labels and value and leaves with the TrainJob, the stalled alert fires
for a TrainJob that stops posting and resolves when it posts again, every alert rule
evaluates cleanly, and every dashboard query runs."""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from typing import Any

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.testing import eventually
from trainjob_status.contract import GROUP

from .conftest import DASHBOARD, JOB, Prometheus, Stack, load_rules

NS = "team-a"
AWKWARD = 'he said "hi"\\ \nλ'


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def stalled_after(seconds: int) -> dict[str, Any]:
    """The rule file with TrainJobStalled's 15 minutes (and its 1m hold) made short."""
    rules = copy.deepcopy(load_rules())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "TrainJobStalled":
                assert "> 15 * 60" in rule["expr"]
                assert rule["for"] == "1m"
                rule["expr"] = rule["expr"].replace("> 15 * 60", f"> {seconds}")
                rule["for"] = "1s"
                return rules
    raise AssertionError("no TrainJobStalled rule")


async def test_progress_is_scraped_with_its_labels_and_leaves_with_the_trainjob(
    stack: Stack, prometheus: Prometheus, devcluster: DevCluster
) -> None:
    devcluster.create_trainjob(NS, "tj")
    devcluster.create_trainjob(NS, "other")
    await prometheus.start(stack.target)
    metrics = [{"name": "loss", "value": "0.25"}, {"name": AWKWARD, "value": "-7.5"}]
    await stack.post(
        NS, "tj", {"progressPercentage": 42, "metrics": metrics, "lastUpdatedTime": now()}
    )
    await stack.post(NS, "other", {"progressPercentage": 5, "lastUpdatedTime": now()})

    async def progress() -> list[dict[str, Any]]:
        return await prometheus.query(f'trainjob_progress_ratio{{trainjob="tj", namespace="{NS}"}}')

    found = await eventually(progress, what="progress in Prometheus")
    assert found == [
        {
            "labels": {
                "__name__": "trainjob_progress_ratio",
                "instance": stack.target,
                "job": JOB,
                "namespace": NS,
                "trainjob": "tj",
            },
            "value": 0.42,
        }
    ]
    reported = await prometheus.query('trainjob_metric{trainjob="tj"}')
    assert sorted((r["labels"]["name"], r["value"]) for r in reported) == [
        (AWKWARD, -7.5),
        ("loss", 0.25),
    ]
    # The target is healthy and scraped as OpenMetrics.
    targets = await prometheus.api("targets")
    [target] = targets["activeTargets"]
    assert (target["health"], target["lastError"]) == ("up", "")

    devcluster.delete("trainjobs", NS, "tj", GROUP)

    async def gone() -> bool:
        return await prometheus.query('{trainjob="tj"}') == []

    await eventually(gone, what="the deleted TrainJob's series to go")
    assert [r["labels"]["trainjob"] for r in await prometheus.query("trainjob_progress_ratio")] == [
        "other"
    ]


async def test_stalled_alert_fires_for_the_trainjob_that_stopped_posting(
    stack: Stack, prometheus: Prometheus, devcluster: DevCluster
) -> None:
    # Silent as well, at 30%, but their controller says why: no alert for them.
    ended = {"failed": "Failed", "suspended": "Suspended", "complete": "Complete"}
    for name in ("stalled", "alive", "done", *ended):
        devcluster.create_trainjob(NS, name)
    await prometheus.start(stack.target, stalled_after(3))
    await stack.post(NS, "stalled", {"progressPercentage": 30, "lastUpdatedTime": now()})
    await stack.post(NS, "done", {"progressPercentage": 100, "lastUpdatedTime": now()})
    for name, condition in ended.items():
        await stack.post(NS, name, {"progressPercentage": 30, "lastUpdatedTime": now()})
        set_conditions(devcluster, name, {"type": condition, "status": "True"})

    async def firing() -> list[dict[str, str]]:
        # "alive" keeps posting meanwhile.
        await stack.post(NS, "alive", {"progressPercentage": 50, "lastUpdatedTime": now()})
        alerts = (await prometheus.api("alerts"))["alerts"]
        return [
            a["labels"]
            for a in alerts
            if a["labels"]["alertname"] == "TrainJobStalled" and a["state"] == "firing"
        ]

    labels = await eventually(firing, what="TrainJobStalled to fire")
    assert labels == [
        {
            "alertname": "TrainJobStalled",
            "namespace": NS,
            "trainjob": "stalled",
            "severity": "warning",
        }
    ]
    # It reports again: the alert resolves.
    await stack.post(NS, "stalled", {"progressPercentage": 31, "lastUpdatedTime": now()})

    async def resolved() -> bool:
        alerts = (await prometheus.api("alerts"))["alerts"]
        await stack.post(NS, "alive", {"progressPercentage": 51, "lastUpdatedTime": now()})
        return not [a for a in alerts if a["labels"]["alertname"] == "TrainJobStalled"]

    await eventually(resolved, what="TrainJobStalled to resolve")


def set_conditions(cluster: DevCluster, name: str, *conditions: dict[str, str]) -> None:
    """What the Trainer's controller does: write ``status.conditions`` (stored and
    watched), leaving the rest of the status as it is."""
    qualified = cluster.resource("trainjobs", GROUP).qualified
    old = cluster.store.get(qualified, NS, name)
    assert old is not None
    status = {**old.get("status", {}), "conditions": list(conditions)}
    cluster.store.update(
        qualified, {**old, "metadata": dict(old["metadata"]), "status": status}, old
    )


async def test_every_rule_evaluates_without_error(
    stack: Stack, prometheus: Prometheus, devcluster: DevCluster
) -> None:
    devcluster.create_trainjob(NS, "tj")
    await prometheus.start(stack.target, load_rules())
    await stack.post(NS, "tj", {"progressPercentage": 1, "lastUpdatedTime": now()})
    expected = {rule.get("alert") for group in load_rules()["groups"] for rule in group["rules"]}

    async def evaluated() -> list[dict[str, Any]] | None:
        groups = (await prometheus.api("rules"))["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        # "unknown" until a rule's first evaluation, then "ok" or "err".
        return rules if rules and all(r["health"] != "unknown" for r in rules) else None

    rules = await eventually(evaluated, what="every rule to be evaluated")
    assert {rule["name"] for rule in rules} == expected
    assert [(rule["name"], rule["health"], rule.get("lastError", "")) for rule in rules] == [
        (rule["name"], "ok", "") for rule in rules
    ]
    # Nothing is wrong here, so nothing fires (the server alerts hold for minutes).
    assert [r for r in rules if r["state"] == "firing"] == []


# -- the dashboard ---------------------------------------------------------------------------


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return [p for p in found if p["type"] != "row"]


def interpolate(expr: str, values: dict[str, str]) -> str:
    """Grafana's variables as a dashboard user with "All" selected would send them."""

    def value(match: re.Match[str]) -> str:
        return values[match.group(1) or match.group(2)]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


async def test_every_dashboard_query_runs_and_the_progress_panel_has_data(
    stack: Stack, prometheus: Prometheus, devcluster: DevCluster
) -> None:
    devcluster.create_trainjob(NS, "tj")
    await prometheus.start(stack.target, load_rules())
    update = {
        "progressPercentage": 64,
        "estimatedRemainingSeconds": 120,
        "metrics": [{"name": "loss", "value": "0.5"}],
        "lastUpdatedTime": now(),
    }
    await stack.post(NS, "tj", update)

    async def scraped_twice() -> bool:
        # Two scrapes with the series, so rate() and deriv() have something to work on.
        data = await prometheus.api("query", query="count_over_time(trainjob_progress_ratio[1m])")
        return bool(data["result"]) and float(data["result"][0]["value"][1]) >= 2

    await eventually(scraped_twice, what="two scrapes")
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {
        "cluster": ".*",
        "namespace": ".*",
        "trainjob": ".*",
        "metric": "loss",
        "datasource": "prometheus",
        "__rate_interval": "1m",
        "__interval": "15s",
        "__range": "5m",
    }
    # The variables' own queries: Grafana's label_values(selector, label).
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"])
        assert match is not None, variable
        selector = interpolate(match.group(1), variables)
        values = await prometheus.api(f"label/{match.group(2)}/values", **{"match[]": selector})
        assert (
            values
            == {"cluster": [], "namespace": [NS], "trainjob": ["tj"], "metric": ["loss"]}[
                variable["name"]
            ]
        )
    checked = 0
    for panel in panels(dashboard):
        for target in panel["targets"]:
            expr = interpolate(target["expr"], variables)
            result = await prometheus.query(expr)  # fails the test on any query error
            checked += 1
            if panel["title"] == "Progress":
                assert [(r["labels"], r["value"]) for r in result] == [
                    ({"namespace": NS, "trainjob": "tj"}, 0.64)
                ]
            if panel["title"] == "$metric":
                assert [r["value"] for r in result] == [0.5]
            if panel["title"] == "TrainJobs by runtime":
                assert [(r["labels"], r["value"]) for r in result] == [
                    ({"runtime": "torch-distributed"}, 1.0)
                ]
            if panel["title"] == "TrainJobs by state" and target["legendFormat"] == "Active":
                assert [r["value"] for r in result] == [1.0]
    assert checked == sum(len(p["targets"]) for p in panels(dashboard))
