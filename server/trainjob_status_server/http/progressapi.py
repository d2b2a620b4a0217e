"""The aggregated API port: ``trainjob-status.kubeflow.org/v1alpha1`` served to the
Kubernetes API server, which proxies its users' reads here (an APIService, as
metrics-server serves ``metrics.k8s.io``). Each TrainJob's newest accepted update is
read from memory: no etcd write and no TrainJob read per request.

Who asks: only the API server's front proxy. The port's TLS requires a client
certificate of the proxy's CA (``kube-system/extension-apiserver-authentication``, read
at start and every ``REFRESH_SECONDS``); its common name must be one the ConfigMap
allows, and the user is the one its ``X-Remote-*`` headers name. Anything else is a 401.
What they may read: the API server has authorized the request on
``trainjobprogresses``; a read also needs ``get`` (``list`` for a list) on the TrainJobs
themselves, asked by SubjectAccessReview and kept ``ACCESS_TTL`` seconds per user,
namespace, name and verb (the ``reads`` API budget, ``--kube-reads-qps``; a get is
asked for the whole namespace first, so one review covers all its TrainJobs).
Discovery is public, as ``system:discovery`` makes it on the API server.

With several replicas, each TrainJob's updates are held by the replica that writes it
(``peers/forwarding.py``): a read asks the others for what they hold (a get, the
TrainJob's owner alone; a list, all of them, side by side, ``PEER_SECONDS`` at most)
and answers the newest of each TrainJob, whichever replica received it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from ..certificates.tls import ReloadingTLS
from ..kube.cache import WatchCache
from ..kube.client import KubeClient
from ..kube.errors import KubeBudgetExhausted, KubeError, KubeUnavailable
from ..kube.resources import Key, Obj
from ..peers.batch import Handed
from ..peers.replicas import Replicas
from ..progress import frontproxy, openapi, resource
from ..progress.frontproxy import RequestHeaderSettings, SettingsError, User
from ..progress.resource import Read
from .errors import StatusError
from .metricsauth import SUBJECTACCESSREVIEWS_PATH, Verdict, VerdictCache, judge_access

log = logging.getLogger(__name__)

REFRESH_SECONDS = 60.0
"""How often the front proxy's CA and names are read again (the API server rewrites
the ConfigMap when its flags change)."""

PEER_SECONDS = 1.0
"""How long a read waits for the other replicas' newest updates (those of the TrainJobs
they write): a replica that has not answered by then adds nothing."""

ACCESS_TTL = 10.0
"""How long a SubjectAccessReview's verdict is kept (metrics-server's delegated
authorization keeps its verdicts as long)."""

View = Callable[[Key, Obj], Obj | None]
"""A cached TrainJob -> the same TrainJob with its newest accepted update in its status
(the object itself when the status holds the newest): ``Exporter.view``."""

_DISCOVERY = {
    "/apis": resource.api_group_list,
    f"/apis/{resource.GROUP}": resource.api_group,
    f"/apis/{resource.GROUP_VERSION}": resource.api_resource_list,
}


_OPENAPI = {openapi.ROOT: openapi.index, openapi.DOCUMENT: openapi.document}


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(body, separators=(",", ":")).encode(),
        content_type="application/json",
    )


def _status(code: int, reason: str, message: str, **details: str) -> web.Response:
    return _json(StatusError(code, reason, message, details=details or None).body(), code)


def _not_found(name: str) -> web.Response:
    return _status(
        404,
        "NotFound",
        f'{resource.QUALIFIED} "{name}" not found',
        name=name,
        group=resource.GROUP,
        kind=resource.RESOURCE,
    )


def _forbidden(user: User, read: Read, reason: str) -> web.Response:
    """As the API server words a refusal, for the TrainJobs the read needs."""
    target = resource.QUALIFIED if read.name is None else f'{resource.QUALIFIED} "{read.name}"'
    scope = (
        "at the cluster scope" if read.namespace is None else f'in the namespace "{read.namespace}"'
    )
    message = (
        f'{target} is forbidden: User "{user.name}" cannot {read.verb} resource '
        f'"{resource.TRAINJOB_RESOURCE}" in API group "{resource.TRAINJOB_GROUP}" {scope}'
    )
    if reason:
        message += f": {reason}"
    return _status(403, "Forbidden", message)


def access_review(user: User, read: Read, verb: str) -> dict[str, Any]:
    """The SubjectAccessReview asking whether ``user`` may ``verb`` the TrainJobs
    ``read`` names (pure)."""
    attributes: dict[str, str] = {
        "group": resource.TRAINJOB_GROUP,
        "resource": resource.TRAINJOB_RESOURCE,
        "verb": verb,
    }
    if read.namespace is not None:
        attributes["namespace"] = read.namespace
    if read.name is not None:
        attributes["name"] = read.name
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {**user.review_fields(), "resourceAttributes": attributes},
    }


class ProgressAPI:
    """The aggregated API's requests: ``start`` reads the front proxy's settings (and
    keeps reading them), ``app`` serves. ``tls`` is the port's context (client
    certificates required); ``view`` gives a TrainJob's newest update."""

    def __init__(
        self,
        kube: KubeClient,
        reviews: KubeClient,
        trainjobs: WatchCache,
        view: View,
        tls: ReloadingTLS,
        replicas: Replicas | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.reviews = reviews
        self.trainjobs = trainjobs
        self.view = view
        self.tls = tls
        self.replicas = replicas
        self.clock = clock
        self.settings: RequestHeaderSettings | None = None
        self.verdicts = VerdictCache(ACCESS_TTL)
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.create_task(self._refreshing(), name="front-proxy-settings")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _refreshing(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            await self.refresh()

    async def refresh(self) -> None:
        """Read the front proxy's settings; on failure the last ones stay (none at
        start: every request is a 401 until they are read)."""
        try:
            configmap = await self.kube.request_json("GET", frontproxy.CONFIGMAP_PATH)
            data = configmap.get("data")
            settings = frontproxy.settings_of(data if isinstance(data, dict) else {})
            if settings != self.settings:
                self.tls.trust(settings.client_ca)
        except (KubeError, KubeUnavailable, SettingsError, ValueError) as exc:
            log.warning(
                "front proxy settings not read: the aggregated API keeps the last ones",
                extra={"configmap": frontproxy.CONFIGMAP_PATH, "error": str(exc)},
            )
            return
        if settings != self.settings:
            log.info(
                "front proxy settings read",
                extra={"allowed_names": list(settings.allowed_names)},
            )
            self.settings = settings

    # -- requests ----------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        user = self._user(request)
        if user is None:
            return _status(401, "Unauthorized", "Unauthorized")
        path = request.path
        if request.method not in ("GET", "HEAD"):
            return _status(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        discovery = _DISCOVERY.get(path)
        if discovery is not None:
            return _json(discovery())
        if path in _OPENAPI:
            return web.Response(body=_OPENAPI[path](), content_type="application/json")
        read = resource.read_of(path)
        if read is None:
            return _status(404, "NotFound", "the server could not find the requested resource")
        if request.query.get("watch") in ("1", "true"):
            return _status(405, "MethodNotAllowed", f"{resource.QUALIFIED} cannot be watched")
        verdict = await self._verdict(user, read)
        if verdict is None:
            return _status(503, "ServiceUnavailable", "the authorization check could not be made")
        if not verdict.allowed:
            log.info("progress read refused", extra={"user": user.name, "verb": read.verb})
            return _forbidden(user, read, verdict.reason)
        items = await self._items(read)
        if read.name is not None and not items:
            return _not_found(read.name)
        if resource.wants_table(request.headers.get("Accept", "")):
            return _json(resource.table(items, self.clock()))
        return _json(items[0] if read.name is not None else resource.progress_list(items))

    def _user(self, request: web.Request) -> User | None:
        if self.settings is None or request.transport is None:
            return None
        peercert = request.transport.get_extra_info("peercert")
        return frontproxy.proxied_user(self.settings, peercert, request.headers)

    async def _items(self, read: Read) -> list[dict[str, Any]]:
        """The progress of the TrainJobs ``read`` reads: the newest update of each,
        this replica's or another's."""
        if read.name is not None:
            assert read.namespace is not None
            found = self.trainjobs.get(read.namespace, read.name)
            objs = [] if found is None else [found]
        else:
            objs = [
                obj
                for obj in self.trainjobs.list()
                if read.namespace is None or obj["metadata"].get("namespace") == read.namespace
            ]
        trainjobs: dict[Key, Obj] = {}
        items: dict[Key, dict[str, Any]] = {}
        for obj in objs:
            meta = obj["metadata"]
            key = (meta["namespace"], meta["name"])
            trainjobs[key] = obj
            newest = self.view(key, obj) or obj
            item = resource.progress_object(newest, stored=newest is obj)
            if item is not None:
                items[key] = item
        if trainjobs:
            for handed in await self._elsewhere(read):
                cached = trainjobs.get(handed.key)
                trainer = handed.update.trainer_status()
                if cached is not None and resource.newer_than(items.get(handed.key), trainer):
                    view = {"metadata": cached["metadata"], "status": {"trainerStatus": trainer}}
                    taken = resource.progress_object(view, stored=False)
                    if taken is not None:
                        items[handed.key] = taken
        return list(items.values())

    async def _elsewhere(self, read: Read) -> list[Handed]:
        """What the other replicas hold that ``read`` reads."""
        replicas = self.replicas
        if replicas is None:
            return []
        if read.name is None:
            peers = replicas.successors()
        else:
            assert read.namespace is not None
            owner = replicas.owner((read.namespace, read.name))
            peers = [] if owner is None else [owner]
        return await replicas.newest(peers, read.namespace, read.name, PEER_SECONDS)

    async def _verdict(self, user: User, read: Read) -> Verdict | None:
        """Whether ``user`` may read the TrainJobs of ``read``; None when the API server
        cannot say. A get is first asked for the whole namespace, as RBAC grants it
        most often: one review then covers every TrainJob there (per TTL), and only a
        user limited to some names costs a review per name."""
        if read.name is not None:
            wide = await self._review(user, Read(read.namespace, None), read.verb)
            if wide is None or wide.allowed:
                return wide
        return await self._review(user, read, read.verb)

    async def _review(self, user: User, read: Read, verb: str) -> Verdict | None:
        who = hashlib.sha256(json.dumps(user.review_fields(), sort_keys=True).encode()).digest()
        key = (who, f"{read.namespace or ''}/{read.name or ''}", verb)
        cached = self.verdicts.get(key)
        if cached is not None:
            return cached
        try:
            answer = await self.reviews.request_json(
                "POST", SUBJECTACCESSREVIEWS_PATH, body=access_review(user, read, verb)
            )
        except (KubeBudgetExhausted, KubeError, KubeUnavailable) as exc:
            status = exc.status if isinstance(exc, KubeError) else None
            log.warning("progress access review failed", extra={"status": status})
            return None
        verdict = judge_access(user.name, answer)
        self.verdicts.put(key, verdict)
        return verdict
