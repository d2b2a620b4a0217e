"""OpenAPI v3 documents: recorded shape, and exactly what kubectl v1.32 relies on."""

import hashlib
import json
from typing import Any

from trainjob_devcluster.common.resources import ResourceType, load_trainjob_crd, resource_from_crd
from trainjob_devcluster.http import openapi
from trainjob_devcluster.http.openapi import META, OpenApiDocuments, Served

TJ = "/apis/trainer.kubeflow.org/v1alpha1"
TJ_KIND = "org.kubeflow.trainer.v1alpha1.TrainJob"
TJ_GVK = {"group": "trainer.kubeflow.org", "kind": "TrainJob", "version": "v1alpha1"}
EMPTY_SHA512 = (
    "CF83E1357EEFB8BDF1542850D66D8007D620E4050B5715DC83F4A921D36CE9CE"
    "47D0D13C5D85F2B0FF8318D2877EEC2F63B931BD47417A81A538327AF927DA3E"
)


def _core(kind: str, plural: str, **kw: Any) -> ResourceType:
    kw.setdefault("namespaced", True)
    return ResourceType(
        group="", version="v1", kind=kind, plural=plural, singular=kind.lower(), **kw
    )


def served() -> list[ResourceType]:
    return [
        _core("Namespace", "namespaces", namespaced=False),
        _core("Pod", "pods", subresources=("status",)),
        _core("ServiceAccount", "serviceaccounts", subresources=("token",)),
        ResourceType(
            group="authentication.k8s.io",
            version="v1",
            kind="TokenReview",
            plural="tokenreviews",
            singular="tokenreview",
            namespaced=False,
            verbs=("create",),
        ),
        resource_from_crd(load_trainjob_crd()),
    ]


def trainer_doc() -> dict[str, Any]:
    doc = openapi.group_version_document(served(), "trainer.kubeflow.org", "v1alpha1")
    assert doc is not None
    return doc


def all_docs() -> dict[str, dict[str, Any]]:
    return {k: json.loads(v) for k, v in openapi.v3_documents(served()).items()}


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, op)
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if method != "parameters"
    ]


def _refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            found.add(node["$ref"])
        node = list(node.values())
    if isinstance(node, list):
        for value in node:
            found |= _refs(value)
    return found


