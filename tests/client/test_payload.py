"""Fitting a report to the TrainJob CRD (pure): every rule of issue 8's "Fitted to the CRD"."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from trainjob_status import payload
from trainjob_status.contract import MAX_METRICS
from trainjob_status.payload import Observation, fit, fit_eta, fit_metrics, fit_progress


def metrics(items: dict[Any, Any] | list[tuple[Any, Any]]) -> tuple[list[dict[str, str]], set[str]]:
    notes: set[str] = set()
    pairs = tuple(items.items()) if isinstance(items, dict) else tuple(items)
    return fit_metrics(pairs, notes), notes


@pytest.mark.parametrize(
    ("given", "sent", "note"),
    [
        (40, 40, None),
        (99.7, 99, None),  # floored: 99.7% is not done
        (0.2, 0, None),
        (100, 100, None),
        (150, 100, payload.CLAMPED_PROGRESS),
        (-3, 0, payload.CLAMPED_PROGRESS),
        (math.inf, 100, payload.CLAMPED_PROGRESS),
        (10**400, 100, payload.CLAMPED_PROGRESS),
        (-(10**400), 0, payload.CLAMPED_PROGRESS),
        (" 42 ", 42, None),
        (Fraction(1, 3) * 100, 33, None),
        (math.nan, None, payload.DROPPED_PROGRESS),
        ("forty", None, payload.DROPPED_PROGRESS),
        (True, None, payload.DROPPED_PROGRESS),
        ([40], None, payload.DROPPED_PROGRESS),
        (None, None, None),
    ],
)
def test_progress_is_floored_into_0_100(given: object, sent: int | None, note: str | None) -> None:
    notes: set[str] = set()
    assert fit_progress(given, notes) == sent
    assert notes == ({note} if note else set())


@pytest.mark.parametrize(
    ("given", "sent", "note"),
    [
        (300, 300, None),
        (12.7, 13, None),  # the SDK sends 12.7 and the whole update is refused
        (12.4, 12, None),
        (-1.5, 0, payload.CLAMPED_ETA),
        (2**31 - 1, 2**31 - 1, None),
        (2**31, 2**31 - 1, payload.CLAMPED_ETA),
        (math.inf, 2**31 - 1, payload.CLAMPED_ETA),
        (math.nan, None, payload.DROPPED_ETA),
        ("soon", None, payload.DROPPED_ETA),
    ],
)
def test_eta_is_rounded_into_int32(given: object, sent: int | None, note: str | None) -> None:
    notes: set[str] = set()
    assert fit_eta(given, notes) == sent
    assert notes == ({note} if note else set())


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.30000000000000004, "0.3"),
        (1 / 3, "0.333333"),
        (123456789.0, "1.23457e+08"),
        (1e-7, "1e-07"),
        (-0.0, "-0"),
        (2.0, "2"),
        (math.nan, "NaN"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (True, "true"),
        (False, "false"),
        (7, "7"),
        (2**70, "1180591620717411303424"),
        (Fraction(1, 8), "0.125"),
        (Decimal("1.50"), "1.50"),  # not a numbers.Real: its own text
        ("as given", "as given"),
        (None, "None"),
    ],
)
def test_values_are_formatted_compactly(value: object, text: str) -> None:
    assert metrics({"m": value})[0] == [{"name": "m", "value": text}]


def test_names_and_values_are_cut_to_64_characters() -> None:
    name, value = "n" * 70, "é" * 80  # characters, not bytes
    fitted, notes = metrics({name: value})
    assert fitted == [{"name": "n" * 64, "value": "é" * 64}]
    assert notes == {payload.CUT_NAME, payload.CUT_VALUE}


def test_huge_int_is_cut_too() -> None:
    fitted, notes = metrics({"big": 10**100})
    assert fitted == [{"name": "big", "value": "1" + "0" * 63}]
    assert notes == {payload.CUT_VALUE}


def test_empty_duplicate_and_unprintable_metrics_are_dropped() -> None:
    class Broken:
        def __str__(self) -> str:
            raise RuntimeError("no text")

    fitted, notes = metrics(
        [
            ("", 1),
            ("empty", ""),
            ("x" * 64 + "a", 1),
            ("x" * 64 + "b", 2),
            ("bad", Broken()),
            ("ok", 3),
        ]
    )
    assert fitted == [{"name": "x" * 64, "value": "1"}, {"name": "ok", "value": "3"}]
    assert payload.DROPPED_METRIC in notes


def test_first_256_metrics_are_kept_in_insertion_order() -> None:
    given = {f"m{i:03d}": i for i in range(300)}
    fitted, notes = metrics(given)
    assert [m["name"] for m in fitted] == [f"m{i:03d}" for i in range(MAX_METRICS)]
    assert notes == {payload.TOO_MANY_METRICS}


def test_exactly_256_metrics_are_not_noted() -> None:
    fitted, notes = metrics({f"m{i}": i for i in range(MAX_METRICS)})
    assert len(fitted) == MAX_METRICS
    assert notes == set()


def test_a_dropped_metric_does_not_use_one_of_the_256_places() -> None:
    given = [("", 0)] * 10 + [(f"m{i}", i) for i in range(MAX_METRICS)]
    fitted, notes = metrics(given)
    assert len(fitted) == MAX_METRICS
    assert notes == {payload.DROPPED_METRIC}


def test_fit_builds_the_whole_trainer_status() -> None:
    observation = Observation(40.5, 299.6, (("loss", 0.25),), 1_796_000_000.123456)
    status, notes = fit(observation)
    assert status == {
        "progressPercentage": 40,
        "estimatedRemainingSeconds": 300,
        "metrics": [{"name": "loss", "value": "0.25"}],
        "lastUpdatedTime": "2026-11-30T00:53:20.123456Z",
    }
    assert notes == set()


def test_fields_left_out_stay_out() -> None:
    status, _ = fit(Observation(None, None, (), 0.0))
    assert status == {"lastUpdatedTime": "1970-01-01T00:00:00.000000Z"}


def test_body_replaces_lone_surrogates() -> None:
    status, _ = fit(Observation(None, None, (("bad\ud800", "ok"),), 0.0))
    body = json.loads(payload.encode(status))
    assert body["trainerStatus"]["metrics"] == [{"name": "bad?", "value": "ok"}]
