"""meta.k8s.io/v1 Tables for kubectl get, durations, and the printer-column JSONPath."""

from datetime import UTC, datetime
from typing import Any

from trainjob_devcluster.common.resources import ResourceType, load_trainjob_crd, resource_from_crd
from trainjob_devcluster.http import printers
from trainjob_devcluster.http.printers import custom_cell, jsonpath, table

NOW = datetime(2025, 1, 1, 0, 10, tzinfo=UTC)
NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "The object's metadata.name, unique within its namespace.",
    "priority": 0,
}


def col(name: str, kind: str = "string", priority: int = 0, fmt: str = "") -> dict[str, Any]:
    return {"name": name, "type": kind, "format": fmt, "description": "", "priority": priority}


def core(kind: str) -> ResourceType:
    plural = kind.lower() + "s"
    return ResourceType(
        group="", version="v1", kind=kind, plural=plural, singular=kind.lower(), namespaced=True
    )


def obj(name: str, created: str = "2025-01-01T00:00:00Z", **fields: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": "team-a", "creationTimestamp": created}
    return {"metadata": meta, **fields}


def test_age() -> None:
    assert printers.age("2025-01-01T00:09:00Z", NOW) == "60s"
    assert printers.age(None, NOW) == "<unknown>"
    assert printers.age("yesterday", NOW) == "<invalid>"


CONDITIONS = {"conditions": [{"type": "Created", "status": "True"}, {"type": "Complete"}]}


def test_jsonpath() -> None:
    job = {"metadata": {"name": "j", "labels": {"a.b/c": "x"}}, "status": CONDITIONS}
    assert jsonpath(".status.conditions[-1:].type", job) == ["Complete"]
    assert jsonpath("{.status.conditions[0].type}", job) == ["Created"]
    assert jsonpath(".status.conditions[*].type", job) == ["Created", "Complete"]
    assert jsonpath(".status.conditions[5].type", job) == []
    assert jsonpath('.status.conditions[?(@.type=="Created")].status', job) == ["True"]
    assert jsonpath(".status.conditions[?(@.status)].type", job) == ["Created"]
    assert jsonpath(".status.conditions[?(@.type!='Created')].type", job) == ["Complete"]
    assert jsonpath(".metadata.labels['a.b/c']", job) == ["x"]
    assert jsonpath("..type", job) == ["Created", "Complete"]
    assert jsonpath(".metadata.*", {"metadata": {"a": 1, "b": 2}}) == [1, 2]
    assert jsonpath(".status.conditions[-1:].type", {"status": {"conditions": []}}) == []
    assert jsonpath(".status.conditions[-1:].type", {"metadata": {}}) == []
    assert jsonpath(".spec.replicas", {"spec": {"replicas": 0}}) == [0]


def test_custom_cells_by_type() -> None:
    item = {"spec": {"n": 3.0, "s": "x", "b": True, "m": {"k": [1]}}, "t": "bad"}
    assert custom_cell({"jsonPath": ".spec.n", "type": "integer"}, item, NOW) == 3
    assert custom_cell({"jsonPath": ".spec.s", "type": "integer"}, item, NOW) is None
    assert custom_cell({"jsonPath": ".spec.n", "type": "number"}, item, NOW) == 3.0
    assert custom_cell({"jsonPath": ".spec.b", "type": "boolean"}, item, NOW) is True
    assert custom_cell({"jsonPath": ".spec.b", "type": "string"}, item, NOW) == "true"
    assert custom_cell({"jsonPath": ".spec.n", "type": "string"}, item, NOW) == "3.0"
    assert custom_cell({"jsonPath": ".spec.m", "type": "string"}, item, NOW) == '{"k":[1]}'
    assert custom_cell({"jsonPath": ".t", "type": "date"}, item, NOW) == "<invalid>"
    assert custom_cell({"jsonPath": ".missing", "type": "string"}, item, NOW) is None


def test_trainjob_table() -> None:
    trainjobs = resource_from_crd(load_trainjob_crd())
    done = obj("job1", status=CONDITIONS)
    done["metadata"]["resourceVersion"] = "5"
    fresh = obj("job2", created="2025-01-01T00:08:55Z")
    list_meta = {"resourceVersion": "9", "continue": "abc", "remainingItemCount": 2}
    assert table(trainjobs, [done, fresh], list_meta=list_meta, now=NOW) == {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": "9", "continue": "abc", "remainingItemCount": 2},
        "columnDefinitions": [NAME_COLUMN, col("State"), col("Age", "date")],
        "rows": [
            {
                "cells": ["job1", "Complete", "10m"],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": done["metadata"],
                },
            },
            {
                "cells": ["job2", None, "65s"],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": fresh["metadata"],
                },
            },
        ],
    }


def test_single_object_table_and_include_object() -> None:
    trainjobs = resource_from_crd(load_trainjob_crd())
    one = obj("job1")
    one["metadata"]["resourceVersion"] = "7"
    assert table(trainjobs, [one], now=NOW, include_object="None")["metadata"] == {
        "resourceVersion": "7"
    }
    assert table(trainjobs, [one], now=NOW, include_object="None")["rows"] == [
        {"cells": ["job1", None, "10m"]}
    ]
    assert table(trainjobs, [one], now=NOW, include_object="Object")["rows"][0]["object"] == one
    assert table(trainjobs, [], list_meta={"resourceVersion": "3"}, now=NOW)["rows"] == []


