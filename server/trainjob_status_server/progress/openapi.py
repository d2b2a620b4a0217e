"""The ``TrainJobProgress`` resource's OpenAPI v3 document (pure): what ``kubectl
explain trainjobprogresses`` reads, merged by the API server into its own
``/openapi/v3`` from the aggregated API's.

``/openapi/v3`` lists the one group-version document with a hash of its content (the
API server fetches it again only when the hash changes); the document describes the
object, its list and the two reads. The field descriptions are this project's; the
limits are those of ``TrainJob.status.trainerStatus`` in the TrainJob CRD, which every
accepted update has met.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

from . import resource

ROOT = "/openapi/v3"
DOCUMENT = f"{ROOT}/apis/{resource.GROUP_VERSION}"
_PREFIX = "io.kubeflow.trainjob-status.v1alpha1"
_GVK = [{"group": resource.GROUP, "version": resource.VERSION, "kind": resource.KIND}]
_LIST_GVK = [{"group": resource.GROUP, "version": resource.VERSION, "kind": resource.LIST_KIND}]


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{_PREFIX}.{name}"}


def _string(description: str, **more: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **more}


def _int32(description: str, **more: Any) -> dict[str, Any]:
    return {"type": "integer", "format": "int32", "description": description, **more}


def _schemas() -> dict[str, Any]:
    metric = {
        "type": "object",
        "description": "One figure the training code reported.",
        "required": ["name", "value"],
        "properties": {
            "name": _string("The metric's name, such as loss.", minLength=1, maxLength=64),
            "value": _string(
                "Its value, as the training code wrote it.", minLength=1, maxLength=64
            ),
        },
    }
    trainer = {
        "type": "object",
        "description": "The newest update, in the shape of TrainJob.status.trainerStatus.",
        "properties": {
            "progressPercentage": _int32(
                "How complete training is, 0 to 100.", minimum=0, maximum=100
            ),
            "estimatedRemainingSeconds": _int32(
                "Seconds of training left, as estimated.", minimum=0
            ),
            "metrics": {
                "type": "array",
                "description": "The figures reported with the update, in order.",
                "maxItems": 256,
                "items": _ref("Metric"),
                "x-kubernetes-list-type": "atomic",
            },
            "lastUpdatedTime": _string("When the update was made.", format="date-time"),
        },
    }
    metadata = {
        "type": "object",
        "description": "The TrainJob's identity.",
        "properties": {
            "name": _string("The TrainJob's name."),
            "namespace": _string("The TrainJob's namespace."),
            "uid": _string("The TrainJob's uid."),
        },
    }
    progress = {
        "type": "object",
        "description": (
            "A TrainJob's newest accepted update, read from the status server's memory:"
            " it may be newer than what the TrainJob's status holds yet."
        ),
        "properties": {
            "apiVersion": _string("trainjob-status.kubeflow.org/v1alpha1"),
            "kind": _string("TrainJobProgress"),
            "metadata": _ref("Metadata"),
            "trainerStatus": _ref("TrainerStatus"),
            "stored": {
                "type": "boolean",
                "description": "Whether the TrainJob's status holds this update already.",
            },
        },
        "x-kubernetes-group-version-kind": _GVK,
    }
    listed = {
        "type": "object",
        "description": "TrainJobProgresses, by namespace and name.",
        "required": ["items"],
        "properties": {
            "apiVersion": _string("trainjob-status.kubeflow.org/v1alpha1"),
            "kind": _string("TrainJobProgressList"),
            "metadata": {"type": "object", "description": "The list's metadata."},
            "items": {"type": "array", "items": _ref("TrainJobProgress")},
        },
        "x-kubernetes-group-version-kind": _LIST_GVK,
    }
    return {
        f"{_PREFIX}.Metric": metric,
        f"{_PREFIX}.TrainerStatus": trainer,
        f"{_PREFIX}.Metadata": metadata,
        f"{_PREFIX}.TrainJobProgress": progress,
        f"{_PREFIX}.TrainJobProgressList": listed,
    }


def _read(operation: str, description: str, schema: str, verb: str) -> dict[str, Any]:
    return {
        "get": {
            "operationId": operation,
            "description": description,
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {"application/json": {"schema": _ref(schema)}},
                },
                "401": {"description": "Unauthorized"},
            },
            "x-kubernetes-action": verb,
            "x-kubernetes-group-version-kind": _GVK[0],
        }
    }


def _parameter(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "uniqueItems": True},
    }


@cache
def document() -> bytes:
    """The group-version document, as JSON."""
    base = f"/apis/{resource.GROUP_VERSION}"
    namespaced = f"{base}/namespaces/{{namespace}}/{resource.RESOURCE}"
    namespace = _parameter("namespace", "The TrainJobs' namespace.")
    paths = {
        f"{base}/{resource.RESOURCE}": _read(
            "listTrainJobProgressForAllNamespaces",
            "The progress of every TrainJob with an update.",
            "TrainJobProgressList",
            "list",
        ),
        namespaced: {
            **_read(
                "listNamespacedTrainJobProgress",
                "The progress of a namespace's TrainJobs with an update.",
                "TrainJobProgressList",
                "list",
            ),
            "parameters": [namespace],
        },
        f"{namespaced}/{{name}}": {
            **_read(
                "readNamespacedTrainJobProgress",
                "One TrainJob's progress.",
                "TrainJobProgress",
                "get",
            ),
            "parameters": [_parameter("name", "The TrainJob's name."), namespace],
        },
    }
    spec = {
        "openapi": "3.0.0",
        "info": {"title": "trainjob-status", "version": resource.VERSION},
        "paths": paths,
        "components": {"schemas": _schemas()},
    }
    return json.dumps(spec, separators=(",", ":"), sort_keys=True).encode()


@cache
def index() -> bytes:
    """``/openapi/v3``: the documents served, each with its content's hash."""
    digest = hashlib.sha512(document()).hexdigest()[:32].upper()
    paths = {f"apis/{resource.GROUP_VERSION}": {"serverRelativeURL": f"{DOCUMENT}?hash={digest}"}}
    return json.dumps({"paths": paths}, separators=(",", ":")).encode()
