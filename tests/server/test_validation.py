"""The trainerStatus validator: the recorded kube-apiserver answers, pinned as literals,
the clients' real bodies, boundaries, our own time rules, and a differential property test
against the real API server's CRD validation (skipped without the control plane).

Expected messages and causes are copied from the recordings of a real kube-apiserver
v1.36 (d_ssa_* and d_merge_*); nothing here reads them at test time.
"""

from __future__ import annotations

import copy
import json
import math
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_status_server.go_text import go_quote
from trainjob_status_server.status.validation import (
    GROUP,
    MAX_AHEAD,
    Cause,
    Metric,
    PayloadError,
    TrainerStatus,
    ValidationFailed,
    decode_payload,
    format_time,
    parse_trainer_status,
)

NAME = "tj-rec"
LUT = "2026-12-02T18:33:25Z"
RECEIVED = datetime(2026, 12, 2, 18, 33, 30, tzinfo=UTC)
NOT_CHECKED_MSG = "Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
NOT_CHECKED = ("FieldValueInvalid", NOT_CHECKED_MSG, "<nil>")

CauseTuple = tuple[str, str, str]


def parse(status: Any, received: datetime = RECEIVED) -> TrainerStatus | None:
    """The trainerStatus of a body, through the real decoding path."""
    raw = json.dumps({"trainerStatus": status}).encode()
    return parse_trainer_status(decode_payload(raw), trainjob=NAME, received=received)


def written(status: Any, received: datetime = RECEIVED) -> dict[str, Any]:
    update = parse(status, received)
    assert update is not None
    return update.to_json()


def refused(status: Any, received: datetime = RECEIVED) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as info:
        parse(status, received)
    return info.value


def causes_of(exc: ValidationFailed) -> list[CauseTuple]:
    return [(c.type, c.message, c.field) for c in exc.causes]


def payload_detail(status: Any) -> str:
    with pytest.raises(PayloadError) as info:
        parse_trainer_status({"trainerStatus": status}, trainjob=NAME, received=RECEIVED)
    return info.value.detail


# -- the recorded answers ---------------------------------------------------------------


def ssa(**fields: Any) -> dict[str, Any]:
    """The trainerStatus of a recorded server-side apply, with ``fields`` changed."""
    base: dict[str, Any] = {
        "progressPercentage": 40,
        "estimatedRemainingSeconds": 300,
        "metrics": [{"name": "loss", "value": "0.31"}],
        "lastUpdatedTime": LUT,
    }
    base.update(fields)
    return base


METRICS_257 = [{"name": f"m{i}", "value": "1"} for i in range(257)]

# case: (SSA body, merge-patch body, message, causes), all as recorded.
RECORDED: dict[str, tuple[dict[str, Any], dict[str, Any], str, list[CauseTuple]]] = {
    "pp_150": (
        ssa(progressPercentage=150),
        {"progressPercentage": 150, "lastUpdatedTime": LUT},
        'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: status.trainerStatus.progressPercentage: Invalid value: 150: trainerStatus.progressPercentage in body should be less than or equal to 100',
        [
            (
                "FieldValueInvalid",
                "Invalid value: 150: trainerStatus.progressPercentage in body should be less than or equal to 100",
                "status.trainerStatus.progressPercentage",
            )
        ],
    ),
    "pp_neg1": (
        ssa(progressPercentage=-1),
        {"progressPercentage": -1, "lastUpdatedTime": LUT},
        'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: status.trainerStatus.progressPercentage: Invalid value: -1: trainerStatus.progressPercentage in body should be greater than or equal to 0',
        [
            (
                "FieldValueInvalid",
                "Invalid value: -1: trainerStatus.progressPercentage in body should be greater than or equal to 0",
                "status.trainerStatus.progressPercentage",
            )
        ],
    ),
    "ers_neg5": (
        ssa(estimatedRemainingSeconds=-5),
        {"estimatedRemainingSeconds": -5, "lastUpdatedTime": LUT},
        'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: status.trainerStatus.estimatedRemainingSeconds: Invalid value: -5: trainerStatus.estimatedRemainingSeconds in body should be greater than or equal to 0',
        [
            (
                "FieldValueInvalid",
                "Invalid value: -5: trainerStatus.estimatedRemainingSeconds in body should be greater than or equal to 0",
                "status.trainerStatus.estimatedRemainingSeconds",
            )
        ],
    ),
    "ers_over_int32": (
        ssa(estimatedRemainingSeconds=3000000000),
        {"estimatedRemainingSeconds": 3000000000, "lastUpdatedTime": LUT},
        'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: status: Invalid value: "": Checked value must be of type integer with format int32 in trainerStatus.estimatedRemainingSeconds',
        [
            (
                "FieldValueInvalid",
                'Invalid value: "": Checked value must be of type integer with format int32 in trainerStatus.estimatedRemainingSeconds',
                "status",
            )
        ],
    ),
    "pp_float": (
        ssa(progressPercentage=40.5),
        {"progressPercentage": 40.5, "lastUpdatedTime": LUT},
        'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: [status.trainerStatus.progressPercentage: Invalid value: "float64": trainerStatus.progressPercentage in body must be of type int32: "float64", status: Invalid value: "": Checked value must be of type integer with format int32 in trainerStatus.progressPercentage, <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]',
        [
            (
                "FieldValueTypeInvalid",
                'Invalid value: "float64": trainerStatus.progressPercentage in body must be of type int32: "float64"',
                "status.trainerStatus.progressPercentage",
            ),
            (
                "FieldValueInvalid",
                'Invalid value: "": Checked value must be of type integer with format int32 in trainerStatus.progressPercentage',
                "status",
            ),
            NOT_CHECKED,
        ],
    ),
    "two_errors": (
        ssa(progressPercentage=150, estimatedRemainingSeconds=-5),
        {"progressPercentage": 150, "estimatedRemainingSeconds": -5, "lastUpdatedTime": LUT},
        'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: [status.trainerStatus.progressPercentage: Invalid value: 150: trainerStatus.progressPercentage in body should be less than or equal to 100, status.trainerStatus.estimatedRemainingSeconds: Invalid value: -5: trainerStatus.estimatedRemainingSeconds in body should be greater than or equal to 0]',
        [
            (
                "FieldValueInvalid",
                "Invalid value: 150: trainerStatus.progressPercentage in body should be less than or equal to 100",
                "status.trainerStatus.progressPercentage",
            ),
            (
                "FieldValueInvalid",
                "Invalid value: -5: trainerStatus.estimatedRemainingSeconds in body should be greater than or equal to 0",
                "status.trainerStatus.estimatedRemainingSeconds",
            ),
        ],
    ),
    "metrics_257": (
        ssa(metrics=METRICS_257),
        {"metrics": METRICS_257, "lastUpdatedTime": LUT},
        'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: [status.trainerStatus.metrics: Too many: 257: must have at most 256 items, <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]',
        [
            (
                "FieldValueTooMany",
                "Too many: 257: must have at most 256 items",
                "status.trainerStatus.metrics",
            ),
            NOT_CHECKED,
        ],
    ),
    "metric_name_65": (
        ssa(metrics=[{"name": "n" * 65, "value": "1"}]),
        {"metrics": [{"name": "n" * 65, "value": "1"}], "lastUpdatedTime": LUT},
        'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: [status.trainerStatus.metrics[0].name: Too long: may not be more than 64 bytes, <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]',
        [
            (
                "FieldValueTooLong",
                "Too long: may not be more than 64 bytes",
                "status.trainerStatus.metrics[0].name",
            ),
            NOT_CHECKED,
        ],
    ),
    "metric_value_65": (
        ssa(metrics=[{"name": "loss", "value": "9" * 65}]),
        {"metrics": [{"name": "loss", "value": "9" * 65}], "lastUpdatedTime": LUT},
        'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: [status.trainerStatus.metrics[0].value: Too long: may not be more than 64 bytes, <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]',
        [
            (
                "FieldValueTooLong",
                "Too long: may not be more than 64 bytes",
                "status.trainerStatus.metrics[0].value",
            ),
            NOT_CHECKED,
        ],
    ),
    "metric_name_empty": (
        ssa(metrics=[{"name": "", "value": "1"}]),
        {"metrics": [{"name": "", "value": "1"}], "lastUpdatedTime": LUT},
        'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: status.trainerStatus.metrics[0].name: Invalid value: "": trainerStatus.metrics[0].name in body should be at least 1 chars long',
        [
            (
                "FieldValueInvalid",
                'Invalid value: "": trainerStatus.metrics[0].name in body should be at least 1 chars long',
                "status.trainerStatus.metrics[0].name",
            )
        ],
    ),
    "metric_missing_value": (
        ssa(metrics=[{"name": "loss"}]),
        {"metrics": [{"name": "loss"}], "lastUpdatedTime": LUT},
        'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: [status.trainerStatus.metrics[0].value: Required value, <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]',
        [
            ("FieldValueRequired", "Required value", "status.trainerStatus.metrics[0].value"),
            NOT_CHECKED,
        ],
    ),
    "lut_not_a_time": (
        ssa(lastUpdatedTime="not-a-time"),
        {"lastUpdatedTime": "not-a-time"},
        'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: [status.trainerStatus.lastUpdatedTime: Invalid value: "not-a-time": trainerStatus.lastUpdatedTime in body must be of type date-time: "not-a-time", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]',
        [
            (
                "FieldValueTypeInvalid",
                'Invalid value: "not-a-time": trainerStatus.lastUpdatedTime in body must be of type date-time: "not-a-time"',
                "status.trainerStatus.lastUpdatedTime",
            ),
            NOT_CHECKED,
        ],
    ),
}


