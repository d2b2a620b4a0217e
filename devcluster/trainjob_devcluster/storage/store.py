"""The development cluster's storage: objects, resourceVersions, the event window, watchers.

Everything runs on one event loop and no method awaits, so a handler's read-modify-write
is atomic without locks. Stored objects are never mutated after they are stored: writers
build a new dict, so readers may hand stored objects out without copying.
"""

from __future__ import annotations

import builtins
import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from .selectors import Requirement, labels_match

Obj = dict[str, Any]
FieldPredicate = Callable[[Mapping[str, Any]], bool]


# For what orjson does not take: integers beyond 64 bits. No circular-reference
# bookkeeping: decoded JSON cannot hold a cycle.
_ENCODER = json.JSONEncoder(
    separators=(",", ":"), sort_keys=True, check_circular=False, ensure_ascii=False
)


def dumps(obj: Any) -> bytes:
    """Compact JSON with sorted keys, as the API server marshals unstructured objects
    (text as UTF-8, as Go writes it)."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return _ENCODER.encode(obj).encode()


class Event:
    """A committed change: ``obj`` as committed and, for MODIFIED and DELETED, ``old``."""

    __slots__ = ("key", "obj", "old", "resource", "rv", "type")

    def __init__(
        self, type: str, resource: str, obj: Obj, old: Obj | None, rv: int, key: tuple[str, str]
    ) -> None:
        self.type = type  # ADDED, MODIFIED or DELETED
        self.resource = resource
        self.obj = obj
        self.old = old
        self.rv = rv
        self.key = key  # the object's (namespace, name)

    def line(self, event_type: str | None = None) -> bytes:
        """The event as a watch sends it (as another type, for a watcher whose selection
        the object entered or left)."""
        return dumps({"type": event_type or self.type, "object": self.obj}) + b"\n"


# Gets an event's line, or None once the watch has ended.
Sink = Callable[[bytes | None], None]


class Watcher:
    """One open watch: filters events the way the watch cache does and hands their lines to
    ``sink`` as they are committed, then None when the watch ends.

    A MODIFIED event that moves an object into the selection is sent as ADDED, and one
    that moves it out as DELETED, so a client's view stays consistent with its selector.
    """

    def __init__(
        self,
        resource: str,
        namespace: str | None,
        labels: builtins.list[Requirement],
        fields: FieldPredicate,
        sink: Sink,
    ) -> None:
        self.resource = resource
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.sink = sink
        self.closed = False

    def _selected(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return labels_match(self.labels, obj) and self.fields(obj)

    def event_type(self, event: Event) -> str | None:
        """The type this watcher sees for ``event``, or None when it is filtered out."""
        new_in = self._selected(event.obj)
        if event.type == "ADDED":
            return "ADDED" if new_in else None
        if event.type == "DELETED":
            return "DELETED" if new_in else None
        old_in = self._selected(event.old)
        if new_in and old_in:
            return "MODIFIED"
        if new_in:
            return "ADDED"
        if old_in:
            return "DELETED"
        return None

    def offer(self, event: Event) -> None:
        if self.closed or event.resource != self.resource:
            return
        event_type = self.event_type(event)
        if event_type is not None:
            self.sink(event.line(event_type))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.sink(None)


class Expired(Exception):
    """A resourceVersion older than the retained event window."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


def _in_order(items: Mapping[tuple[str, str], Obj], namespace: str | None) -> list[Obj]:
    """``items`` (by (namespace, name)) of ``namespace`` (None: every one), ordered by
    namespace then name, as the API server lists."""
    keys = sorted(k for k in items if namespace is None or k[0] == namespace)
    return [items[k] for k in keys]