def test_trainer_document_matches_recorded_shape() -> None:
    # h_openapi_v3_trainer_group: openapi, info, the four paths, the fifteen schemas.
    doc = trainer_doc()
    assert doc["openapi"] == "3.0.0"
    assert doc["info"] == {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"}
    assert list(doc["paths"]) == [
        f"{TJ}/namespaces/{{namespace}}/trainjobs",
        f"{TJ}/namespaces/{{namespace}}/trainjobs/{{name}}",
        f"{TJ}/namespaces/{{namespace}}/trainjobs/{{name}}/status",
        f"{TJ}/trainjobs",
    ]
    assert list(doc["components"]["schemas"]) == [
        META + "DeleteOptions",
        META + "FieldsV1",
        META + "ListMeta",
        META + "ManagedFieldsEntry",
        META + "ObjectMeta",
        META + "OwnerReference",
        META + "Patch",
        META + "Preconditions",
        META + "ShardInfo",
        META + "Status",
        META + "StatusCause",
        META + "StatusDetails",
        META + "Time",
        TJ_KIND,
        TJ_KIND + "List",
    ]


def test_trainer_operations() -> None:
    doc = trainer_doc()
    ops = {(path.removeprefix(TJ), method): op for path, method, op in _operations(doc)}
    ids = {key: (op["operationId"], op["x-kubernetes-action"]) for key, op in ops.items()}
    assert ids == {
        ("/namespaces/{namespace}/trainjobs", "get"): (
            "listTrainerKubeflowOrgV1alpha1NamespacedTrainJob",
            "list",
        ),
        ("/namespaces/{namespace}/trainjobs", "post"): (
            "createTrainerKubeflowOrgV1alpha1NamespacedTrainJob",
            "post",
        ),
        ("/namespaces/{namespace}/trainjobs", "delete"): (
            "deleteTrainerKubeflowOrgV1alpha1CollectionNamespacedTrainJob",
            "deletecollection",
        ),
        ("/namespaces/{namespace}/trainjobs/{name}", "get"): (
            "readTrainerKubeflowOrgV1alpha1NamespacedTrainJob",
            "get",
        ),
        ("/namespaces/{namespace}/trainjobs/{name}", "put"): (
            "replaceTrainerKubeflowOrgV1alpha1NamespacedTrainJob",
            "put",
        ),
        ("/namespaces/{namespace}/trainjobs/{name}", "delete"): (
            "deleteTrainerKubeflowOrgV1alpha1NamespacedTrainJob",
            "delete",
        ),
        ("/namespaces/{namespace}/trainjobs/{name}", "patch"): (
            "patchTrainerKubeflowOrgV1alpha1NamespacedTrainJob",
            "patch",
        ),
        ("/namespaces/{namespace}/trainjobs/{name}/status", "get"): (
            "readTrainerKubeflowOrgV1alpha1NamespacedTrainJobStatus",
            "get",
        ),
        ("/namespaces/{namespace}/trainjobs/{name}/status", "put"): (
            "replaceTrainerKubeflowOrgV1alpha1NamespacedTrainJobStatus",
            "put",
        ),
        ("/namespaces/{namespace}/trainjobs/{name}/status", "patch"): (
            "patchTrainerKubeflowOrgV1alpha1NamespacedTrainJobStatus",
            "patch",
        ),
        ("/trainjobs", "get"): ("listTrainerKubeflowOrgV1alpha1TrainJobForAllNamespaces", "list"),
    }
    assert all(op["x-kubernetes-group-version-kind"] == TJ_GVK for op in ops.values())
    assert all(op["tags"] == ["trainerKubeflowOrg_v1alpha1"] for op in ops.values())


def test_patch_operation_in_full() -> None:
    op = trainer_doc()["paths"][f"{TJ}/namespaces/{{namespace}}/trainjobs/{{name}}"]["patch"]
    ref = {"schema": {"$ref": "#/components/schemas/" + TJ_KIND}}
    patch = {"schema": {"$ref": "#/components/schemas/" + META + "Patch"}}
    assert op == {
        "tags": ["trainerKubeflowOrg_v1alpha1"],
        "operationId": "patchTrainerKubeflowOrgV1alpha1NamespacedTrainJob",
        "parameters": [
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
            {
                "name": "fieldManager",
                "in": "query",
                "schema": {"type": "string", "uniqueItems": True},
            },
            {
                "name": "fieldValidation",
                "in": "query",
                "schema": {"type": "string", "uniqueItems": True},
            },
            {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": True}},
        ],
        "responses": {
            "200": {
                "description": "OK",
                "content": {"application/json": ref, "application/yaml": ref},
            },
            "201": {
                "description": "Created",
                "content": {"application/json": ref, "application/yaml": ref},
            },
            "401": {"description": "Unauthorized"},
        },
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": TJ_GVK,
        "requestBody": {
            "content": {
                "application/apply-patch+yaml": patch,
                "application/json-patch+json": patch,
                "application/merge-patch+json": patch,
            },
            "required": True,
        },
    }


def test_every_patch_lets_kubectl_send_field_validation() -> None:
    # kubectl v1.32 sends fieldValidation=Strict only when a PATCH operation for the kind
    # has x-kubernetes-group-version-kind and a fieldValidation query parameter; otherwise
    # it validates on the client against /openapi/v2 and fails ("failed to download
    # openapi"). No document lists strategic-merge-patch: see openapi's docstring.
    patched: set[str] = set()
    for doc in all_docs().values():
        for _, method, op in _operations(doc):
            if method != "patch":
                continue
            gvk = op["x-kubernetes-group-version-kind"]
            patched.add(f"{gvk['group']}/{gvk['version']}/{gvk['kind']}")
            assert {"name": "fieldValidation", "in": "query"}.items() <= op["parameters"][2].items()
            assert "application/strategic-merge-patch+json" not in op["requestBody"]["content"]
    assert patched == {
        "/v1/Namespace",
        "/v1/Pod",
        "/v1/ServiceAccount",
        "trainer.kubeflow.org/v1alpha1/TrainJob",
    }


def test_every_reference_resolves() -> None:
    for key, doc in all_docs().items():
        names = {"#/components/schemas/" + n for n in doc["components"]["schemas"]}
        assert _refs(doc) <= names, key


def test_trainjob_schema_is_the_crd_schema_with_meta_and_gvk() -> None:
    crd = load_trainjob_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema = trainer_doc()["components"]["schemas"][TJ_KIND]
    assert schema["x-kubernetes-group-version-kind"] == [TJ_GVK]
    assert schema["properties"]["metadata"] == {
        "allOf": [{"$ref": "#/components/schemas/" + META + "ObjectMeta"}]
    }
    assert schema["properties"]["spec"] == crd["properties"]["spec"]
    assert schema["properties"]["status"] == crd["properties"]["status"]
    assert schema["x-kubernetes-validations"] == crd["x-kubernetes-validations"]
    assert crd["properties"]["metadata"] == {"type": "object"}  # the CRD itself is untouched


def test_trainjob_list_schema() -> None:
    assert trainer_doc()["components"]["schemas"][TJ_KIND + "List"] == {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/" + TJ_KIND}},
            "kind": {"type": "string"},
            "metadata": {"allOf": [{"$ref": "#/components/schemas/" + META + "ListMeta"}]},
        },
        "required": ["items"],
        "x-kubernetes-group-version-kind": [
            {"group": "trainer.kubeflow.org", "kind": "TrainJobList", "version": "v1alpha1"}
        ],
    }


def test_core_document() -> None:
    doc = all_docs()["api/v1"]
    assert doc["info"] == {"title": "Kubernetes", "version": "v1.32.4+devcluster"}
    assert list(doc["paths"]) == [
        "/api/v1/namespaces",
        "/api/v1/namespaces/{namespace}/pods",
        "/api/v1/namespaces/{namespace}/pods/{name}",
        "/api/v1/namespaces/{namespace}/pods/{name}/status",
        "/api/v1/namespaces/{namespace}/serviceaccounts",
        "/api/v1/namespaces/{namespace}/serviceaccounts/{name}",
        "/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        "/api/v1/namespaces/{name}",
        "/api/v1/pods",
        "/api/v1/serviceaccounts",
    ]
    schemas = doc["components"]["schemas"]
    assert schemas["io.k8s.api.core.v1.Pod"] == {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"allOf": [{"$ref": "#/components/schemas/" + META + "ObjectMeta"}]},
        },
        "x-kubernetes-preserve-unknown-fields": True,
        "x-kubernetes-group-version-kind": [{"group": "", "kind": "Pod", "version": "v1"}],
    }
    assert schemas[META + "DeleteOptions"]["x-kubernetes-group-version-kind"] == [
        {"group": "", "kind": "DeleteOptions", "version": "v1"}
    ]
    token = doc["paths"]["/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"]
    assert list(token) == ["post", "parameters"]
    assert token["post"]["operationId"] == "createCoreV1NamespacedServiceAccountToken"
    assert token["post"]["x-kubernetes-group-version-kind"] == {
        "group": "authentication.k8s.io",
        "kind": "TokenRequest",
        "version": "v1",
    }
    assert "io.k8s.api.authentication.v1.TokenRequest" in schemas
    # A built-in delete answers the object; the namespace list is cluster-scoped.
    pod_delete = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["delete"]
    assert pod_delete["responses"]["200"]["content"]["application/json"] == {
        "schema": {"$ref": "#/components/schemas/io.k8s.api.core.v1.Pod"}
    }
    assert doc["paths"]["/api/v1/namespaces"]["get"]["operationId"] == "listCoreV1Namespace"