@pytest.mark.parametrize("body", ["ssa", "merge"])
@pytest.mark.parametrize("case", list(RECORDED))
def test_recorded_refusals_are_answered_word_for_word(case: str, body: str) -> None:
    ssa_body, merge_body, message, causes = RECORDED[case]
    exc = refused(ssa_body if body == "ssa" else merge_body)
    assert exc.message == message
    assert causes_of(exc) == causes
    assert exc.name == NAME
    assert (exc.kind, exc.group) == ("TrainJob", "trainer.kubeflow.org")


def test_causes_serialize_as_status_causes() -> None:
    exc = refused(ssa(progressPercentage=150))
    assert [c.to_json() for c in exc.causes] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 150: trainerStatus.progressPercentage in body should be less than or equal to 100",
            "field": "status.trainerStatus.progressPercentage",
        }
    ]


@pytest.mark.parametrize(
    ("status", "detail"),
    [
        # d_ssa_pp_string: the API server answers apply with a bare 500 (merge: 422).
        (
            ssa(progressPercentage="40"),
            "trainerStatus.progressPercentage: must be an integer, got string",
        ),
        # d_ssa_pp_bool
        (
            ssa(progressPercentage=True),
            "trainerStatus.progressPercentage: must be an integer, got boolean",
        ),
        # d_ssa_metric_value_number
        (
            ssa(metrics=[{"name": "loss", "value": 0.31}]),
            "trainerStatus.metrics[0].value: must be a string, got number",
        ),
    ],
    ids=["pp_string", "pp_bool", "metric_value_number"],
)
def test_recorded_type_mismatches_are_payload_errors(status: dict[str, Any], detail: str) -> None:
    assert payload_detail(status) == detail
    with pytest.raises(PayloadError) as info:
        parse(status)
    assert info.value.message == f"Invalid payload: {detail}"
    assert str(info.value) == f"Invalid payload: {detail}"


def test_missing_last_updated_time_is_stamped_not_refused() -> None:
    # d_ssa_lut_missing / d_merge_lut_missing: the API server's CEL rule refuses these;
    # we stamp the receive time, so the rule always holds.
    assert written(ssa(lastUpdatedTime=None)) == {
        "progressPercentage": 40,
        "estimatedRemainingSeconds": 300,
        "metrics": [{"name": "loss", "value": "0.31"}],
        "lastUpdatedTime": "2026-12-02T18:33:30Z",
    }
    no_lut = ssa()
    del no_lut["lastUpdatedTime"]
    assert written(no_lut)["lastUpdatedTime"] == "2026-12-02T18:33:30Z"
    # d_ssa_trainer_status_empty
    assert written({}) == {"lastUpdatedTime": "2026-12-02T18:33:30Z"}


def test_stamp_is_written_in_utc() -> None:
    received = datetime(2026, 12, 2, 20, 33, 30, 250000, tzinfo=timezone(timedelta(hours=2)))
    update = parse({}, received)
    assert update is not None
    assert update.last_updated_time == datetime(2026, 12, 2, 18, 33, 30, 250000, tzinfo=UTC)
    assert update.to_json() == {"lastUpdatedTime": "2026-12-02T18:33:30.250000Z"}


@pytest.mark.parametrize("raw", [b"{}", b'{"trainerStatus": null}', b'{"status": {}}'])
def test_nothing_to_write(raw: bytes) -> None:
    # d_merge_trainer_status_null and d_ssa_status_empty are refused by the API server
    # (status has minProperties 1); we write nothing and answer 200.
    assert parse_trainer_status(decode_payload(raw), trainjob=NAME, received=RECEIVED) is None


# -- what real clients send ------------------------------------------------------------


def test_kubeflow_sdk_body() -> None:
    # update_trainjob_status: lastUpdatedTime first, from datetime.now(timezone.utc).isoformat()
    # (datetime.UTC is timezone.utc).
    now = datetime.now(UTC)
    body = {
        "trainerStatus": {
            "lastUpdatedTime": now.isoformat(),
            "progressPercentage": max(0, min(100, 57)),
            "estimatedRemainingSeconds": max(0, 812),
            "metrics": [
                {"name": str(k), "value": str(v)}
                for k, v in {"loss": 0.2731, "accuracy": 0.91, "step": 1200}.items()
            ],
        }
    }
    raw = json.dumps(body).encode()  # what requests sends for json=...
    update = parse_trainer_status(decode_payload(raw), trainjob=NAME, received=now)
    assert update == TrainerStatus(
        progress_percentage=57,
        estimated_remaining_seconds=812,
        metrics=(Metric("loss", "0.2731"), Metric("accuracy", "0.91"), Metric("step", "1200")),
        last_updated_time=now,
    )
    assert update.to_json() == {
        "progressPercentage": 57,
        "estimatedRemainingSeconds": 812,
        "metrics": [
            {"name": "loss", "value": "0.2731"},
            {"name": "accuracy", "value": "0.91"},
            {"name": "step", "value": "1200"},
        ],
        "lastUpdatedTime": format_time(now),
    }
    assert update.to_json()["lastUpdatedTime"] == now.isoformat().replace("+00:00", "Z")


def transformers_body(
    progress: int | None, eta: float | None, metrics: dict[str, Any] | None, now: datetime
) -> bytes:
    """What transformers' KubeflowCallback._update_status posts."""
    trainer_status: dict[str, Any] = {"lastUpdatedTime": now.isoformat()}
    if progress is not None:
        trainer_status["progressPercentage"] = max(0, min(100, progress))
    if eta is not None:
        trainer_status["estimatedRemainingSeconds"] = max(0, int(eta))
    if metrics:
        trainer_status["metrics"] = [{"name": str(k), "value": str(v)} for k, v in metrics.items()]
    return json.dumps({"trainerStatus": trainer_status}).encode("utf-8")


def test_transformers_callback_bodies() -> None:
    now = datetime.now(UTC)
    logs = {
        "loss": 0.6931,
        "grad_norm": 1.2345678901234567,
        "learning_rate": 4.8e-05,
        "epoch": 0.42,
    }
    begin = transformers_body(0, None, {"total_steps": 500}, now)
    step = transformers_body(
        min(int(210 / 500 * 100), 99),
        321.7,
        {**logs, "current_step": 210, "total_steps": 500, "current_epoch": round(0.4199999, 2)},
        now,
    )
    end = transformers_body(100, 0, {}, now)
    updates = [
        parse_trainer_status(decode_payload(b), trainjob=NAME, received=now)
        for b in (begin, step, end)
    ]
    assert [u.to_json() if u else None for u in updates] == [
        {
            "progressPercentage": 0,
            "metrics": [{"name": "total_steps", "value": "500"}],
            "lastUpdatedTime": format_time(now),
        },
        {
            "progressPercentage": 42,
            "estimatedRemainingSeconds": 321,
            "metrics": [
                {"name": "loss", "value": "0.6931"},
                {"name": "grad_norm", "value": "1.2345678901234567"},
                {"name": "learning_rate", "value": "4.8e-05"},
                {"name": "epoch", "value": "0.42"},
                {"name": "current_step", "value": "210"},
                {"name": "total_steps", "value": "500"},
                {"name": "current_epoch", "value": "0.42"},
            ],
            "lastUpdatedTime": format_time(now),
        },
        {
            "progressPercentage": 100,
            "estimatedRemainingSeconds": 0,
            "lastUpdatedTime": format_time(now),
        },
    ]


def test_metric_order_and_duplicates_are_kept() -> None:
    metrics = [
        {"name": "b", "value": "2"},
        {"name": "a", "value": "1"},
        {"name": "b", "value": "3"},
    ]
    assert written({"metrics": metrics, "lastUpdatedTime": LUT})["metrics"] == metrics


