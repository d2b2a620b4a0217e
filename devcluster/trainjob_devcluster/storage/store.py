"""The development cluster's storage: objects, resourceVersions, the event window, watchers.

Everything runs on one event loop and no method awaits, so a handler's read-modify-write
is atomic without locks. Stored objects are never mutated after they are stored: writers
build a new dict, so readers may hand stored objects out without copying, and the write
path remembers things about stored objects and their parts by identity (their JSON here,
managedFields in fieldmanager and fieldsets, CEL verdicts in schema).
"""

from __future__ import annotations

import builtins
import json
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping
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
    (text as UTF-8, as Go writes it). orjson: a fifth of the json module's time for a
    stored TrainJob, the largest single cost of a write's answer and of a watch event."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return _ENCODER.encode(obj).encode()


# The JSON of recently encoded objects, by id: the answer to the write that stored an
# object is the JSON its watch event carries, and the event window keeps that JSON once
# the event is folded. Stored objects never change, so an entry whose object is the one
# asked about is its JSON.
_ENCODED: dict[int, tuple[Obj, bytes]] = {}
_ENCODED_LIMIT = 64


def _remember(obj: Obj, encoded: bytes) -> None:
    if len(_ENCODED) >= _ENCODED_LIMIT:
        del _ENCODED[next(iter(_ENCODED))]
    _ENCODED[id(obj)] = (obj, encoded)


def _known(obj: Obj) -> bytes | None:
    known = _ENCODED.get(id(obj))
    return known[1] if known is not None and known[0] is obj else None


def dumps_object(obj: Obj) -> bytes:
    """``dumps(obj)`` for a stored object, without encoding again one whose JSON a watch
    event or an answer just needed."""
    encoded = _known(obj)
    if encoded is None:
        encoded = dumps(obj)
        _remember(obj, encoded)
    return encoded


def _decode(encoded: bytes) -> Obj:
    # The json module, not orjson: integers beyond 64 bits come back exact.
    decoded: Obj = json.loads(encoded)
    return decoded


class Event:
    """A committed change; its JSON line is built once however many watchers get it.

    Once the store has committed its ``hot_events`` newer ones, an event is folded: it
    keeps the JSON of its object and of the object before it instead of their dicts,
    and decodes them when asked (a watch resuming from far back, a LIST at a past
    version), with keys in JSON order. The window then holds one string per object
    rather than a tree of about a hundred small objects, and the write that pushes the
    oldest event out frees that string instead of walking the tree through memory long
    out of the CPU's caches: a write with 1,000 watches open costs less CPU, and a full
    window of TrainJob writes takes less memory (figures: docs/devcluster.md).
    """

    __slots__ = (
        "_before",
        "_lines",
        "_obj",
        "_obj_json",
        "_old",
        "_old_json",
        "key",
        "resource",
        "rv",
        "type",
        "verdicts",
    )

    def __init__(
        self,
        type: str,
        resource: str,
        obj: Obj,
        old: Obj | None,
        rv: int,
        key: tuple[str, str] = ("", ""),
        before: Event | None = None,
    ) -> None:
        self.type = type  # ADDED, MODIFIED or DELETED
        self.resource = resource
        self.key = key  # the object's (namespace, name)
        self.rv = rv
        self._obj: Obj | None = obj
        self._old = old
        # The event that committed ``old`` (its JSON is old's), while this one is hot.
        self._before = before
        self._obj_json: bytes | None = None
        self._old_json: bytes | None = None
        self._lines: dict[str, bytes] = {}
        # What watchers with equal selectors see of it (see Watcher.selector), found once.
        self.verdicts: dict[Hashable, str | None] = {}

    @property
    def obj(self) -> Obj:
        if self._obj is not None:
            return self._obj
        assert self._obj_json is not None
        return _decode(self._obj_json)

    @property
    def old(self) -> Obj | None:
        if self._obj is not None:
            return self._old
        return None if self._old_json is None else _decode(self._old_json)

    @property
    def folded(self) -> bool:
        return self._obj is None

    def encoded(self) -> bytes:
        """The JSON of the event's object."""
        if self._obj_json is None:
            assert self._obj is not None
            found = _known(self._obj)
            if found is None:
                found = dumps(self._obj)
                _remember(self._obj, found)
            self._obj_json = found
        return self._obj_json

    def keep_answered(self) -> None:
        """Take the object's JSON if its write's answer has just encoded it."""
        if self._obj_json is None and self._obj is not None:
            self._obj_json = _known(self._obj)

    def fold(self) -> None:
        """Keep JSON instead of dicts (see the class)."""
        if self._obj is None:
            return
        self.encoded()
        old = self._old
        if old is not None:
            before = self._before
            self._old_json = before.encoded() if before is not None else dumps(old)
        self._obj = self._old = self._before = None
        self._lines = {}
        self.verdicts = {}

    def release(self) -> None:
        """Leave the window: let go of the event before it."""
        self._before = None

    def line(self, event_type: str | None = None) -> bytes:
        kind = event_type or self.type
        cached = self._lines.get(kind)
        if cached is None:
            # Exactly dumps({"type": kind, "object": obj}): keys sorted, no spaces.
            cached = b'{"object":' + self.encoded() + b',"type":' + dumps(kind) + b"}\n"
            if not self.folded:
                self._lines[kind] = cached
        return cached


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
        name: str | None = None,
        selector: Hashable | None = None,
        name_only: bool = False,
    ) -> None:
        self.resource = resource
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.sink = sink
        # The metadata.name the field selector requires, if it requires one.
        self.name = name
        # Whether that name is the whole selection (no other field, no label): the
        # store offers such a watcher only its object's events, and it takes each as is.
        self.name_only = name_only and name is not None and not labels
        # What ``labels`` and ``fields`` were parsed from (None: unknown): watchers of a
        # namespace with equal selectors see every event the same way, so the first of
        # them to be offered an event finds the type they all see.
        self.selector = None if selector is None else (namespace, selector)
        self.closed = False
        self.last_rv = 0

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
        if self.name_only:
            event_type: str | None = event.type
        elif self.selector is None:
            event_type = self.event_type(event)
        elif self.selector in event.verdicts:
            event_type = event.verdicts[self.selector]
        else:
            event_type = event.verdicts[self.selector] = self.event_type(event)
        if event_type is None:
            return
        self.last_rv = event.rv
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


