"""LIST (selectors, limit/continue) and WATCH (streamed events, bookmarks, expiry)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from . import status
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


async def serve_watch(
    request: web.Request,
    store: Store,
    resource: ResourceType,
    namespace: str | None,
    bookmark_interval: float,
    encode: Callable[[bytes], bytes] | None = None,
) -> web.StreamResponse:
    """Stream newline-delimited watch events until the timeout, a drop, or the client goes.

    ``encode`` rewrites each event line (e.g. into a Table row for ``kubectl get -w``)."""
    query = request.query
    check_watch_options(query)
    labels = parse_label_selector(query.get("labelSelector"))
    fields = parse_field_selector(query.get("fieldSelector"))
    rv_text = query.get("resourceVersion", "")
    initial = query_flag(query, "sendInitialEvents") or rv_text in ("", "0")
    bookmarks = query_flag(query, "allowWatchBookmarks")

    # Register before reading the current state, with no await in between: every event
    # committed after the snapshot reaches the watcher, none twice.
    name = pinned_value(query.get("fieldSelector"), "metadata.name")
    selector = (query.get("labelSelector") or "", query.get("fieldSelector") or "")
    watcher = store.watch(
        resource.qualified, namespace, labels, fields, name=name, selector=selector
    )
    first: list[bytes] = []
    expired = False
    if initial:
        for obj in store.list(resource.qualified, namespace):
            if labels_match(labels, obj) and fields(obj):
                first.append(dumps({"type": "ADDED", "object": obj}) + b"\n")
        if bookmarks:
            first.append(_bookmark(resource, store.rv, initial_end=True))
    else:
        try:
            since = store.events_since(resource.qualified, int(rv_text))
        except ValueError as exc:
            store.unwatch(watcher)
            raise status.bad_request(f"invalid resource version: {rv_text}") from exc
        except Expired as exc:
            first.append(_expired_line(exc))
            expired = True
            since = []
        for event in since:
            event_type = watcher.event_type(event)
            if event_type is not None:
                first.append(event.line(event_type))

    response = _EncodingResponse(encode)
    try:
        await response.prepare(request)
        for line in first:
            await response.write(line)
        if not expired:
            await _pump(response, store, watcher, resource, query, bookmarks, bookmark_interval)
    except (ConnectionResetError, asyncio.CancelledError):
        store.unwatch(watcher)
        raise
    finally:
        store.unwatch(watcher)
    return response


class _EncodingResponse(web.StreamResponse):
    """A watch stream whose event lines pass through ``encode`` on the way out."""

    def __init__(self, encode: Callable[[bytes], bytes] | None) -> None:
        super().__init__(status=200, headers={"Content-Type": "application/json"})
        self._encode = encode

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._encode is not None:
            data = self._encode(bytes(data))
        await super().write(data)

    async def write_lines(self, lines: list[bytes]) -> None:
        """Event lines in one write (one TLS record, one send) when they pass unchanged."""
        if self._encode is not None:
            for line in lines:
                await self.write(line)
        else:
            await super().write(b"".join(lines))


async def _pump(
    response: _EncodingResponse,
    store: Store,
    watcher: Watcher,
    resource: ResourceType,
    query: Mapping[str, str],
    bookmarks: bool,
    bookmark_interval: float,
) -> None:
    timeout = float(query.get("timeoutSeconds") or 0)
    deadline = time.monotonic() + timeout if timeout > 0 else None
    while True:
        wait = bookmark_interval if bookmarks else None
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            wait = left if wait is None else min(wait, left)
        try:
            # asyncio.timeout, not wait_for: no task per event (None: no deadline).
            async with asyncio.timeout(wait):
                line = await watcher.queue.get()
        except TimeoutError:
            if deadline is not None and time.monotonic() >= deadline:
                break  # the closing bookmark below marks the end
            if bookmarks and watcher.queue.empty():
                # Everything committed so far has reached this watcher: the store's
                # resourceVersion is a safe resume point.
                await response.write(_bookmark(resource, store.rv))
            continue
        if line is None:
            return
        # Events that queued up meanwhile (a busy server) go out together.
        lines = [line]
        ending = False
        while not watcher.queue.empty():
            more = watcher.queue.get_nowait()
            if more is None:
                ending = True
                break
            lines.append(more)
        await response.write_lines(lines)
        if ending:
            return
    if bookmarks and watcher.queue.empty():
        await response.write(_bookmark(resource, store.rv))
