"""Shared pieces of the injector, certificate and CA distribution tests (no tests here).

``StandIn`` serves, over a real socket, the two kinds the devcluster does not:
``jobset.x-k8s.io/v1alpha2`` JobSets (GET, list and watch) and
``admissionregistration.k8s.io/v1`` MutatingWebhookConfigurations (GET and JSON Patch),
with the API server's error bodies.
Our KubeClient talks to it through a kubeconfig of its own, exactly as to a cluster.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from trainjob_devcluster.harness.workloads import controller_reference
from trainjob_devcluster.storage.patches import PatchError, json_patch
from trainjob_status.contract import ANCESTOR_STEP_LABEL as ANCESTOR
from trainjob_status.contract import JOBSET_NAME_LABEL as JOBSET_LABEL
from trainjob_status_server.kube.client import KubeClient

NS = "team-a"
TJ = "tj"
RJOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
SERVICE_HOST = "trainjob-status.trainjob-status.svc"


def status_of(code: int, reason: str, message: str) -> web.Response:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
    body |= {"message": message, "reason": reason, "code": code}
    return web.json_response(body, status=code)


class StandIn:
    """A few objects of kinds the devcluster lacks, served as the API server would."""

    def __init__(self, workdir: Path) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.requests: Counter[tuple[str, str]] = Counter()
        self.stall: dict[str, float] = {}  # plural -> seconds to hold each request
        # plural -> the error code its lists and watches answer (a CRD not installed: 404,
        # no RBAC rule: 403).
        self.refuse_list: dict[str, int] = {}
        self.kubeconfig_path = workdir / "standin.kubeconfig"
        self._rv = 100
        self._events: list[tuple[int, str, str, dict[str, Any]]] = []  # rv, plural, type, obj
        self._wake = asyncio.Event()
        self._runner: web.AppRunner | None = None

    def put(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        key = (plural, meta.get("namespace", ""), meta["name"])
        kind = "MODIFIED" if key in self.objects else "ADDED"
        self.objects[key] = obj
        self._event(plural, kind, obj)
        return obj

    def delete(self, plural: str, name: str, namespace: str = "") -> None:
        obj = self.objects.pop((plural, namespace, name))
        self._rv += 1
        self._event(plural, "DELETED", {**obj, "metadata": {**obj["metadata"]}})

    def _event(self, plural: str, kind: str, obj: dict[str, Any]) -> None:
        self._events.append((self._rv, plural, kind, copy.deepcopy(obj)))
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        info = request.match_info
        plural, namespace = info["plural"], info.get("namespace")
        watching = request.query.get("watch") == "true"
        self.requests[("WATCH" if watching else "LIST", plural)] += 1
        if plural in self.stall:
            await asyncio.sleep(self.stall[plural])
        if plural in self.refuse_list:
            code = self.refuse_list[plural]
            reason = "Forbidden" if code == 403 else "NotFound"
            return status_of(code, reason, f"{plural} cannot be listed here")
        if not watching:
            items = [
                copy.deepcopy(obj)
                for (p, ns, _), obj in self.objects.items()
                if p == plural and namespace in (None, ns)
            ]
            meta = {"resourceVersion": str(self._rv)}
            return web.json_response({"kind": "List", "metadata": meta, "items": items})
        since = int(request.query.get("resourceVersion") or 0)
        seconds = float(request.query.get("timeoutSeconds") or 60)
        response = web.StreamResponse()
        await response.prepare(request)
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            async with asyncio.timeout(seconds):
                while True:
                    wake = self._wake
                    for rv, p, kind, obj in self._events:
                        if rv > since and p == plural:
                            since = rv
                            line = json.dumps({"type": kind, "object": obj}) + "\n"
                            await response.write(line.encode())
                    await wake.wait()
        return response

    def get(self, plural: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.objects.get((plural, namespace, name))

    async def _handle(self, request: web.Request) -> web.Response:
        info = request.match_info
        plural, namespace, name = info["plural"], info.get("namespace", ""), info["name"]
        self.requests[(request.method, plural)] += 1
        if plural in self.stall:
            await asyncio.sleep(self.stall[plural])
        key = (plural, namespace, name)
        obj = self.objects.get(key)
        if obj is None:
            return status_of(404, "NotFound", f'{plural} "{name}" not found')
        if request.method == "GET":
            return web.json_response(obj)
        if request.headers.get("Content-Type") != "application/json-patch+json":
            return status_of(415, "UnsupportedMediaType", "unsupported patch type")
        try:
            patched = json_patch(copy.deepcopy(obj), json.loads(await request.read()))
        except PatchError:
            return status_of(422, "Invalid", "the server rejected our request")
        self.put(plural, patched)
        return web.json_response(patched)

    async def start(self) -> StandIn:
        app = web.Application()
        for prefix in ("/apis/{group}/{version}", "/apis/{group}/{version}/namespaces/{namespace}"):
            app.router.add_route("GET", prefix + "/{plural}", self._collection)
            app.router.add_route("GET", prefix + "/{plural}/{name}", self._handle)
            app.router.add_route("PATCH", prefix + "/{plural}/{name}", self._handle)
        # A watch ends when its client goes (the handler is cancelled), not at shutdown.
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            shutdown_timeout=0.5,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "s", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "s", "user": {"token": "standin"}}],
            "contexts": [{"name": "s", "context": {"cluster": "s", "user": "s"}}],
            "current-context": "s",
        }
        self.kubeconfig_path.write_text(yaml.safe_dump(config))
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[KubeClient]:
        async with KubeClient(self.kubeconfig_path, qps=1000, burst=1000, timeout=2.0) as kube:
            yield kube


def jobset(name: str = TJ, namespace: str = NS) -> dict[str, Any]:
    """A JobSet as the Trainer builds it from the torch-distributed runtime with
    initializers: only the trainer step's Job template carries the ancestor label."""

    def rjob(rname: str, labels: dict[str, str]) -> dict[str, Any]:
        pod_spec = {"containers": [{"name": rname, "image": "busybox"}]}
        template = {"metadata": {"labels": labels}, "spec": {"template": {"spec": pod_spec}}}
        return {"name": rname, "replicas": 1, "template": template}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicatedJobs": [
                rjob("dataset-initializer", {ANCESTOR: "dataset-initializer"}),
                rjob("node", {ANCESTOR: "trainer"}),
            ]
        },
    }


