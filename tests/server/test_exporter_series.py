"""The pure parts of the export: which series a TrainJob yields, what the cap keeps, the
skip count, and the sample lines, held to prometheus_client's own rendering and parsers."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text
from prometheus_client.utils import floatToGoString

from trainjob_status_server.kube.views import trainjob_view
from trainjob_status_server.metrics.exporter import (
    RenderedSeries,
    escape_label_value,
    exposition,
    format_value,
)
from trainjob_status_server.metrics.series import (
    CONDITION,
    CORE,
    ESTIMATED_REMAINING,
    FAMILIES,
    INFO,
    LAST_UPDATE,
    MAX_CONDITIONS,
    METRIC,
    PROGRESS,
    STATE,
    TrainJobSeries,
    admit,
    allowance,
    conditions_of,
    exportable,
    fair_shares,
    newly_skipped,
    parse_number,
    parse_time,
    series_of,
)

LUT = "2026-12-02T18:33:25Z"
LUT_SECONDS = 1796236405.0
# The state of a TrainJob with no runtime reference and no conditions.
NO_STATE = ((INFO, (("runtime_kind", ""), ("runtime", ""))),)


def trainjob(
    trainer_status: Any = None, *, name: str = "tj", namespace: str = "team-a"
) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"namespace": namespace, "name": name}, "spec": {}}
    if trainer_status is not None:
        obj["status"] = {"trainerStatus": trainer_status}
    return obj


def metrics(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in pairs]


# -- series_of ---------------------------------------------------------------------------


def test_full_status_yields_every_family_in_priority_order() -> None:
    series = series_of(
        trainjob(
            {
                "progressPercentage": 42,
                "estimatedRemainingSeconds": 600,
                "lastUpdatedTime": LUT,
                "metrics": metrics(("loss", "0.25"), ("accuracy", "0.9"), ("note", "n/a")),
            }
        )
    )
    assert series == TrainJobSeries(
        namespace="team-a",
        trainjob="tj",
        core=((LAST_UPDATE, LUT_SECONDS), (PROGRESS, 0.42), (ESTIMATED_REMAINING, 600.0)),
        metrics=(("loss", 0.25), ("accuracy", 0.9)),
        skipped=frozenset({("note", "n/a")}),
        state=NO_STATE,
    )
    assert series.count == 6
    assert CORE == (LAST_UPDATE, PROGRESS, ESTIMATED_REMAINING)
    assert STATE == (CONDITION, INFO)


@pytest.mark.parametrize(
    "obj",
    [
        trainjob(),
        {"metadata": {"namespace": "team-a", "name": "tj"}, "status": {}},
        {"metadata": {"namespace": "team-a", "name": "tj"}, "status": {"trainerStatus": None}},
        {"metadata": {"namespace": "team-a", "name": "tj"}, "status": {"trainerStatus": "x"}},
        {"metadata": {"namespace": "team-a", "name": "tj"}, "status": None},
    ],
)
def test_no_trainer_status_yields_the_state_only(obj: dict[str, Any]) -> None:
    assert series_of(obj) == TrainJobSeries("team-a", "tj", state=NO_STATE)


def test_fields_left_out_yield_no_series() -> None:
    series = series_of(trainjob({"lastUpdatedTime": LUT}))
    assert series == TrainJobSeries(
        "team-a", "tj", core=((LAST_UPDATE, LUT_SECONDS),), state=NO_STATE
    )
    empty = series_of(trainjob({}))
    assert empty == TrainJobSeries("team-a", "tj", state=NO_STATE)
    assert empty.count == 1


# -- state ---------------------------------------------------------------------------------


def test_the_state_is_the_conditions_then_the_runtime() -> None:
    obj = {
        "metadata": {"namespace": "team-a", "name": "tj"},
        "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org",
                 "kind": "TrainingRuntime", "name": "torch"}},
        "status": {
            "conditions": [
                {"type": "Created", "status": "True", "reason": "JobsCreationSucceeded",
                 "message": "Succeeded to create Jobs", "lastTransitionTime": LUT},
                {"type": "Suspended", "status": "False", "reason": "Resumed"},
                {"type": "Complete", "status": "True"},
            ]
        },
    }  # fmt: skip
    expected = (
        (CONDITION, (("type", "Created"), ("status", "True"))),
        (CONDITION, (("type", "Suspended"), ("status", "False"))),
        (CONDITION, (("type", "Complete"), ("status", "True"))),
        (INFO, (("runtime_kind", "TrainingRuntime"), ("runtime", "torch"))),
    )
    series = series_of(obj)
    assert series == TrainJobSeries("team-a", "tj", state=expected)
    # The cache's view of the object yields the same.
    assert series_of(trainjob_view(obj)) == series


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (None, ()),
        ("Complete", ()),
        ([], ()),
        ([{"type": "Complete", "status": "True"}], (("Complete", "True"),)),
        # Not a condition status, not a type, not an object: left out.
        ([{"type": "Complete", "status": "true"}], ()),
        ([{"type": "Complete", "status": "Yes"}, {"status": "True"}, "Failed"], ()),
        ([{"type": "", "status": "True"}, {"type": 7, "status": "True"}], ()),
        ([{"type": "Complete", "status": True}], ()),
        # A type the page cannot hold, or longer than any condition type may be.
        ([{"type": "Com\x1bplete", "status": "True"}, {"type": "x" * 317, "status": "True"}], ()),
        ([{"type": "x" * 316, "status": "Unknown"}], (("x" * 316, "Unknown"),)),
        # One type once: the last one held wins, in its place.
        (
            [{"type": "A", "status": "True"}, {"type": "B", "status": "True"},
             {"type": "A", "status": "False"}],
            (("B", "True"), ("A", "False")),
        ),
        # Quoting is the renderer's business: exportable text is kept as it is.
        ([{"type": 'say "hi"\n', "status": "True"}], (('say "hi"\n', "True"),)),
    ],
)  # fmt: skip
def test_conditions_that_can_be_exported(items: Any, expected: tuple[Any, ...]) -> None:
    assert conditions_of(items) == expected


def test_conditions_beyond_the_crds_limit_are_not_exported() -> None:
    items = [{"type": f"T{i}", "status": "True"} for i in range(MAX_CONDITIONS + 3)]
    assert conditions_of(items) == tuple((f"T{i}", "True") for i in range(MAX_CONDITIONS))


@pytest.mark.parametrize(
    ("spec", "info"),
    [
        ({}, ("", "")),
        ({"runtimeRef": "torch"}, ("", "")),
        ({"runtimeRef": {"name": "torch"}}, ("", "torch")),
        ({"runtimeRef": {"name": "t\x07rch", "kind": 5}}, ("", "")),
        ({"runtimeRef": {"name": "t" * 400, "kind": "ClusterTrainingRuntime"}},
         ("ClusterTrainingRuntime", "")),
    ],
)  # fmt: skip
def test_a_runtime_reference_that_cannot_be_exported_leaves_its_label_empty(
    spec: dict[str, Any], info: tuple[str, str]
) -> None:
    obj = {"metadata": {"namespace": "team-a", "name": "tj"}, "spec": spec}
    series = series_of(obj)
    assert series is not None
    assert series.state == ((INFO, (("runtime_kind", info[0]), ("runtime", info[1]))),)


@pytest.mark.parametrize("value", ["42", 42.0, True, None, [42]])
def test_progress_that_is_not_a_json_integer_is_not_exported(value: Any) -> None:
    series = series_of(trainjob({"progressPercentage": value, "estimatedRemainingSeconds": value}))
    assert series is not None
    assert series.core == ()


@pytest.mark.parametrize(("percent", "ratio"), [(0, 0.0), (1, 0.01), (99, 0.99), (100, 1.0)])
def test_progress_ratio(percent: int, ratio: float) -> None:
    series = series_of(trainjob({"progressPercentage": percent}))
    assert series is not None
    assert series.core == ((PROGRESS, ratio),)


def test_a_metric_name_reported_twice_last_one_wins_in_its_place() -> None:
    series = series_of(
        trainjob({"metrics": metrics(("loss", "1"), ("acc", "0.5"), ("loss", "2"), ("x", "y"))})
    )
    assert series is not None
    assert series.metrics == (("acc", 0.5), ("loss", 2.0))
    assert series.skipped == {("x", "y")}
    # The last occurrence decides, a non-numeric one too.
    series = series_of(trainjob({"metrics": metrics(("loss", "1"), ("loss", "nan"))}))
    assert series is not None
    assert (series.metrics, series.skipped) == ((), {("loss", "nan")})


@pytest.mark.parametrize(
    "items",
    [
        "loss=1",
        [{"name": "loss"}],
        [{"value": "1"}],
        [{"name": "", "value": "1"}],
        [{"name": 7, "value": "1"}],
        [{"name": "loss", "value": 1.0}],
        ["loss"],
    ],
)
def test_malformed_metric_items_are_ignored(items: Any) -> None:
    series = series_of(trainjob({"metrics": items}))
    assert series is not None
    assert (series.metrics, series.skipped) == ((), frozenset())


@pytest.mark.parametrize(
    "trainer_status",
    [
        {},
        {"lastUpdatedTime": LUT, "progressPercentage": 42, "estimatedRemainingSeconds": 60},
        {"metrics": metrics(("loss", "1"), ("acc", "0.5"), ("loss", "2"), ("x", "y"))},
        {
            "metrics": [
                {"name": "loss"},
                {"name": 7, "value": "1"},
                "loss",
                {"name": "a", "value": "1"},
            ]
        },
        {"metrics": "loss=1", "progressPercentage": True},
    ],
)
def test_a_cache_view_yields_the_series_of_the_whole_object(trainer_status: Any) -> None:
    obj = trainjob(trainer_status)
    assert series_of(trainjob_view(obj)) == series_of(obj)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0.0),
        ("42", 42.0),
        ("-1.5", -1.5),
        ("+2", 2.0),
        ("1e-05", 1e-05),
        ("1E3", 1000.0),
        (".5", 0.5),
        ("5.", 5.0),
        ("0.1234567890123", 0.1234567890123),
        ("-0", -0.0),
        ("1e308", 1e308),
    ],
)
def test_numbers(text: str, value: float) -> None:
    assert parse_number(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "nan",
        "NaN",
        "inf",
        "-inf",
        "Infinity",
        "1e999",  # overflows
        "1_000",
        " 1",
        "1 ",
        "0x10",
        "",
        "--1",
        "1e",
        ".",
        "٣",  # an Arabic-Indic digit: float() takes it, people do not mean a number
        "½",
        "1,5",
        "50%",
    ],
)
def test_not_finite_numbers(text: str) -> None:
    assert parse_number(text) is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (LUT, LUT_SECONDS),
        ("2026-12-02T18:33:25.5Z", LUT_SECONDS + 0.5),
        ("2026-12-02T18:33:25.123456+00:00", LUT_SECONDS + 0.123456),
        ("2026-12-02T18:33:25.123456789Z", LUT_SECONDS + 0.123456),
        ("2026-12-02T20:33:25+02:00", LUT_SECONDS),
        ("2026-12-02t18:33:25z", LUT_SECONDS),
        ("2026-12-02T18:33:25", LUT_SECONDS),  # no offset: UTC
    ],
)
def test_times(text: str, seconds: float) -> None:
    parsed = parse_time(text)
    assert parsed is not None
    assert math.isclose(parsed, seconds, abs_tol=1e-6)


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-02T18:33:25Z", "0000-01-01T00:00:00Z"])
def test_times_that_do_not_parse(text: str) -> None:
    assert parse_time(text) is None
    series = series_of(trainjob({"lastUpdatedTime": text, "progressPercentage": 1}))
    assert series is not None
    assert series.core == ((PROGRESS, 0.01),)


# Every character a client can send that neither format can escape: C0 but the line feed,
# DEL, C1 (NEL among them), the Unicode line and paragraph separators, lone surrogates.
UNEXPORTABLE = [chr(c) for c in (*range(0x0A), *range(0x0B, 0x20), *range(0x7F, 0xA0))] + [
    "\u2028",
    "\u2029",
    "\ud800",
    "\udfff",
]


@pytest.mark.parametrize("char", UNEXPORTABLE, ids=lambda c: f"U+{ord(c):04X}")
def test_names_with_a_character_no_format_can_escape_are_refused(char: str) -> None:
    assert not exportable(f"loss{char}x")
    series = series_of(
        trainjob(
            {"metrics": metrics((f"loss{char}x", "1"), ("loss", "2"), (f"{char}", "x"))},
            name="tj",
        )
    )
    assert series is not None
    # Refused, not replaced: "loss\ud800" and "loss\udfff" would both become "loss?",
    # two samples with the same labels.
    assert series.metrics == (("loss", 2.0),)
    assert series.unexportable == {f"loss{char}x", char}
    assert series.skipped == frozenset()


@pytest.mark.parametrize(
    "name", ['he said "hi"', "C:\\", "two\nlines", "λόγος 🚀", "\u202e", "\xa0"]
)
def test_names_the_formats_can_escape_or_hold_are_exported(name: str) -> None:
    assert exportable(name)
    series = series_of(trainjob({"metrics": metrics((name, "1"))}))
    assert series is not None
    assert (series.metrics, series.unexportable) == (((name, 1.0),), frozenset())


@pytest.mark.parametrize(
    ("name", "namespace"), [("tj\udfff", "a"), ("tj", "a\rb"), ("t\x1bj", "a")]
)
def test_a_trainjob_whose_name_cannot_be_exported_yields_no_series(
    name: str, namespace: str
) -> None:
    assert series_of(trainjob({"progressPercentage": 1}, name=name, namespace=namespace)) is None


def test_capped_lines_are_cut_at_line_feeds_only() -> None:
    # Lines rendered from names holding a carriage return (as an older page did) still
    # come apart whole: the cut is at the format's one line end.
    series = TrainJobSeries(
        "a", "tj", core=((LAST_UPDATE, 1.0),), metrics=(("x\ry", 1.0), ("z\x0b\x0c\x1c", 2.0))
    )
    rendered = RenderedSeries.of(series)
    assert rendered.metric_lines(1) == [
        b'trainjob_metric{name="x\ry",namespace="a",trainjob="tj"} 1.0\n'
    ]
    assert b"".join(rendered.metric_lines(2)) == rendered.metrics_joined
    assert rendered.metric_lines(5) == rendered.metric_lines(2)
    assert rendered.core_lines(1) == [
        (2, b'trainjob_last_update_timestamp_seconds{namespace="a",trainjob="tj"} 1.0\n')
    ]


# -- the name limit --------------------------------------------------------------------------


def test_admit_lets_new_names_in_until_the_limit_then_only_held_ones() -> None:
    assert admit(["a", "b"], frozenset(), 3) == (("a", "b"), frozenset())
    assert admit(["c", "d", "a"], frozenset({"a", "b"}), 3) == (("c", "a"), frozenset({"d"}))
    # At the limit: the names held before keep being exported, in the order reported.
    assert admit(["e", "b", "c"], frozenset({"a", "b", "c"}), 3) == (("b", "c"), frozenset({"e"}))
    assert admit([], frozenset({"a"}), 1) == ((), frozenset())


def test_admit_without_a_limit_admits_everything() -> None:
    names = [f"m{i}" for i in range(1000)]
    assert admit(names, frozenset(), 0) == (tuple(names), frozenset())


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from("abcdefghij"), unique=True, max_size=6), max_size=12),
    st.integers(1, 6),
)
def test_admit_bounds_the_names_ever_held(posts: list[list[str]], limit: int) -> None:
    held: frozenset[str] = frozenset()
    for names in posts:
        admitted, refused = admit(names, held, limit)
        assert set(admitted) | refused == set(names)
        assert not set(admitted) & refused
        assert [n for n in names if n in admitted] == list(admitted)
        # A name once admitted is never refused later.
        assert not refused & held
        held = held | set(admitted)
        assert len(held) <= limit


# -- the skip count ------------------------------------------------------------------------


def skipped(*pairs: tuple[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset(pairs)


def test_newly_skipped_counts_each_non_numeric_value_once_per_change() -> None:
    assert newly_skipped(skipped(), skipped()) == 0
    assert newly_skipped(skipped(), skipped(("a", "x"), ("b", "y"))) == 2
    # The same values again (another update, a relist, a scrape): nothing new.
    assert newly_skipped(skipped(("a", "x"), ("b", "y")), skipped(("a", "x"), ("b", "y"))) == 0
    # One value changed, one went away.
    assert newly_skipped(skipped(("a", "x"), ("b", "y")), skipped(("a", "z"))) == 1
    assert newly_skipped(skipped(("a", "x")), skipped()) == 0


# -- the cap ---------------------------------------------------------------------------------


def test_no_cap_or_under_it_keeps_everything() -> None:
    counts = [(3, 10), (3, 0), (1, 5)]
    assert allowance(counts, 0) == (counts, 0)
    assert allowance(counts, 22) == (counts, 0)
    assert allowance([], 5) == ([], 0)


def test_over_the_cap_core_series_of_every_trainjob_come_first() -> None:
    counts = [(3, 10), (3, 10), (3, 10)]
    assert allowance(counts, 21) == ([(3, 10), (3, 2), (3, 0)], 18)
    assert allowance(counts, 9) == ([(3, 0), (3, 0), (3, 0)], 30)
    assert allowance(counts, 7) == ([(3, 0), (3, 0), (1, 0)], 32)
    assert allowance(counts, 1) == ([(1, 0), (0, 0), (0, 0)], 38)


def test_the_cap_is_exact() -> None:
    counts = [(3, 4), (2, 0), (3, 7), (0, 9)]
    total = sum(a + b for a, b in counts)
    for cap in range(1, total + 3):
        kept, dropped = allowance(counts, cap)
        assert sum(a + b for a, b in kept) == min(cap, total)
        assert dropped == max(total - cap, 0)
        assert all(k <= c for (k, _), (c, _) in zip(kept, counts, strict=True))


def test_the_cap_shares_fairly_among_namespaces_whatever_their_names() -> None:
    # "a-team" sorts first and holds ten TrainJobs of 10 metrics; "z-team" one.
    counts = [(3, 10)] * 10 + [(3, 10)]
    tenants = ["a-team"] * 10 + ["z-team"]
    kept, dropped = allowance(counts, 33 + 20, tenants)
    assert dropped == sum(a + b for a, b in counts) - 53
    assert [core for core, _ in kept] == [3] * 11
    # The 20 metric series left: 10 each, so z-team's whole and a-team's first job's.
    assert kept[-1] == (3, 10)
    assert sum(m for _, m in kept[:10]) == 10
    assert kept[0] == (3, 10)
    # Core series are shared too: too few for everyone, each namespace gets its half.
    kept, _ = allowance(counts, 6, tenants)
    assert [core for core, _ in kept] == [3] + [0] * 9 + [3]


def test_fair_shares_are_max_min_fair_and_spend_the_budget() -> None:
    assert fair_shares({"a": 100, "b": 5, "c": 100}, 60) == {"a": 28, "b": 5, "c": 27}
    assert fair_shares({"a": 1, "b": 1}, 10) == {"a": 1, "b": 1}
    assert fair_shares({"a": 0, "b": 4}, 3) == {"a": 0, "b": 3}
    assert fair_shares({}, 5) == {}
    for budget in range(0, 30):
        shares = fair_shares({"x": 7, "y": 3, "z": 12}, budget)
        assert sum(shares.values()) == min(budget, 22)
        assert all(shares[g] <= want for g, want in {"x": 7, "y": 3, "z": 12}.items())


# -- sample lines ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [0.0, -0.0, 0.42, 1.0, 600.0, 1e-05, 123456.0, 1234567.0, 1e16, 1e22, -1e22, LUT_SECONDS,
     LUT_SECONDS + 0.123456, 2.5e-300, 1.7976931348623157e308],
)  # fmt: skip
def test_values_are_written_as_prometheus_client_writes_them(value: float) -> None:
    assert format_value(value) == floatToGoString(value)


@settings(deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_any_finite_value_is_written_as_prometheus_client_writes_it(value: float) -> None:
    assert format_value(value) == floatToGoString(value)


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("plain", "plain"),
        ('say "hi"', r"say \"hi\""),
        ("C:\\temp", r"C:\\temp"),
        ("two\nlines", r"two\nlines"),
        ('\\"', r"\\\""),
        ("λόγος 🚀", "λόγος 🚀"),
        ("tab\there", "tab\there"),
    ],
)
def test_label_values_are_escaped(raw: str, escaped: str) -> None:
    assert escape_label_value(raw) == escaped


class _One:
    """A registry of prepared families, for prometheus_client's renderer."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self.families