@pytest.mark.parametrize(
    "status",
    [
        {"lastUpdatedTime": LUT},
        {
            "progressPercentage": 7,
            "estimatedRemainingSeconds": 0,
            "metrics": [],
            "lastUpdatedTime": LUT,
        },
        {"metrics": [{"name": "λoss", "value": "0.5"}, {"name": 'a"b\\', "value": "\n"}]},
    ],
)
def test_the_encoded_update_is_the_update_as_compact_json(status: dict[str, Any]) -> None:
    update = parse(status)
    assert update is not None
    encoded = update.encoded(RECEIVED)
    assert (encoded.last_updated_time, encoded.received) == (update.last_updated_time, RECEIVED)
    assert json.loads(encoded.json) == update.to_json()
    assert encoded.json == json.dumps(update.to_json(), separators=(",", ":")).encode()


@given(
    st.builds(
        TrainerStatus,
        st.none() | st.integers(0, 100),
        st.none() | st.integers(0, 2**31 - 1),
        st.none() | st.lists(st.tuples(st.text(), st.text()), max_size=5).map(tuple),
        st.datetimes(timezones=st.just(UTC)),
    )
)
def test_the_encoding_is_json_dumps_of_the_object_for_any_text(update: TrainerStatus) -> None:
    # Any text: control characters, quotes, surrogates and astral characters alike.
    encoded = update.encoded(RECEIVED)
    assert encoded.json == json.dumps(update.to_json(), separators=(",", ":")).encode()


@pytest.mark.parametrize("name", ["loss", "λoss"])  # ASCII and not
def test_metric_names_are_one_copy_across_posts(name: str) -> None:
    # Each post decodes its own strings; an update waiting for its write keeps them.
    first, second = (
        parse({"metrics": [{"name": name, "value": "1"}], "lastUpdatedTime": LUT}) for _ in range(2)
    )
    assert first is not None
    assert second is not None
    assert first.metrics is not None
    assert second.metrics is not None
    assert first.metrics[0] == second.metrics[0] == (name, "1")
    assert first.metrics[0].name is second.metrics[0].name


def test_empty_metrics_list_is_written() -> None:
    assert written({"metrics": [], "lastUpdatedTime": LUT}) == {
        "metrics": [],
        "lastUpdatedTime": LUT,
    }


# -- boundaries ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1, 99, 100])
def test_progress_in_range(value: int) -> None:
    assert written({"progressPercentage": value})["progressPercentage"] == value


@pytest.mark.parametrize("value", [0, 1, 2147483647])
def test_remaining_seconds_in_range(value: int) -> None:
    assert written({"estimatedRemainingSeconds": value})["estimatedRemainingSeconds"] == value


def test_progress_101() -> None:
    assert causes_of(refused({"progressPercentage": 101})) == [
        (
            "FieldValueInvalid",
            "Invalid value: 101: trainerStatus.progressPercentage in body should be less than or equal to 100",
            "status.trainerStatus.progressPercentage",
        )
    ]


def test_remaining_seconds_2147483648() -> None:
    exc = refused({"estimatedRemainingSeconds": 2147483648})
    assert (
        exc.message
        == 'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: status: Invalid value: "": Checked value must be of type integer with format int32 in trainerStatus.estimatedRemainingSeconds'
    )


def test_progress_below_int32_gets_both_causes() -> None:
    assert causes_of(refused({"progressPercentage": -2147483649})) == [
        (
            "FieldValueInvalid",
            'Invalid value: "": Checked value must be of type integer with format int32 in trainerStatus.progressPercentage',
            "status",
        ),
        (
            "FieldValueInvalid",
            "Invalid value: -2147483649: trainerStatus.progressPercentage in body should be greater than or equal to 0",
            "status.trainerStatus.progressPercentage",
        ),
    ]


def test_strings_of_64_characters_pass() -> None:
    name, value = "n" * 64, "é" * 64  # characters, not bytes, as go-openapi counts
    assert written({"metrics": [{"name": name, "value": value}]})["metrics"] == [
        {"name": name, "value": value}
    ]


def test_string_of_65_characters() -> None:
    assert causes_of(refused({"metrics": [{"name": "x", "value": "é" * 65}]})) == [
        (
            "FieldValueTooLong",
            "Too long: may not be more than 64 bytes",
            "status.trainerStatus.metrics[0].value",
        ),
        NOT_CHECKED,
    ]


def test_empty_value() -> None:
    assert causes_of(refused({"metrics": [{"name": "x", "value": ""}]})) == [
        (
            "FieldValueInvalid",
            'Invalid value: "": trainerStatus.metrics[0].value in body should be at least 1 chars long',
            "status.trainerStatus.metrics[0].value",
        )
    ]


def test_256_metrics_pass() -> None:
    metrics = [{"name": f"m{i}", "value": str(i)} for i in range(256)]
    assert written({"metrics": metrics})["metrics"] == metrics


def test_every_metric_cause_comes_before_too_many() -> None:
    metrics = [{"name": f"m{i}", "value": "1"} for i in range(257)]
    metrics[3] = {"value": "", "name": "n" * 65, "unit": "s"}
    metrics[200] = {"value": "1"}
    assert causes_of(refused({"metrics": metrics})) == [
        (
            "FieldValueInvalid",
            'Invalid value: "": trainerStatus.metrics[3].value in body should be at least 1 chars long',
            "status.trainerStatus.metrics[3].value",
        ),
        (
            "FieldValueTooLong",
            "Too long: may not be more than 64 bytes",
            "status.trainerStatus.metrics[3].name",
        ),
        ("FieldValueRequired", "Required value", "status.trainerStatus.metrics[200].name"),
        (
            "FieldValueTooMany",
            "Too many: 257: must have at most 256 items",
            "status.trainerStatus.metrics",
        ),
        NOT_CHECKED,
    ]


def test_causes_follow_the_body_order() -> None:
    exc = refused(
        {"estimatedRemainingSeconds": -5, "lastUpdatedTime": LUT, "progressPercentage": 150}
    )
    assert [c.field for c in exc.causes] == [
        "status.trainerStatus.estimatedRemainingSeconds",
        "status.trainerStatus.progressPercentage",
    ]


# -- numbers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("literal", "value"),
    [("5.0", 5), ("1e2", 100), ("1E1", 10), ("-0", 0), ("-0.0", 0), ("0.0", 0), ("100.000", 100)],
)
def test_whole_numbers_written_as_floats_are_integers(literal: str, value: int) -> None:
    # The API server decodes these as float64 and its integer check accepts them.
    raw = b'{"trainerStatus": {"progressPercentage": %s}}' % literal.encode()
    update = parse_trainer_status(decode_payload(raw), trainjob=NAME, received=RECEIVED)
    assert update is not None
    assert update.progress_percentage == value
    assert type(update.progress_percentage) is int
    assert json.dumps(update.to_json()["progressPercentage"]) == str(value)


def test_fraction_below_zero() -> None:
    assert causes_of(refused({"estimatedRemainingSeconds": -0.5})) == [
        (
            "FieldValueTypeInvalid",
            'Invalid value: "float64": trainerStatus.estimatedRemainingSeconds in body must be of type int32: "float64"',
            "status.trainerStatus.estimatedRemainingSeconds",
        ),
        (
            "FieldValueInvalid",
            'Invalid value: "": Checked value must be of type integer with format int32 in trainerStatus.estimatedRemainingSeconds',
            "status",
        ),
        (
            "FieldValueInvalid",
            "Invalid value: -0.5: trainerStatus.estimatedRemainingSeconds in body should be greater than or equal to 0",
            "status.trainerStatus.estimatedRemainingSeconds",
        ),
        NOT_CHECKED,
    ]


def test_large_float_is_shown_as_go_shows_it() -> None:
    exc = refused({"progressPercentage": 1e20})
    assert exc.causes[2] == Cause(
        "FieldValueInvalid",
        "Invalid value: 1e+20: trainerStatus.progressPercentage in body should be less than or equal to 100",
        "status.trainerStatus.progressPercentage",
    )


def test_float_within_relative_1e9_of_an_integer_passes_the_type_check() -> None:
    # go-openapi (swag/conv.IsFloat64AJSONInteger) takes it for an integer; only the
    # int32 range check (which formats it with its fraction) refuses it, non-blocking.
    assert causes_of(refused({"progressPercentage": 40.00000000001})) == [
        (
            "FieldValueInvalid",
            'Invalid value: "": Checked value must be of type integer with format int32 in trainerStatus.progressPercentage',
            "status",
        )
    ]