def webhook_configuration(name: str = "trainjob-status", hooks: int = 1) -> dict[str, Any]:
    webhooks = []
    for i in range(hooks):
        service = {"name": "trainjob-status", "namespace": "trainjob-status", "port": 10443}
        webhooks.append(
            {
                "name": f"pods{i}.trainjob-status.kubeflow.org",
                "clientConfig": {"service": {**service, "path": "/mutate-pods"}},
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
            }
        )
    # One webhook that is not ours (by URL): its caBundle is never touched.
    webhooks.append(
        {
            "name": "elsewhere.example.com",
            "clientConfig": {"url": "https://elsewhere.example.com/x", "caBundle": "b3RoZXI="},
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
        }
    )
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": webhooks,
    }


def ca_bundles(standin: StandIn, name: str = "trainjob-status") -> list[bytes | None]:
    """Each webhook's caBundle, decoded (None when unset)."""
    config = standin.get("mutatingwebhookconfigurations", name)
    assert config is not None
    out: list[bytes | None] = []
    for hook in config["webhooks"]:
        bundle = hook["clientConfig"].get("caBundle")
        out.append(None if bundle is None else base64.b64decode(bundle))
    return out


def pod(
    name: str = "tj-node-0-0",
    *,
    trainjob: str | None = TJ,
    rjob: str | None = "node",
    labels: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    owner: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod as the Job controller creates it for a TrainJob's JobSet (the Job ``owner``,
    as stored, its controller when given)."""
    all_labels = dict(labels or {})
    if trainjob is not None:
        all_labels[JOBSET_LABEL] = trainjob
    if rjob is not None:
        all_labels[RJOB_LABEL] = rjob
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": all_labels}
    if owner is not None:
        meta["ownerReferences"] = [controller_reference(owner)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "serviceAccountName": "trainer",
            "containers": containers or [{"name": "node", "image": "pytorch/pytorch"}],
            **spec,
        },
    }


def review(obj: Any, *, uid: str = "uid-1", operation: str = "CREATE", **request: Any) -> Any:
    body = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": NS,
        "operation": operation,
        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    body.update(request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}


# -- applying a JSON Patch, independently of the code under test ---------------------------


def _pointer(path: str) -> list[str]:
    assert path.startswith("/")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 add/replace/test, strictly: a path whose parent is missing, a replace of
    nothing, or a failed test raises."""
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = _pointer(op["path"])
        target = doc
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        kind = op["op"]
        if kind == "test":
            current = target[int(last)] if isinstance(target, list) else target[last]
            assert current == op["value"], op
        elif kind == "add":
            if isinstance(target, list):
                if last == "-":
                    target.append(copy.deepcopy(op["value"]))
                else:
                    target.insert(int(last), copy.deepcopy(op["value"]))
            else:
                target[last] = copy.deepcopy(op["value"])
        elif kind == "replace":
            if isinstance(target, list):
                target[int(last)] = copy.deepcopy(op["value"])
            else:
                assert last in target, op
                target[last] = copy.deepcopy(op["value"])
        else:
            raise AssertionError(f"unexpected op {kind}")
    return doc


def decoded_patch(answer: dict[str, Any]) -> list[dict[str, Any]] | None:
    response = answer["response"]
    if "patch" not in response:
        return None
    assert response["patchType"] == "JSONPatch"
    patch: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return patch


async def until(condition: Callable[[], bool], within: float = 10.0) -> None:
    """Wait for something another task does (a watch event, a write); never a timing."""
    async with asyncio.timeout(within):
        while not condition():
            await asyncio.sleep(0.01)
