"""The Kubernetes API client: configuration, timeouts, the request budget, error mapping.

Everything goes through kubernetes-asyncio's ``ApiClient.call_api`` with raw responses
(``_preload_content=False``): objects stay plain dicts (no model classes for pods), one
function maps every failure, and the same code path serves get, apply, list and watch
for any resource. (The generated ``CustomObjectsApi.patch_namespaced_custom_object_status``
would also do for the apply, but only with ``_content_type=APPLY_PATCH``: left to
choose, it sends a dict body as ``application/json-patch+json`` and the API answers 400.)

Timeouts: kubernetes-asyncio applies no timeout unless ``_request_timeout`` is given
(then it is an ``aiohttp.ClientTimeout``), so every call here passes one: ``timeout``
bounds the whole call and ``connect_timeout`` its connection. A watch is bounded by
``timeout`` until its response starts and then by the server-side ``timeoutSeconds``
plus ``timeout`` between reads.

Budgets: a client spends one token bucket; ``lane()`` gives another client on the same
connection with a bucket of its own, so callers that must not starve each other (status
writes, token and pod look-ups, the caches' lists and watches) each get theirs. A client
with a ``max_wait`` refuses at once, with ``KubeBudgetExhausted``, a request whose turn
in the bucket is further away than that, instead of queueing it: the caller has a
deadline and turns the refusal into an answer with Retry-After (or retries later).
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from .errors import (
    KubeBudgetExhausted,
    KubeConfigError,
    KubeError,
    KubeUnavailable,
    error_from_response,
    error_from_status,
)
from .ratelimit import TokenBucket
from .resources import TRAINJOBS, Obj, Resource

APPLY_PATCH = "application/apply-patch+yaml"
# The same media type with a charset, for an apply body already encoded: kubernetes-asyncio
# JSON-encodes the body of a request typed exactly APPLY_PATCH (or anything with "json"),
# and sends ``bytes`` as they are under any other type; the API server reads the type
# without its parameters (JSON is YAML).
APPLY_PATCH_ENCODED = APPLY_PATCH + "; charset=utf-8"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
FIELD_MANAGER = "trainer-status"
USER_AGENT = "trainjob-status"

BOOKMARK = "BOOKMARK"
_COMPACT = json.JSONEncoder(separators=(",", ":"))

__all__ = [
    "APPLY_PATCH",
    "BOOKMARK",
    "FIELD_MANAGER",
    "JSON_PATCH",
    "MERGE_PATCH",
    "KubeBudgetExhausted",
    "KubeClient",
    "KubeError",
    "KubeUnavailable",
    "ObjectList",
    "WatchEvent",
    "load_configuration",
    "parse_watch_line",
]
_WATCH_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", BOOKMARK})


@dataclass(frozen=True)
class ObjectList:
    """A list's items and the resourceVersion to watch from."""

    items: list[Obj]
    resource_version: str


@dataclass(frozen=True)
class WatchEvent:
    """ADDED, MODIFIED, DELETED or BOOKMARK (a bookmark's object carries only
    ``metadata.resourceVersion``)."""

    type: str
    object: Obj


def parse_watch_line(line: bytes) -> WatchEvent:
    """One line of a watch stream. An ERROR event raises its KubeError (410 when the
    resourceVersion is too old); a line that is not an event raises ValueError."""
    event = json.loads(line)
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise ValueError("watch line is not an event")
    kind, obj = event.get("type"), event["object"]
    if kind == "ERROR":
        raise error_from_status(obj)
    if kind not in _WATCH_TYPES:
        raise ValueError(f"unknown watch event type {kind!r}")
    return WatchEvent(str(kind), obj)