def test_integer_beyond_int64_is_a_float64_as_the_api_server_decodes_it() -> None:
    raw = b'{"trainerStatus": {"estimatedRemainingSeconds": 9223372036854775808}}'
    with pytest.raises(ValidationFailed) as info:
        parse_trainer_status(decode_payload(raw), trainjob=NAME, received=RECEIVED)
    assert causes_of(info.value) == [
        (
            "FieldValueTypeInvalid",
            'Invalid value: "float64": trainerStatus.estimatedRemainingSeconds in body must be of type int32: "float64"',
            "status.trainerStatus.estimatedRemainingSeconds",
        ),
        (
            "FieldValueInvalid",
            'Invalid value: "": Checked value must be of type integer with format int32 in trainerStatus.estimatedRemainingSeconds',
            "status",
        ),
        NOT_CHECKED,
    ]


@pytest.mark.parametrize("literal", [b"1e400", b"-1e400", b"1" + b"0" * 400])
def test_numbers_beyond_float64_are_payload_errors(literal: bytes) -> None:
    raw = b'{"trainerStatus": {"progressPercentage": %s}}' % literal
    with pytest.raises(PayloadError) as info:
        parse_trainer_status(decode_payload(raw), trainjob=NAME, received=RECEIVED)
    assert info.value.detail == "trainerStatus.progressPercentage: number is out of range"


def test_huge_number_in_an_ignored_field_is_ignored() -> None:
    raw = b'{"trainerStatus": {"progressPercentage": 5, "other": 1e400}, "x": 1e999}'
    assert parse_trainer_status(decode_payload(raw), trainjob=NAME, received=RECEIVED) is not None


# -- lastUpdatedTime ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "instant"),
    [
        ("2026-12-02T18:33:25Z", "2026-12-02T18:33:25Z"),
        ("2026-12-02T18:33:25.123456+00:00", "2026-12-02T18:33:25.123456Z"),
        ("2026-12-02T20:33:25.5+02:00", "2026-12-02T18:33:25.500000Z"),
        ("2026-12-02T18:33:25.123456789Z", "2026-12-02T18:33:25.123456Z"),  # truncated
        ("2026-12-02T13:33:25-05:00", "2026-12-02T18:33:25Z"),
        ("2026-12-03T18:32:25+23:59", "2026-12-02T18:33:25Z"),
        ("2026-12-01T18:34:25-23:59", "2026-12-02T18:33:25Z"),
        ("2026-12-02T18:33:25-00:00", "2026-12-02T18:33:25Z"),
        ("2024-02-29T00:00:00Z", "2024-02-29T00:00:00Z"),
        ("0001-01-01T00:00:00Z", "0001-01-01T00:00:00Z"),
    ],
)
def test_date_times_accepted(text: str, instant: str) -> None:
    assert written({"lastUpdatedTime": text})["lastUpdatedTime"] == instant


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2026-12-02",
        "2026-12-02T18:33:25",
        "2026-12-02 18:33:25Z",
        "2026-12-02T18:33Z",
        "2026-12-02T24:00:00Z",
        "2026-12-02T18:60:00Z",
        "2026-12-02T23:59:60Z",
        "2025-02-29T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-12-02T18:33:25+0100",
        "2026-12-02T18:33:25.Z",
        "2026-12-02T18:33:25Tt5Z",
        "2026-12-02T18:33:25\n5Z",
        "20261202T183325Z",
        "2026-12-02T18:33:25Z ",
        " 2026-12-02T18:33:25Z",
        "２０２６-12-02T18:33:25Z",
        # strfmt.IsDateTime, which the API server runs, accepts these (it lowers the text
        # and splits it on "t", and its pattern has "." for any character and [0-9]{2}
        # for offset hours and minutes); RFC 3339 does not, and neither does Go's
        # time.Parse behind metav1.Time for the offsets and the trailing text.
        "2026-12-06T18:33:25+99:99",
        "2026-12-02T18:33:25+24:00",
        "2026-12-02T18:33:25-23:60",
        "2026-12-02T18:33:25Ztrailing",
        "2026-12-02T18:33:25ZTjunk",
        "2026-12-02T18:33:25+01:00t",
        "2026-12-02T18:33:25Zthe rest\nis ignored",
        "2026-12-02T18:33:25,25Z",
        "2026-12-02T18:33:25x5Z",
        "2026-12-02T18:33:25é5Z",
    ],
)
def test_date_times_refused(text: str) -> None:
    exc = refused({"lastUpdatedTime": text})
    quoted = json.dumps(text, ensure_ascii=False)  # the same as Go's %q for these
    assert causes_of(exc) == [
        (
            "FieldValueTypeInvalid",
            f"Invalid value: {quoted}: trainerStatus.lastUpdatedTime in body must be of type date-time: {quoted}",
            "status.trainerStatus.lastUpdatedTime",
        ),
        NOT_CHECKED,
    ]


def test_bad_date_time_is_quoted_as_go_quotes_it() -> None:
    exc = refused({"lastUpdatedTime": 'a"\\\x00\x7fé\u00a0\U0001f600'})
    assert exc.causes[0].message == (
        'Invalid value: "a\\"\\\\\\x00\\x7fé\\u00a0😀": trainerStatus.lastUpdatedTime in body '
        'must be of type date-time: "a\\"\\\\\\x00\\x7fé\\u00a0😀"'
    )


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        # Added in Unicode 15.0: Go 1.21 to 1.26 (kube-apiserver) print them, Python 3.11
        # (Unicode 14.0) does not know them.
        ("\U00031350", '"\U00031350"'),
        ("\U000323af", '"\U000323af"'),
        ("\u0cf3", '"\u0cf3"'),
        ("\U0001fadb", '"\U0001fadb"'),
        # Added in Unicode 15.1: Python 3.13 prints them, Go escapes them.
        ("\U0002ebf0", '"\\U0002ebf0"'),
        ("\u2ffc", '"\\u2ffc"'),
        ("\u31ef", '"\\u31ef"'),
        # Unassigned in both.
        ("\U000323b0", '"\\U000323b0"'),
    ],
)
def test_what_prints_follows_gos_unicode_version_not_pythons(text: str, quoted: str) -> None:
    """kube-apiserver quotes a bad value with Go's tables (Unicode 15.0.0, recorded with
    ``strconv.Quote`` of Go 1.26); Python's follow its own version."""
    assert go_quote(text) == quoted


@pytest.mark.parametrize("offset", [MAX_AHEAD, timedelta(0), -timedelta(days=400)])
def test_times_up_to_five_minutes_ahead_are_accepted(offset: timedelta) -> None:
    assert written({"lastUpdatedTime": format_time(RECEIVED + offset)})


def test_time_more_than_five_minutes_ahead_is_refused() -> None:
    text = format_time(RECEIVED + MAX_AHEAD + timedelta(microseconds=1))
    exc = refused({"progressPercentage": 150, "lastUpdatedTime": text})
    assert exc.message == (
        'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: [status.trainerStatus.progressPercentage: '
        "Invalid value: 150: trainerStatus.progressPercentage in body should be less than or equal to 100, "
        'status.trainerStatus.lastUpdatedTime: Invalid value: "2026-12-02T18:38:30.000001Z": must not be '
        "more than 5 minutes after the time the server received it (2026-12-02T18:33:30Z)]"
    )
    assert exc.causes[1] == Cause(
        "FieldValueInvalid",
        'Invalid value: "2026-12-02T18:38:30.000001Z": must not be more than 5 minutes after the time the server received it (2026-12-02T18:33:30Z)',
        "status.trainerStatus.lastUpdatedTime",
    )


def test_future_time_with_an_offset_counts_in_utc() -> None:
    # 20:38:31+02:00 is 18:38:31Z, one second past the allowance.
    assert refused({"lastUpdatedTime": "2026-12-02T20:38:31+02:00"}).causes[0].field == (
        "status.trainerStatus.lastUpdatedTime"
    )
    assert written({"lastUpdatedTime": "2026-12-02T20:38:30+02:00"})


def test_time_rules_do_not_run_after_a_blocking_error() -> None:
    # As the API server's CEL rules: one "not checked" cause stands in for them.
    exc = refused({"metrics": [{"name": "x"}], "lastUpdatedTime": "2100-01-01T00:00:00Z"})
    assert causes_of(exc) == [
        ("FieldValueRequired", "Required value", "status.trainerStatus.metrics[0].value"),
        NOT_CHECKED,
    ]


@pytest.mark.parametrize(
    "text", ["0000-01-01T00:00:00Z", "0000-02-29T12:00:00Z", "0001-01-01T00:00:00+00:01"]
)
def test_valid_date_times_outside_years_1_to_9999_utc(text: str) -> None:
    assert causes_of(refused({"lastUpdatedTime": text})) == [
        (
            "FieldValueInvalid",
            f'Invalid value: "{text}": must be between 0001-01-01 and 9999-12-31 UTC',
            "status.trainerStatus.lastUpdatedTime",
        )
    ]


