import json

import pytest

from trainjob_status_server.devcluster.selectors import parse_field_selector, parse_label_selector
from trainjob_status_server.devcluster.store import Expired, Store


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
    watcher = store.watch("pods", "ns", parse_label_selector("app=x"), parse_field_selector(None))
    a = store.create("pods", new("a"))
    b = store.update("pods", new("a", {"app": "x"}), a)
    store.update("pods", new("a", {"app": "y"}), b)
    store.create("pods", new("other", {"app": "x"}, ns="elsewhere"))
    lines = [watcher.queue.get_nowait() for _ in range(watcher.queue.qsize())]
    events = [json.loads(line) for line in lines if line is not None]
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


def test_slow_watcher_is_cut_off() -> None:
    store = Store(watch_queue_limit=2)
    watcher = store.watch("pods", None, [], parse_field_selector(None))
    for i in range(4):
        store.create("pods", new(f"p{i}"))
    assert watcher.closed
    assert watcher.queue.qsize() == 3  # two events, then the end-of-stream marker
