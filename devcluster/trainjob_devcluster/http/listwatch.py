"""LIST (selectors, limit/continue) and WATCH (streamed events, bookmarks, expiry)."""

from __future__ import annotations

import asyncio
import base64
import json
import posixpath
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from ..common import status
from ..common.go_text import go_json_loads, go_quote
from ..common.resources import ResourceType
from ..common.status import ApiError
from ..storage.selectors import labels_match, parse_field_selector, parse_label_selector
from ..storage.store import Expired, Obj, Store, dumps
from .httpserver import Request, Stream
from .routing import query_flag


def _encode_continue(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


_CONTINUE_VERSION = "meta.k8s.io/v1"
_INVALID_CONTINUE = "invalid continue token: continue key is not valid"
_BASE64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _decode_continue(token: str) -> tuple[int, str]:
    """The resourceVersion a paged list is read at and the key its next page starts at
    (rv below 0: an inconsistent token, read at the current version); a 400 worded as
    apimachinery's DecodeContinue for a token it would refuse."""
    # Unpadded base64url, as Go's RawURLEncoding: the first byte outside the alphabet
    # (padding included), or the last one of a single left-over byte, is the error.
    bad = next((i for i, c in enumerate(token) if c not in _BASE64URL), None)
    if bad is None and len(token) % 4 == 1:
        bad = len(token) - 1
    if bad is not None:
        raise status.bad_request(f"{_INVALID_CONTINUE}: illegal base64 data at input byte {bad}")
    try:
        data = go_json_loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except ValueError as exc:
        raise status.bad_request(f"{_INVALID_CONTINUE}: {exc}") from exc
    if not isinstance(data, dict):
        raise status.bad_request(_INVALID_CONTINUE)
    version, rv, start = data.get("v", ""), data.get("rv", 0), data.get("start", "")
    if not isinstance(version, str) or type(rv) is not int or not isinstance(start, str):
        raise status.bad_request(_INVALID_CONTINUE)
    problem = _continue_problem(version, rv, start)
    if problem:
        raise status.bad_request(f"{_INVALID_CONTINUE}: {problem}")
    return rv, start


def _continue_problem(version: str, rv: int, start: str) -> str:
    """Why DecodeContinue refuses a decoded token, in its words; "" when it does not."""
    if version != _CONTINUE_VERSION:
        return f"server does not recognize this encoded version {version}"
    if rv == 0:
        return f"incorrect encoded start resourceVersion (version {version})"
    if not start:
        return f"encoded start key empty (version {version})"
    # A start key that path.Clean would change (``..``, ``//``) could reach above the
    # listed prefix in etcd.
    key = start if start.startswith("/") else "/" + start
    if posixpath.normpath(key) != key or key.startswith("//"):
        return start
    return ""


def _limit(query: Mapping[str, str]) -> int:
    """``limit`` as Go's strconv.ParseInt reads it (0 when absent: no limit)."""
    if "limit" not in query:
        return 0
    text = query["limit"]
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise status.bad_request(f"strconv.ParseInt: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not -(1 << 63) <= value < 1 << 63:
        raise status.bad_request(f"strconv.ParseInt: parsing {go_quote(text)}: value out of range")
    return value


def _key(obj: Obj) -> str:
    """Where a page starts: orders as the store lists, by namespace then name (a NUL
    sorts before any character of either)."""
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}\x00{meta['name']}\x00"


# The real server's words when a paged list's version has been compacted away.
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You "
    "can start a new list without the continue parameter, or use the continue token in "
    "this response to retrieve the remainder of the results. Continuing with the provided "
    "token results in an inconsistent list - objects that were created, modified, or "
    "deleted between the time the first chunk was returned and now may show up in the list."
)


# List and watch options the development cluster does not serve, and what to do instead.
_UNSERVED = {
    "sendInitialEvents": "watch from resourceVersion 0 for the current objects first",
    "resourceVersionMatch": "leave it out (a list reads the current state)",
}


