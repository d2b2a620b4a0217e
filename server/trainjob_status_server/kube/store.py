"""The cache's objects and the rules for changing them (pure: no I/O, no clock).

Every change comes from one of three sources: a full list (``replace``), a watch event
(``apply``) or a single GET made on a cache miss (``offer``). They can arrive out of
order with respect to each other (a GET may return a newer object than the watch has
delivered yet), so each change is checked with ``is_newer`` and the cache never goes
back in time.
"""

from __future__ import annotations

from dataclasses import dataclass

from .resources import Key, Obj, key_of, resource_version_of

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"


@dataclass(frozen=True)
class CacheEvent:
    """A change the cache made: ``old`` is None for ADDED, ``new`` is None for DELETED."""

    type: str
    key: Key
    old: Obj | None
    new: Obj | None


def _rv_number(obj: Obj) -> int | None:
    return _number(resource_version_of(obj))


def _number(rv: str) -> int | None:
    return int(rv) if rv.isdigit() else None


def is_newer(incoming: Obj, held: Obj | None) -> bool:
    """Whether ``incoming`` is a later state of the object than ``held``.

    resourceVersions are opaque by contract, but every API server in use (etcd
    revisions) issues increasing integers, and comparing them is what keeps a GET's answer
    and a lagging watch from overwriting each other. When either is not an integer we
    cannot order them and trust the newest arrival, as the watch protocol itself does.
    """
    if held is None:
        return True
    new, old = _rv_number(incoming), _rv_number(held)
    if new is None or old is None:
        return True
    return new > old


class ObjectStore:
    """Objects by (namespace, name); every method returns the events it caused."""

    def __init__(self) -> None:
        self._objects: dict[Key, Obj] = {}

    def __len__(self) -> int:
        return len(self._objects)

    def get(self, key: Key) -> Obj | None:
        return self._objects.get(key)

    def objects(self) -> list[Obj]:
        return list(self._objects.values())

    def apply(self, event_type: str, obj: Obj) -> CacheEvent | None:
        """A watch event; None when it changes nothing (it is older than what we hold)."""
        key = key_of(obj)
        held = self._objects.get(key)
        if event_type == DELETED:
            if held is None or not _deletes(obj, held):
                return None
            del self._objects[key]
            return CacheEvent(DELETED, key, held, None)
        return self.offer(obj)

    def offer(self, obj: Obj) -> CacheEvent | None:
        """An object seen alive (watch ADDED/MODIFIED, or a GET); kept if it is newer."""
        key = key_of(obj)
        held = self._objects.get(key)
        if not is_newer(obj, held):
            return None
        self._objects[key] = obj
        return CacheEvent(ADDED if held is None else MODIFIED, key, held, obj)

    def offer_fetched(self, obj: Obj, watched_rv: str) -> CacheEvent | None:
        """A GET's answer, kept only if it is news to the watch.

        ``watched_rv`` is the last resourceVersion the list or watch delivered. A GET
        answer no later than that is already reflected here, its deletion included: the
        GET raced a watch event (deleted since, or moved out of the selection), and
        keeping it would bring back an object no event will ever remove.
        """
        fetched_at, watched_at = _rv_number(obj), _number(watched_rv)
        if fetched_at is not None and watched_at is not None and fetched_at <= watched_at:
            return None
        return self.offer(obj)

    def replace(self, listed: list[Obj], list_rv: str) -> list[CacheEvent]:
        """A full list taken at ``list_rv``: the listed objects replace what we hold.

        What we hold and the list lacks is deleted, unless it is newer than the list
        itself (a GET answered after the list was taken: the watch that follows the
        list will deliver its fate). Of an object in both, the newer one stays.
        """
        events: list[CacheEvent] = []
        snapshot = {key_of(obj): obj for obj in listed}
        listed_at = _number(list_rv)
        for key, held in list(self._objects.items()):
            held_at = _rv_number(held)
            fetched_later = listed_at is not None and held_at is not None and held_at > listed_at
            if key not in snapshot and not fetched_later:
                del self._objects[key]
                events.append(CacheEvent(DELETED, key, held, None))
        for obj in listed:
            event = self.offer(obj)
            if event is not None:
                events.append(event)
        return events


def _deletes(deleted: Obj, held: Obj) -> bool:
    """A DELETED event removes what we hold unless we hold a later incarnation (the
    object was deleted and created again, and a GET already showed us the new one)."""
    new, old = _rv_number(deleted), _rv_number(held)
    if new is None or old is None:
        return True
    return new >= old