def test_year_zero_follows_its_leap_calendar() -> None:
    # Go accepts 0000-02-29 (year 0 is a leap year), so it is a date-time, out of range;
    # 0000-02-30 is no date-time at all.
    assert (
        refused({"lastUpdatedTime": "0000-02-30T00:00:00Z"}).causes[0].type
        == "FieldValueTypeInvalid"
    )


# -- JSON types, nulls, unknown fields -----------------------------------------------------


@pytest.mark.parametrize(
    ("status", "detail"),
    [
        ("x", "trainerStatus: must be an object, got string"),
        ([], "trainerStatus: must be an object, got array"),
        (1, "trainerStatus: must be an object, got number"),
        (False, "trainerStatus: must be an object, got boolean"),
        (
            {"progressPercentage": [50]},
            "trainerStatus.progressPercentage: must be an integer, got array",
        ),
        (
            {"estimatedRemainingSeconds": {}},
            "trainerStatus.estimatedRemainingSeconds: must be an integer, got object",
        ),
        (
            {"estimatedRemainingSeconds": "1"},
            "trainerStatus.estimatedRemainingSeconds: must be an integer, got string",
        ),
        ({"metrics": {"loss": "1"}}, "trainerStatus.metrics: must be an array, got object"),
        ({"metrics": "loss=1"}, "trainerStatus.metrics: must be an array, got string"),
        (
            {"metrics": [{"name": "a", "value": "1"}, ["loss", "1"]]},
            "trainerStatus.metrics[1]: must be an object, got array",
        ),
        ({"metrics": [None]}, "trainerStatus.metrics[0]: must be an object, got null"),
        (
            {"metrics": [{"name": 1, "value": "1"}]},
            "trainerStatus.metrics[0].name: must be a string, got number",
        ),
        (
            {"metrics": [{"name": "a", "value": True}]},
            "trainerStatus.metrics[0].value: must be a string, got boolean",
        ),
        (
            {"lastUpdatedTime": 1764700405},
            "trainerStatus.lastUpdatedTime: must be a string, got number",
        ),
        ({"lastUpdatedTime": []}, "trainerStatus.lastUpdatedTime: must be a string, got array"),
        (
            {"metrics": [{"name": "\ud800", "value": "1"}]},
            "trainerStatus.metrics[0].name: string holds an unpaired UTF-16 surrogate",
        ),
        (
            {"progressPercentage": math.inf},
            "trainerStatus.progressPercentage: number is out of range",
        ),
    ],
)
def test_wrong_json_types(status: Any, detail: str) -> None:
    assert payload_detail(status) == detail


def test_wrong_type_wins_over_every_violation() -> None:
    status = {
        "progressPercentage": 150,
        "metrics": [{"name": ""}, {"name": "a", "value": 5}],
        "estimatedRemainingSeconds": "x",
    }
    assert payload_detail(status) == "trainerStatus.metrics[1].value: must be a string, got number"


def test_nulls_are_absent_fields() -> None:
    status = {
        "progressPercentage": None,
        "estimatedRemainingSeconds": None,
        "metrics": None,
        "lastUpdatedTime": None,
    }
    assert written(status) == {"lastUpdatedTime": "2026-12-02T18:33:30Z"}
    assert causes_of(refused({"metrics": [{"name": None, "value": "1"}]})) == [
        ("FieldValueRequired", "Required value", "status.trainerStatus.metrics[0].name"),
        NOT_CHECKED,
    ]


def test_unknown_fields_are_ignored_and_names_are_case_sensitive() -> None:
    status = {
        "ProgressPercentage": "x",
        "bogusField": 1,
        "progressPercentage": 10,
        "metrics": [{"name": "a", "value": "1", "unit": {"deep": [1, 2]}}],
        "lastUpdatedTime": LUT,
    }
    assert written(status) == {
        "progressPercentage": 10,
        "metrics": [{"name": "a", "value": "1"}],
        "lastUpdatedTime": LUT,
    }


def test_parse_leaves_the_payload_alone() -> None:
    payload = {
        "trainerStatus": {
            "progressPercentage": 5.0,
            "metrics": [{"name": "a", "value": "1", "x": 1}],
        }
    }
    before = copy.deepcopy(payload)
    parse_trainer_status(payload, trainjob=NAME, received=RECEIVED)
    assert payload == before


# -- decoding ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        (b"", "body is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
        (
            b"{",
            "body is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        (b"{} {}", "body is not valid JSON: Extra data: line 1 column 4 (char 3)"),
        (b"[]", "body must be a JSON object, got array"),
        (b"null", "body must be a JSON object, got null"),
        (b'"x"', "body must be a JSON object, got string"),
        (b'{"a": NaN}', "body is not valid JSON: NaN is not a JSON value"),
        (b'{"a": Infinity}', "body is not valid JSON: Infinity is not a JSON value"),
        (b'{"a": [-Infinity]}', "body is not valid JSON: -Infinity is not a JSON value"),
        (b'{"a": "\xff"}', "body is not valid UTF-8 (byte 7)"),
        (b'{"a": "\xed\xa0\x80"}', "body is not valid UTF-8 (byte 7)"),  # an encoded surrogate
        (
            b"\xef\xbb\xbf{}",
            "body starts with a byte order mark",
        ),
        ('{"a": 1}'.encode("utf-16"), "body is not valid UTF-8 (byte 0)"),
    ],
)
def test_bodies_that_do_not_decode(raw: bytes, detail: str) -> None:
    with pytest.raises(PayloadError) as info:
        decode_payload(raw)
    assert info.value.detail == detail


@pytest.mark.parametrize("raw", [b"[" * 50000 + b"]" * 50000, b'{"a": ' + b"9" * 5000 + b"}"])
def test_bodies_python_cannot_decode_are_payload_errors(raw: bytes) -> None:
    with pytest.raises(PayloadError) as info:
        decode_payload(raw)
    assert info.value.detail.startswith("body cannot be decoded: ")


def test_duplicate_keys_last_one_wins() -> None:
    raw = b'{"trainerStatus": {"progressPercentage": 150, "progressPercentage": 50}}'
    update = parse_trainer_status(decode_payload(raw), trainjob=NAME, received=RECEIVED)
    assert update is not None
    assert update.progress_percentage == 50


def test_whitespace_and_non_ascii_escapes_decode() -> None:
    raw = b' \n{"trainerStatus": {"metrics": [{"name": "\\u00e9t\\u00e9", "value": "\\ud83d\\ude00"}]}}\t'
    update = parse_trainer_status(decode_payload(raw), trainjob=NAME, received=RECEIVED)
    assert update is not None
    assert update.metrics == (Metric("été", "😀"),)


def test_trainjob_name_is_quoted_in_the_message() -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_trainer_status(
            {"trainerStatus": {"progressPercentage": -1}}, trainjob='a"b', received=RECEIVED
        )
    assert info.value.message.startswith('TrainJob.trainer.kubeflow.org "a\\"b" is invalid: ')


# -- differential: the real API server's CRD validation ---------------------------------------

TRAINJOBS = f"/apis/{GROUP}/v1alpha1/namespaces/rec/trainjobs"
# Later than any generated time (years up to 9000, offsets up to 99:99), so our own
# time rules never fire: they are not the CRD's.
FAR_RECEIVED = datetime(9500, 1, 1, tzinfo=UTC)


# RFC 3339's date-time (section 5.6), written out apart from the module under test.
RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
    r"([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])\Z"
)
NOT_A_TIME = "not-a-time"


class Crd:
    """TrainJob rec/tj-rec on the real control plane; :meth:`refusal` asks kube-apiserver
    (a dry-run update of /status, which keeps nulls as sent and prunes unknown fields)."""

    def __init__(self, cluster: RealCluster) -> None:
        self.cluster = cluster
        self.stored = cluster.create_trainjob("rec", NAME)

    def refusal(self, status: dict[str, Any]) -> dict[str, Any] | None:
        """The API server's 422 answer to a /status write leaving trainerStatus =
        ``status``, after our two documented changes: a missing or null lastUpdatedTime is
        stamped, and one the API server's date-time check accepts but RFC 3339 does not is
        answered as a string that is no date-time. None where it accepts the write."""
        stamped = copy.deepcopy(status)
        text = stamped.get("lastUpdatedTime")
        if text is None:
            stamped["lastUpdatedTime"] = format_time(FAR_RECEIVED)
        answer = self._write(stamped)
        if type(text) is str and not RFC3339.match(text):
            fields = [c.get("field") for c in (answer or {}).get("details", {}).get("causes", [])]
            if "status.trainerStatus.lastUpdatedTime" not in fields:
                stamped["lastUpdatedTime"] = NOT_A_TIME
                answer = self._write(stamped)
                assert answer is not None
                was, now = go_quote(NOT_A_TIME), go_quote(text)
                answer["message"] = answer["message"].replace(was, now)
                for cause in answer["details"]["causes"]:
                    cause["message"] = cause["message"].replace(was, now)
        return answer

    def write(self, trainer_status: dict[str, Any]) -> tuple[int, Any]:
        """The answer to a dry-run write of ``trainer_status`` as it is."""
        body = {**self.stored, "status": {"trainerStatus": trainer_status}}
        path = f"{TRAINJOBS}/{NAME}/status?dryRun=All&fieldValidation=Ignore"
        answer: tuple[int, Any] = self.cluster.plane.request("PUT", path, body)
        return answer

    def _write(self, trainer_status: dict[str, Any]) -> dict[str, Any] | None:
        code, answer = self.write(trainer_status)
        assert code in (200, 422), (code, answer)
        return answer if code == 422 else None


