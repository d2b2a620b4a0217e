import json

import pytest

from trainjob_devcluster.storage.selectors import parse_field_selector, parse_label_selector
from trainjob_devcluster.storage.store import Expired, Store, dumps


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
    # The window holds the last three events: the oldest it can resume from is the
    # version before the first of them.
    assert str(err.value) == f"too old resource version: {start} ({store.rv - 3})"
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


def _names(objs: list[dict[str, object]]) -> list[tuple[str, str]]:
    return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs]  # type: ignore[index]


def test_lists_select_by_namespace_in_api_order() -> None:
    store = Store()
    for ns in ("b", "a"):
        for name in ("y", "x", "z"):
            store.create("pods", new(name, ns=ns))
    store.create("configmaps", new("x", ns="a"))
    assert _names(store.list("pods")) == [
        ("a", "x"), ("a", "y"), ("a", "z"), ("b", "x"), ("b", "y"), ("b", "z"),
    ]  # fmt: skip
    assert _names(store.list("pods", "b")) == [("b", "x"), ("b", "y"), ("b", "z")]
    assert store.list("pods", "c") == []
    assert store.list("secrets", "a") == []


def test_lists_at_a_past_version_undo_later_changes() -> None:
    store = Store()
    x = store.create("pods", new("x", {"v": "1"}))
    store.create("pods", new("x", {"v": "1"}, ns="other"))
    at = store.rv
    x2 = store.update("pods", new("x", {"v": "2"}), x)
    store.update("pods", new("x", {"v": "3"}), x2)
    store.create("pods", new("y"))
    store.delete("pods", "other", "x")
    past = store.list_at("pods", "ns", at)
    assert [(o["metadata"]["labels"], o["metadata"]["resourceVersion"]) for o in past] == [
        ({"v": "1"}, x["metadata"]["resourceVersion"])
    ]
    assert _names(store.list_at("pods", None, at)) == [("ns", "x"), ("other", "x")]
    assert _names(store.list("pods")) == [("ns", "x"), ("ns", "y")]


def _snapshot(store: Store) -> list[dict[str, object]]:
    return json.loads(json.dumps(store.list("pods")))


def test_events_give_back_what_was_committed() -> None:
    """What the window's events hold, their watch lines and LISTs at past versions are
    what they were (integers beyond 64 bits too)."""
    store = Store(history_size=60)
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
    for event, (_rv, kind, obj, old) in zip(events, committed, strict=True):
        assert (event.type, event.obj) == (kind, obj)
        assert event.old == (None if old is None else json.loads(json.dumps(old)))
        assert event.line() == dumps({"type": kind, "object": obj}) + b"\n"
    assert lines == [e.line() for e in events]
    assert events[0].obj["spec"]["n"] == 2**70  # exact, not a float
    for rv, state in states.items():
        assert json.loads(json.dumps(store.list_at("pods", None, rv))) == state, rv


def test_a_watch_resuming_from_far_back_sees_selector_changes() -> None:
    store = Store()
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
