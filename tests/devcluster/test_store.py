import gc
import json

import pytest

from trainjob_devcluster.storage.selectors import (
    parse_field_selector,
    parse_label_selector,
    pinned_value,
    sole_value,
)
from trainjob_devcluster.storage.store import Event, Expired, Store, dumps


def new(name: str, labels: dict[str, str] | None = None, ns: str = "ns") -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {}}}


def test_resource_version_increases_on_every_commit() -> None:
    store = Store()
    a = store.create("pods", new("a"))
    rv_a = int(a["metadata"]["resourceVersion"])
    b = store.update("pods", new("a", {"x": "1"}), a)
    assert int(b["metadata"]["resourceVersion"]) == rv_a + 1
    gone = store.delete("pods", "ns", "a")
    assert gone is not None
    assert int(gone["metadata"]["resourceVersion"]) == rv_a + 2
    assert store.get("pods", "ns", "a") is None


async def test_watcher_sees_selector_transitions_as_added_and_deleted() -> None:
    store = Store()
    lines: list[bytes] = []
    store.watch(
        "pods", "ns", parse_label_selector("app=x"), parse_field_selector(None), lines.append
    )
    a = store.create("pods", new("a"))
    b = store.update("pods", new("a", {"app": "x"}), a)
    store.update("pods", new("a", {"app": "y"}), b)
    store.create("pods", new("other", {"app": "x"}, ns="elsewhere"))
    events = [json.loads(line) for line in lines]
    assert [(e["type"], e["object"]["metadata"]["labels"]) for e in events] == [
        ("ADDED", {"app": "x"}),
        ("DELETED", {"app": "y"}),
    ]


def test_events_since_and_expiry() -> None:
    store = Store(history_size=3)
    a = store.create("pods", new("a"))
    start = int(a["metadata"]["resourceVersion"])
    for i in range(5):
        a = store.update("pods", new("a", {"i": str(i)}), a)
    with pytest.raises(Expired) as err:
        store.events_since("pods", start)
    assert str(err.value) == f"too old resource version: {start} ({store.oldest_resumable_rv})"
    recent = store.events_since("pods", store.rv - 2)
    assert [e.rv for e in recent] == [store.rv - 1, store.rv]
    store.compact()
    with pytest.raises(Expired):
        store.events_since("pods", store.rv - 1)
    assert store.events_since("pods", store.rv) == []


def test_a_closed_watcher_gets_nothing_more_and_is_gone_once_unwatched() -> None:
    store = Store()
    lines: list[bytes | None] = []
    watcher = store.watch("pods", None, [], parse_field_selector(None), lines.append)
    store.create("pods", new("p0"))
    watcher.close()
    store.create("pods", new("p1"))
    assert lines[-1] is None  # the sink hears of the end
    assert [json.loads(line)["object"]["metadata"]["name"] for line in lines[:-1]] == ["p0"]
    assert store.watchers("pods") == [watcher]
    store.unwatch(watcher)
    assert store.watchers("pods") == []


def test_watchers_pinned_to_a_name_see_only_that_objects_events() -> None:
    """A name alone is taken as is; a name with a label or another field term still
    filters on them (a MODIFIED event that leaves the selection is a DELETED)."""
    store = Store()
    seen: dict[str, list[bytes]] = {"name": [], "name+label": [], "name+field": [], "all": []}

    def watch(key: str, labels: str | None, fields: str) -> None:
        store.watch(
            "pods",
            "ns",
            parse_label_selector(labels),
            parse_field_selector(fields),
            seen[key].append,
            name=pinned_value(fields, "metadata.name"),
            selector=(labels or "", fields),
            name_only=sole_value(fields, "metadata.name") is not None,
        )

    watch("name", None, "metadata.name=a")
    watch("name+label", "app=x", "metadata.name=a")
    watch("name+field", None, "metadata.name=a,metadata.namespace=other")
    store.watch("pods", "ns", [], parse_field_selector(None), seen["all"].append)
    a = store.create("pods", new("a", {"app": "x"}))
    store.create("pods", new("b", {"app": "x"}))
    store.create("pods", new("a", {"app": "x"}, ns="elsewhere"))
    a = store.update("pods", new("a", {"app": "y"}), a)
    store.delete("pods", "ns", "a")

    def summary(key: str) -> list[tuple[str, str, str]]:
        events = [json.loads(line) for line in seen[key]]
        return [
            (e["type"], e["object"]["metadata"]["name"], e["object"]["metadata"]["labels"]["app"])
            for e in events
        ]

    assert summary("name") == [("ADDED", "a", "x"), ("MODIFIED", "a", "y"), ("DELETED", "a", "y")]
    assert summary("name+label") == [("ADDED", "a", "x"), ("DELETED", "a", "y")]
    assert summary("name+field") == []
    assert [t for t, _, _ in summary("all")] == ["ADDED", "ADDED", "MODIFIED", "DELETED"]
    assert sorted(w.name_only for w in store.watchers("pods")) == [False, False, False, True]


def _names(objs: list[dict[str, object]]) -> list[tuple[str, str]]:
    return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs]  # type: ignore[index]