def reference(series: TrainJobSeries) -> bytes:
    """What prometheus_client renders for the same series."""
    families = {f.name: GaugeMetricFamily(f.name, f.help, labels=f.labels) for f in FAMILIES}
    by_name = {f.name: f for f in FAMILIES}
    for family, more in series.state:
        held = {"namespace": series.namespace, "trainjob": series.trainjob, **dict(more)}
        families[family].add_metric([held[label] for label in by_name[family].labels], 1.0)
    for family, value in series.core:
        families[family].add_metric([series.namespace, series.trainjob], value)
    for name, value in series.metrics:
        families[METRIC].add_metric([series.namespace, series.trainjob, name], value)
    return generate_latest(_One(families.values()))  # type: ignore[arg-type]


def ours(series: TrainJobSeries) -> bytes:
    rendered = RenderedSeries.of(series)
    return exposition([(rendered, rendered.core_count, rendered.metric_count)])


AWKWARD_NAMES = [
    'he said "hi"',
    "C:\\path\\",
    "line\nbreak",
    "λόγος 🚀",
    "\\n",
    'a"b\\c\nd',
    "x" * 64,
]


def test_awkward_metric_names_render_as_prometheus_client_renders_them() -> None:
    series = series_of(
        trainjob(
            {
                "progressPercentage": 7,
                "lastUpdatedTime": LUT,
                "metrics": metrics(*((name, f"{i}.5") for i, name in enumerate(AWKWARD_NAMES))),
            },
            name="job-1",
        )
    )
    assert series is not None
    assert ours(series) == reference(series)
    parsed = {f.name: f for f in parse_text(ours(series).decode())}
    assert [s.labels["name"] for s in parsed[METRIC].samples] == AWKWARD_NAMES
    assert [s.value for s in parsed[METRIC].samples] == [i + 0.5 for i in range(len(AWKWARD_NAMES))]


