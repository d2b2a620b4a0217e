"""The same requests to the development cluster and to the real control plane, compared:
status code, reason, message, and the shape of the body. A difference is a development
cluster bug: each one found was fixed there, and the case that showed it stays here.

Request ids, uids, timestamps and resourceVersions differ between any two servers, so
bodies are compared by shape (their key paths) and by the fields named in each case.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
import pytest_asyncio

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.pytest_plugin import KubeAPI
from trainjob_devcluster.harness.realcluster import RealCluster

NS = "team-a"
TRAINJOBS = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs"
REVIEWS = (
    "/apis/authentication.k8s.io/v1/tokenreviews",
    "/apis/authorization.k8s.io/v1/subjectaccessreviews",
)


@dataclass
class Answer:
    code: int
    body: Any


class Server:
    """One API server, spoken to as its admin over HTTPS, and through the real kubectl."""

    def __init__(self, cluster: KubeAPI, session: aiohttp.ClientSession, home: Path) -> None:
        self.cluster = cluster
        self.session = session
        self.home = home

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        token: str | None = None,
        accept: str | None = None,
    ) -> Answer:
        # token "": anonymous (no header); None: the admin.
        headers = (
            {} if token == "" else {"Authorization": f"Bearer {token or self.cluster.admin_token}"}
        )
        if accept is not None:
            headers["Accept"] = accept
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        async with self.session.request(
            method,
            self.cluster.url + path,
            data=data,
            headers=headers,
            ssl=self.cluster.client_ssl_context(),
        ) as response:
            raw = await response.read()
        try:
            return Answer(response.status, json.loads(raw))
        except ValueError:
            return Answer(response.status, raw.decode(errors="replace"))

    async def kubectl(self, *args: str) -> tuple[int, str, str]:
        # Not blocking the loop: the development cluster serves from this same loop.
        process = await asyncio.create_subprocess_exec(
            "kubectl",
            f"--cache-dir={self.home / 'cache'}",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={
                "PATH": os.environ.get("PATH", ""),
                "HOME": str(self.home),
                "KUBECONFIG": str(self.cluster.kubeconfig_path),
            },
        )
        out, err = await process.communicate()
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()


@dataclass
class Both:
    dev: Server
    real: Server

    async def call(self, *args: Any, **kwargs: Any) -> tuple[Answer, Answer]:
        return await self.dev.call(*args, **kwargs), await self.real.call(*args, **kwargs)

    async def kubectl(self, *args: str) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
        return await self.dev.kubectl(*args), await self.real.kubectl(*args)

    def each(self, action: str, *args: Any, **kwargs: Any) -> None:
        """The same direct call (``create_trainjob``, ``ensure_namespace`` ...) on both."""
        for server in (self.dev, self.real):
            getattr(server.cluster, action)(*args, **kwargs)


@pytest_asyncio.fixture
async def both(
    devcluster: DevCluster, real_cluster: RealCluster, tmp_path: Path
) -> AsyncIterator[Both]:
    async with aiohttp.ClientSession() as session:
        (tmp_path / "dev").mkdir()
        (tmp_path / "real").mkdir()
        yield Both(
            Server(devcluster, session, tmp_path / "dev"),
            Server(real_cluster, session, tmp_path / "real"),
        )


def shape(value: Any, prefix: str = "") -> set[str]:
    """The key paths of a JSON document (list items share one path)."""
    if isinstance(value, dict):
        paths = {prefix or "."}
        for key, item in value.items():
            paths |= shape(item, f"{prefix}.{key}")
        return paths
    if isinstance(value, list):
        paths = {prefix + "[]"}
        for item in value:
            paths |= shape(item, prefix + "[]")
        return paths
    return {prefix}


def status_fields(answer: Answer) -> tuple[int, Any, Any, Any]:
    body = answer.body if isinstance(answer.body, dict) else {}
    return answer.code, body.get("kind"), body.get("reason"), body.get("message")


def require_kubectl() -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")


# -- the review endpoints answer only POST ----------------------------------------------


@pytest.mark.parametrize("path", REVIEWS)
@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "PATCH"])
async def test_review_collections_refuse_other_methods_as_405(
    both: Both, path: str, method: str
) -> None:
    body = {} if method in ("PUT", "PATCH") else None
    patch = "application/merge-patch+json"
    kind = patch if method == "PATCH" else "application/json"
    dev, real = await both.call(method, path, body, content_type=kind)
    assert dev.body == real.body
    assert (real.code, real.body["reason"]) == (405, "MethodNotAllowed")


@pytest.mark.parametrize("path", REVIEWS)
@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
async def test_a_named_review_has_no_route(both: Both, path: str, method: str) -> None:
    body = {} if method == "PUT" else None
    dev, real = await both.call(method, path + "/some-name", body)
    assert dev.body == real.body
    assert (real.code, real.body["message"]) == (
        404,
        "the server could not find the requested resource",
    )


# -- kubectl ---------------------------------------------------------------------------


async def test_kubectl_auth_can_i_as_another_user_is_never_a_wrong_yes(both: Both) -> None:
    """``--as`` makes kubectl send Impersonate-User: the real server answers for that
    user; the development cluster cannot, so it refuses instead of answering as the admin."""
    require_kubectl()
    args = ("auth", "can-i", "get", "/metrics", "--as", "system:serviceaccount:monitoring:default")
    dev, real = await both.kubectl(*args)
    assert real == (1, "no\n", "")
    code, out, err = dev
    assert code != 0
    assert "yes" not in out
    assert "does not serve impersonation" in err
    assert "use a real API server" in err


# -- object answers the server relies on --------------------------------------------------


async def test_a_missing_trainjob_is_the_same_404(both: Both) -> None:
    both.each("ensure_namespace", NS)
    dev, real = await both.call("GET", f"{TRAINJOBS}/nope")
    assert status_fields(dev) == status_fields(real)
    assert dev.body == real.body


async def test_a_strategic_merge_patch_to_a_trainjob_is_the_same_415(both: Both) -> None:
    """The answer the development cluster gives a strategic merge patch on every kind."""
    both.each("create_trainjob", NS, "tj")
    strategic = "application/strategic-merge-patch+json"
    dev, real = await both.call(
        "PATCH", f"{TRAINJOBS}/tj", {"metadata": {}}, content_type=strategic
    )
    assert dev.body == real.body
    assert (real.code, real.body["reason"]) == (415, "UnsupportedMediaType")


async def test_forced_status_applies_alike(both: Both) -> None:
    """What our server sends: applies to /status with force, from two managers (the
    devcluster has no conflicts between managers, so only forced applies compare)."""
    both.each("create_trainjob", NS, "tj")
    status = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj"},
        "status": {
            "trainerStatus": {"progressPercentage": 10, "lastUpdatedTime": "2026-12-02T18:00:00Z"}
        },
    }
    apply = "application/apply-patch+yaml"
    path = f"{TRAINJOBS}/tj/status?force=true&fieldManager="
    dev, real = await both.call("PATCH", path + "one", status, content_type=apply)
    assert dev.code == real.code == 200
    assert dev.body["status"] == real.body["status"]
    status["status"]["trainerStatus"]["progressPercentage"] = 20
    dev, real = await both.call("PATCH", path + "two", status, content_type=apply)
    assert dev.code == real.code == 200
    assert dev.body["status"] == real.body["status"]
    managers = [
        sorted(
            (m["manager"], m["operation"], m.get("subresource"), json.dumps(m["fieldsV1"]))
            for m in a.body["metadata"]["managedFields"]
            if m["operation"] == "Apply"
        )
        for a in (dev, real)
    ]
    assert managers[0] == managers[1]


async def test_subject_access_reviews_give_the_same_verdict_and_reason(both: Both) -> None:
    """What the secure metrics port asks: bound, the reason names the binding; unbound,
    no reason."""
    rbac = "rbac.authorization.k8s.io"
    both.each("ensure_namespace", "mon")
    both.each(
        "create",
        "clusterroles",
        {
            "metadata": {"name": "metrics-reader"},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
        group=rbac,
    )
    both.each(
        "create",
        "clusterrolebindings",
        {
            "metadata": {"name": "metrics-reader"},
            "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "metrics-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "mon"}],
        },
        group=rbac,
    )
    for user, path in [
        ("system:serviceaccount:mon:prometheus", "/metrics"),
        ("system:serviceaccount:mon:stranger", "/metrics"),
        ("system:serviceaccount:mon:stranger", "/apis"),
        ("system:serviceaccount:mon:stranger", "/openid/v1/jwks"),
    ]:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": [
                    "system:serviceaccounts",
                    "system:serviceaccounts:mon",
                    "system:authenticated",
                ],
                "nonResourceAttributes": {"path": path, "verb": "get"},
            },
        }
        dev, real = await both.call("POST", REVIEWS[1], review)
        assert (dev.code, dev.body["status"]) == (real.code, real.body["status"]), (user, path)
    # Two default bindings allow /healthz to an authenticated user: the real server names
    # whichever its cache lists first.
    review["spec"]["nonResourceAttributes"]["path"] = "/healthz"
    dev, real = await both.call("POST", REVIEWS[1], review)
    possible = {
        f'RBAC: allowed by ClusterRoleBinding "{name}" of ClusterRole "{name}" to Group '
        '"system:authenticated"'
        for name in ("system:discovery", "system:public-info-viewer")
    }
    assert dev.body["status"]["allowed"] is real.body["status"]["allowed"] is True
    assert {dev.body["status"]["reason"], real.body["status"]["reason"]} <= possible


async def test_a_token_review_of_a_stranger_token(both: Both) -> None:
    review = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "not-a-token"},
    }
    dev, real = await both.call("POST", REVIEWS[0], review)
    assert dev.code == real.code == 201
    assert dev.body["status"] == real.body["status"]


@pytest.mark.parametrize(
    "path",
    [
        "/healthz",
        "/healthz/etcd",
        "/livez",
        "/readyz",
        "/version",
        "/api",
        "/apis",
        "/metrics",
        "/openid/v1/jwks",
    ],
)
async def test_what_an_anonymous_caller_may_read(both: Both, path: str) -> None:
    dev, real = await both.call("GET", path, token="")
    assert dev.code == real.code, (dev, real)
    if real.code == 403:
        assert dev.body == real.body


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/nosuchthings"),
        ("POST", "/apis/authorization.k8s.io/v1/nosuchreviews"),
        ("GET", f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/nosuchthings"),
        ("GET", "/apis/no.such.group/v1/things"),
        ("GET", "/no/such/path"),
    ],
)
async def test_an_unknown_path_is_the_same_404(both: Both, method: str, path: str) -> None:
    """A NotFound Status below a built-in group-version, Go's plain-text 404 elsewhere
    (below a custom resource's group-version too)."""
    dev, real = await both.call(method, path, {} if method == "POST" else None)
    assert (dev.code, dev.body) == (real.code, real.body)
    assert real.code == 404


async def test_a_short_token_is_the_same_422(both: Both) -> None:
    both.each("ensure_namespace", NS)
    both.each("create", "serviceaccounts", {"metadata": {"name": "sa"}}, NS)
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"audiences": ["x"], "expirationSeconds": 60},
    }
    dev, real = await both.call(
        "POST", f"/api/v1/namespaces/{NS}/serviceaccounts/sa/token", request
    )
    assert (dev.code, dev.body) == (real.code, real.body)
    assert real.code == 422