def invalid_message(causes: list[dict[str, str]]) -> str:
    parts = [f"{c['field']}: {c['message']}" for c in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    return f'TrainJob.trainer.kubeflow.org "{NAME}" is invalid: {joined}'


@pytest.fixture(scope="module")
def crd(control_plane: RealCluster) -> Crd:
    control_plane.reset()
    return Crd(control_plane)


def _go_json_integer_differs(value: float) -> bool:
    """Floats where go-openapi's integer test (relative 1e-9 tolerance, limit 2**53 - 1)
    and the devcluster's (exact, limit 2**53) disagree; see the tests above."""
    if not math.isfinite(value):
        return False
    if abs(value) == 2.0**53:
        return True
    rounded = round(value)
    return value != rounded and rounded != 0 and abs(value - rounded) < 1e-9 * abs(rounded)


NUMBERS = st.one_of(
    st.sampled_from(
        [0, 1, 42, 99, 100, 101, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, -(2**63)]
    ),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=-5, max_value=120),
    st.sampled_from(
        [
            5.0,
            0.0,
            -0.0,
            100.0,
            100.5,
            40.5,
            -1.0,
            -0.5,
            1e20,
            2147483647.0,
            2147483648.0,
            1e-300,
            4.5e15,
        ]
    ),
    st.floats(allow_nan=False, allow_infinity=False).filter(
        lambda f: not _go_json_integer_differs(f)
    ),
)
SHORT_TEXT = st.one_of(
    st.text(max_size=8),
    st.text(min_size=62, max_size=66),
    st.sampled_from(["", "loss", "é" * 64, "é" * 65]),
)


@st.composite
def metric_items(draw: st.DrawFn) -> dict[str, Any]:
    entries: list[tuple[str, Any]] = []
    for key in ("name", "value"):
        if draw(st.integers(0, 9)):  # mostly present
            entries.append(
                (
                    key,
                    draw(
                        st.one_of(SHORT_TEXT, st.none())
                        if draw(st.integers(0, 9)) == 0
                        else SHORT_TEXT
                    ),
                )
            )
    if draw(st.integers(0, 4)) == 0:
        entries.append(("unit", draw(st.one_of(st.integers(), st.text(max_size=3)))))
    return dict(draw(st.permutations(entries)))


@st.composite
def long_metric_lists(draw: st.DrawFn) -> list[dict[str, Any]]:
    size = draw(st.integers(253, 258))
    items: list[dict[str, Any]] = [{"name": f"m{i}", "value": "1"} for i in range(size)]
    for _ in range(draw(st.integers(0, 2))):
        items[draw(st.integers(0, size - 1))] = draw(metric_items())
    return items


@st.composite
def date_times(draw: st.DrawFn) -> str:
    """Strings around RFC 3339: most valid, many just off (day, hour, separators, offsets)."""
    year = draw(st.integers(2, 9000))
    month = draw(st.integers(0, 13))
    day = draw(st.integers(0, 32))
    hour, minute, second = (
        draw(st.integers(0, 25)),
        draw(st.integers(0, 60)),
        draw(st.integers(0, 61)),
    )
    sep = draw(st.sampled_from(["T", "T", "t", " ", "_"]))
    text = f"{year:04d}-{month:02d}-{day:02d}{sep}{hour:02d}:{minute:02d}:{second:02d}"
    if draw(st.booleans()):
        mark = draw(st.sampled_from([".", ".", ",", "x", "é", "T", "\n", ""]))
        text += mark + draw(st.text(alphabet="0123456789", min_size=0, max_size=10))
    text += draw(
        st.one_of(
            st.sampled_from(["Z", "Z", "z", "", "+00:00", "-05:30", "+0100", "Zt", "ZTjunk"]),
            st.builds(
                lambda s, h, m: f"{s}{h:02d}:{m:02d}",
                st.sampled_from("+-"),
                st.integers(0, 99),
                st.integers(0, 99),
            ),
        )
    )
    return text


LAST_UPDATED = st.one_of(
    date_times(),
    st.text(max_size=25).filter(
        lambda t: "\u0130" not in t
    ),  # Python lowercases İ to 2 characters, Go to 1
    st.sampled_from(
        [
            "not-a-time",
            LUT,
            "2026-12-02T18:33:25.123456+00:00",
            "2026-02-29T00:00:00Z",
            "2024-02-29T00:00:00Z",
        ]
    ),
    st.none(),
)


@st.composite
def trainer_statuses(draw: st.DrawFn) -> dict[str, Any]:
    """trainerStatus objects with right JSON types throughout, valid or not, keys in any order."""
    entries: list[tuple[str, Any]] = []
    if draw(st.integers(0, 4)):
        entries.append(("progressPercentage", draw(st.one_of(NUMBERS, st.none()))))
    if draw(st.integers(0, 4)):
        entries.append(("estimatedRemainingSeconds", draw(st.one_of(NUMBERS, st.none()))))
    if draw(st.integers(0, 3)):
        metrics = st.one_of(st.lists(metric_items(), max_size=4), long_metric_lists(), st.none())
        entries.append(("metrics", draw(metrics)))
    if draw(st.integers(0, 5)):
        entries.append(("lastUpdatedTime", draw(LAST_UPDATED)))
    if draw(st.integers(0, 5)) == 0:
        entries.append(
            ("bogusField", draw(st.one_of(st.integers(), st.text(max_size=3), st.none())))
        )
    return dict(draw(st.permutations(entries)))


@settings(
    max_examples=600,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(status=trainer_statuses())
def test_same_verdict_and_causes_as_the_api_server(crd: Crd, status: dict[str, Any]) -> None:
    refused = crd.refusal(status)
    payload = {"trainerStatus": status}
    if refused is not None:
        with pytest.raises(ValidationFailed) as info:
            parse_trainer_status(payload, trainjob=NAME, received=FAR_RECEIVED)
        ours = [c.to_json() for c in info.value.causes]
        theirs = refused["details"]["causes"]
        # The API server walks the schema's properties in Go map order, ours follow the
        # body: the same causes, and the same message once put in the same order.
        assert sorted(ours, key=json.dumps) == sorted(theirs, key=json.dumps)
        assert refused["message"] == invalid_message(theirs)
        assert info.value.message == invalid_message(ours)
    else:
        update = parse_trainer_status(payload, trainjob=NAME, received=FAR_RECEIVED)
        assert update is not None
        # What we write is what the CRD accepts, too.
        assert crd.refusal(update.to_json()) is None


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-02t18:33:25Z",
        "2026-12-02T18:33:25z",
        "2026-12-02t18:33:25z",
        "2026-12-02T18:33:25.5z",
        "2026-12-02t18:33:25+01:00",
    ],
)
def test_a_lowercase_t_or_z_is_refused_as_the_api_server_refuses_it(crd: Crd, text: str) -> None:
    refused = crd.refusal({"lastUpdatedTime": text})
    assert refused is not None
    with pytest.raises(ValidationFailed) as info:
        parse_trainer_status(
            {"trainerStatus": {"lastUpdatedTime": text}}, trainjob=NAME, received=FAR_RECEIVED
        )
    assert info.value.message == refused["message"]


WRONG_FOR_INTEGER: st.SearchStrategy[Any] = st.one_of(
    st.text(max_size=3),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.just({}),
    st.just(math.inf),
)
WRONG_FOR_STRING: st.SearchStrategy[Any] = st.one_of(
    st.integers(), st.floats(allow_nan=False), st.booleans(), st.just({"a": 1})
)


