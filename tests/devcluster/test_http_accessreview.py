"""SubjectAccessReview over HTTP: answered from RBAC, for non-resource URLs and resources,
the default policy's public paths included; malformed reviews refused as the API server
refuses them. Impersonation is refused rather than ignored."""

from typing import Any

import pytest

from trainjob_devcluster import DevCluster

from .conftest import Api

PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
RBAC = "rbac.authorization.k8s.io"
SA_USER = "system:serviceaccount:mon:scraper"
SA_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:mon", "system:authenticated"]


def non_resource(path: str, verb: str = "get", user: str = SA_USER) -> dict[str, Any]:
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": SA_GROUPS,
            "nonResourceAttributes": {"path": path, "verb": verb},
        },
    }


def grant_metrics(devcluster: DevCluster) -> None:
    devcluster.ensure_namespace("mon")
    devcluster.create(
        "clusterroles",
        {
            "metadata": {"name": "metrics-reader"},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
        group=RBAC,
    )
    devcluster.create(
        "clusterrolebindings",
        {
            "metadata": {"name": "scraper-reads-metrics"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "metrics-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": "mon"}],
        },
        group=RBAC,
    )


async def test_non_resource_url_follows_the_cluster_role(api: Api, devcluster: DevCluster) -> None:
    code, body, _ = await api.call("POST", PATH, non_resource("/metrics"))
    assert code == 201, body
    assert body["status"] == {"allowed": False}
    assert body["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
    grant_metrics(devcluster)
    code, body, _ = await api.call("POST", PATH, non_resource("/metrics"))
    assert code == 201
    assert body["status"] == {
        "allowed": True,
        "reason": 'RBAC: allowed by ClusterRoleBinding "scraper-reads-metrics" of ClusterRole '
        '"metrics-reader" to ServiceAccount "scraper/mon"',
    }
    # Only the verb and the path the rule names.
    for path, verb in (("/metrics", "create"), ("/metricsx", "get"), ("/debug", "get")):
        _, body, _ = await api.call("POST", PATH, non_resource(path, verb))
        assert body["status"] == {"allowed": False}, (path, verb)
    # Another user of the same groups is not the bound service account.
    _, body, _ = await api.call(
        "POST", PATH, non_resource("/metrics", user="system:serviceaccount:mon:x")
    )
    assert body["status"] == {"allowed": False}


async def test_default_policy_paths_and_masters(api: Api) -> None:
    # The default bindings that allow a path are named as RBAC names them.
    _, body, _ = await api.call("POST", PATH, non_resource("/healthz"))
    assert body["status"] == {
        "allowed": True,
        "reason": 'RBAC: allowed by ClusterRoleBinding "system:discovery" of ClusterRole '
        '"system:discovery" to Group "system:authenticated"',
    }
    _, body, _ = await api.call("POST", PATH, non_resource("/openid/v1/jwks"))
    assert body["status"]["reason"] == (
        'RBAC: allowed by ClusterRoleBinding "system:service-account-issuer-discovery" of '
        'ClusterRole "system:service-account-issuer-discovery" to Group "system:serviceaccounts"'
    )
    anonymous = non_resource("/version", user="system:anonymous")
    anonymous["spec"]["groups"] = ["system:unauthenticated"]
    _, body, _ = await api.call("POST", PATH, anonymous)
    assert body["status"]["reason"] == (
        'RBAC: allowed by ClusterRoleBinding "system:public-info-viewer" of ClusterRole '
        '"system:public-info-viewer" to Group "system:unauthenticated"'
    )
    _, body, _ = await api.call("POST", PATH, non_resource("/healthz", "create"))
    assert body["status"] == {"allowed": False}
    review = non_resource("/anything")
    review["spec"]["groups"] = ["system:masters"]
    _, body, _ = await api.call("POST", PATH, review)
    assert body["status"] == {"allowed": True}


async def test_resource_attributes_follow_role_bindings(api: Api, devcluster: DevCluster) -> None:
    devcluster.ensure_namespace("mon")
    devcluster.create(
        "roles",
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        },
        "mon",
        RBAC,
    )
    devcluster.create(
        "rolebindings",
        {
            "metadata": {"name": "read-pods"},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": "mon"}],
        },
        "mon",
        RBAC,
    )
    review = non_resource("/metrics")
    del review["spec"]["nonResourceAttributes"]
    review["spec"]["resourceAttributes"] = {"namespace": "mon", "verb": "get", "resource": "pods"}
    _, body, _ = await api.call("POST", PATH, review)
    assert body["status"] == {
        "allowed": True,
        "reason": 'RBAC: allowed by RoleBinding "read-pods/mon" of Role "pod-reader" to '
        'ServiceAccount "scraper/mon"',
    }
    review["spec"]["resourceAttributes"]["namespace"] = "other"
    _, body, _ = await api.call("POST", PATH, review)
    assert body["status"] == {"allowed": False}


