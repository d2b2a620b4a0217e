"""The TrainJob CRD's schema against answers recorded from a real kube-apiserver v1.36.

Expected causes and messages are copied from the recordings (d_*, a_create_*,
c_merge_unknown_field) as literals.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from trainjob_devcluster.common.resources import load_trainjob_crd, resource_from_crd
from trainjob_devcluster.common.status import Cause, invalid
from trainjob_devcluster.schema.schema import NOT_CHECKED, StructuralSchema
from trainjob_devcluster.storage.objectmeta import validate_name

TRAINJOB = resource_from_crd(load_trainjob_crd())
assert TRAINJOB.schema is not None
SCHEMA = StructuralSchema(TRAINJOB.schema)

NOT_CHECKED_MSG = (
    "Invalid value: null: some validation rules were not checked because the object was "
    "invalid; correct the existing errors to complete validation"
)
LUT = "2026-12-02T18:33:25Z"
METRICS = [{"name": "loss", "value": "0.31"}]
STORED: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {
        "name": "tj-rec",
        "namespace": "rec",
        "uid": "41713f6b-fa3b-4b28-9c54-5c1dfa434fd1",
        "resourceVersion": "223",
        "generation": 1,
        "creationTimestamp": "2026-12-02T18:33:24Z",
    },
    "spec": {
        "managedBy": "trainer.kubeflow.org/trainjob-controller",
        "runtimeRef": {
            "apiGroup": "trainer.kubeflow.org",
            "kind": "ClusterTrainingRuntime",
            "name": "torch-distributed",
        },
        "suspend": False,
    },
    "status": {
        "trainerStatus": {
            "progressPercentage": 60,
            "estimatedRemainingSeconds": 300,
            "metrics": METRICS,
            "lastUpdatedTime": LUT,
        }
    },
}


def status_write(status: dict[str, Any], old: dict[str, Any] | None = None) -> list[Cause]:
    """A write to /status that leaves ``status`` in the object, validated as the server does."""
    old = copy.deepcopy(old or STORED)
    new = copy.deepcopy(old)
    new["status"] = copy.deepcopy(status)
    SCHEMA.apply_defaults(new)
    SCHEMA.prune(new)
    return SCHEMA.validate(new, old, subresource="status")


def trainer(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "progressPercentage": 40,
        "estimatedRemainingSeconds": 300,
        "metrics": METRICS,
        "lastUpdatedTime": LUT,
    }
    base.update(fields)
    return {"trainerStatus": {k: v for k, v in base.items() if v is not ...}}


STATUS_CASES = [
    pytest.param(
        trainer(progressPercentage=150),
        [
            (
                "FieldValueInvalid",
                "Invalid value: 150: trainerStatus.progressPercentage in body should be "
                "less than or equal to 100",
                "status.trainerStatus.progressPercentage",
            )
        ],
        id="pp_150",
    ),
    pytest.param(
        trainer(progressPercentage=-1),
        [
            (
                "FieldValueInvalid",
                "Invalid value: -1: trainerStatus.progressPercentage in body should be "
                "greater than or equal to 0",
                "status.trainerStatus.progressPercentage",
            )
        ],
        id="pp_neg1",
    ),
    pytest.param(
        trainer(estimatedRemainingSeconds=-5),
        [
            (
                "FieldValueInvalid",
                "Invalid value: -5: trainerStatus.estimatedRemainingSeconds in body should be "
                "greater than or equal to 0",
                "status.trainerStatus.estimatedRemainingSeconds",
            )
        ],
        id="ers_neg5",
    ),
    pytest.param(
        trainer(estimatedRemainingSeconds=3000000000),
        [
            (
                "FieldValueInvalid",
                'Invalid value: "": Checked value must be of type integer with format int32 '
                "in trainerStatus.estimatedRemainingSeconds",
                "status",
            )
        ],
        id="ers_over_int32",
    ),
    pytest.param(
        trainer(progressPercentage=40.5),
        [
            (
                "FieldValueTypeInvalid",
                'Invalid value: "float64": trainerStatus.progressPercentage in body must be '
                'of type int32: "float64"',
                "status.trainerStatus.progressPercentage",
            ),
            (
                "FieldValueInvalid",
                'Invalid value: "": Checked value must be of type integer with format int32 '
                "in trainerStatus.progressPercentage",
                "status",
            ),
            ("FieldValueInvalid", NOT_CHECKED_MSG, "<nil>"),
        ],
        id="pp_float",
    ),
    pytest.param(
        trainer(progressPercentage=True),
        [
            (
                "FieldValueTypeInvalid",
                'Invalid value: "": trainerStatus.progressPercentage in body must be of type '
                'int32: ""',
                "status.trainerStatus.progressPercentage",
            ),
            ("FieldValueInvalid", NOT_CHECKED_MSG, "<nil>"),
        ],
        id="pp_bool",
    ),
    pytest.param(
        trainer(progressPercentage="40"),
        [
            (
                "FieldValueTypeInvalid",
                'Invalid value: "string": trainerStatus.progressPercentage in body must be of '
                'type integer: "string"',
                "status.trainerStatus.progressPercentage",
            ),
            ("FieldValueInvalid", NOT_CHECKED_MSG, "<nil>"),
        ],
        id="pp_string",
    ),
    pytest.param(
        trainer(metrics=[{"name": "loss", "value": 0.31}]),
        [
            (
                "FieldValueTypeInvalid",
                'Invalid value: "number": trainerStatus.metrics[0].value in body must be of '
                'type string: "number"',
                "status.trainerStatus.metrics[0].value",
            ),
            ("FieldValueInvalid", NOT_CHECKED_MSG, "<nil>"),
        ],
        id="metric_value_number",
    ),
    pytest.param(
        trainer(metrics=[{"name": f"m{i}", "value": "1"} for i in range(257)]),
        [
            (
                "FieldValueTooMany",
                "Too many: 257: must have at most 256 items",
                "status.trainerStatus.metrics",
            ),
            ("FieldValueInvalid", NOT_CHECKED_MSG, "<nil>"),
        ],
        id="metrics_257",
    ),
    pytest.param(
        trainer(metrics=[{"name": "n" * 65, "value": "1"}]),
        [
            (
                "FieldValueTooLong",
                "Too long: may not be more than 64 bytes",
                "status.trainerStatus.metrics[0].name",
            ),
            ("FieldValueInvalid", NOT_CHECKED_MSG, "<nil>"),
        ],
        id="metric_name_65",
    ),
    pytest.param(
        trainer(metrics=[{"name": "loss", "value": "9" * 65}]),
        [
            (
                "FieldValueTooLong",
                "Too long: may not be more than 64 bytes",
                "status.trainerStatus.metrics[0].value",
            ),
            ("FieldValueInvalid", NOT_CHECKED_MSG, "<nil>"),
        ],
        id="metric_value_65",
    ),
    pytest.param(
        trainer(metrics=[{"name": "", "value": "1"}]),
        [
            (
                "FieldValueInvalid",
                'Invalid value: "": trainerStatus.metrics[0].name in body should be at least '
                "1 chars long",
                "status.trainerStatus.metrics[0].name",
            )
        ],
        id="metric_name_empty",
    ),
    pytest.param(
        trainer(metrics=[{"name": "loss"}]),
        [
            ("FieldValueRequired", "Required value", "status.trainerStatus.metrics[0].value"),
            ("FieldValueInvalid", NOT_CHECKED_MSG, "<nil>"),
        ],
        id="metric_missing_value",
    ),
    pytest.param(
        trainer(lastUpdatedTime="not-a-time"),
        [
            (
                "FieldValueTypeInvalid",
                'Invalid value: "not-a-time": trainerStatus.lastUpdatedTime in body must be '
                'of type date-time: "not-a-time"',
                "status.trainerStatus.lastUpdatedTime",
            ),
            ("FieldValueInvalid", NOT_CHECKED_MSG, "<nil>"),
        ],
        id="lut_not_a_time",
    ),
    pytest.param(
        trainer(lastUpdatedTime=...),
        [
            (
                "FieldValueInvalid",
                "Invalid value: lastUpdatedTime is required when trainerStatus is present",
                "status.trainerStatus",
            )
        ],
        id="lut_missing",
    ),
    pytest.param(
        {"trainerStatus": {}},
        [
            (
                "FieldValueInvalid",
                "Invalid value: lastUpdatedTime is required when trainerStatus is present",
                "status.trainerStatus",
            )
        ],
        id="trainer_status_empty",
    ),
    pytest.param(
        {},
        [
            (
                "FieldValueInvalid",
                "Invalid value: 0:  in body should have at least 1 properties",
                "status",
            )
        ],
        id="status_empty",
    ),
    pytest.param(
        {"trainerStatus": None},
        [
            (
                "FieldValueInvalid",
                "Invalid value: 0:  in body should have at least 1 properties",
                "status",
            )
        ],
        id="trainer_status_null",
    ),
    pytest.param(trainer(), [], id="valid"),
    pytest.param(trainer(progressPercentage=50.0), [], id="integral_float_is_an_integer"),
]


@pytest.mark.parametrize(("status", "expected"), STATUS_CASES)
def test_status_write_causes(status: dict[str, Any], expected: list[tuple[str, str, str]]) -> None:
    assert [(c.reason, c.message, c.field) for c in status_write(status)] == expected


def test_status_causes_follow_the_objects_key_order() -> None:
    first_pp = {
        "trainerStatus": {
            "progressPercentage": 150,
            "estimatedRemainingSeconds": -5,
            "lastUpdatedTime": LUT,
        }
    }
    first_ers = {
        "trainerStatus": {
            "estimatedRemainingSeconds": -5,
            "progressPercentage": 150,
            "lastUpdatedTime": LUT,
        }
    }
    assert [c.field for c in status_write(first_pp)] == [
        "status.trainerStatus.progressPercentage",
        "status.trainerStatus.estimatedRemainingSeconds",
    ]
    assert [c.field for c in status_write(first_ers)] == [
        "status.trainerStatus.estimatedRemainingSeconds",
        "status.trainerStatus.progressPercentage",
    ]


def test_two_errors_full_message() -> None:
    causes = status_write(trainer(progressPercentage=150, estimatedRemainingSeconds=-5))
    error = invalid(TRAINJOB.kind_qualified, TRAINJOB.group, TRAINJOB.kind, "tj-rec", causes)
    assert error.message == (
        'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: [status.trainerStatus.'
        "progressPercentage: Invalid value: 150: trainerStatus.progressPercentage in body "
        "should be less than or equal to 100, status.trainerStatus.estimatedRemainingSeconds: "
        "Invalid value: -5: trainerStatus.estimatedRemainingSeconds in body should be greater "
        "than or equal to 0]"
    )


def test_pp_float_full_message() -> None:
    causes = status_write(trainer(progressPercentage=40.5))
    error = invalid(TRAINJOB.kind_qualified, TRAINJOB.group, TRAINJOB.kind, "tj-rec", causes)
    assert error.message == (
        'TrainJob.trainer.kubeflow.org "tj-rec" is invalid: [status.trainerStatus.'
        'progressPercentage: Invalid value: "float64": trainerStatus.progressPercentage in '
        'body must be of type int32: "float64", status: Invalid value: "": Checked value must '
        "be of type integer with format int32 in trainerStatus.progressPercentage, <nil>: "
        "Invalid value: null: some validation rules were not checked because the object was "
        "invalid; correct the existing errors to complete validation]"
    )


def test_create_with_bad_name_reports_name_check_then_cel_rule() -> None:
    obj: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "Bad.Name", "namespace": "rec"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }
    SCHEMA.apply_defaults(obj)
    name_causes = validate_name("Bad.Name", namespaced_or_custom=True)
    causes = name_causes + SCHEMA.validate(obj, None, prior=name_causes)
    error = invalid(TRAINJOB.kind_qualified, TRAINJOB.group, TRAINJOB.kind, "Bad.Name", causes)
    assert error.message == (
        'TrainJob.trainer.kubeflow.org "Bad.Name" is invalid: [metadata.name: Invalid value: '
        '"Bad.Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
        "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
        "'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), <nil>: Invalid "
        "value: metadata.name must match RFC 1035 DNS label format]"
    )
    assert causes[1] == Cause(
        "FieldValueInvalid",
        "Invalid value: metadata.name must match RFC 1035 DNS label format",
        "<nil>",
    )


def test_create_fills_in_the_crd_defaults() -> None:
    obj: dict[str, Any] = {"spec": {"runtimeRef": {"name": "torch-distributed"}}}
    SCHEMA.apply_defaults(obj)
    assert obj["spec"] == {
        "managedBy": "trainer.kubeflow.org/trainjob-controller",
        "runtimeRef": {
            "apiGroup": "trainer.kubeflow.org",
            "kind": "ClusterTrainingRuntime",
            "name": "torch-distributed",
        },
        "suspend": False,
    }


def test_defaulting_drops_nulls_and_defaults_them_where_the_schema_has_a_default() -> None:
    obj: dict[str, Any] = {
        "spec": {"runtimeRef": {"name": "x"}, "suspend": None},
        "status": {"trainerStatus": {"progressPercentage": None, "lastUpdatedTime": LUT}},
    }
    SCHEMA.apply_defaults(obj)
    assert obj["spec"]["suspend"] is False
    assert obj["status"]["trainerStatus"] == {"lastUpdatedTime": LUT}


def test_prune_drops_unknown_status_fields_and_reports_their_paths() -> None:
    obj = copy.deepcopy(STORED)
    obj["status"]["trainerStatus"]["bogusField"] = 1
    obj["status"]["extra"] = {"a": 1}
    obj["metadata"]["labels"] = {"app": "x"}
    obj["spec"]["trainer"] = {"image": "pytorch"}  # spec preserves unknown fields
    assert SCHEMA.prune(obj) == ["status.trainerStatus.bogusField", "status.extra"]
    assert obj["status"] == STORED["status"]
    assert obj["metadata"]["labels"] == {"app": "x"}
    assert obj["spec"]["trainer"] == {"image": "pytorch"}


def test_main_resource_messages_keep_the_full_path() -> None:
    obj = copy.deepcopy(STORED)
    del obj["status"]
    obj["spec"]["runtimeRef"]["name"] = ""
    assert SCHEMA.validate(obj, None) == [
        Cause(
            "FieldValueInvalid",
            'Invalid value: "": spec.runtimeRef.name in body should be at least 1 chars long',
            "spec.runtimeRef.name",
        )
    ]


def test_missing_required_field_blocks_the_cel_rules() -> None:
    obj = {"metadata": {"name": "Bad.Name"}, "spec": {}}
    assert SCHEMA.validate(obj, None) == [
        Cause("FieldValueRequired", "Required value", "spec.runtimeRef"),
        NOT_CHECKED,
    ]


def test_a_blocking_prior_cause_keeps_cel_from_running() -> None:
    obj = copy.deepcopy(STORED)
    obj["metadata"]["name"] = ""
    prior = validate_name("", namespaced_or_custom=True)
    assert prior[0].reason == "FieldValueRequired"
    assert SCHEMA.validate(obj, None, prior=prior) == [NOT_CHECKED]


def test_transition_rules_reject_a_changed_immutable_field() -> None:
    new = copy.deepcopy(STORED)
    new["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    new["spec"]["runtimeRef"]["name"] = "other"
    assert SCHEMA.validate(new, STORED) == [
        Cause("FieldValueInvalid", "Invalid value: field is immutable", "spec.managedBy"),
        Cause("FieldValueInvalid", "Invalid value: field is immutable", "spec.runtimeRef"),
    ]


def test_rules_run_in_order_and_transition_rules_skip_creates() -> None:
    new = copy.deepcopy(STORED)
    new["spec"]["managedBy"] = "someone-else"
    not_allowed = Cause(
        "FieldValueInvalid",
        "Invalid value: ManagedBy must be trainer.kubeflow.org/trainjob-controller or "
        "kueue.x-k8s.io/multikueue if set",
        "spec.managedBy",
    )
    immutable = Cause("FieldValueInvalid", "Invalid value: field is immutable", "spec.managedBy")
    assert SCHEMA.validate(new, STORED) == [not_allowed, immutable]
    assert SCHEMA.validate(new, None) == [not_allowed]


def test_ratcheting_ignores_errors_on_unchanged_values() -> None:
    # Stored before a (hypothetical) schema tightening: out of range and missing the time.
    old = copy.deepcopy(STORED)
    old["status"]["trainerStatus"] = {"progressPercentage": 150}
    same_again = {"trainerStatus": {"progressPercentage": 150}, "conditions": [{"type": "Ready"}]}
    assert status_write(same_again, old) == []
    changed = {"trainerStatus": {"progressPercentage": 151}}
    assert [c.field for c in status_write(changed, old)] == [
        "status.trainerStatus.progressPercentage",
        "status.trainerStatus",
    ]


def test_status_write_checks_list_map_keys_over_the_whole_object() -> None:
    status = {"conditions": [{"type": "Ready"}, {"type": "Ready"}], **trainer()}
    assert status_write(status) == [
        Cause(
            "FieldValueDuplicate",
            'Duplicate value: map[string]interface {}{"type":"Ready"}',
            "status.conditions[1]",
        )
    ]
