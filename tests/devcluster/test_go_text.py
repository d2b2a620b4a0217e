"""Go's renderings, checked against what Go prints.

The development cluster and the status server each keep their own implementation of
``%q`` and ``%v`` of a float64 (kubectl's ages only the server renders): the cluster is the reference the server's
validation messages are compared with, so neither may lean on the other. Both are held
to the same facts here, one implementation at a time.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from trainjob_devcluster.common import go_text as devcluster_go_text
from trainjob_status_server import go_text as server_go_text

IMPLEMENTATIONS = [
    pytest.param(devcluster_go_text, id="devcluster"),
    pytest.param(server_go_text, id="server"),
]

# fmt.Sprintf("%v", f) for a float64.
FLOATS = [
    (0.31, "0.31"),
    (5.0, "5"),
    (100.0, "100"),
    (40.5, "40.5"),
    (-0.5, "-0.5"),
    (123456.0, "123456"),
    (999999.0, "999999"),
    (1e6, "1e+06"),
    (1234567.0, "1.234567e+06"),
    (0.0001, "0.0001"),
    (0.00001, "1e-05"),
    (1e-7, "1e-07"),
    (0.1 + 0.2, "0.30000000000000004"),
    (1e20, "1e+20"),
    (1e21, "1e+21"),
    (1.5e300, "1.5e+300"),
    (5e-324, "5e-324"),
    (0.0, "0"),
    (-0.0, "-0"),
    (float("inf"), "+Inf"),
    (float("-inf"), "-Inf"),
    (float("nan"), "NaN"),
]

# strconv.Quote(s).
QUOTES = [
    ("", '""'),
    ("plain", '"plain"'),
    ('a"b\\c\n\x01é', '"a\\"b\\\\c\\n\\x01é"'),
    ("tab\there\x00é", '"tab\\there\\x00é"'),
    ("\a\b\f\r\v", '"\\a\\b\\f\\r\\v"'),
    ("\x7f", '"\\x7f"'),
    ("no\u00a0break", '"no\\u00a0break"'),
    ("\u2028", '"\\u2028"'),
    ("\ue000", '"\\ue000"'),
    ("\U0010ffff", '"\\U0010ffff"'),
    ("日本 😀", '"日本 😀"'),
]

# duration.HumanDuration, as kubectl shows ages.
AGES = [
    (-5, "<invalid>"),
    (-1.5, "0s"),
    (-1, "0s"),
    (0, "0s"),
    (59, "59s"),
    (119, "119s"),
    (119.9, "119s"),
    (120, "2m"),
    (125, "2m5s"),
    (150, "2m30s"),
    (599, "9m59s"),
    (600, "10m"),
    (3700, "61m"),
    (3 * 3600 - 1, "179m"),
    (3 * 3600, "3h"),
    (3 * 3600 + 120, "3h2m"),
    (3 * 3600 + 600, "3h10m"),
    (8 * 3600, "8h"),
    (8 * 3600 + 59, "8h"),
    (47 * 3600, "47h"),
    (48 * 3600, "2d"),
    (50 * 3600, "2d2h"),
    (8 * 86400, "8d"),
    (729 * 86400, "729d"),
    (730 * 86400, "2y"),
    (731 * 86400, "2y1d"),
    (800 * 86400, "2y70d"),
    (8 * 365 * 86400, "8y"),
    (9 * 365 * 86400, "9y"),
]


@pytest.mark.parametrize("go_text", IMPLEMENTATIONS)
@pytest.mark.parametrize(("value", "text"), FLOATS)
def test_go_float(go_text: ModuleType, value: float, text: str) -> None:
    assert go_text.go_float(value) == text


@pytest.mark.parametrize("go_text", IMPLEMENTATIONS)
@pytest.mark.parametrize(("text", "quoted"), QUOTES)
def test_go_quote(go_text: ModuleType, text: str, quoted: str) -> None:
    assert go_text.go_quote(text) == quoted


@pytest.mark.parametrize(("seconds", "shown"), AGES)
def test_human_duration(seconds: float, shown: str) -> None:
    # Only the server renders ages (the development cluster prints no tables).
    assert server_go_text.human_duration(seconds) == shown


# json.Marshal of a float64: positional from 1e-6 to below 1e21, a negative exponent
# without its leading zero.
@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.31, "0.31"),
        (1e6, "1000000"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (1.5e300, "1.5e+300"),
        (0.000001, "0.000001"),
        (1e-7, "1e-7"),
        (1.25e-10, "1.25e-10"),
        (-2.5e-7, "-2.5e-7"),
        (0.0, "0"),
        (-0.0, "-0"),
    ],
)
def test_go_json_float(value: float, text: str) -> None:
    assert devcluster_go_text.go_json_float(value) == text
