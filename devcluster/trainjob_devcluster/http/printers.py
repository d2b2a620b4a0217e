"""meta.k8s.io/v1 Table answers (what ``kubectl get`` prints), pure functions.

Custom resources get Name plus their additionalPrinterColumns (or Name and Age when the
CRD declares none), evaluated with a small JSONPath evaluator; built-in kinds get the
columns a real server prints for them. ``date`` cells are rendered on the server as a
human duration ("5m"), as a real server does: kubectl prints cells as it gets them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from ..common.go_text import human_duration
from ..common.resources import ResourceType

Column = dict[str, Any]
Row = list[Any]

_NAME_COLUMN: Column = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "The object's metadata.name, unique within its namespace.",
    "priority": 0,
}


def _column(name: str, kind: str = "string", priority: int = 0, fmt: str = "") -> Column:
    return {"name": name, "type": kind, "format": fmt, "description": "", "priority": priority}


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def age(value: Any, now: datetime) -> str:
    """A timestamp as time since: ``<unknown>`` when absent, ``<invalid>`` when unparsable."""
    if value in (None, ""):
        return "<unknown>"
    when = _parse_time(value)
    return "<invalid>" if when is None else human_duration((now - when).total_seconds())


# --- JSONPath, the subset printer columns use ---------------------------------------

_TOKEN = re.compile(r"\.\.|\.(\*|[^.\[\]]+)|\[([^\]]*)\]")
_FILTER = re.compile(r"^\?\(@((?:\.[^.\s=!<>]+)+)\s*(?:(==|!=)\s*(.+?))?\s*\)$")


def _literal(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    try:
        return json.loads(text)
    except ValueError:
        return text


def _children(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return list(node.values())
    return list(node) if isinstance(node, list) else []


def _descendants(node: Any) -> list[Any]:
    out = [node]
    for child in _children(node):
        out.extend(_descendants(child))
    return out


def _bracket(node: Any, inner: str) -> list[Any]:
    inner = inner.strip()
    if inner == "*":
        return _children(node)
    if inner[:1] in "'\"":
        key = _literal(inner)
        return [node[key]] if isinstance(node, dict) and key in node else []
    if inner.startswith("?"):
        m = _FILTER.match(inner)
        if m is None or not isinstance(node, list):
            return []
        path, op, raw = m.groups()
        out = []
        for item in node:
            found = jsonpath(path, item)
            if op is None:
                keep = bool(found)
            else:
                equal = bool(found) and found[0] == _literal(raw)
                keep = equal if op == "==" else (bool(found) and not equal)
            if keep:
                out.append(item)
        return out
    if not isinstance(node, list):
        return []
    if ":" in inner:
        bounds = [int(b) if b.strip() else None for b in inner.split(":")]
        return node[slice(*bounds[:3])]
    index = int(inner)
    # Out-of-range indexes are an error on the server; the cell is then empty.
    return [node[index]] if -len(node) <= index < len(node) else []


def jsonpath(expression: str, obj: Any) -> list[Any]:
    """Values that ``expression`` (``.a.b[0]``, ``[-1:]``, ``[*]``, ``[?(@.k=="v")]``,
    ``['key']``, ``..key``) selects in ``obj``; missing keys select nothing."""
    expr = expression.strip()
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1].strip()
    nodes, pos, recursive = [obj], 0, False
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            return []
        pos = m.end()
        if m.group(0) == "..":
            recursive = True
            # "..name": the second dot also starts the field that follows it.
            if pos < len(expr) and expr[pos] != "[":
                pos -= 1
            continue
        if recursive:
            nodes = [d for n in nodes for d in _descendants(n)]
            recursive = False
        field, inner = m.group(1), m.group(2)
        nxt: list[Any] = []
        for node in nodes:
            if inner is not None:
                nxt.extend(_bracket(node, inner))
            elif field == "*":
                nxt.extend(_children(node))
            elif isinstance(node, dict) and field in node:
                nxt.append(node[field])
        nodes = nxt
    return nodes


# --- cells ------------------------------------------------------------------------


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, separators=(",", ":"))


def custom_cell(column: dict[str, Any], obj: dict[str, Any], now: datetime) -> Any:
    """One additionalPrinterColumns cell: None (kubectl shows ``<none>``) when absent or
    of the wrong type, the first selected value otherwise."""
    found = jsonpath(str(column.get("jsonPath", "")), obj)
    if not found or found[0] is None:
        return None
    value, kind = found[0], column.get("type", "string")
    if kind == "string":
        return _text(value)
    if kind == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        return age(value, now) if _parse_time(value) else "<invalid>"
    return None


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _d(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]...``, or None where a level is missing or not an object."""
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _name(obj: dict[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def _since(obj: dict[str, Any], now: datetime) -> str:
    return age(_meta(obj).get("creationTimestamp"), now)


def _pod(obj: dict[str, Any], now: datetime) -> Row:
    """Ready, Status, Restarts as the server derives them from the container statuses."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    reason = status.get("reason") or status.get("phase") or ""
    restarts, ready, last_restart = 0, 0, None
    for cs in reversed(status.get("containerStatuses") or []):
        restarts += int(cs.get("restartCount") or 0)
        finished = _d(cs, "lastState", "terminated", "finishedAt")
        if finished and (last_restart is None or finished > last_restart):
            last_restart = finished
        waiting, terminated = _d(cs, "state", "waiting"), _d(cs, "state", "terminated")
        if waiting and waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated and terminated.get("reason"):
            reason = terminated["reason"]
        elif terminated is not None:  # present, even empty, means the container stopped
            signal = terminated.get("signal")
            reason = f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode', 0)}"
        elif cs.get("ready") and _d(cs, "state", "running") is not None:
            ready += 1
    if _meta(obj).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    shown = f"{restarts} ({age(last_restart, now)} ago)" if last_restart else str(restarts)
    gates = spec.get("readinessGates") or []
    return [
        _name(obj),
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        shown,
        _since(obj, now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        f"0/{len(gates)}" if gates else "<none>",
    ]


def _service(obj: dict[str, Any], now: datetime) -> Row:
    spec = obj.get("spec") or {}
    ports = [
        f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/"
        f"{p.get('protocol') or 'TCP'}"
        for p in spec.get("ports") or []
    ]
    selector = [f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())]
    return [
        _name(obj),
        spec.get("type") or "ClusterIP",
        spec.get("clusterIP") or "<none>",
        ",".join(spec.get("externalIPs") or []) or "<none>",
        ",".join(ports) or "<none>",
        _since(obj, now),
        ",".join(selector) or "<none>",
    ]


def _event(obj: dict[str, Any], now: datetime) -> Row:
    seen = obj.get("lastTimestamp") or obj.get("eventTime") or obj.get("firstTimestamp")
    involved = obj.get("involvedObject") or {}
    return [
        age(seen or _meta(obj).get("creationTimestamp"), now),
        obj.get("type") or "",
        obj.get("reason") or "",
        f"{str(involved.get('kind') or '').lower()}/{involved.get('name') or ''}",
        str(obj.get("message") or "").strip(),
        _name(obj),
    ]


def _simple(obj: dict[str, Any], now: datetime) -> Row:
    """Name, the kind's own cells, Age; for the kinds with one or two plain columns."""
    extra: list[Any]
    match obj.get("kind"):
        case "Namespace":
            extra = [_d(obj, "status", "phase") or "Active"]
        case "ServiceAccount":
            extra = [len(obj.get("secrets") or [])]
        case "ConfigMap":
            extra = [len(obj.get("data") or {}) + len(obj.get("binaryData") or {})]
        case "Secret":
            extra = [obj.get("type") or "Opaque", len(obj.get("data") or {})]
        case _:
            extra = []
    return [_name(obj), *extra, _since(obj, now)]


Cells = Callable[[dict[str, Any], datetime], Row]


def _builtin(kind: str) -> tuple[list[Column], Cells]:
    """The columns a real server prints for a built-in kind, and its row builder."""
    c, age_col = _column, _column("Age")
    match kind:
        case "Pod":
            wide = ("IP", "Node", "Nominated Node", "Readiness Gates")
            cols = [c("Ready"), c("Status"), c("Restarts"), age_col]
            return [_NAME_COLUMN, *cols, *(c(n, priority=1) for n in wide)], _pod
        case "Service":
            cols = [c("Type"), c("Cluster-IP"), c("External-IP"), c("Port(s)"), age_col]
            return [_NAME_COLUMN, *cols, c("Selector", priority=1)], _service
        case "Event":
            cols = [c("Last Seen"), c("Type"), c("Reason"), c("Object"), c("Message")]
            return [*cols, c("Name", priority=1, fmt="name")], _event
        case "Namespace":
            return [_NAME_COLUMN, c("Status"), age_col], _simple
        case "ServiceAccount":
            return [_NAME_COLUMN, c("Secrets", "integer"), age_col], _simple
        case "ConfigMap":
            return [_NAME_COLUMN, c("Data", "integer"), age_col], _simple
        case "Secret":
            return [_NAME_COLUMN, c("Type"), c("Data", "integer"), age_col], _simple
    return [_NAME_COLUMN, age_col], _simple


def columns_and_rows(
    resource: ResourceType, objects: Sequence[dict[str, Any]], now: datetime
) -> tuple[list[Column], list[Row]]:
    """The column definitions and each object's cells."""
    if resource.builtin:
        columns, cells = _builtin(resource.kind)
        # Rows are built per kind; the object's own "kind" may be absent from a list item.
        return [dict(col) for col in columns], [
            cells({**o, "kind": resource.kind}, now) for o in objects
        ]
    # A CRD without additionalPrinterColumns gets an Age column by default.
    printer = list(resource.printer_columns) or [
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    ]
    columns = [dict(_NAME_COLUMN)] + [
        {
            "name": col.get("name", ""),
            "type": col.get("type", "string"),
            "format": col.get("format", ""),
            "description": col.get("description", ""),
            "priority": int(col.get("priority", 0)),
        }
        for col in printer
    ]
    rows = [[_name(o)] + [custom_cell(col, o, now) for col in printer] for o in objects]
    return columns, rows


def table(
    resource: ResourceType,
    objects: Sequence[dict[str, Any]],
    *,
    list_meta: dict[str, Any] | None = None,
    now: datetime | None = None,
    include_object: str = "Metadata",
) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table of ``objects``.

    ``list_meta`` is the list's metadata (resourceVersion, continue, remainingItemCount);
    without it a single object's resourceVersion is used, as for a GET of one object.
    ``include_object`` is the request's ``includeObject`` (None, Metadata, Object).
    """
    moment = now or datetime.now(UTC)
    columns, rows = columns_and_rows(resource, objects, moment)
    meta: dict[str, Any] = {}
    if list_meta is not None:
        for key in ("resourceVersion", "continue", "remainingItemCount"):
            if list_meta.get(key) not in (None, ""):
                meta[key] = list_meta[key]
    elif len(objects) == 1 and _meta(objects[0]).get("resourceVersion"):
        meta["resourceVersion"] = _meta(objects[0])["resourceVersion"]
    out_rows = []
    for obj, cells in zip(objects, rows, strict=True):
        row: dict[str, Any] = {"cells": cells}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": _meta(obj),
            }
        out_rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": columns,
        "rows": out_rows,
    }