def refuse_unserved(query: Mapping[str, str]) -> None:
    """A 400 naming the first option of ``_UNSERVED`` in the query, even empty."""
    for name, instead in _UNSERVED.items():
        if name in query:
            raise status.bad_request(f"the development cluster does not serve {name}: {instead}")


def _too_large(rv: int, current: int) -> ApiError:
    return ApiError(
        504,
        "Timeout",
        f"Too large resource version: {rv}, current: {current}",
        {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
        {"Retry-After": "1"},
    )


def _read_version(store: Store, query: Mapping[str, str]) -> tuple[int | None, str]:
    """The resourceVersion a LIST reads at (None: the current state) and where its page
    starts: a continue token's version; otherwise the current state, which is never
    older than any version asked for."""
    token = query.get("continue")
    if token:
        rv, start = _decode_continue(token)
        return (None if rv < 0 else rv), start
    text = query.get("resourceVersion") or ""
    if text in ("", "0"):
        return None, ""
    try:
        rv = int(text)
    except ValueError as exc:
        raise status.bad_request(f"invalid resource version: {text}") from exc
    if rv > store.rv:
        raise _too_large(rv, store.rv)
    return None, ""


def list_objects(
    store: Store, resource: ResourceType, namespace: str | None, query: Mapping[str, str]
) -> Obj:
    """A ``<Kind>List``: the current state, or for every page after the first of a paged
    list the state at the first page's version while the event window reaches it, so the
    pages make one consistent list."""
    refuse_unserved(query)
    limit = _limit(query)  # refused before anything else, as the real server decodes it first
    labels = parse_label_selector(query.get("labelSelector"))
    fields = parse_field_selector(query.get("fieldSelector"))
    at, start = _read_version(store, query)
    if at is None:
        objs = store.list(resource.qualified, namespace)
        at = store.rv
    else:
        try:
            objs = store.list_at(resource.qualified, namespace, at)
        except Expired as exc:
            # An inconsistent token for the rest, read at the current version.
            inconsistent = {"continue": _encode_continue(-1, start)}
            raise ApiError(410, "Expired", CONTINUE_EXPIRED, list_meta=inconsistent) from exc
    items = [obj for obj in objs if labels_match(labels, obj) and fields(obj)]
    if start:
        items = [obj for obj in items if _key(obj) >= start]
    meta: dict[str, Any] = {"resourceVersion": str(at), "continue": ""}
    if 0 < limit < len(items):
        rest = items[limit:]
        items = items[:limit]
        meta["continue"] = _encode_continue(at, _key(rest[0]))
        meta["remainingItemCount"] = len(rest)
    return {
        "apiVersion": resource.group_version,
        "kind": resource.list_kind,
        "metadata": meta,
        "items": items,
    }


def _bookmark(resource: ResourceType, rv: int, initial_end: bool = False) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {"apiVersion": resource.group_version, "kind": resource.kind, "metadata": meta}
    return dumps({"type": "BOOKMARK", "object": obj}) + b"\n"


def _expired_line(exc: Expired) -> bytes:
    error = ApiError(410, "Expired", str(exc))
    return dumps({"type": "ERROR", "object": error.to_json()}) + b"\n"


# A watch whose client has this much unread: it is cut off, as the real server cuts off
# a watcher that does not keep up; its informer relists.
WATCH_BUFFER_LIMIT = 16 * 1024 * 1024


class _Outbox:
    """The lines a watch has yet to send, in order, and whether the watch has ended.

    The store adds an event's line as it commits the event, on the thread that commits
    it: a test may change objects from another thread, and what it commits there reaches
    the outbox through the event loop, whose thread alone touches the outbox."""

    def __init__(self, limit: int, overflow: Callable[[], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._limit = limit
        self._overflow = overflow
        self.lines: deque[bytes] = deque()
        self.size = 0  # bytes in ``lines``
        self.ended = False
        self.ready = asyncio.Event()  # a line was added or the watch ended

    def add(self, line: bytes) -> None:
        self.lines.append(line)
        self.size += len(line)
        self.ready.set()

    def put(self, line: bytes | None) -> None:
        """The store's sink: an event's line, or None once the watch has ended. Past
        the limit the watch is cut off."""
        if threading.get_ident() != self._thread:
            self._loop.call_soon_threadsafe(self.put, line)
            return
        if line is None:
            self.ended = True
            self.ready.set()
            return
        self.add(line)
        if self.size > self._limit:
            self._overflow()

    def take(self) -> bytes:
        line = self.lines.popleft()
        self.size -= len(line)
        return line


async def serve_watch(
    request: Request,
    stream: Stream,
    store: Store,
    resource: ResourceType,
    namespace: str | None,
    bookmark_interval: float,
    buffer_limit: int = WATCH_BUFFER_LIMIT,
) -> None:
    """Stream newline-delimited watch events until the timeout, a drop, or the client goes.

    Events reach the watch's outbox as they are committed, by the store's call; this
    coroutine sends what the outbox holds, and bookmarks. A client that leaves more
    than ``buffer_limit`` bytes of events unsent is cut off."""
    query = request.query
    refuse_unserved(query)
    _limit(query)  # refused before anything else, as the real server decodes it first
    labels = parse_label_selector(query.get("labelSelector"))
    fields = parse_field_selector(query.get("fieldSelector"))
    rv_text = query.get("resourceVersion", "")
    initial = rv_text in ("", "0")
    bookmarks = query_flag(query, "allowWatchBookmarks")
    if not initial:
        try:
            since_rv = int(rv_text)
        except ValueError as exc:
            raise status.bad_request(f"invalid resource version: {rv_text}") from exc

    outbox = _Outbox(buffer_limit, lambda: store.unwatch(watcher))
    # From here to the initial events nothing awaits, so no event is committed between
    # the watcher's registration and the current state it starts from: every later event
    # reaches the client once, none twice.
    watcher = store.watch(resource.qualified, namespace, labels, fields, outbox.put)
    try:
        if initial:
            for obj in store.list(resource.qualified, namespace):
                if labels_match(labels, obj) and fields(obj):
                    outbox.add(dumps({"type": "ADDED", "object": obj}) + b"\n")
            if bookmarks:
                outbox.add(_bookmark(resource, store.rv, initial_end=True))
        else:
            try:
                for event in store.events_since(resource.qualified, since_rv):
                    event_type = watcher.event_type(event)
                    if event_type is not None:
                        outbox.add(event.line(event_type))
            except Expired as exc:
                outbox.add(_expired_line(exc))
                store.unwatch(watcher)
        await stream.start(200, "application/json")
        await _send(stream, outbox, store, resource, query, bookmarks, bookmark_interval)
    finally:
        store.unwatch(watcher)


async def _send(
    stream: Stream,
    outbox: _Outbox,
    store: Store,
    resource: ResourceType,
    query: Mapping[str, str],
    bookmarks: bool,
    bookmark_interval: float,
) -> None:
    """Until the watch ends: what the outbox holds, bookmarks every ``bookmark_interval``
    if asked for, and one at ``timeoutSeconds``."""
    timeout = float(query.get("timeoutSeconds") or 0)
    deadline = time.monotonic() + timeout if timeout > 0 else None
    while True:
        while outbox.lines:
            await stream.write(outbox.take())
        if outbox.ended:
            return
        wait = bookmark_interval if bookmarks else None
        if deadline is not None:
            left = max(deadline - time.monotonic(), 0.0)
            wait = left if wait is None else min(wait, left)
        outbox.ready.clear()
        try:
            async with asyncio.timeout(wait):
                await outbox.ready.wait()
        except TimeoutError:
            # Queued after every event committed so far: the store's resourceVersion is
            # a safe resume point.
            if bookmarks:
                outbox.add(_bookmark(resource, store.rv))
            if deadline is not None and time.monotonic() >= deadline:
                outbox.ended = True  # the bookmark just queued marks the end