def test_lists_select_by_namespace_and_pinned_name_in_api_order() -> None:
    store = Store()
    for ns in ("b", "a"):
        for name in ("y", "x", "z"):
            store.create("pods", new(name, ns=ns))
    store.create("configmaps", new("x", ns="a"))
    assert _names(store.list("pods")) == [
        ("a", "x"), ("a", "y"), ("a", "z"), ("b", "x"), ("b", "y"), ("b", "z"),
    ]  # fmt: skip
    assert _names(store.list("pods", "b")) == [("b", "x"), ("b", "y"), ("b", "z")]
    assert _names(store.list("pods", "b", "y")) == [("b", "y")]
    assert _names(store.list("pods", None, "x")) == [("a", "x"), ("b", "x")]
    assert store.list("pods", "b", "missing") == []
    assert store.list("pods", "c", "x") == []
    assert store.list("pods", None, "missing") == []
    assert store.list("secrets", "a", "x") == []


def test_lists_at_a_past_version_select_a_pinned_name() -> None:
    store = Store()
    x = store.create("pods", new("x", {"v": "1"}))
    store.create("pods", new("x", {"v": "1"}, ns="other"))
    at = store.rv
    store.update("pods", new("x", {"v": "2"}), x)
    store.create("pods", new("y"))
    store.delete("pods", "other", "x")
    past = store.list_at("pods", "ns", at, "x")
    assert [(o["metadata"]["labels"], o["metadata"]["resourceVersion"]) for o in past] == [
        ({"v": "1"}, x["metadata"]["resourceVersion"])
    ]
    assert _names(store.list_at("pods", None, at, "x")) == [("ns", "x"), ("other", "x")]
    assert store.list_at("pods", "ns", at, "y") == []
    assert _names(store.list("pods", None, "x")) == [("ns", "x")]


def _snapshot(store: Store) -> list[dict[str, object]]:
    return json.loads(json.dumps(store.list("pods")))


def test_folded_events_give_back_what_was_committed() -> None:
    """Past the hot events an event keeps JSON, not dicts: what it decodes to, its watch
    lines and LISTs at past versions are what they were (integers beyond 64 bits too)."""
    store = Store(history_size=60, hot_events=4)
    states: dict[int, list[dict[str, object]]] = {store.rv: _snapshot(store)}
    committed: list[tuple[int, str, object, object]] = []
    lines: list[bytes] = []
    store.watch("pods", None, [], parse_field_selector(None), lines.append)
    current: dict[str, dict[str, object]] = {}
    for step in range(30):
        name = f"p{step % 3}"
        labels = {"step": str(step), "big": str(2**70)}
        old = current.get(name)
        if step % 7 == 6 and old is not None:
            gone = store.delete("pods", "ns", name)
            assert gone is not None
            del current[name]
            committed.append((store.rv, "DELETED", json.loads(json.dumps(gone)), old))
        else:
            body = {**new(name, labels), "spec": {"n": 2**70 + step, "x": -0.0, "s": "ü"}}
            obj = store.create("pods", body) if old is None else store.update("pods", body, old)
            current[name] = obj
            kind = "ADDED" if old is None else "MODIFIED"
            committed.append((store.rv, kind, json.loads(json.dumps(obj)), old))
        states[store.rv] = _snapshot(store)

    events = store.events_since("pods", committed[0][0] - 1)
    assert [e.rv for e in events] == [rv for rv, *_ in committed]
    assert [e.folded for e in events] == [True] * 26 + [False] * 4
    for event, (_rv, kind, obj, old) in zip(events, committed, strict=True):
        assert (event.type, event.obj) == (kind, obj)
        assert event.old == (None if old is None else json.loads(json.dumps(old)))
        assert event.line() == dumps({"type": kind, "object": obj}) + b"\n"
    assert lines == [e.line() for e in events]
    assert events[0].obj["spec"]["n"] == 2**70  # exact, not a float
    for rv, state in states.items():
        assert json.loads(json.dumps(store.list_at("pods", None, rv))) == state, rv


def test_a_watch_resuming_from_far_back_sees_selector_changes_in_folded_events() -> None:
    store = Store(hot_events=2)
    a = store.create("pods", new("a", {"app": "x"}))
    start = store.rv
    a = store.update("pods", new("a", {"app": "y"}), a)  # leaves app=x
    a = store.update("pods", new("a", {"app": "x"}), a)  # comes back
    for i in range(3):
        store.create("pods", new(f"filler{i}"))
    lines: list[bytes] = []
    watcher = store.watch(
        "pods", "ns", parse_label_selector("app=x"), parse_field_selector(None), lines.append
    )
    replayed = [
        (watcher.event_type(e), e.obj["metadata"]["name"])
        for e in store.events_since("pods", start)
    ]
    assert replayed == [
        ("DELETED", "a"),
        ("ADDED", "a"),
        (None, "filler0"),
        (None, "filler1"),
        (None, "filler2"),
    ]


@pytest.mark.parametrize("hot", [50, 20, 5])
def test_the_window_holds_no_more_events_than_it_keeps(hot: int) -> None:
    """Each hot event refers to the one before it on its object until it folds: that
    reference must never keep events alive past the window."""
    store = Store(history_size=20, hot_events=hot)
    obj = store.create("pods", new("a"))
    for i in range(500):
        obj = store.update("pods", new("a", {"i": str(i)}), obj)
    gc.collect()
    alive = [o for o in gc.get_objects() if isinstance(o, Event)]
    assert len(alive) <= 21
