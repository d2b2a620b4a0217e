"""LIST (selectors, limit/continue) and WATCH (streamed events, bookmarks, expiry)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import status
from .httpserver import Request, Stream
from .resources import ResourceType
from .routing import query_flag
from .selectors import labels_match, parse_field_selector, parse_label_selector, pinned_value
from .status import ApiError
from .store import Expired, Obj, Store, Watcher, dumps


def _encode_continue(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> str:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded))
        start = data["start"]
        if not isinstance(start, str):
            raise TypeError
        return start
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise status.bad_request("continue key is not valid: invalid continue token") from exc


def _key(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}\x00"


def list_objects(
    store: Store, resource: ResourceType, namespace: str | None, query: Mapping[str, str]
) -> Obj:
    """A ``<Kind>List`` of the current state (no historical snapshots: see the README)."""
    labels = parse_label_selector(query.get("labelSelector"))
    fields = parse_field_selector(query.get("fieldSelector"))
    items = [
        obj
        for obj in store.list(resource.qualified, namespace)
        if labels_match(labels, obj) and fields(obj)
    ]
    if query.get("continue"):
        start = _decode_continue(query["continue"])
        items = [obj for obj in items if _key(obj) >= start]
    meta: dict[str, Any] = {"resourceVersion": str(store.rv), "continue": ""}
    limit = int(query.get("limit") or 0)
    if 0 < limit < len(items):
        rest = items[limit:]
        items = items[:limit]
        meta["continue"] = _encode_continue(store.rv, _key(rest[0]))
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


def check_watch_options(query: Mapping[str, str]) -> None:
    if (
        query_flag(query, "sendInitialEvents")
        and query.get("resourceVersionMatch") != "NotOlderThan"
    ):
        cause = status.Cause(
            "FieldValueForbidden",
            "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            "resourceVersionMatch",
        )
        raise ApiError(
            422,
            "Invalid",
            f'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: {cause.message}',
            {"group": "meta.k8s.io", "kind": "ListOptions", "causes": [cause.to_json()]},
        )


# A watch whose client has this much unread: it is cut off, as the real server cuts off
# a watcher that does not keep up; its informer relists.
WATCH_BUFFER_LIMIT = 16 * 1024 * 1024


async def serve_watch(
    request: Request,
    stream: Stream,
    store: Store,
    resource: ResourceType,
    namespace: str | None,
    bookmark_interval: float,
    encode: Callable[[bytes], bytes] | None = None,
    buffer_limit: int = WATCH_BUFFER_LIMIT,
) -> None:
    """Stream newline-delimited watch events until the timeout, a drop, or the client goes.

    Events are written as they are committed, by the store's call, with nothing queued
    in between; this coroutine only starts the stream, sends bookmarks and ends it.
    ``encode`` rewrites each event line (e.g. into a Table row for ``kubectl get -w``)."""
    query = request.query
    check_watch_options(query)
    labels = parse_label_selector(query.get("labelSelector"))
    fields = parse_field_selector(query.get("fieldSelector"))
    rv_text = query.get("resourceVersion", "")
    initial = query_flag(query, "sendInitialEvents") or rv_text in ("", "0")
    bookmarks = query_flag(query, "allowWatchBookmarks")
    if not initial:
        try:
            since_rv = int(rv_text)
        except ValueError as exc:
            raise status.bad_request(f"invalid resource version: {rv_text}") from exc

    def write(line: bytes) -> None:
        stream.write(line if encode is None else encode(line))

    def send(line: bytes) -> None:
        write(line)
        if stream.buffered > buffer_limit:
            watcher.close()

    # From here to the stream's start nothing awaits, so no event is committed between the
    # watcher's registration and the current state it starts from: every later event
    # reaches the client once, none twice.
    name = pinned_value(query.get("fieldSelector"), "metadata.name")
    selector = (query.get("labelSelector") or "", query.get("fieldSelector") or "")
    watcher = store.watch(
        resource.qualified, namespace, labels, fields, send, name=name, selector=selector
    )
    try:
        stream.start(200, "application/json")
        if initial:
            for obj in store.list(resource.qualified, namespace):
                if labels_match(labels, obj) and fields(obj):
                    write(dumps({"type": "ADDED", "object": obj}) + b"\n")
            if bookmarks:
                write(_bookmark(resource, store.rv, initial_end=True))
        else:
            try:
                since = store.events_since(resource.qualified, since_rv)
            except Expired as exc:
                write(_expired_line(exc))
                return
            for event in since:
                event_type = watcher.event_type(event)
                if event_type is not None:
                    write(event.line(event_type))
        await _wait(stream, store, watcher, resource, query, bookmarks, bookmark_interval)
    finally:
        store.unwatch(watcher)


async def _wait(
    stream: Stream,
    store: Store,
    watcher: Watcher,
    resource: ResourceType,
    query: Mapping[str, str],
    bookmarks: bool,
    bookmark_interval: float,
) -> None:
    """Until the watch ends: bookmarks every ``bookmark_interval`` if asked for, and one
    at ``timeoutSeconds``."""
    timeout = float(query.get("timeoutSeconds") or 0)
    deadline = time.monotonic() + timeout if timeout > 0 else None
    while not watcher.closed:
        wait = bookmark_interval if bookmarks else None
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            wait = left if wait is None else min(wait, left)
        try:
            async with asyncio.timeout(wait):
                await watcher.ended.wait()
        except TimeoutError:
            if deadline is not None and time.monotonic() >= deadline:
                break  # the closing bookmark below marks the end
            if bookmarks and not watcher.closed:
                # Every event committed so far has been written: the store's
                # resourceVersion is a safe resume point.
                stream.write(_bookmark(resource, store.rv))
            continue
        return
    if bookmarks and not watcher.closed:
        stream.write(_bookmark(resource, store.rv))
