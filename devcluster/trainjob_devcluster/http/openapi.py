"""OpenAPI v3 documents of the development cluster: pure builders, no I/O.

One document per served group-version, shaped like a real kube-apiserver's. What kubectl
v1.32 needs from it (checked against the real binary):

* every PATCH operation carries ``x-kubernetes-group-version-kind`` and a ``fieldValidation``
  query parameter. kubectl then sends ``fieldValidation=Strict``; without them it falls
  back to client-side validation against ``/openapi/v2`` and fails (we serve no v2).
* built-in PATCH operations do not list strategic-merge-patch: kubectl would compute the
  patch from these minimal schemas and warn "unable to find api field". Without it,
  kubectl uses its compiled-in types, which carry the real merge keys.
* ``/openapi/v2`` answers 404: kubectl asks for it (protobuf) on a re-apply, treats any
  failure as "no v2 schema", and patches custom resources with a JSON merge patch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..common.resources import ResourceType
from .discovery import SUBRESOURCES, Subresource, media_ranges, version_info

META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_REF = "#/components/schemas/"
# The recorded server sends the index without a Content-Type of its own, so Go sniffs one.
INDEX_CONTENT_TYPE = "text/plain; charset=utf-8"
DOCUMENT_CONTENT_TYPE = "application/json"
_PATCH_TYPES = (
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
)

_S: dict[str, Any] = {"type": "string"}
_B: dict[str, Any] = {"type": "boolean"}
_INT: dict[str, Any] = {"type": "integer"}
_I32: dict[str, Any] = {"type": "integer", "format": "int32"}
_I64: dict[str, Any] = {"type": "integer", "format": "int64"}
_STR_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": _REF + name}


def _wrapped(name: str) -> dict[str, Any]:
    # OpenAPI 3.0 ignores siblings of $ref, so the server wraps a referenced property in allOf.
    return {"allOf": [_ref(name)]}


def _array(items: dict[str, Any], list_type: str = "atomic", **extra: Any) -> dict[str, Any]:
    return {"type": "array", "items": items, "x-kubernetes-list-type": list_type, **extra}


def _obj(props: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, **extra}


def _gvk(group: str, version: str, kind: str) -> dict[str, str]:
    return {"group": group, "kind": kind, "version": version}


def meta_schemas() -> dict[str, dict[str, Any]]:
    """The meta.v1 schemas kinds and operations reference, by full component name."""
    owner_ref_list = {
        "x-kubernetes-list-map-keys": ["uid"],
        "x-kubernetes-patch-merge-key": "uid",
        "x-kubernetes-patch-strategy": "merge",
    }
    return {
        META + "DeleteOptions": _obj({
            "apiVersion": _S, "dryRun": _array(_S), "gracePeriodSeconds": _I64,
            "ignoreStoreReadErrorWithClusterBreakingPotential": _B, "kind": _S,
            "orphanDependents": _B, "preconditions": _wrapped(META + "Preconditions"),
            "propagationPolicy": _S,
        }),
        META + "FieldsV1": {"type": "object"},
        META + "ListMeta": _obj({
            "continue": _S, "remainingItemCount": _I64, "resourceVersion": _S,
            "selfLink": _S, "shardInfo": _wrapped(META + "ShardInfo"),
        }),
        META + "ManagedFieldsEntry": _obj({
            "apiVersion": _S, "fieldsType": _S, "fieldsV1": _wrapped(META + "FieldsV1"),
            "manager": _S, "operation": _S, "subresource": _S, "time": _wrapped(META + "Time"),
        }),
        META + "ObjectMeta": _obj({
            "annotations": _STR_MAP, "creationTimestamp": _wrapped(META + "Time"),
            "deletionGracePeriodSeconds": _I64, "deletionTimestamp": _wrapped(META + "Time"),
            "finalizers": _array(_S, "set", **{"x-kubernetes-patch-strategy": "merge"}),
            "generateName": _S, "generation": _I64, "labels": _STR_MAP,
            "managedFields": _array(_wrapped(META + "ManagedFieldsEntry")),
            "name": _S, "namespace": _S,
            "ownerReferences": _array(_wrapped(META + "OwnerReference"), "map", **owner_ref_list),
            "resourceVersion": _S, "selfLink": _S, "uid": _S,
        }),
        META + "OwnerReference": _obj(
            {"apiVersion": _S, "blockOwnerDeletion": _B, "controller": _B, "kind": _S,
             "name": _S, "uid": _S},
            required=["apiVersion", "kind", "name", "uid"],
            **{"x-kubernetes-map-type": "atomic"},
        ),
        META + "Patch": {"type": "object"},
        META + "Preconditions": _obj({"resourceVersion": _S, "uid": _S}),
        META + "ShardInfo": _obj({"selector": _S}, required=["selector"]),
        META + "Status": _obj(
            {"apiVersion": _S, "code": _I32, "details": _wrapped(META + "StatusDetails"),
             "kind": _S, "message": _S, "metadata": _wrapped(META + "ListMeta"),
             "reason": _S, "status": _S},
            **{"x-kubernetes-group-version-kind": [_gvk("", "v1", "Status")]},
        ),
        META + "StatusCause": _obj({"field": _S, "message": _S, "reason": _S}),
        META + "StatusDetails": _obj({
            "causes": _array(_wrapped(META + "StatusCause")), "group": _S, "kind": _S,
            "name": _S, "retryAfterSeconds": _I32, "uid": _S,
        }),
        META + "Time": {"type": "string", "format": "date-time"},
    }  # fmt: skip


def schema_name(group: str, version: str, kind: str, *, builtin: bool) -> str:
    """``org.kubeflow.trainer.v1alpha1.TrainJob``, ``io.k8s.api.core.v1.Pod``."""
    if builtin:
        short = group.split(".", 1)[0] if group else "core"
        return f"io.k8s.api.{short}.{version}.{kind}"
    return ".".join([*reversed(group.split(".")), version, kind])


def _envelope(group: str, version: str, kind: str) -> dict[str, Any]:
    # Built-in kinds are stored as sent, so their schema only pins the envelope.
    return {
        "type": "object",
        "properties": {"apiVersion": _S, "kind": _S, "metadata": _wrapped(META + "ObjectMeta")},
        "x-kubernetes-preserve-unknown-fields": True,
        "x-kubernetes-group-version-kind": [_gvk(group, version, kind)],
    }


def _kind_schema(r: ResourceType) -> dict[str, Any]:
    if r.schema is None:
        return _envelope(r.group, r.version, r.kind)
    schema: dict[str, Any] = json.loads(json.dumps(r.schema))  # deep copy: never alias the CRD
    schema.setdefault("properties", {})["metadata"] = _wrapped(META + "ObjectMeta")
    schema["x-kubernetes-group-version-kind"] = [_gvk(r.group, r.version, r.kind)]
    return schema


def _list_schema(r: ResourceType, item: str) -> dict[str, Any]:
    props = {
        "apiVersion": _S,
        "items": {"type": "array", "items": _ref(item)},
        "kind": _S,
        "metadata": _wrapped(META + "ListMeta"),
    }
    gvk = [_gvk(r.group, r.version, r.list_kind)]
    return _obj(props, required=["items"], **{"x-kubernetes-group-version-kind": gvk})


def _param(name: str, kind: dict[str, Any] = _S, where: str = "query") -> dict[str, Any]:
    param: dict[str, Any] = {"name": name, "in": where, "schema": {**kind, "uniqueItems": True}}
    if where == "path":
        param["required"] = True
    return param


_LIST_Q = (
    ("allowWatchBookmarks", _B), ("continue", _S), ("fieldSelector", _S), ("labelSelector", _S),
    ("limit", _INT), ("resourceVersion", _S), ("resourceVersionMatch", _S),
    ("sendInitialEvents", _B), ("timeoutSeconds", _INT), ("watch", _B),
)  # fmt: skip
_WRITE_Q = (("dryRun", _S), ("fieldManager", _S), ("fieldValidation", _S))
_DELETE_Q = (
    ("dryRun", _S), ("gracePeriodSeconds", _INT),
    ("ignoreStoreReadErrorWithClusterBreakingPotential", _B), ("orphanDependents", _B),
    ("propagationPolicy", _S),
)  # fmt: skip
_JSON_YAML = ("application/json", "application/yaml")
_REASONS = {"200": "OK", "201": "Created", "202": "Accepted"}


@dataclass(frozen=True)
class _Op:
    """How one verb is published: HTTP method, operationId word, x-kubernetes-action, query
    parameters, request body and answer (symbolic: kind, list, status, deleted, ...)."""

    method: str
    word: str
    action: str
    query: tuple[tuple[str, dict[str, Any]], ...]
    body: str | None
    answer: str
    codes: tuple[str, ...]


_OPS = {
    "list": _Op("get", "list", "list", _LIST_Q, None, "list", ("200",)),
    "create": _Op("post", "create", "post", _WRITE_Q, "kind", "kind", ("200", "201", "202")),
    "deletecollection": _Op(
        "delete", "delete", "deletecollection",
        tuple(q for q in _DELETE_Q + _LIST_Q if q[0] not in ("allowWatchBookmarks", "watch")),
        "delete", "status", ("200",),
    ),
    "get": _Op("get", "read", "get", (), None, "kind", ("200",)),
    "update": _Op("put", "replace", "put", _WRITE_Q, "kind", "kind", ("200", "201")),
    "delete": _Op("delete", "delete", "delete", _DELETE_Q, "delete", "deleted", ("200", "202")),
    "patch": _Op("patch", "patch", "patch", (*_WRITE_Q, ("force", _B)), "patch", "kind",
                 ("200", "201")),
}  # fmt: skip
_COLLECTION_VERBS = ("list", "create", "deletecollection")
_ITEM_VERBS = ("get", "update", "delete", "patch")


def _content(name: str, types: Sequence[str] = _JSON_YAML) -> dict[str, Any]:
    return {t: {"schema": _ref(name)} for t in types}


def _camel(r: ResourceType) -> str:
    """``CoreV1``, ``AuthenticationV1``, ``TrainerKubeflowOrgV1alpha1`` (operationIds)."""
    if not r.group:
        words = ["core"]
    else:  # built-in groups drop ".k8s.io"; custom groups keep every label
        words = (r.group.removesuffix(".k8s.io") if r.builtin else r.group).split(".")
    return "".join(w[:1].upper() + w[1:] for w in [*words, r.version])


def _operation(
    r: ResourceType,
    verb: str,
    names: Mapping[str, str],
    *,
    suffix: str = "",
    gvk: tuple[str, str, str] | None = None,
) -> tuple[str, dict[str, Any]]:
    """(HTTP method, operation); ``names`` maps the symbolic schemas to component names."""
    op = _OPS[verb]
    camel = _camel(r)
    scoped = "Namespaced" if r.namespaced and suffix != "ForAllNamespaces" else ""
    collection = "Collection" if verb == "deletecollection" else ""
    content = _content(names[op.answer])
    answers = {code: {"description": _REASONS[code], "content": content} for code in op.codes}
    operation: dict[str, Any] = {
        "tags": [f"{camel[:1].lower()}{camel[1 : -len(r.version)]}_{r.version}"],
        "operationId": f"{op.word}{camel}{collection}{scoped}{r.kind}{suffix}",
        "parameters": [_param(name, kind) for name, kind in op.query],
        "responses": {**answers, "401": {"description": "Unauthorized"}},
        "x-kubernetes-action": op.action,
        "x-kubernetes-group-version-kind": _gvk(*(gvk or (r.group, r.version, r.kind))),
    }
    if op.body is not None:
        types = _PATCH_TYPES if op.body == "patch" else _JSON_YAML
        body = {"content": _content(names[op.body], types), "required": op.body != "delete"}
        operation["requestBody"] = body
    return op.method, operation


def _paths(r: ResourceType) -> dict[str, dict[str, Any]]:
    base = f"/apis/{r.group}/{r.version}" if r.group else f"/api/{r.version}"
    coll = f"{base}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else f"{base}/{r.plural}"
    scope = [_param("namespace", where="path")] if r.namespaced else []
    kind = schema_name(r.group, r.version, r.kind, builtin=r.builtin)
    names = {
        "kind": kind,
        "list": schema_name(r.group, r.version, r.list_kind, builtin=r.builtin),
        "status": META + "Status",
        # A built-in delete answers the deleted object; a custom resource's a Status.
        "deleted": kind if r.builtin else META + "Status",
        "delete": META + "DeleteOptions",
        "patch": META + "Patch",
    }
    item_params = [_param("name", where="path"), *scope, _param("pretty")]
    paths: dict[str, dict[str, Any]] = {}
    for path, verbs, params in (
        (coll, _COLLECTION_VERBS, [*scope, _param("pretty")]),
        (f"{coll}/{{name}}", _ITEM_VERBS, item_params),
    ):
        ops = dict(_operation(r, v, names) for v in verbs if v in r.verbs)
        if ops:
            paths[path] = {**ops, "parameters": params}
    for sub_name in sorted(r.subresources):
        sub = SUBRESOURCES.get(sub_name, Subresource(("get",)))
        target = sub.response_kind
        own = {**names, "kind": schema_name(*target, builtin=True) if target else kind}
        suffix = sub_name[:1].upper() + sub_name[1:]
        ops = dict(_operation(r, v, own, suffix=suffix, gvk=target) for v in sub.verbs)
        # A subresource's create is a POST on the item path, not on the collection.
        paths[f"{coll}/{{name}}/{sub_name}"] = {**ops, "parameters": item_params}
    if r.namespaced and "list" in r.verbs:
        method, listing = _operation(r, "list", names, suffix="ForAllNamespaces")
        paths[f"{base}/{r.plural}"] = {method: listing, "parameters": [_param("pretty")]}
    return paths


def _refs(node: Any, found: set[str]) -> set[str]:
    """Adds every component name ``node`` references to ``found``, and returns it."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF):
            found.add(ref.removeprefix(_REF))
        node = list(node.values())
    if isinstance(node, list):
        for value in node:
            _refs(value, found)
    return found


