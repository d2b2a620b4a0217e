"""The ``TrainJobProgress`` resource (pure): its names, its discovery documents, its
objects and its tables, as the Kubernetes API server's clients read them.

A ``TrainJobProgress`` is a TrainJob's newest accepted update, named and namespaced as
the TrainJob: its ``trainerStatus`` has the shape of ``TrainJob.status.trainerStatus``
(metrics as ``{name, value}`` objects), and ``stored`` says whether the TrainJob's status
already holds it. The resource is read-only (``get`` and ``list``); ``metadata`` carries
the TrainJob's name, namespace, uid and creation time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..go_text import human_duration
from ..metrics.series import parse_time

GROUP = "trainjob-status.kubeflow.org"
VERSION = "v1alpha1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainJobProgress"
LIST_KIND = "TrainJobProgressList"
RESOURCE = "trainjobprogresses"
SINGULAR = "trainjobprogress"
SHORT_NAMES = ("tjp",)
VERBS = ("get", "list")
QUALIFIED = f"{RESOURCE}.{GROUP}"
APISERVICE = f"{VERSION}.{GROUP}"
"""The APIService that registers the group-version (the chart's and the overlays')."""

# The TrainJob a progress belongs to: reading one asks whether its reader may read that.
TRAINJOB_GROUP = "trainer.kubeflow.org"
TRAINJOB_RESOURCE = "trainjobs"

_SEGMENT = r"[^/]+"
_ROUTES = re.compile(
    rf"/apis/{re.escape(GROUP)}/{re.escape(VERSION)}"
    rf"(?:/namespaces/(?P<namespace>{_SEGMENT}))?/{RESOURCE}(?:/(?P<name>{_SEGMENT}))?"
)


@dataclass(frozen=True, slots=True)
class Read:
    """A read of the resource: ``name`` None is a list; ``namespace`` None, all
    namespaces (a list only)."""

    namespace: str | None
    name: str | None

    @property
    def verb(self) -> str:
        return "list" if self.name is None else "get"


def read_of(path: str) -> Read | None:
    """The read ``path`` asks for (decoded, as aiohttp gives ``request.path``), or None
    when it names none: a name without a namespace is no read."""
    match = _ROUTES.fullmatch(path)
    if match is None:
        return None
    namespace, name = match.group("namespace", "name")
    if name is not None and namespace is None:
        return None
    return Read(namespace, name)


# -- discovery ----------------------------------------------------------------------------


def _version_entry() -> dict[str, str]:
    return {"groupVersion": GROUP_VERSION, "version": VERSION}


def api_group() -> dict[str, Any]:
    """``/apis/{GROUP}``: the group and its one version."""
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [_version_entry()],
        "preferredVersion": _version_entry(),
    }


def api_group_list() -> dict[str, Any]:
    """``/apis``: this server's groups."""
    group = api_group()
    del group["kind"], group["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}


def api_resource_list() -> dict[str, Any]:
    """``/apis/{GROUP}/{VERSION}``: what kubectl resolves ``trainjobprogresses``,
    ``trainjobprogress`` and ``tjp`` by."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [
            {
                "name": RESOURCE,
                "singularName": SINGULAR,
                "namespaced": True,
                "kind": KIND,
                "verbs": list(VERBS),
                "shortNames": list(SHORT_NAMES),
            }
        ],
    }


# -- objects ------------------------------------------------------------------------------


def trainer_status_of(view: Mapping[str, Any]) -> dict[str, Any] | None:
    """A TrainJob view's ``status.trainerStatus`` in the resource's shape (its metrics as
    ``{name, value}`` objects, whether the view holds pairs or objects), or None."""
    status = view.get("status")
    trainer = status.get("trainerStatus") if isinstance(status, dict) else None
    if not isinstance(trainer, dict):
        return None
    shaped = dict(trainer)
    metrics = trainer.get("metrics")
    if isinstance(metrics, (list, tuple)):
        shaped["metrics"] = [
            dict(item) if isinstance(item, dict) else {"name": item[0], "value": item[1]}
            for item in metrics
        ]
    return shaped


def progress_object(view: Mapping[str, Any], *, stored: bool) -> dict[str, Any] | None:
    """The ``TrainJobProgress`` of a TrainJob view (the newest update in its status), or
    None for a TrainJob with no update yet."""
    trainer = trainer_status_of(view)
    if trainer is None:
        return None
    meta = view.get("metadata") or {}
    metadata = {field: meta[field] for field in ("name", "namespace") if field in meta}
    if "uid" in meta:
        metadata["uid"] = meta["uid"]
    return {
        "kind": KIND,
        "apiVersion": GROUP_VERSION,
        "metadata": metadata,
        "trainerStatus": trainer,
        "stored": stored,
    }


def _sort_key(item: Mapping[str, Any]) -> tuple[str, str]:
    return item["metadata"]["namespace"], item["metadata"]["name"]


def newer_than(item: Mapping[str, Any] | None, trainer: Mapping[str, Any]) -> bool:
    """Whether ``trainer`` (a ``trainerStatus``) is newer than ``item``'s: by
    ``lastUpdatedTime``, which every accepted update has (an item without one, or none
    at all, is older)."""
    if item is None:
        return True
    ours, theirs = item["trainerStatus"].get("lastUpdatedTime"), trainer.get("lastUpdatedTime")
    ours_at = parse_time(ours) if isinstance(ours, str) else None
    theirs_at = parse_time(theirs) if isinstance(theirs, str) else None
    if theirs_at is None:
        return False
    return ours_at is None or theirs_at > ours_at


def progress_list(items: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    ordered = sorted(items, key=_sort_key)
    return {
        "kind": LIST_KIND,
        "apiVersion": GROUP_VERSION,
        "metadata": {"resourceVersion": ""},
        "items": ordered,
    }


# -- tables (``kubectl get``) -------------------------------------------------------------

TABLE_MEDIA = "application/json;as=Table;v=v1;g=meta.k8s.io"

_COLUMNS = (
    ("Name", "string", "name", "The TrainJob's name."),
    ("Progress", "string", "", "progressPercentage of its newest update."),
    ("ETA", "string", "", "estimatedRemainingSeconds of its newest update."),
    ("Updated", "string", "", "Time since its newest update's lastUpdatedTime."),
    ("Stored", "boolean", "", "Whether the TrainJob's status holds that update yet."),
)


def wants_table(accept: str) -> bool:
    """Whether an Accept header asks for a ``meta.k8s.io/v1`` Table first, as kubectl
    get's does (a client that asks for one after another type gets the other)."""
    first = accept.split(",", 1)[0].replace(" ", "")
    params = set(first.split(";")[1:])
    return {"as=Table", "g=meta.k8s.io", "v=v1"} <= params


def _integer_cell(value: Any, suffix: str = "") -> str:
    return f"{value}{suffix}" if type(value) is int else "<none>"


def table_row(item: Mapping[str, Any], now: float) -> dict[str, Any]:
    trainer = item["trainerStatus"]
    eta = trainer.get("estimatedRemainingSeconds")
    stamp = trainer.get("lastUpdatedTime")
    updated = parse_time(stamp) if isinstance(stamp, str) else None
    return {
        "cells": [
            item["metadata"]["name"],
            _integer_cell(trainer.get("progressPercentage"), "%"),
            human_duration(eta) if type(eta) is int else "<none>",
            "<unknown>" if updated is None else human_duration(now - updated),
            item["stored"],
        ],
        "object": {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": item["metadata"],
        },
    }


def table(items: Iterable[Mapping[str, Any]], now: float) -> dict[str, Any]:
    """The items (progress objects) as the Table ``kubectl get`` prints, ``now`` in Unix
    seconds."""
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": ""},
        "columnDefinitions": [
            {"name": name, "type": kind, "format": form, "description": text, "priority": 0}
            for name, kind, form, text in _COLUMNS
        ],
        "rows": [table_row(item, now) for item in items],
    }