class Store:
    """Objects by resource and (namespace, name), a global resourceVersion, a window of events."""

    def __init__(self, history_size: int = 10_000) -> None:
        self.rv = 1
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._history: deque[Event] = deque(maxlen=history_size)
        # Watches may resume from any resourceVersion >= this one.
        self._window_start = 1
        self._watchers: builtins.list[Watcher] = []

    # -- reads ---------------------------------------------------------------------------

    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        return self._objects.get(resource, {}).get((namespace, name))

    def list(self, resource: str, namespace: str | None = None) -> builtins.list[Obj]:
        """The objects of ``namespace`` (None: all), by namespace then name."""
        return _in_order(self._objects.get(resource, {}), namespace)

    def list_at(self, resource: str, namespace: str | None, rv: int) -> builtins.list[Obj]:
        """The objects as they were at ``rv``: the current ones with every later change of
        the event window undone. Expired if the window no longer reaches back to ``rv``
        (as for a watch from it); ``rv`` must not be past the current one."""
        if rv < self._window_start:
            raise Expired(rv, self._window_start)
        if rv > self.rv:
            raise ValueError(f"resourceVersion {rv} is past the current {self.rv}")
        items = dict(self._objects.get(resource, {}))
        # Undo the changes after ``rv``, newest first: each object ends up as it was.
        for event in reversed(self._history):
            if event.rv <= rv:
                break
            if event.resource != resource:
                continue
            if event.type == "ADDED":
                items.pop(event.key, None)
            else:  # MODIFIED and DELETED: the object as it was before
                assert event.old is not None
                items[event.key] = event.old
        return _in_order(items, namespace)

    # -- writes --------------------------------------------------------------------------

    def _commit(self, event_type: str, resource: str, obj: Obj, old: Obj | None) -> Event:
        self.rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.rv)
        key = (meta.get("namespace", ""), meta["name"])
        event = Event(event_type, resource, obj, old, self.rv, key)
        history = self._history
        if len(history) == history.maxlen:
            self._window_start = history[0].rv
        history.append(event)
        for watcher in tuple(self._watchers):
            watcher.offer(event)
        return event

    def create(self, resource: str, obj: Obj) -> Obj:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        self._objects.setdefault(resource, {})[key] = obj
        self._commit("ADDED", resource, obj, None)
        return obj

    def update(self, resource: str, obj: Obj, old: Obj) -> Obj:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        self._objects.setdefault(resource, {})[key] = obj
        self._commit("MODIFIED", resource, obj, old)
        return obj

    def delete(self, resource: str, namespace: str, name: str) -> Obj | None:
        old = self._objects.get(resource, {}).pop((namespace, name), None)
        if old is None:
            return None
        # The DELETED event carries the object at the deletion's resourceVersion.
        final = {**old, "metadata": dict(old["metadata"])}
        self._commit("DELETED", resource, final, old)
        return final

    # -- watch ---------------------------------------------------------------------------

    def events_since(self, resource: str, rv: int) -> builtins.list[Event]:
        """Events of ``resource`` after ``rv``; Expired if the window no longer reaches it."""
        if rv < self._window_start:
            raise Expired(rv, self._window_start)
        return [e for e in self._history if e.rv > rv and e.resource == resource]

    def watch(
        self,
        resource: str,
        namespace: str | None,
        labels: builtins.list[Requirement],
        fields: FieldPredicate,
        sink: Sink,
    ) -> Watcher:
        """A new watcher that gives ``sink`` the line of every event it selects, committed
        from now on."""
        watcher = Watcher(resource, namespace, labels, fields, sink)
        self._watchers.append(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        if watcher in self._watchers:
            self._watchers.remove(watcher)
        watcher.close()

    def watchers(self, resource: str | None = None) -> builtins.list[Watcher]:
        return [w for w in self._watchers if resource in (None, w.resource)]

    def close_watches(self, resource: str | None = None) -> int:
        """Close open watches (all, or one resource's); returns how many were closed."""
        closing = self.watchers(resource)
        for watcher in closing:
            self.unwatch(watcher)
        return len(closing)

    def compact(self) -> int:
        """Forget every event so far: a watch from any resourceVersion so far, the current
        one included, gets 410. The resourceVersion moves on by one (no object changes),
        so the LIST an informer then makes answers one it can watch from again."""
        self._history.clear()
        self.rv += 1
        self._window_start = self.rv
        return self.rv

    def all_resources(self) -> Iterable[str]:
        return list(self._objects)