def test_authentication_document_has_only_create() -> None:
    doc = all_docs()["apis/authentication.k8s.io/v1"]
    assert list(doc["paths"]) == ["/apis/authentication.k8s.io/v1/tokenreviews"]
    item = doc["paths"]["/apis/authentication.k8s.io/v1/tokenreviews"]
    assert list(item) == ["post", "parameters"]
    assert item["post"]["operationId"] == "createAuthenticationV1TokenReview"
    # No list, patch or delete: only ObjectMeta and what it references come along.
    assert list(doc["components"]["schemas"]) == [
        META + "FieldsV1",
        META + "ManagedFieldsEntry",
        META + "ObjectMeta",
        META + "OwnerReference",
        META + "Time",
        "io.k8s.api.authentication.v1.TokenReview",
    ]


def test_unserved_group_version_has_no_document() -> None:
    assert openapi.group_version_document(served(), "trainer.kubeflow.org", "v1") is None
    assert openapi.group_version_document(served(), "apps", "v1") is None


def test_hash_and_index() -> None:
    assert openapi.document_hash(b"") == EMPTY_SHA512
    docs = {"api/v1": b"{}", "apis/trainer.kubeflow.org/v1alpha1": b'{"a":1}'}
    digest = hashlib.sha512(b'{"a":1}').hexdigest().upper()
    assert openapi.v3_index(docs) == {
        "paths": {
            "api/v1": {
                "serverRelativeURL": "/openapi/v3/api/v1?hash="
                + hashlib.sha512(b"{}").hexdigest().upper()
            },
            "apis/trainer.kubeflow.org/v1alpha1": {
                "serverRelativeURL": f"/openapi/v3/apis/trainer.kubeflow.org/v1alpha1?hash={digest}"
            },
        }
    }
    assert openapi.encode({"b": [1, "é"], "a": None}) == '{"b":[1,"é"],"a":null}'.encode()


