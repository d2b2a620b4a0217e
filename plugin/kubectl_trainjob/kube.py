"""The plugin's Kubernetes API access: the user's kubeconfig (or the pod's service
account) as kubectl reads it, and the three reads the plugin makes, a list, a watch and
a GET of any JSON path. Objects stay decoded JSON.

kubernetes-asyncio loads the configuration (contexts, client certificates, tokens,
exec credential plugins) and sends the requests (``ApiClient.call_api`` with raw
responses, so any path of any API group reads the same way). A failure is ``KubeError``
when the API server answered with an error, ``KubeUnavailable`` when it did not, whose
text says what happened as kubectl would say it. kubernetes-asyncio passes its HTTP
library's exceptions through unwrapped, and the plugin names no HTTP library (that is
kubernetes-asyncio's to choose): they are told apart by when they come and what they are
built on. Before an answer, an ``OSError`` is a connection that could not be made and a
timeout is no answer; while an answer is read, anything but a timeout is a connection
the API server closed.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

Obj = dict[str, Any]
"""A Kubernetes object as decoded JSON."""

Key = tuple[str, str]
"""(namespace, name)."""

USER_AGENT = "kubectl-trainjob"
BOOKMARK = "BOOKMARK"
_WATCH_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", BOOKMARK})
# Bodies that are not a metav1.Status (a proxy's HTML page) are cut to this in messages.
_MAX_FOREIGN_MESSAGE = 256
_INCLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
T = TypeVar("T")


class KubeConfigError(Exception):
    """No usable configuration: the kubeconfig (or its context) cannot be loaded."""


class KubeUnavailable(Exception):
    """The API server did not answer; the text says what happened."""


class KubeError(Exception):
    """The API server answered with an error: ``status`` is the HTTP code, ``reason``
    and ``message`` come from its ``metav1.Status`` (or the HTTP reason phrase and the
    body's start when the body is not one), ``retry_after`` is the seconds it asked for."""

    def __init__(
        self, status: int, reason: str, message: str, retry_after: int | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


@dataclass(frozen=True)
class Resource:
    """A resource of an API group: enough to build its paths and name it."""

    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def qualified(self) -> str:
        """``trainjobs.trainer.kubeflow.org``: as the API server names it."""
        return f"{self.plural}.{self.group}"

    def path(self, namespace: str | None = None) -> str:
        """The collection of ``namespace``, or of all namespaces when it is None."""
        where = "" if namespace is None else f"/namespaces/{quote(namespace, safe='')}"
        return f"/apis/{self.group}/{self.version}{where}/{self.plural}"


TRAINJOBS = Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs")


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def resource_version_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclass(frozen=True)
class ObjectList:
    """A list's items and the resourceVersion to watch from."""

    items: list[Obj]
    resource_version: str


@dataclass(frozen=True)
class WatchEvent:
    """ADDED, MODIFIED, DELETED or BOOKMARK (whose object carries only
    ``metadata.resourceVersion``)."""

    type: str
    object: Obj


def status_error(
    status: Obj, code: int | None = None, http_reason: str = "", retry_after: int | None = None
) -> KubeError:
    """A KubeError from a ``metav1.Status`` (an error answer's body, or the object of a
    watch's ERROR event); ``code`` is the HTTP status when there was one."""
    if code is None:
        found = status.get("code")
        code = found if isinstance(found, int) else 500
    details = status.get("details")
    seconds = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    if retry_after is None and isinstance(seconds, int) and seconds >= 0:
        retry_after = seconds
    reason = str(status.get("reason") or http_reason or "Unknown")
    return KubeError(code, reason, str(status.get("message") or http_reason), retry_after)


def answer_error(status: int, http_reason: str, retry_after: str | None, data: bytes) -> KubeError:
    """A KubeError from an error answer's status, reason phrase, Retry-After and body."""
    text = data.decode("utf-8", "replace")
    try:
        decoded = json.loads(text) if text else None
    except ValueError:
        decoded = None
    seconds = int(retry_after) if retry_after and retry_after.strip().isdigit() else None
    if isinstance(decoded, dict) and decoded.get("kind", "Status") == "Status":
        return status_error(decoded, status, http_reason, seconds)
    # Not the API server's own answer (a proxy or load balancer in between).
    message = text[:_MAX_FOREIGN_MESSAGE] or http_reason
    return KubeError(status, http_reason or "Unknown", message, seconds)


def parse_watch_line(line: bytes) -> WatchEvent:
    """One line of a watch. An ERROR event raises its KubeError (410 when the
    resourceVersion is too old); a line that is not an event raises ValueError."""
    event = json.loads(line)
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise ValueError("watch line is not an event")
    kind, obj = event.get("type"), event["object"]
    if kind == "ERROR":
        raise status_error(obj)
    if kind not in _WATCH_TYPES:
        raise ValueError(f"unknown watch event type {kind!r}")
    return WatchEvent(str(kind), obj)


def one_line(text: str) -> str:
    """``text`` on one line (a YAML parser's or a proxy's message may span several)."""
    return " ".join(text.split())


async def load_config(kubeconfig: str | None, context: str | None) -> tuple[Any, str]:
    """(client configuration, the context's namespace or ``default``) from a kubeconfig
    (files joined with ":" are merged), or from the pod's service account when it is
    None."""
    configuration = k8s_client.Configuration()
    try:
        if kubeconfig is None:
            incluster: Callable[..., None] = k8s_config.load_incluster_config
            incluster(client_configuration=configuration)
            return configuration, _incluster_namespace()
        loader = await k8s_config.load_kube_config(
            config_file=kubeconfig,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except Exception as exc:
        # The loaders raise whatever a bad file leads to (ConfigException, OSError, ...).
        raise KubeConfigError(f"cannot load kubeconfig: {exc}") from exc
    current = loader.current_context or {}
    namespace = (current.get("context") or {}).get("namespace") or "default"
    return configuration, str(namespace)


def _incluster_namespace() -> str:
    try:
        with open(_INCLUSTER_NAMESPACE) as file:
            return file.read().strip() or "default"
    except OSError:
        return "default"


class KubeClient:
    """Reads through one kubernetes-asyncio ApiClient, opened by ``async with``. Each
    request has ``timeout`` seconds to be answered and read, a watch that long to start."""

    def __init__(self, configuration: Any, *, timeout: float = 30.0) -> None:
        self.configuration = configuration
        self.timeout = timeout
        self._api: Any = None

    async def __aenter__(self) -> KubeClient:
        self._api = k8s_client.ApiClient(self.configuration)
        self._api.user_agent = USER_AGENT
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        api, self._api = self._api, None
        if api is not None:
            await api.close()

    async def get_json(self, path: str, query: Sequence[tuple[str, str]] = ()) -> Obj:
        """The JSON object at ``path``."""
        response = await self._open(path, query, self.timeout)
        try:
            data: bytes = await self._reading(path, response.read())
        finally:
            response.release()
        try:
            decoded = json.loads(data)
        except ValueError as exc:
            raise KubeUnavailable(f"GET {path}: answer is not JSON") from exc
        if not isinstance(decoded, dict):
            raise KubeUnavailable(f"GET {path}: answer is not an object")
        return decoded

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        page_size: int = 500,
    ) -> ObjectList:
        """Every matching object (in pages of ``page_size``) and the list's
        resourceVersion."""
        items: list[Obj] = []
        resource_version = ""
        token = ""
        while True:
            query = [*_selector(label_selector), ("limit", str(page_size))]
            if token:
                query.append(("continue", token))
            page = await self.get_json(resource.path(namespace), query)
            items.extend(item for item in page.get("items") or [] if isinstance(item, dict))
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
        """Events after ``resource_version``, with bookmarks, until the API server ends
        the watch (after ``timeout_seconds``, or a dropped connection). Close the
        iterator (``contextlib.aclosing``) to end it early."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
            *_selector(label_selector),
        ]
        path = resource.path(namespace)
        # The API server ends it after timeout_seconds; ours is a bound past that.
        response = await self._open(path, query, timeout_seconds + self.timeout)
        try:
            while line := await self._reading(path, response.content.readline()):
                if line.strip():
                    yield parse_watch_line(line)
        finally:
            response.close()

    async def _open(self, path: str, query: Sequence[tuple[str, str]], total: float) -> Any:
        """GET ``path``: the response, its body unread; an error answer raises. Its
        headers must come within ``timeout``; ``total`` bounds the whole of it."""
        if self._api is None:
            raise RuntimeError("KubeClient used outside its async with")
        try:
            async with asyncio.timeout(self.timeout):
                response = await self._api.call_api(
                    path,
                    "GET",
                    query_params=list(query),
                    header_params={"Accept": "application/json"},
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=total,
                )
        except TimeoutError as exc:
            raise KubeUnavailable(f"GET {path}: no answer within {self.timeout:g}s") from exc
        except OSError as exc:
            raise KubeUnavailable(self._cannot_connect(exc)) from exc
        except Exception as exc:
            # Anything else the transport raised before an answer, in its own words.
            raise KubeUnavailable(f"GET {path}: {type(exc).__name__}: {exc}") from exc
        if 200 <= response.status < 300:
            return response
        try:
            data = await self._reading(path, response.read())
        finally:
            response.release()
        retry_after = response.headers.get("Retry-After")
        raise answer_error(response.status, response.reason or "", retry_after, data)

    async def _reading(self, path: str, pending: Awaitable[T]) -> T:
        """What ``pending`` reads of an answer; its failure in words."""
        try:
            return await pending
        except TimeoutError as exc:
            raise KubeUnavailable(f"GET {path}: no answer within {self.timeout:g}s") from exc
        except Exception as exc:
            raise KubeUnavailable(
                "lost the connection to the API server: it closed the connection"
            ) from exc

    def _cannot_connect(self, exc: OSError) -> str:
        server = urlsplit(str(self.configuration.host))
        port = server.port or (443 if server.scheme == "https" else 80)
        if exc.errno is not None and exc.errno > 0:
            why = os.strerror(exc.errno).lower()
        else:
            why = one_line(exc.strerror or str(exc)) or "no connection"
        return f"cannot connect to the API server at {server.hostname}:{port}: {why}"


def _selector(label_selector: str | None) -> list[tuple[str, str]]:
    return [("labelSelector", label_selector)] if label_selector else []