async def load_configuration(kubeconfig: str | Path | None) -> Any:
    """A fresh kubernetes-asyncio Configuration (never the process-wide default) from a
    kubeconfig file, or from the pod's service account when ``kubeconfig`` is None."""
    configuration = k8s_client.Configuration()
    try:
        if kubeconfig is None:
            # Re-reads the projected token file as kubelet rotates it.
            incluster: Callable[..., None] = k8s_config.load_incluster_config
            incluster(client_configuration=configuration)
        else:
            await k8s_config.load_kube_config(
                config_file=str(kubeconfig),
                client_configuration=configuration,
                persist_config=False,
            )
    except Exception as exc:
        # The loaders raise whatever a malformed file leads to (ConfigException, OSError,
        # YAML, KeyError ...); at startup all of them mean the same thing.
        source = kubeconfig if kubeconfig is not None else "in-cluster service account"
        raise KubeConfigError(f"cannot load Kubernetes configuration ({source}): {exc}") from exc
    return configuration


@dataclass
class _Connection:
    """The ApiClient every lane of one client shares (set by ``start()``)."""

    api: Any = None


class KubeClient:
    """Owns one kubernetes-asyncio ApiClient; ``start()`` before use, ``close()`` after
    (or ``async with``).

    Every call waits its turn in a token bucket (``qps`` per second, ``burst`` at once:
    Kubeflow Trainer's 5/10 by default) shared by everything that uses this client (``lane()``
    makes a client with a bucket of its own on the same connection), is bounded by
    the timeouts, and raises ``KubeError`` for an error answer or ``KubeUnavailable``
    when there is none (connection failure, timeout). With ``max_wait`` set, a call
    that would wait longer than that for its turn raises ``KubeBudgetExhausted`` at once
    and takes no token; None waits as long as the bucket says.
    """

    def __init__(
        self,
        kubeconfig: str | Path | None = None,
        *,
        qps: float = 5.0,
        burst: int = 10,
        timeout: float = 5.0,
        connect_timeout: float | None = None,
        max_wait: float | None = None,
        budget_name: str = "default",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.timeout = timeout
        self.connect_timeout = connect_timeout if connect_timeout is not None else timeout
        self.budget = TokenBucket(qps, burst, clock)
        self.budget_name = budget_name
        self.max_wait = max_wait
        self._clock = clock
        self._connection = _Connection()
        self.owns_connection = True

    def lane(
        self, name: str, *, qps: float, burst: int, max_wait: float | None = None
    ) -> KubeClient:
        """A client on this one's connection (started and closed with it) that spends a
        bucket of its own, named ``name`` in errors and logs."""
        other = self._sharing()
        other.budget = TokenBucket(qps, burst, self._clock)
        other.budget_name = name
        other.max_wait = max_wait
        return other

    def waiting(self, max_wait: float | None) -> KubeClient:
        """This client, same bucket, with another limit on how long a call may wait."""
        other = self._sharing()
        other.max_wait = max_wait
        return other

    def _sharing(self) -> KubeClient:
        other = copy.copy(self)
        other.owns_connection = False
        return other

    @property
    def _api(self) -> Any:
        return self._connection.api

    @_api.setter
    def _api(self, api: Any) -> None:
        # For subclasses that build the ApiClient themselves (a kubeconfig context).
        self._connection.api = api

    async def start(self) -> KubeClient:
        """Open the connection (a lane's owner does it for all of its lanes)."""
        if self.owns_connection and self._connection.api is None:
            configuration = await load_configuration(self.kubeconfig)
            api = k8s_client.ApiClient(configuration)
            api.user_agent = USER_AGENT
            self._connection.api = api
        return self

    async def close(self) -> None:
        if self.owns_connection and self._connection.api is not None:
            api, self._connection.api = self._connection.api, None
            await api.close()

    async def __aenter__(self) -> KubeClient:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- what the server needs -------------------------------------------------------------

    async def get(self, resource: Resource, namespace: str | None, name: str) -> Obj | None:
        """The object, or None when it does not exist (404). ``namespace`` is None for a
        cluster-scoped resource."""
        try:
            return await self._call("GET", resource.path(namespace, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def get_trainjob(self, namespace: str, name: str) -> Obj | None:
        """The TrainJob, or None when it does not exist."""
        return await self.get(TRAINJOBS, namespace, name)

    async def apply_trainjob_status(
        self,
        namespace: str,
        name: str,
        trainer_status: Obj,
        *,
        field_manager: str = FIELD_MANAGER,
        force: bool = True,
        resource_version: str | None = None,
    ) -> Obj:
        """Server-side apply of ``status.trainerStatus`` on the status subresource;
        ``trainer_status`` is that object (the body is sent as compact JSON). Returns the
        TrainJob as stored. The field manager owns trainerStatus as a whole, so a field
        left out of ``trainer_status`` is removed. A missing TrainJob is a 404 (apply to a
        subresource never creates). With ``resource_version`` the write is conditional:
        409 Conflict when the object changed since that version."""
        metadata = {"name": name, "namespace": namespace}
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        body = {
            "apiVersion": TRAINJOBS.api_version,
            "kind": TRAINJOBS.kind,
            "metadata": metadata,
            "status": {"trainerStatus": trainer_status},
        }
        query = [("fieldManager", field_manager)]
        if force:
            query.append(("force", "true"))
        return await self._call(
            "PATCH",
            TRAINJOBS.path(namespace, name, "status"),
            query,
            body=_COMPACT.encode(body).encode(),
            content_type=APPLY_PATCH_ENCODED,
        )

    async def request_json(
        self,
        method: str,
        path: str,
        *,
        body: Obj | None = None,
        accept: str = "application/json",
    ) -> Obj:
        """Any request whose answer is a JSON object: a non-resource path (the issuer's
        discovery document and JWKS, which answer 406 to ``Accept: application/json``
        and so take their own ``accept``) or a create-only API such as TokenReview."""
        return await self._call(
            method,
            path,
            body=body,
            content_type=None if body is None else "application/json",
            accept=accept,
        )

    async def create(self, resource: Resource, namespace: str | None, body: Obj) -> Obj:
        """POST ``body`` to the collection; a name already taken is a 409 AlreadyExists
        (the way racing writers agree on one object)."""
        return await self._call(
            "POST", resource.path(namespace), body=body, content_type="application/json"
        )

    async def replace(self, resource: Resource, namespace: str | None, name: str, body: Obj) -> Obj:
        """PUT ``body`` over the object. With ``metadata.resourceVersion`` in ``body`` the
        write is conditional: 409 Conflict when the object changed since that version."""
        return await self._call(
            "PUT", resource.path(namespace, name), body=body, content_type="application/json"
        )

    async def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: Obj | Sequence[Obj],
        *,
        content_type: str = JSON_PATCH,
        field_manager: str | None = None,
    ) -> Obj:
        """PATCH the object: an RFC 6902 JSON Patch (a list of operations) by default, or
        a merge patch with ``content_type=MERGE_PATCH``."""
        query = [("fieldManager", field_manager)] if field_manager else []
        return await self._call(
            "PATCH", resource.path(namespace, name), query, body=patch, content_type=content_type
        )

    async def apply(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: Obj,
        *,
        field_manager: str,
        force: bool = True,
    ) -> Obj:
        """Server-side apply of ``body`` (which names the object): creates it when absent,
        and the field manager owns exactly the fields ``body`` sets."""
        query = [("fieldManager", field_manager)]
        if force:
            query.append(("force", "true"))
        return await self._call(
            "PATCH", resource.path(namespace, name), query, body=body, content_type=APPLY_PATCH
        )

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
    ) -> ObjectList:
        """Every matching object (in pages of ``page_size``) and the list's
        resourceVersion."""
        items: list[Obj] = []
        resource_version = ""
        token = ""
        while True:
            query = [*_selectors(label_selector, field_selector), ("limit", str(page_size))]
            if token:
                query.append(("continue", token))
            page = await self._call("GET", resource.path(namespace), query)
            for item in page.get("items") or []:
                # The API server leaves these out of list items of built-in kinds; watch
                # events carry them, and cached objects should look the same either way.
                item.setdefault("apiVersion", resource.api_version)
                item.setdefault("kind", resource.kind)
                items.append(item)
            meta = page.get("metadata") or {}
            # Every page of one list shares the first page's snapshot.
            resource_version = resource_version or str(meta.get("resourceVersion") or "")
            token = meta.get("continue") or ""
            if not token:
                return ObjectList(items, resource_version)

    async def watch(
        self,
        resource: Resource,
        resource_version: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncGenerator[WatchEvent, None]:
        """Events after ``resource_version``, with bookmarks, until the server ends the
        watch (after ``timeout_seconds`` or a dropped connection). Raises KubeError 410
        when the resourceVersion is too old, however the server says it. Close the
        iterator (``contextlib.aclosing``) to end the watch early."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
            *_selectors(label_selector, None),
        ]
        # No total: the stream lives for minutes. The server must say something (an
        # event, a bookmark, or the end) before its own timeout, plus our margin.
        stream_timeout = aiohttp.ClientTimeout(
            connect=self.connect_timeout,
            sock_connect=self.connect_timeout,
            sock_read=timeout_seconds + self.timeout,
        )
        path = resource.path(namespace)
        response = await self._open("GET", path, query, client_timeout=stream_timeout)
        try:
            if response.status != 200:
                raise await _error_of(response)
            async for line in response.content:
                if line.strip():
                    yield parse_watch_line(line)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _unavailable("GET", path, exc, self.timeout) from exc
        finally:
            response.close()

    # -- the one request path --------------------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]] = (),
        *,
        body: Obj | Sequence[Obj] | bytes | None = None,
        content_type: str | None = None,
        accept: str = "application/json",
    ) -> Obj:
        response = await self._open(
            method, path, query, body=body, content_type=content_type, accept=accept
        )
        try:
            if not 200 <= response.status < 300:
                raise await _error_of(response)
            data = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _unavailable(method, path, exc, self.timeout) from exc
        finally:
            response.release()
        try:
            decoded = json.loads(data)
        except ValueError as exc:
            raise KubeUnavailable(f"{method} {path}: answer is not JSON") from exc
        if not isinstance(decoded, dict):
            raise KubeUnavailable(f"{method} {path}: answer is not an object")
        return decoded

    async def _open(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        *,
        body: Obj | Sequence[Obj] | bytes | None = None,
        content_type: str | None = None,
        client_timeout: aiohttp.ClientTimeout | None = None,
        accept: str = "application/json",
    ) -> aiohttp.ClientResponse:
        """Send a request once the budget allows; the response's body is left unread."""
        if self._api is None:
            raise RuntimeError("KubeClient used before start() or after close()")
        await self._take_budget()
        headers = {"Accept": accept}
        if content_type is not None:
            # kubernetes-asyncio JSON-encodes the body for this type too (JSON is YAML).
            headers["Content-Type"] = content_type
        if client_timeout is None:
            client_timeout = aiohttp.ClientTimeout(
                total=self.timeout, connect=self.connect_timeout, sock_connect=self.connect_timeout
            )
        try:
            # The response headers must come within `timeout` even for a watch, whose
            # own ClientTimeout has no total.
            async with asyncio.timeout(self.timeout):
                response: aiohttp.ClientResponse = await self._api.call_api(
                    path,
                    method,
                    query_params=list(query),
                    header_params=headers,
                    body=body,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=client_timeout,
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _unavailable(method, path, exc, self.timeout) from exc
        return response

    async def _take_budget(self) -> None:
        if self.max_wait is None:
            wait = self.budget.reserve()
        else:
            fits = self.budget.reserve_within(self.max_wait)
            if fits is None:
                raise KubeBudgetExhausted(self.budget_name, self.budget.delay())
            wait = fits
        if wait > 0:
            try:
                await asyncio.sleep(wait)
            except asyncio.CancelledError:
                self.budget.cancel()
                raise


def _selectors(label_selector: str | None, field_selector: str | None) -> list[tuple[str, str]]:
    query = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    return query


async def _error_of(response: aiohttp.ClientResponse) -> KubeError:
    data = await response.read()
    return error_from_response(response.status, response.reason or "", response.headers, data)


def _unavailable(method: str, path: str, exc: BaseException, timeout: float) -> KubeUnavailable:
    if isinstance(exc, TimeoutError):
        return KubeUnavailable(f"{method} {path}: no answer within {timeout:g}s")
    return KubeUnavailable(f"{method} {path}: {type(exc).__name__}: {exc}")