def test_crd_without_printer_columns_gets_age() -> None:
    widgets = ResourceType(
        group="example.com",
        version="v1",
        kind="Widget",
        plural="widgets",
        singular="widget",
        namespaced=True,
        builtin=False,
    )
    result = table(widgets, [obj("w")], now=NOW)
    assert result["columnDefinitions"] == [NAME_COLUMN, col("Age", "date")]
    assert result["rows"][0]["cells"] == ["w", "10m"]


def test_pod_table() -> None:
    running = obj(
        "job1-node-0-0",
        spec={"nodeName": "node-a", "containers": [{"name": "a"}, {"name": "b"}]},
        status={
            "phase": "Running",
            "podIP": "10.0.0.5",
            "containerStatuses": [
                {
                    "name": "a",
                    "ready": True,
                    "restartCount": 1,
                    "state": {"running": {}},
                    "lastState": {"terminated": {"finishedAt": "2025-01-01T00:05:00Z"}},
                },
                {
                    "name": "b",
                    "ready": False,
                    "restartCount": 3,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                },
            ],
        },
    )
    pending = obj("p2", spec={"containers": [{"name": "a"}]}, status={"phase": "Pending"})
    leaving = obj("p3", spec={"containers": []}, status={"phase": "Running"})
    leaving["metadata"]["deletionTimestamp"] = "2025-01-01T00:09:00Z"
    failed = obj(
        "p4",
        spec={"containers": [{"name": "a"}], "readinessGates": [{"conditionType": "x"}]},
        status={"phase": "Failed", "containerStatuses": [{"state": {"terminated": {}}}]},
    )
    result = table(core("Pod"), [running, pending, leaving, failed], now=NOW)
    wide = [col(n, priority=1) for n in ("IP", "Node", "Nominated Node", "Readiness Gates")]
    assert result["columnDefinitions"] == [
        NAME_COLUMN,
        col("Ready"),
        col("Status"),
        col("Restarts"),
        col("Age"),
        *wide,
    ]
    assert [row["cells"] for row in result["rows"]] == [
        ["job1-node-0-0", "1/2", "CrashLoopBackOff", "4 (5m ago)", "10m", "10.0.0.5", "node-a",
         "<none>", "<none>"],
        ["p2", "0/1", "Pending", "0", "10m", "<none>", "<none>", "<none>", "<none>"],
        ["p3", "0/0", "Terminating", "0", "10m", "<none>", "<none>", "<none>", "<none>"],
        ["p4", "0/1", "ExitCode:0", "0", "10m", "<none>", "<none>", "<none>", "0/1"],
    ]  # fmt: skip


def test_other_builtin_tables() -> None:
    namespace = table(core("Namespace"), [obj("team-a", status={"phase": "Active"})], now=NOW)
    assert namespace["columnDefinitions"] == [NAME_COLUMN, col("Status"), col("Age")]
    assert namespace["rows"][0]["cells"] == ["team-a", "Active", "10m"]
    secret = table(core("Secret"), [obj("s", type="kubernetes.io/tls", data={"a": ""})], now=NOW)
    assert secret["columnDefinitions"] == [
        NAME_COLUMN,
        col("Type"),
        col("Data", "integer"),
        col("Age"),
    ]
    assert secret["rows"][0]["cells"] == ["s", "kubernetes.io/tls", 1, "10m"]
    config = table(core("ConfigMap"), [obj("c", data={"a": "1"}, binaryData={"b": ""})], now=NOW)
    assert config["rows"][0]["cells"] == ["c", 2, "10m"]
    account = table(core("ServiceAccount"), [obj("trainer")], now=NOW)
    assert account["rows"][0]["cells"] == ["trainer", 0, "10m"]
    service = obj(
        "svc",
        spec={"clusterIP": "10.0.0.1", "ports": [{"port": 80}, {"port": 443, "protocol": "UDP"}]},
    )
    assert table(core("Service"), [service], now=NOW)["rows"][0]["cells"] == [
        "svc",
        "ClusterIP",
        "10.0.0.1",
        "<none>",
        "80/TCP,443/UDP",
        "10m",
        "<none>",
    ]
    event = obj(
        "job1.1",
        type="Normal",
        reason="Created",
        message=" made ",
        lastTimestamp="2025-01-01T00:09:30Z",
        involvedObject={"kind": "TrainJob", "name": "job1"},
    )
    events = table(core("Event"), [event], now=NOW)
    assert [c["name"] for c in events["columnDefinitions"]] == [
        "Last Seen",
        "Type",
        "Reason",
        "Object",
        "Message",
        "Name",
    ]
    assert events["rows"][0]["cells"] == [
        "30s",
        "Normal",
        "Created",
        "trainjob/job1",
        "made",
        "job1.1",
    ]
    # A built-in kind without a table of its own: Name and Age.
    roles = table(core("Role"), [obj("r")], now=NOW)
    assert roles["columnDefinitions"] == [NAME_COLUMN, col("Age")]
    assert roles["rows"][0]["cells"] == ["r", "10m"]
