"""The request count and duration histogram: on the page exactly what prometheus_client's
own Counter and Histogram show for the same posts, in both exposition formats."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from trainjob_status_server.metrics import selfmetrics
from trainjob_status_server.metrics.exporter import server_registry
from trainjob_status_server.metrics.requeststats import RequestStats

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
NAMES = (
    "trainjob_status_requests",
    "Status posts answered, by HTTP code.",
    "trainjob_status_request_duration_seconds",
    "Time from a post's arrival to its answer.",
)
# The _created samples carry each one's own clock reading.
CREATED = re.compile(rb"^(\S+_created(?:\{[^}]*\})?) \S+$", re.MULTILINE)


def pages(posts: list[tuple[int, float]]) -> tuple[list[bytes], list[bytes]]:
    """Both registries' pages (text, OpenMetrics) after ``posts``: ours, and the
    prometheus_client metrics it stands for."""
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    stats = RequestStats(*NAMES, buckets=BUCKETS)
    ours.register(stats)
    counter = Counter(NAMES[0], NAMES[1], ["code"], registry=theirs)
    histogram = Histogram(NAMES[2], NAMES[3], buckets=BUCKETS, registry=theirs)
    for code, seconds in sorted(posts, key=lambda post: post[0]):
        stats.record(code, seconds)
        counter.labels(str(code)).inc()
        histogram.observe(seconds)
    out: tuple[list[bytes], list[bytes]] = ([], [])
    for registry, into in ((ours, out[0]), (theirs, out[1])):
        for generate in (generate_latest, generate_openmetrics):
            into.append(CREATED.sub(rb"\1 T", generate(registry)))
    return out


durations = st.one_of(
    st.sampled_from([0.0, *BUCKETS, 10.000001, 3600.0]),
    st.floats(min_value=0.0, max_value=100.0, allow_nan=False),
)


@given(st.lists(st.tuples(st.sampled_from([200, 400, 401, 404, 422, 503]), durations)))
def test_the_page_is_what_a_counter_and_a_histogram_show(posts: list[tuple[int, float]]) -> None:
    ours, theirs = pages(posts)
    assert ours == theirs


def test_a_duration_on_a_bound_is_in_that_bucket() -> None:
    stats = RequestStats(*NAMES, buckets=(0.5, 1.0))
    for seconds in (0.5, 0.50001, 1.0, 2.0):
        stats.record(200, seconds)
    duration = list(stats.collect())[1]
    buckets = {s.labels["le"]: s.value for s in duration.samples if s.name.endswith("_bucket")}
    assert buckets == {"0.5": 1.0, "1.0": 3.0, "+Inf": 4.0}
    assert [s.value for s in duration.samples if s.name.endswith("_sum")] == [4.00001]


def test_created_is_when_a_code_was_first_answered() -> None:
    now = iter([100.0, 205.0, 310.0])
    stats = RequestStats(*NAMES, buckets=BUCKETS, clock=lambda: next(now))
    stats.record(200, 0.001)
    stats.record(200, 0.001)
    stats.record(401, 0.001)
    requests, duration = stats.collect()
    created = {s.labels["code"]: s.value for s in requests.samples if s.name.endswith("_created")}
    assert created == {"200": 205.0, "401": 310.0}
    assert [s.value for s in duration.samples if s.name.endswith("_created")] == [100.0]


@pytest.mark.parametrize("buckets", [(), (1.0, 0.5), (0.5, 0.5)])
def test_buckets_must_increase(buckets: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="buckets must be distinct and in increasing order"):
        RequestStats(*NAMES, buckets=buckets)


def test_the_servers_registry_holds_them() -> None:
    names = {family.name for family in server_registry().collect()}
    assert {NAMES[0], NAMES[2]} <= names
    assert selfmetrics.REQUEST_STATS.bounds == BUCKETS
