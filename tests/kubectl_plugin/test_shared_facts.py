"""The plugin's own copies of what it shares with the status server give the server's
answers: Go's durations, the parsing of metric values and update stamps, the names and
paths of the TrainJobs and of the server's aggregated API.

The plugin installs without the server, so it keeps these itself
(``kubectl_trainjob.formats``, ``kube.TRAINJOBS``, ``fresh.PROGRESSES``); each is
compared here with the server's over many inputs, the edges of each rule among them.
"""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kubectl_trainjob import formats, fresh, kube
from trainjob_status import contract
from trainjob_status_server import go_text
from trainjob_status_server.kube import resources
from trainjob_status_server.metrics import series
from trainjob_status_server.progress import resource

# Where human_duration changes its form (seconds): 2 minutes, 10 minutes, 3 hours,
# 8 hours, 2 days, 8 days, 2 years, 8 years.
EDGES = [-1, 0, 120, 600, 10_800, 28_800, 172_800, 691_200, 63_072_000, 252_288_000]
NEAR_EDGES = st.sampled_from(EDGES).flatmap(lambda edge: st.integers(edge - 3_601, edge + 3_601))

NUMBERS = st.from_regex(r"[+-]?(?:[0-9]{0,400}(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
NAMESPACES = st.from_regex(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
STAMPS = st.from_regex(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,12})?)?"
    r"(?:[Zz]|[+-][0-9]{2}:?[0-9]{2})?",
    fullmatch=True,
)


def rfc3339(moment: dt.datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@given(
    st.integers(min_value=-(10**12), max_value=10**12)
    | NEAR_EDGES
    | st.floats(min_value=-1e12, max_value=1e12, allow_nan=False)
)
@example(119.99)
@example(-1.5)
def test_human_duration(seconds: float) -> None:
    assert formats.human_duration(seconds) == go_text.human_duration(seconds)


@pytest.mark.parametrize("edge", EDGES)
def test_human_duration_at_its_edges(edge: int) -> None:
    for seconds in (edge - 1, edge - 0.5, edge, edge + 1):
        assert formats.human_duration(seconds) == go_text.human_duration(seconds)


@given(NUMBERS | st.floats().map(repr) | st.text())
@example("1e999")
@example("٣")
@example(" 1")
@example("1_000")
@example("-0")
def test_parse_number(text: str) -> None:
    mine, theirs = formats.parse_number(text), series.parse_number(text)
    assert (mine, str(mine)) == (theirs, str(theirs))  # -0.0 == 0.0, but "-0.0" != "0.0"


@given(
    STAMPS
    | st.datetimes(timezones=st.just(dt.UTC)).map(rfc3339)
    | st.datetimes().map(dt.datetime.isoformat)
    | st.text()
)
@example("0000-01-01T00:00:00Z")
@example("9999-12-31T23:59:59-23:59")
@example("2026-12-02t18:33:25z")
@example("2026-12-02T18:33:25.123456789Z")
def test_parse_time(text: str) -> None:
    assert formats.parse_time(text) == series.parse_time(text)


def test_the_resources_are_named_as_the_server_names_them() -> None:
    trainjobs = (kube.TRAINJOBS.group, kube.TRAINJOBS.version, kube.TRAINJOBS.plural)
    assert trainjobs == (contract.GROUP, contract.VERSION, contract.RESOURCE)
    assert kube.TRAINJOBS.qualified == resources.TRAINJOBS.qualified
    progresses = (fresh.PROGRESSES.group, fresh.PROGRESSES.version, fresh.PROGRESSES.plural)
    assert progresses == (resource.GROUP, resource.VERSION, resource.RESOURCE)
    assert fresh.PROGRESSES.qualified == resource.QUALIFIED
    served = resource.api_resource_list()["groupVersion"]
    assert fresh.DISCOVERY.removeprefix("/apis/") == served


@given(st.none() | NAMESPACES | st.text(min_size=1))
def test_paths_are_the_servers(namespace: str | None) -> None:
    assert kube.TRAINJOBS.path(namespace) == resources.TRAINJOBS.path(namespace)


@given(st.none() | NAMESPACES)
def test_the_progress_list_is_what_the_server_serves(namespace: str | None) -> None:
    assert resource.read_of(fresh.PROGRESSES.path(namespace)) == resource.Read(namespace, None)