@st.composite
def mistyped_statuses(draw: st.DrawFn) -> dict[str, Any]:
    status = draw(trainer_statuses())
    where = draw(
        st.sampled_from(
            [
                "progressPercentage",
                "estimatedRemainingSeconds",
                "metrics",
                "item",
                "name",
                "value",
                "lastUpdatedTime",
            ]
        )
    )
    if where in ("progressPercentage", "estimatedRemainingSeconds"):
        status[where] = draw(WRONG_FOR_INTEGER)
    elif where == "metrics":
        status["metrics"] = draw(
            st.one_of(st.text(max_size=3), st.integers(), st.just({"name": "a"}))
        )
    elif where == "lastUpdatedTime":
        # Not arrays: go-openapi waves an array through a formatted string schema (a
        # merge patch stores it), though apply refuses it, and so do we.
        status["lastUpdatedTime"] = draw(WRONG_FOR_STRING)
    else:
        metrics = status.get("metrics")
        if type(metrics) is not list:
            metrics = status["metrics"] = [{"name": "a", "value": "1"}]
        if where == "item":
            not_an_object = st.one_of(
                st.integers(),
                st.booleans(),
                st.text(max_size=3),
                st.lists(st.integers(), max_size=2),
            )
            metrics.append(draw(not_an_object))
        else:
            metrics.append({"name": "a", "value": "1", where: draw(WRONG_FOR_STRING)})
    return status


@settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(status=mistyped_statuses())
def test_a_wrong_json_type_is_a_payload_error_the_crd_refuses_too(
    crd: Crd, status: dict[str, Any]
) -> None:
    with pytest.raises(PayloadError):
        parse_trainer_status({"trainerStatus": status}, trainjob=NAME, received=FAR_RECEIVED)
    try:
        json.dumps(status, allow_nan=False)
    except ValueError:
        # Infinity is no JSON: the API server cannot even decode the body.
        assert crd.write(status)[0] == 400
        return
    refused = crd.refusal(status)
    assert refused is not None
    assert any(c["reason"] == "FieldValueTypeInvalid" for c in refused["details"]["causes"])


@settings(max_examples=300, deadline=None, database=None)
@given(date_times())
def test_accepted_date_times_mean_the_instant_they_spell(text: str) -> None:
    """An independent reading of the accepted strings: components, fraction, offset."""
    try:
        update = parse_trainer_status(
            {"trainerStatus": {"lastUpdatedTime": text}}, trainjob=NAME, received=FAR_RECEIVED
        )
    except ValidationFailed:
        return
    assert update is not None
    date, _, rest = text.replace("t", "T").partition("T")
    rest = rest.replace("z", "Z").split("T")[0]
    year, month, day = (int(p) for p in date.split("-"))
    clock, tail = rest[:8], rest[8:]
    hour, minute, second = (int(p) for p in clock.split(":"))
    micro = 0
    if tail[:1] not in ("Z", "+", "-"):
        digits = tail[1:].rstrip("Z").split("+")[0].split("-")[0]
        micro = int(digits[:6].ljust(6, "0"))
    offset = timedelta(0)
    if tail[-6:-5] in ("+", "-"):
        sign = 1 if tail[-6] == "+" else -1
        offset = sign * timedelta(hours=int(tail[-5:-3]), minutes=int(tail[-2:]))
    expected = datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC) - offset
    assert update.last_updated_time == expected


# -- the shortcuts against straightforward references ------------------------------------------
#
# Every post is decoded and its time written by shortcuts. Here they meet straightforward
# references on the same inputs: format_time's first form and json's own decode, copied as
# they were; and the update's JSON meets json.dumps of its fields. Every result, error
# message, cause and byte must be the same.


def outcome(call: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """What ``call(*args)`` returns (by ``repr``, which tells 1 from 1.0 and True), or
    everything about what it raises."""
    try:
        return ("returned", repr(call(*args)))
    except Exception as exc:  # any exception is an outcome to compare
        about: tuple[Any, ...] = (
            type(exc),
            str(exc),
            repr(exc.__cause__),
            type(exc.__context__),
            exc.__suppress_context__,
        )
        if isinstance(exc, PayloadError):
            about += (exc.detail, exc.message)
        if isinstance(exc, ValidationFailed):
            about += (exc.name, exc.message, [c.to_json() for c in exc.causes])
        return ("raised", *about)


def reference_format_time(stamp: datetime) -> str:
    return stamp.astimezone(UTC).isoformat()[:-6] + "Z"


ZONES = st.one_of(
    st.none(),
    st.just(UTC),
    st.builds(
        timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23))
    ),
)


@settings(max_examples=500, deadline=None, database=None)
@given(st.datetimes(timezones=ZONES))
def test_format_time_is_the_utc_isoformat(stamp: datetime) -> None:
    assert outcome(format_time, stamp) == outcome(reference_format_time, stamp)


JSON_TYPES = {
    type(None): "null",
    bool: "boolean",
    int: "number",
    float: "number",
    str: "string",
    list: "array",
}


def json_type(value: Any) -> str:
    return JSON_TYPES.get(type(value), "object")


def _reference_reject_constant(name: str) -> Any:
    raise PayloadError(f"body is not valid JSON: {name} is not a JSON value")


_REFERENCE_DECODER = json.JSONDecoder(parse_constant=_reference_reject_constant)


