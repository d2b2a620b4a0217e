"""The plugin's own copies of what it shares with the status server give the server's
answers: Go's durations, the parsing of metric values and update stamps.

The plugin installs without the server, so it keeps these itself
(``kubectl_trainjob.formats``); each is compared here with the server's over many inputs,
the edges of each rule among them.
"""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kubectl_trainjob import formats
from trainjob_status_server import go_text
from trainjob_status_server.metrics import series

# Where human_duration changes its form (seconds): 2 minutes, 10 minutes, 3 hours,
# 8 hours, 2 days, 8 days, 2 years, 8 years.
EDGES = [-1, 0, 120, 600, 10_800, 28_800, 172_800, 691_200, 63_072_000, 252_288_000]
NEAR_EDGES = st.sampled_from(EDGES).flatmap(lambda edge: st.integers(edge - 3_601, edge + 3_601))

NUMBERS = st.from_regex(r"[+-]?(?:[0-9]{0,400}(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
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
