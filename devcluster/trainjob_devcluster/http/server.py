"""The development cluster's request handler: authentication, faults, routing."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from ..auth import accessreview, authz
from ..auth.admission import MutatingAdmission
from ..auth.tokens import TokenIssuer
from ..common import status
from ..common.faults import Fault, Faults, RequestInfo
from ..common.resources import ResourceType
from ..common.status import ApiError
from ..storage.store import Obj, Store, dumps
from . import bodies
from .discovery import accepts_json
from .httpserver import HandlerResult, Request, Response, Stream
from .listwatch import WATCH_BUFFER_LIMIT, list_objects, serve_watch
from .nonresource import NonResourcePaths
from .rest import Answer, Call, ResourceApi
from .routing import Registry, Route, route

MAX_BODY = 3 * 1024 * 1024  # the real server's limit for a request body

_IMPERSONATE = ("impersonate-user", "impersonate-group", "impersonate-uid")


def _refuse_impersonation(request: Request) -> None:
    """kube-apiserver answers as the impersonated user; acting as the caller instead would
    give a wrong answer (``kubectl auth can-i --as`` saying yes), so refuse outright."""
    for name in request.headers:
        lowered = name.lower()
        if lowered in _IMPERSONATE or lowered.startswith("impersonate-extra-"):
            raise ApiError(
                403,
                "Forbidden",
                f"the development cluster does not serve impersonation ({name} header): "
                "use a real API server to act as another user",
                {},
            )


def json_response(code: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(code, dumps(body), headers=headers or {})


class ClusterApp:
    """Serves the Kubernetes API paths the development cluster supports."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        tokens: TokenIssuer,
        faults: Faults,
        admin_token: str,
        clock: Callable[[], float],
        bookmark_interval: float = 10.0,
        watch_buffer_limit: int = WATCH_BUFFER_LIMIT,
    ) -> None:
        self.store = store
        self.registry = registry
        self.tokens = tokens
        self.faults = faults
        self.admin_token = admin_token
        self.clock = clock
        self.bookmark_interval = bookmark_interval
        # Bytes a watch's client may leave unread before the watch is cut off.
        self.watch_buffer_limit = watch_buffer_limit
        self.api = ResourceApi(store, clock)
        self.paths = NonResourcePaths(registry.resources, tokens)
        self.admission = MutatingAdmission(store)
        # Set when the cluster stops: stalled requests stop waiting, so stopping does not
        # wait out a test's stall.
        self.stopping = asyncio.Event()

    # -- authentication ------------------------------------------------------------------

    def authenticate(self, request: Request) -> authz.User:
        header = request.headers.get("Authorization")
        if header is None:
            return authz.ANONYMOUS
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise status.unauthorized()
        if hmac.compare_digest(token.encode(), self.admin_token.encode()):
            return authz.ADMIN
        user = self.tokens.authenticate(token, self.store.get)
        if user is None:
            raise status.unauthorized()
        return authz.User(user["username"], user.get("uid", ""), tuple(user.get("groups", ())))

    def _role(self, kind: str, namespace: str, name: str) -> Obj | None:
        if kind == "ClusterRole":
            return self.store.get("clusterroles.rbac.authorization.k8s.io", "", name)
        return self.store.get("roles.rbac.authorization.k8s.io", namespace, name)

    def _bindings(self, namespace: str) -> Iterator[Obj]:
        # Lazy: the admin and public paths never look at a binding.
        yield from self.store.list("clusterrolebindings.rbac.authorization.k8s.io")
        if namespace:
            yield from self.store.list("rolebindings.rbac.authorization.k8s.io", namespace)

    # -- dispatch ------------------------------------------------------------------------

    def dispatch(self, request: Request, stream: Stream) -> HandlerResult:
        """The answer, or a coroutine for one that waits (a stall, a watch)."""
        try:
            found = route(self.registry, request.method, request.path, request.query)
            user = self.authenticate(request)
            _refuse_impersonation(request)
            self.faults.record(found.info, request.headers.get("Content-Type", ""))
            faults = self.faults.take(found.info)
            if faults:
                return self._after_faults(faults, request, stream, found, user)
            return self._serve(request, stream, found, user)
        except ApiError as exc:
            return json_response(exc.code, exc.to_json(), exc.headers)

    async def _after_faults(
        self,
        faults: list[Fault],
        request: Request,
        stream: Stream,
        found: Route,
        user: authz.User,
    ) -> Response | None:
        try:
            for fault in faults:
                if fault.delay:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(fault.delay):
                            await self.stopping.wait()
                error = fault.error()
                if error is not None:
                    raise error
            answer = self._serve(request, stream, found, user)
            if isinstance(answer, Response):
                return answer
            return await answer
        except ApiError as exc:
            return json_response(exc.code, exc.to_json(), exc.headers)

    def _serve(
        self, request: Request, stream: Stream, found: Route, user: authz.User
    ) -> Response | Coroutine[Any, Any, Response | None]:
        info, resource = found.info, found.resource
        authz.authorize(user, info, resource, self._bindings(info.namespace), self._role)
        if resource is None:
            if self.registry.under_group_version(request.path):
                raise status.no_route()
            return self.paths.serve(request, user)
        if not accepts_json(request.headers.get("Accept")):
            # Protobuf or a Table alone: a real server would send one, this one cannot.
            raise ApiError(
                406,
                "NotAcceptable",
                "only the following media types are accepted: application/json "
                "(the development cluster speaks JSON only)",
                {},
            )
        query = request.query
        verb = info.verb
        if resource.verbs == ("create",) and info.name:
            # Reviews have no names: the API server has no route for one (404, not 405).
            raise status.no_route()
        if resource.verbs == ("create",) and verb != "create":
            # Nor any method but POST on their collection (a GET is no list).
            raise status.method_not_allowed()
        if verb == "watch":
            return self._watch(request, stream, info, resource)
        if verb == "list":
            listed = list_objects(self.store, resource, info.namespace or None, query)
            return json_response(200, listed)
        call = Call(
            info=info,
            resource=resource,
            query=query,
            body=request.body,
            content_type=request.headers.get("Content-Type", ""),
        )
        if verb == "create" and not info.subresource and self.admission.configured():
            return self._admitted(request, call, user)
        return self._answer(request, call)

    def _answer(self, request: Request, call: Call) -> Response:
        answer = self._special(call) or self._verb(call)
        return json_response(answer.code, answer.body)

    async def _admitted(self, request: Request, call: Call, user: authz.User) -> Response:
        """A create that mutating webhooks may change first (see auth/admission.py)."""
        try:
            obj = self._json_object(call)
            admitted = await self.admission.admit(call.info, call.resource, obj, user, call.dry_run)
            if admitted is not obj:
                call.body, call.content_type = dumps(admitted), "application/json"
            return self._answer(request, call)
        except ApiError as exc:
            return json_response(exc.code, exc.to_json(), exc.headers)

    async def _watch(
        self, request: Request, stream: Stream, info: RequestInfo, resource: ResourceType
    ) -> Response | None:
        try:
            await serve_watch(
                request,
                stream,
                self.store,
                resource,
                info.namespace or None,
                self.bookmark_interval,
                self.watch_buffer_limit,
            )
        except ApiError as exc:  # the options were refused: nothing was streamed
            return json_response(exc.code, exc.to_json(), exc.headers)
        return None

    def _verb(self, call: Call) -> Answer:
        verb, sub = call.info.verb, call.info.subresource
        if sub and sub != "status":
            raise status.method_not_allowed()
        if verb == "get":
            return self.api.get(call)
        if verb == "create" and not sub:
            return self.api.create(call)
        if verb == "update":
            return self.api.update(call)
        if verb == "patch":
            return self.api.patch(call)
        if verb == "delete" and not sub:
            return self.api.delete(call)
        raise status.method_not_allowed()

    def _special(self, call: Call) -> Answer | None:
        """Verbs that are not storage: token requests, token reviews, new namespaces."""
        info = call.info
        if info.resource == "serviceaccounts" and info.subresource == "token":
            if info.verb != "create":
                raise status.method_not_allowed()
            sa = self.store.get("serviceaccounts", info.namespace, info.name)
            if sa is None:
                raise status.not_found("serviceaccounts", "", "serviceaccounts", info.name)
            body = self._json_object(call)
            return Answer(201, self.tokens.request_token(info.namespace, sa, body, self.store.get))
        if info.resource == "tokenreviews":
            if info.verb != "create":
                raise status.method_not_allowed()
            return Answer(201, self.tokens.review(self._json_object(call), self.store.get))
        if info.resource == "subjectaccessreviews":
            if info.verb != "create":
                raise status.method_not_allowed()
            body = self._json_object(call)
            return Answer(201, accessreview.review(body, self._bindings, self._role))
        if info.resource == "namespaces" and info.verb == "create" and call.resource.builtin:
            answer = self.api.create(call)
            if not call.dry_run:
                self._default_service_account(answer.body["metadata"]["name"])
            return answer
        return None

    def _json_object(self, call: Call) -> Obj:
        return bodies.decode_object(call.body, call.content_type)

    def _default_service_account(self, namespace: str) -> None:
        """The service-account controller's job: every namespace gets ``default``."""
        if self.store.get("serviceaccounts", namespace, "default") is not None:
            return
        sa_type = self.registry.by_plural("serviceaccounts")
        info = RequestInfo("POST", "", "create", "serviceaccounts", "", namespace, "")
        body = json.dumps({"metadata": {"name": "default"}}).encode()
        call = Call(info, sa_type, {"fieldManager": "kube-controller-manager"}, body)
        self.api.create(call)