def reference_decode(raw: bytes) -> dict[str, Any]:
    """decode_payload as it was: the decoder's own decode, then the checks."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PayloadError(f"body is not valid UTF-8 (byte {exc.start})") from None
    try:
        payload = _REFERENCE_DECODER.decode(text)
    except json.JSONDecodeError as exc:
        if text.startswith("\ufeff"):
            raise PayloadError("body starts with a byte order mark") from None
        raise PayloadError(f"body is not valid JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:  # integers past 4300 digits, deep nesting
        raise PayloadError(f"body cannot be decoded: {exc}") from None
    if type(payload) is not dict:
        raise PayloadError(f"body must be a JSON object, got {json_type(payload)}")
    return payload


JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=5),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """JSON texts, mostly objects, as written and then now and then spoiled: whitespace
    or a byte order mark around them, junk after them, cut short, a NaN, a bad byte."""
    value = draw(st.one_of(st.dictionaries(st.text(max_size=3), JSON_VALUES), JSON_VALUES))
    separators = draw(st.sampled_from([(", ", ": "), (",", ":"), (" ,\n", " :\t")]))
    text = json.dumps(value, separators=separators, ensure_ascii=draw(st.booleans()))
    spoil = draw(st.integers(0, 9))
    if spoil == 0:
        text = draw(st.sampled_from([" ", "\n", "\ufeff", "\t\r"])) + text
    elif spoil == 1:
        text += draw(st.sampled_from([" ", "\n", " x", "{}", "]", " NaN"]))
    elif spoil == 2:
        text = text[: draw(st.integers(0, len(text)))]
    elif spoil == 3:
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["NaN", "Infinity", "-Infinity"])) + text[at:]
    raw = text.encode("utf-8", "surrogatepass")
    if spoil == 4:
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])) + raw[at:]
    return raw


@settings(max_examples=600, deadline=None, database=None)
@given(bodies())
def test_bodies_decode_as_json_decodes_them(raw: bytes) -> None:
    assert outcome(decode_payload, raw) == outcome(reference_decode, raw)


def _nested(depth: int, kind: str) -> bytes:
    opening = {"arrays": "[", "objects": '{"a":', "both": '[{"a":'}[kind]
    closing = {"arrays": "]", "objects": "}", "both": "}]"}[kind]
    return ('{"x":' + opening * depth + "1" + closing * depth + "}").encode()


@pytest.mark.parametrize("kind", ["arrays", "objects", "both"])
def test_deep_bodies_fail_at_the_depth_json_decode_fails_at(kind: str) -> None:
    # The deepest body the reference decodes from here, then the bodies about it. Up to
    # Python 3.11 that is about the recursion limit; from 3.12 the decoder's C recursion
    # limit decides (about 10,000 levels on 3.13, whatever sys.getrecursionlimit() says).
    bound = 1_000_000
    low, high = 1, bound
    while low < high:
        middle = (low + high + 1) // 2
        if outcome(reference_decode, _nested(middle, kind))[0] == "returned":
            low = middle
        else:
            high = middle - 1
    assert low < bound - 10  # found: the reference refuses a deeper body
    for depth in range(low - 3, low + 4):
        raw = _nested(depth, kind)
        assert outcome(decode_payload, raw) == outcome(reference_decode, raw), depth


def reference_json(update: TrainerStatus) -> bytes:
    obj: dict[str, Any] = {}
    if update.progress_percentage is not None:
        obj["progressPercentage"] = update.progress_percentage
    if update.estimated_remaining_seconds is not None:
        obj["estimatedRemainingSeconds"] = update.estimated_remaining_seconds
    if update.metrics is not None:
        obj["metrics"] = [{"name": name, "value": value} for name, value in update.metrics]
    obj["lastUpdatedTime"] = reference_format_time(update.last_updated_time)
    return json.dumps(obj, separators=(",", ":")).encode()


def accepted(
    decode: Callable[[bytes], dict[str, Any]],
    parse: Callable[[dict[str, Any], datetime], TrainerStatus | None],
    raw: bytes,
    received: datetime,
) -> tuple[Any, ...] | None:
    """Everything a post's update shows: its fields and their types, its metrics (names
    interned), its dict, and the update as the writer gets it (json.dumps of its fields)."""
    update = parse(decode(raw), received)
    if update is None:
        return None
    metrics = update.metrics
    if metrics is not None:
        assert all(type(m) is Metric and m.name is sys.intern(m.name) for m in metrics)
    encoded = update.encoded(received)
    assert encoded.json == reference_json(update)
    return (
        update.progress_percentage,
        update.estimated_remaining_seconds,
        metrics,
        update.last_updated_time,
        update.last_updated_time.tzinfo,
        update.to_json(),
        encoded.json,
        encoded.last_updated_time,
        encoded.received,
        update,
        hash(update),
    )


def parse_as_posted(payload: dict[str, Any], received: datetime) -> TrainerStatus | None:
    return parse_trainer_status(payload, trainjob=NAME, received=received)


# Characters that JSON escapes, that are not ASCII, or that would close a metric's JSON
# early if its quotes went unseen.
AWKWARD = [
    '"',
    "\\",
    "\n",
    "\x00",
    "\x1f",
    "\x7f",
    "é",
    "\u2028",
    "😀",
    "\ud800",
    '","value":"',
    '","value":"b"},{"name":"a',  # two metrics' JSON, if its quotes went unseen
    "}",
    " ",
]
# What JSON writes as it is in a name or value: printable ASCII but the two escapes.
PLAIN_ASCII = st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"\\')


@st.composite
def metric_texts(draw: st.DrawFn) -> str:
    """Names and values of plain characters, of lengths up to the limit; one in three is
    an edge instead: empty, one character too long, or with one awkward character."""
    edge = draw(st.integers(0, 5))
    size = draw(st.sampled_from([0, 65] if edge == 0 else [1, 2, 7, 63, 64]))
    text = draw(st.text(alphabet=PLAIN_ASCII, min_size=size, max_size=size))
    if edge == 1:
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(AWKWARD)) + text[at:]
    return text


@st.composite
def posted_metric(draw: st.DrawFn) -> Any:
    kind = draw(st.integers(0, 19))
    if kind == 0:  # not an object
        return draw(st.one_of(st.none(), st.integers(), st.text(max_size=3), st.just(["a"])))
    entries: list[tuple[str, Any]] = []
    for key in ("name", "value"):
        if kind == 1 and draw(st.booleans()):
            continue  # missing
        if kind == 2 and draw(st.booleans()):
            entries.append((key, draw(st.one_of(st.none(), st.integers(), st.booleans()))))
        else:
            entries.append((key, draw(metric_texts())))
    if kind == 3:
        entries.append(("unit", "s"))
    if kind == 4:
        entries.reverse()
    return dict(entries)


@st.composite
def posted_metrics(draw: st.DrawFn) -> list[Any]:
    """Typical metrics, as many as the limit allows or one more, a few drawn about the
    edges."""
    size = draw(st.sampled_from([0, 1, 2, 8, 8, 255, 256, 257]))
    items: list[Any] = [{"name": f"metric_{i}", "value": f"{i * 0.125:.4f}"} for i in range(size)]
    if items:
        for _ in range(draw(st.integers(0, 2))):
            items[draw(st.integers(0, size - 1))] = draw(posted_metric())
    return items


@st.composite
def posted_times(draw: st.DrawFn) -> str:
    """lastUpdatedTime as clients write it, near RECEIVED (some ahead), in every zone and
    fraction form."""
    offset = draw(
        st.one_of(
            st.timedeltas(min_value=timedelta(days=-3), max_value=timedelta(0)),
            st.timedeltas(min_value=timedelta(minutes=4), max_value=timedelta(minutes=6)),
            st.sampled_from([MAX_AHEAD, MAX_AHEAD + timedelta(microseconds=1)]),
        )
    )
    zone = draw(st.sampled_from([UTC, UTC, timezone(timedelta(hours=5, minutes=30))]))
    stamp = (RECEIVED + offset).astimezone(zone)
    text = stamp.strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{stamp.microsecond:06d}"
    text += draw(
        st.sampled_from(["", "." + digits, "." + digits[:3], "." + digits + "789", ".000000"])
    )
    if zone is UTC:
        return text + draw(st.sampled_from(["Z", "Z", "+00:00", "-00:00", "z"]))
    return text + "+05:30"


EDGES: dict[str, st.SearchStrategy[Any]] = {
    "progressPercentage": st.sampled_from([101, -1, 2**31, True, 5.0, 40.5, "5", None]),
    "estimatedRemainingSeconds": st.sampled_from([-1, 2**31 - 1, 2**31, False, 1e3, "5", None]),
    "metrics": st.one_of(st.none(), st.text(max_size=3), st.integers(), st.just({"name": "a"})),
    "lastUpdatedTime": st.one_of(LAST_UPDATED, st.just(5)),
}


@st.composite
def posted_statuses(draw: st.DrawFn) -> dict[str, Any]:
    """A typical post's trainerStatus about the edges of validity: its keys in any order,
    some left out, the metrics and time drawn about theirs, and now and then one other
    field at an edge of its own."""
    status: dict[str, Any] = {
        "progressPercentage": draw(st.integers(0, 100)),
        "estimatedRemainingSeconds": draw(st.integers(0, 2**31 - 1)),
        "metrics": draw(posted_metrics()),
        "lastUpdatedTime": draw(posted_times()),
    }
    if draw(st.integers(0, 3)) == 0:
        key = draw(st.sampled_from(sorted(EDGES)))
        status[key] = draw(EDGES[key])
    for key in draw(st.lists(st.sampled_from(sorted(status)), max_size=2)):
        status.pop(key, None)
    if draw(st.integers(0, 5)) == 0:
        status["bogusField"] = draw(st.one_of(st.integers(), st.text(max_size=3)))
    return dict(draw(st.permutations(list(status.items()))))


@settings(
    max_examples=800,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    st.one_of(posted_statuses(), posted_statuses(), trainer_statuses(), mistyped_statuses()),
    st.sampled_from([(", ", ": "), (",", ":")]),
    st.sampled_from([RECEIVED, FAR_RECEIVED]),
)
@example(ssa(metrics=[{"name": 'x","value":"b"},{"name":"a', "value": "v"}]), (",", ":"), RECEIVED)
@example(ssa(metrics=[{"name": "x" * 65, "value": "v"}]), (",", ":"), RECEIVED)
@example(ssa(metrics=[{"name": "", "value": "v"}]), (",", ":"), RECEIVED)
@example(ssa(metrics=[{"name": "x", "value": "\x7f"}]), (",", ":"), RECEIVED)
@example(ssa(metrics=[{"value": "v", "name": "x", "unit": 1}] * 256), (",", ":"), RECEIVED)
@example(ssa(metrics=[{"name": "x", "value": "v"}] * 257), (",", ":"), RECEIVED)
@example(ssa(lastUpdatedTime="2026-12-02T18:33:25.000000Z"), (",", ":"), RECEIVED)
@example(ssa(lastUpdatedTime="2026-12-02T18:33:25.5-00:00"), (",", ":"), RECEIVED)
@example(ssa(lastUpdatedTime=format_time(RECEIVED + MAX_AHEAD)), (",", ":"), RECEIVED)
@example(
    ssa(lastUpdatedTime=format_time(RECEIVED + MAX_AHEAD + timedelta(microseconds=1))),
    (",", ":"),
    RECEIVED,
)
@example(ssa(progressPercentage=101), (",", ":"), RECEIVED)
@example(ssa(estimatedRemainingSeconds=2**31), (",", ":"), RECEIVED)
@example(ssa(estimatedRemainingSeconds=2**31 - 1, progressPercentage=0), (",", ":"), RECEIVED)
@example(ssa(lastUpdatedTime=None, progressPercentage=100), (",", ":"), RECEIVED)
def test_posts_are_decided_and_written_as_the_references_make_them(
    status: dict[str, Any], separators: tuple[str, str], received: datetime
) -> None:
    raw = json.dumps({"trainerStatus": status}, separators=separators).encode()
    ours = outcome(accepted, decode_payload, parse_as_posted, raw, received)
    assert ours[:2] != ("raised", AssertionError)  # accepted's own checks held
    assert ours == outcome(accepted, reference_decode, parse_as_posted, raw, received)