def _in_order(
    items: Mapping[tuple[str, str], Obj], namespace: str | None, name: str | None
) -> list[Obj]:
    """``items`` (by (namespace, name)) of ``namespace`` (None: every one) and called
    ``name`` (None: any), ordered by namespace then name, as the API server lists."""
    if name is not None and namespace is not None:
        found = items.get((namespace, name))
        return [] if found is None else [found]
    if name is not None:
        keys = sorted(k for k in items if k[1] == name)
    elif namespace is not None:
        keys = sorted(k for k in items if k[0] == namespace)
    else:
        keys = sorted(items)
    return [items[k] for k in keys]


class Store:
    """Objects by resource and (namespace, name), a global resourceVersion, a window of events."""

    def __init__(self, history_size: int = 10_000, hot_events: int = 1_000) -> None:
        self.rv = 1
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._history: deque[Event] = deque(maxlen=history_size)
        # The newest events, kept unfolded (see Event); never more than the window.
        self._hot: deque[Event] = deque(maxlen=max(min(hot_events, history_size), 1))
        # The last event of each object still stored, and that object.
        self._last: dict[tuple[str, str, str], tuple[Event, Obj]] = {}
        # Watches may resume from any resourceVersion >= this one.
        self._window_start = 1
        # Watchers by (resource, namespace or None), and those whose field selector names
        # one object by (resource, namespace or None, name): a commit only visits the
        # watchers that can want it, so thousands of idle watches cost nothing per write.
        self._watchers: dict[tuple[str, str | None], set[Watcher]] = {}
        self._named: dict[tuple[str, str | None, str], set[Watcher]] = {}

    # -- reads ---------------------------------------------------------------------------

    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        return self._objects.get(resource, {}).get((namespace, name))

    def list(
        self, resource: str, namespace: str | None = None, name: str | None = None
    ) -> builtins.list[Obj]:
        """The objects of ``namespace`` (None: all), by namespace then name; only those
        called ``name`` if given (a field selector that pins metadata.name): one lookup in
        a namespace, however many objects the resource has."""
        return _in_order(self._objects.get(resource, {}), namespace, name)

    def list_at(
        self, resource: str, namespace: str | None, rv: int, name: str | None = None
    ) -> builtins.list[Obj]:
        """The objects as they were at ``rv``: the current ones with every later change of
        the event window undone. Expired if the window no longer reaches back to ``rv``
        (as for a watch from it); ``rv`` must not be past the current one. ``namespace``
        and ``name`` select as in ``list``."""
        if rv < self._window_start:
            raise Expired(rv, self._window_start)
        if rv > self.rv:
            raise ValueError(f"resourceVersion {rv} is past the current {self.rv}")
        items = dict(self._objects.get(resource, {}))
        # The first change of each object after ``rv`` says what it was at ``rv``: walking
        # back, the last one seen of each object.
        first: dict[tuple[str, str], Event] = {}
        for event in reversed(self._history):
            if event.rv <= rv:
                break
            if event.resource == resource:
                first[event.key] = event
        for event in first.values():
            if event.type == "ADDED":
                items.pop(event.key, None)
            else:  # MODIFIED and DELETED: the object as it was before
                old = event.old
                assert old is not None
                items[event.key] = old
        return _in_order(items, namespace, name)

    def count(self, resource: str) -> int:
        return len(self._objects.get(resource, {}))

    # -- writes --------------------------------------------------------------------------

    def _commit(self, event_type: str, resource: str, obj: Obj, old: Obj | None) -> Event:
        self.rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.rv)
        namespace, name = meta.get("namespace", ""), meta["name"]
        last = self._last.get((resource, namespace, name))
        before = last[0] if last is not None and old is not None and last[1] is old else None
        event = Event(event_type, resource, obj, old, self.rv, (namespace, name), before)
        if event_type == "DELETED":
            self._last.pop((resource, namespace, name), None)
        else:
            self._last[(resource, namespace, name)] = (event, obj)
        history, hot = self._history, self._hot
        if history:
            history[-1].keep_answered()
        if history and len(history) == history.maxlen:
            history[0].release()
            self._window_start = history[0].rv
        history.append(event)
        if len(hot) == hot.maxlen:
            hot[0].fold()
        hot.append(event)
        # Names never change (a DELETED event's object is the old one's copy), so the
        # watchers of one name are the only named ones an event can concern.
        assert old is None or old["metadata"]["name"] == name
        for key in ((resource, namespace), (resource, None)):
            group = self._watchers.get(key)
            if group:
                for watcher in tuple(group):
                    watcher.offer(event)
            if self._named:
                group = self._named.get((*key, name))
                if group:
                    for watcher in tuple(group):
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

    @property
    def oldest_resumable_rv(self) -> int:
        return self._window_start

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
        *,
        name: str | None = None,
        selector: Hashable | None = None,
        name_only: bool = False,
    ) -> Watcher:
        """A new watcher that gives ``sink`` the line of every event it selects, committed
        from now on; ``name``: the metadata.name ``fields`` requires, if any (it is then
        only offered that object's events, which are the only ones it can select);
        ``selector``: what ``labels`` and ``fields`` were parsed from, if known;
        ``name_only``: ``fields`` requires ``name`` and nothing else."""
        watcher = Watcher(resource, namespace, labels, fields, sink, name, selector, name_only)
        self._index(watcher).setdefault(self._key(watcher), set()).add(watcher)
        return watcher

    def _index(self, watcher: Watcher) -> dict[Any, set[Watcher]]:
        return self._watchers if watcher.name is None else self._named

    @staticmethod
    def _key(watcher: Watcher) -> tuple[Any, ...]:
        if watcher.name is None:
            return (watcher.resource, watcher.namespace)
        return (watcher.resource, watcher.namespace, watcher.name)

    def unwatch(self, watcher: Watcher) -> None:
        index, key = self._index(watcher), self._key(watcher)
        group = index.get(key)
        if group is not None:
            group.discard(watcher)
            if not group:
                del index[key]
        watcher.close()

    def watchers(self, resource: str | None = None) -> builtins.list[Watcher]:
        groups = [*self._watchers.items(), *self._named.items()]
        return [w for key, group in groups for w in group if resource in (None, key[0])]

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
        self._hot.clear()
        self._last.clear()
        self.rv += 1
        self._window_start = self.rv
        return self.rv

    def all_resources(self) -> Iterable[str]:
        return list(self._objects)