def test_documents_are_deterministic() -> None:
    assert openapi.v3_documents(served()) == openapi.v3_documents(served())
    assert list(openapi.v3_documents(served())) == [
        "api/v1",
        "apis/authentication.k8s.io/v1",
        "apis/trainer.kubeflow.org/v1alpha1",
    ]


def test_serve_index_and_documents() -> None:
    docs = OpenApiDocuments(served())
    data = docs.documents["apis/trainer.kubeflow.org/v1alpha1"]
    digest = openapi.document_hash(data)
    index = docs.serve("/openapi/v3", {}, "application/json, */*")
    # h_openapi_v3_index: the recorded server sends the index as text/plain.
    assert index == Served(200, "text/plain; charset=utf-8", docs.index)
    url = f"/openapi/v3/apis/trainer.kubeflow.org/v1alpha1?hash={digest}"
    assert json.loads(docs.index)["paths"]["apis/trainer.kubeflow.org/v1alpha1"] == {
        "serverRelativeURL": url
    }
    path = "/openapi/v3/apis/trainer.kubeflow.org/v1alpha1"
    assert docs.serve(path, {"hash": digest}, "application/json") == Served(
        200,
        "application/json",
        data,
        {"Etag": f'"{digest}"', "Vary": "Accept", "Cache-Control": "public, immutable"},
    )
    assert docs.serve(path, {}, None) == Served(
        200, "application/json", data, {"Etag": f'"{digest}"', "Vary": "Accept"}
    )
    assert docs.serve(path, {"hash": "STALE"}, "application/json") == Served(
        301,
        "text/html; charset=utf-8",
        f'<a href="{url}">Moved Permanently</a>.\n\n'.encode(),
        {"Location": url},
    )
    protobuf = "application/com.github.proto-openapi.spec.v3.v1.0+protobuf"
    assert docs.serve(path, {}, protobuf) == Served(
        406, "text/plain; charset=utf-8", b"", {"Vary": "Accept"}
    )


def test_serve_unknown_paths_are_none() -> None:
    docs = OpenApiDocuments(served())
    # kubectl asks /openapi/v2 for protobuf on a re-apply; a 404 makes it fall back quietly.
    protobuf_v2 = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
    assert docs.serve("/openapi/v2", {}, protobuf_v2) is None
    assert docs.serve("/openapi/v3/apis/apps/v1", {}, "application/json") is None
    assert docs.serve("/openapi/v3x", {}, "application/json") is None


def test_schema_names() -> None:
    assert openapi.schema_name("trainer.kubeflow.org", "v1alpha1", "TrainJob", builtin=False) == (
        TJ_KIND
    )
    assert openapi.schema_name("", "v1", "Pod", builtin=True) == "io.k8s.api.core.v1.Pod"
    assert openapi.schema_name("rbac.authorization.k8s.io", "v1", "Role", builtin=True) == (
        "io.k8s.api.rbac.v1.Role"
    )