@pytest.mark.parametrize("name", ["plain", 'a"b', "caf\u00e9", "tab\there", "back\\slash"])
async def test_a_missing_names_404_quotes_it_as_go_does(both: Both, name: str) -> None:
    both.each("ensure_namespace", NS)
    path = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs/{quote(name)}"
    dev, real = await both.call("GET", path)
    assert (dev.code, dev.body) == (real.code, real.body)
    assert real.code == 404


def continue_token(**fields: Any) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", **fields}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "query",
    [
        "limit=abc",
        "limit=-1",
        "limit=1.5",
        "continue=not-a-token",
        "continue=" + continue_token(rv=0, start="x"),
        "continue=" + continue_token(rv=-2, start="x"),
        "continue=" + continue_token(rv=1, start=""),
        "continue=" + continue_token(rv=1, start="team-a/x"),
        "continue=" + continue_token(rv=1, start="a/../b"),
        "continue=" + continue_token(rv=1, start="//a"),
        "continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiJ4In0=",
        "continue=e30",
        "continue="
        + base64.urlsafe_b64encode(b'{"v": "other/v1", "rv": 1, "start": "x"}').decode(),
        "continue=" + base64.urlsafe_b64encode(b'{"v": "meta.k8s.io/v1", "rv": 1,').decode(),
        "limit=",
        "limit=+2",
        "limit=99999999999999999999",
    ],
)
async def test_a_lists_wrong_paging_is_the_same_answer(both: Both, query: str) -> None:
    both.each("ensure_namespace", NS)
    both.each("create_trainjob", NS, "tj")
    path = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs?{query}"
    dev, real = await both.call("GET", path)
    assert dev.code == real.code, (dev, real)
    if real.code != 200:
        assert dev.body == real.body


@pytest.mark.parametrize("path", ["/.well-known/openid-configuration", "/openid/v1/jwks"])
@pytest.mark.parametrize(
    "accept",
    ["application/json", "application/jwk-set+json", "application/*", "text/plain", "*/*", ""],
)
async def test_the_issuers_documents_answer_the_same_accept_headers(
    both: Both, path: str, accept: str
) -> None:
    """The server fetches both documents to verify tokens; what a proxy or client that
    asks for another type gets is the real server's 406."""
    dev, real = await both.call("GET", path, accept=accept)
    assert dev.code == real.code, (dev, real)
    if real.code != 200:
        assert dev.body == real.body


@pytest.mark.parametrize(
    "path",
    ["/.well-known/openid-configuration", "/openid/v1/jwks", "/apis/trainer.kubeflow.org/v1alpha1"],
)
async def test_documents_the_server_reads_have_the_same_shape(both: Both, path: str) -> None:
    dev, real = await both.call("GET", path)
    assert dev.code == real.code == 200
    assert shape(dev.body) == shape(real.body)