def test_state_series_render_as_prometheus_client_renders_them() -> None:
    obj = {
        "metadata": {"namespace": "team-a", "name": "job-1"},
        "spec": {"runtimeRef": {"kind": 'Kind "q"', "name": "C:\\rt\nx"}},
        "status": {
            "conditions": [
                {"type": name, "status": status}
                for name, status in zip(
                    AWKWARD_NAMES, ["True", "False", "Unknown"] * 3, strict=False
                )
            ],
            "trainerStatus": {"progressPercentage": 7, "lastUpdatedTime": LUT},
        },
    }
    series = series_of(obj)
    assert series is not None
    assert ours(series) == reference(series)
    parsed = {f.name: f for f in parse_text(ours(series).decode())}
    assert [s.labels for s in parsed[INFO].samples] == [
        {"namespace": "team-a", "trainjob": "job-1", "runtime_kind": 'Kind "q"',
         "runtime": "C:\\rt\nx"}
    ]  # fmt: skip
    assert [(s.labels["type"], s.value) for s in parsed[CONDITION].samples] == [
        (name, 1.0) for name in AWKWARD_NAMES
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(min_size=1, max_size=64),
            st.floats(allow_nan=False, allow_infinity=False).map(repr),
        ),
        max_size=8,
        unique_by=lambda pair: pair[0],
    ),
    st.integers(0, 100),
)
def test_any_metric_names_round_trip_through_both_parsers(
    pairs: list[tuple[str, str]], progress: int
) -> None:
    series = series_of(
        trainjob(
            {"progressPercentage": progress, "lastUpdatedTime": LUT, "metrics": metrics(*pairs)}
        )
    )
    assert series is not None
    assert series.unexportable == {name for name, _ in pairs if not exportable(name)}
    text = ours(series)
    assert text == reference(series)
    expected = [(name, float(value)) for name, value in pairs if exportable(name)]
    parsed = {f.name: f for f in parse_text(text.decode())}
    assert [(s.labels["name"], s.value) for s in parsed[METRIC].samples] == expected
    assert [s.value for s in parsed[PROGRESS].samples] == [progress / 100]
    openmetrics = {f.name: f for f in parse_openmetrics(text.decode() + "# EOF\n")}
    assert [(s.labels["name"], s.value) for s in openmetrics[METRIC].samples] == expected