async def test_malformed_reviews_are_refused(api: Api, devcluster: DevCluster) -> None:
    no_attributes = non_resource("/metrics")
    del no_attributes["spec"]["nonResourceAttributes"]
    code, body, _ = await api.call("POST", PATH, no_attributes)
    assert (code, body["reason"]) == (400, "BadRequest")
    assert "exactly one of nonResourceAttributes or resourceAttributes" in body["message"]
    nobody = non_resource("/metrics", user="")
    nobody["spec"]["groups"] = []
    code, body, _ = await api.call("POST", PATH, nobody)
    assert (code, body["reason"]) == (400, "BadRequest")
    assert "at least one of user or group must be specified" in body["message"]
    for field, value, message in (
        ("groups", "system:masters", "spec.groups must be a list of strings"),
        ("nonResourceAttributes", {"path": 1}, "spec.nonResourceAttributes.path must be a string"),
    ):
        review = non_resource("/metrics")
        review["spec"][field] = value
        code, body, _ = await api.call("POST", PATH, review)
        assert (code, body["reason"], body["message"]) == (400, "BadRequest", message)
    # Nothing is stored: a review is an answer, not an object.
    assert devcluster.list("subjectaccessreviews", group="authorization.k8s.io") == []


async def test_a_service_account_needs_rbac_to_ask(api: Api, devcluster: DevCluster) -> None:
    devcluster.ensure_namespace("mon")
    devcluster.create("serviceaccounts", {"metadata": {"name": "scraper"}}, "mon")
    token = devcluster.request_token("mon", "scraper", [devcluster.issuer])
    code, body, _ = await api.call("POST", PATH, non_resource("/metrics"), token=token)
    assert code == 403
    assert body["message"] == (
        'subjectaccessreviews.authorization.k8s.io is forbidden: User "system:serviceaccount:mon:'
        'scraper" cannot create resource "subjectaccessreviews" in API group '
        '"authorization.k8s.io" at the cluster scope'
    )


@pytest.mark.parametrize(
    "path",
    [
        PATH,
        "/apis/authentication.k8s.io/v1/tokenreviews",
    ],
)
@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "PATCH"])
async def test_review_collections_answer_only_post(api: Api, path: str, method: str) -> None:
    sent = {} if method in ("PUT", "PATCH") else None
    kind = "application/merge-patch+json" if method == "PATCH" else "application/json"
    code, body, _ = await api.call(method, path, sent, content_type=kind)
    assert (code, body) == (
        405,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "the server does not allow this method on the requested resource",
            "reason": "MethodNotAllowed",
            "details": {},
            "code": 405,
        },
    )


@pytest.mark.parametrize(
    "path",
    [
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
    ],
)
async def test_self_reviews_are_not_served(api: Api, path: str) -> None:
    """kubectl auth can-i / whoami send these as protobuf, which is refused anyway: the
    paths are unknown resources, 404 as kube-apiserver answers one."""
    code, body, _ = await api.call("POST", path, {"spec": {}})
    assert (code, body["reason"], body["message"]) == (
        404,
        "NotFound",
        "the server could not find the requested resource",
    )


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_a_named_review_has_no_route(api: Api, method: str) -> None:
    body = {} if method == "PUT" else None
    code, answer, _ = await api.call(method, PATH + "/some-name", body)
    assert (code, answer) == (
        404,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "the server could not find the requested resource",
            "reason": "NotFound",
            "details": {},
            "code": 404,
        },
    )


@pytest.mark.parametrize(
    ("path", "token", "code"),
    [
        ("/healthz", None, 200),
        ("/healthz/etcd", None, 403),
        ("/version/", None, 200),
        ("/apis", None, 403),
        ("/apis/trainer.kubeflow.org", "sa", 200),
        ("/healthz/etcd", "sa", 403),
        ("/openid/v1/jwks", "sa", 200),
    ],
)
async def test_default_policy_urls_match_as_rbac_matches_them(
    api: Api, devcluster: DevCluster, path: str, token: str | None, code: int
) -> None:
    """Exact paths unless the default role's URL ends in ``*``: ``/healthz`` is
    everyone's, ``/healthz/etcd`` nobody's without a binding."""
    if token == "sa":
        devcluster.ensure_namespace("mon")
        devcluster.create("serviceaccounts", {"metadata": {"name": "scraper"}}, "mon")
        token = devcluster.request_token("mon", "scraper", [devcluster.issuer])
    got, body, _ = await api.call("GET", path, token=token)
    assert got == code, body
    if code == 403:
        user = "system:anonymous" if token is None else SA_USER
        assert body["message"] == f'forbidden: User "{user}" cannot get path "{path}"'


@pytest.mark.parametrize(
    "header",
    ["Impersonate-User", "Impersonate-Group", "Impersonate-Uid", "Impersonate-Extra-Scopes"],
)
async def test_impersonation_is_refused_not_answered_as_the_caller(
    api: Api, devcluster: DevCluster, header: str
) -> None:
    body = {"metadata": {"name": "team-a"}}
    code, answer, _ = await api.call(
        "POST", "/api/v1/namespaces", body, headers={header: "system:serviceaccount:mon:x"}
    )
    assert code == 403
    assert (answer["kind"], answer["reason"]) == ("Status", "Forbidden")
    assert answer["message"] == (
        f"the development cluster does not serve impersonation ({header} header): "
        "use a real API server to act as another user"
    )
    assert devcluster.get("namespaces", "", "team-a") is None
    # Authentication comes first, as in kube-apiserver: a stranger is 401 either way.
    code, _, _ = await api.call("GET", "/api/v1/namespaces", token="nope", headers={header: "x"})
    assert code == 401