def group_version_document(
    resources: Sequence[ResourceType], group: str, version: str
) -> dict[str, Any] | None:
    """The OpenAPI v3 document of one group-version, or None if it is not served."""
    served = [r for r in resources if (r.group, r.version) == (group, version)]
    served.sort(key=lambda r: r.plural)
    if not served:
        return None
    paths: dict[str, Any] = {}
    kinds: dict[str, Any] = {}
    for r in served:
        paths.update(_paths(r))
        name = schema_name(group, version, r.kind, builtin=r.builtin)
        kinds[name] = _kind_schema(r)
        if "list" in r.verbs:
            list_name = schema_name(group, version, r.list_kind, builtin=r.builtin)
            kinds[list_name] = _list_schema(r, name)
        for sub in r.subresources:
            target = SUBRESOURCES.get(sub, Subresource(("get",))).response_kind
            if target is not None:  # e.g. serviceaccounts/token answers a TokenRequest
                kinds.setdefault(schema_name(*target, builtin=True), _envelope(*target))
    meta = meta_schemas()
    own = [_gvk(group, version, "DeleteOptions")] if group else []
    gvks = [_gvk("", "v1", "DeleteOptions"), *own]
    meta[META + "DeleteOptions"]["x-kubernetes-group-version-kind"] = gvks
    # Only the meta schemas something references, followed transitively, as the server does.
    wanted: set[str] = set()
    _refs([paths, kinds], wanted)
    while (more := _refs([meta[n] for n in wanted if n in meta], set(wanted))) != wanted:
        wanted = more
    schemas = {n: meta[n] for n in sorted(wanted) if n in meta} | dict(sorted(kinds.items()))
    info = (
        {"title": "Kubernetes", "version": version_info()["gitVersion"]}
        if served[0].builtin
        else {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"}  # as recorded
    )
    paths = dict(sorted(paths.items()))
    return {"openapi": "3.0.0", "info": info, "paths": paths, "components": {"schemas": schemas}}


def encode(document: Mapping[str, Any]) -> bytes:
    """The bytes served for a document; its hash is taken over exactly these bytes."""
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def document_hash(data: bytes) -> str:
    """Uppercase hex SHA-512 of the served bytes (the ``hash`` query parameter)."""
    return hashlib.sha512(data).hexdigest().upper()


def v3_documents(resources: Sequence[ResourceType]) -> dict[str, bytes]:
    """Encoded documents keyed like the index: ``api/v1``, ``apis/{group}/{version}``."""
    docs: dict[str, bytes] = {}
    for group, version in dict.fromkeys((r.group, r.version) for r in resources):
        doc = group_version_document(resources, group, version)
        assert doc is not None  # the group-version of a served resource is served
        docs[f"apis/{group}/{version}" if group else f"api/{version}"] = encode(doc)
    return docs


def v3_index(documents: Mapping[str, bytes]) -> dict[str, Any]:
    """``/openapi/v3``: each group-version's URL carries its content hash."""
    return {
        "paths": {
            key: {"serverRelativeURL": f"/openapi/v3/{key}?hash={document_hash(data)}"}
            for key, data in sorted(documents.items())
        }
    }


def _accepts_json(accept: str | None) -> bool:
    if not accept or not accept.strip():
        return True
    return any(m in ("*/*", "application/*", "application/json") for m, _ in media_ranges(accept))


@dataclass(frozen=True)
class Served:
    """An answer under ``/openapi``; ``headers`` never holds Content-Type."""

    status: int
    content_type: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class OpenApiDocuments:
    """Every document, computed once from the (fixed) resource list; then read-only."""

    def __init__(self, resources: Sequence[ResourceType]) -> None:
        self.documents = v3_documents(resources)
        self.index = encode(v3_index(self.documents))

    def serve(self, path: str, query: Mapping[str, str], accept: str | None) -> Served | None:
        """The answer for a GET of ``path``, or None: the caller answers 404 page not found.

        A stale ``hash`` is redirected (301) to the current one, a matching one makes the
        answer immutable, and an Accept without JSON gets an empty 406, as a real server.
        """
        if path != "/openapi/v3" and not path.startswith("/openapi/v3/"):
            return None  # /openapi/v2 included: see the module docstring
        key = path.removeprefix("/openapi/v3").strip("/")
        if not key:
            return Served(200, INDEX_CONTENT_TYPE, self.index)
        data = self.documents.get(key)
        if data is None:
            return None
        if not _accepts_json(accept):
            return Served(406, INDEX_CONTENT_TYPE, b"", {"Vary": "Accept"})
        etag = document_hash(data)
        headers = {"Etag": f'"{etag}"', "Vary": "Accept"}
        wanted = query.get("hash")
        if wanted and wanted != etag:
            location = f"/openapi/v3/{key}?hash={etag}"
            body = f'<a href="{location}">Moved Permanently</a>.\n\n'.encode()
            return Served(301, "text/html; charset=utf-8", body, {"Location": location})
        if wanted:
            headers["Cache-Control"] = "public, immutable"
        return Served(200, DOCUMENT_CONTENT_TYPE, data, headers)
