"""When the server gives memory back to the system: shortly after a crowd of connections
has gone, once however many closes decide it, and never for ordinary traffic."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trainjob_status_server.http.memory import CROWD, TRIM_DELAY, HeapTrim, crowd_left


@pytest.mark.parametrize(
    ("peak", "open_now", "left"),
    [
        (1024, 512, True),
        (1024, 513, False),
        (CROWD, 0, True),
        (CROWD - 1, 0, False),  # a handful of clients coming and going
        (200, 100, True),
        (130, 66, False),  # half gone, but fewer than CROWD of them
        (0, 0, False),
    ],
)
def test_a_crowd_has_left(peak: int, open_now: int, left: bool) -> None:
    assert crowd_left(peak, open_now) is left


class Later:
    def __init__(self) -> None:
        self.calls: list[tuple[float, Callable[[], None]]] = []

    def __call__(self, delay: float, callback: Callable[[], None]) -> None:
        self.calls.append((delay, callback))

    def run(self) -> None:
        calls, self.calls = self.calls, []
        for _, callback in calls:
            callback()


def test_the_heap_is_trimmed_once_shortly_after_each_half_of_a_crowd_leaves() -> None:
    trims: list[int] = []
    later = Later()
    heap = HeapTrim(trim=lambda: trims.append(1), schedule=later)
    for n in range(1, 1025):
        heap.opened(n)
    for n in range(1023, 512, -1):
        heap.closed(n)
    assert later.calls == []
    heap.closed(512)
    assert [delay for delay, _ in later.calls] == [TRIM_DELAY]
    # More of the crowd leaving before the trim runs: still one trim.
    for n in range(510, 200, -1):
        heap.closed(n)
    assert len(later.calls) == 1
    assert trims == []
    later.run()
    assert trims == [1]
    assert heap.trims == 1
    for n in range(200, -1, -1):
        heap.closed(n)
    later.run()
    assert heap.trims == 2


def test_ordinary_traffic_never_trims() -> None:
    later = Later()
    heap = HeapTrim(trim=lambda: None, schedule=later)
    for _ in range(10_000):
        heap.opened(40)
        heap.closed(39)
    assert later.calls == []
