"""x-kubernetes-validations rules: CEL semantics and messages."""

from __future__ import annotations

from typing import Any

import pytest

from trainjob_devcluster.common.status import Cause
from trainjob_devcluster.schema.celrules import CelRule, RuleFailure
from trainjob_devcluster.schema.schema import StructuralSchema

OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def rule(text: str, schema: dict[str, Any] | None = None, **extra: Any) -> CelRule:
    return CelRule({"rule": text, **extra}, schema or OBJECT, root=False)


def failed(message: str, reason: str = "FieldValueInvalid") -> RuleFailure:
    return RuleFailure(reason, message, False)


def test_has_tests_presence() -> None:
    has_time = rule("has(self.lastUpdatedTime)", message="lastUpdatedTime is required")
    value = {"progressPercentage": 1, "lastUpdatedTime": "2026-12-02T18:33:25Z"}
    assert has_time.check(value, None, False) is None
    assert has_time.check({"progressPercentage": 1}, None, False) == failed(
        "Invalid value: lastUpdatedTime is required"
    )


def test_a_select_chain_reads_its_field() -> None:
    schema = {
        "type": "object",
        "properties": {"metadata": {"type": "object"}, "status": OBJECT},
    }
    name_rule = CelRule(
        {"rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"}, schema, root=True
    )
    obj = {"metadata": {"name": "tj-rec", "resourceVersion": "7"}, "status": {"p": 7}}
    assert name_rule.check(obj, None, False) is None
    bad = {"metadata": {"name": "Bad.Name"}}
    assert name_rule.check(bad, None, False) == failed(
        "Invalid value: failed rule: self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"
    )


def test_root_metadata_exposes_only_name_and_generate_name() -> None:
    schema = {"type": "object", "properties": {"metadata": {"type": "object"}}}
    labels = CelRule({"rule": "!has(self.metadata.labels)"}, schema, root=True)
    assert labels.check({"metadata": {"name": "a", "labels": {"x": "y"}}}, None, False) is None


def test_1_1_0_and_true_are_told_apart() -> None:
    is_int = rule("type(self.v) == int")
    assert is_int.check({"v": 1}, None, False) is None
    assert is_int.check({"v": 1.0}, None, False) is not None
    assert is_int.check({"v": True}, None, False) is not None
    assert is_int.check({"v": "1"}, None, False) is not None


def test_values_are_typed_by_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "number"},
            "at": {"type": "string", "format": "date-time"},
        },
    }
    assert rule("type(self.n) == double", schema).check({"n": 2}, None, False) is None
    later = rule("self.at > timestamp('2026-01-01T00:00:00Z')", schema)
    assert later.check({"at": "2026-12-02T18:33:25Z"}, None, False) is None
    assert later.check({"at": "2025-12-02T18:33:25Z"}, None, False) is not None


def test_transition_rule_compares_with_old_self() -> None:
    immutable = rule("self == oldSelf", {"type": "string"}, message="field is immutable")
    assert immutable.uses_old_self
    assert immutable.check("a", "a", True) is None
    assert immutable.check("b", "a", True) == failed("Invalid value: field is immutable")


def test_a_macro_variable_may_be_named_self() -> None:
    schema = {
        "type": "object",
        "properties": {"l": {"type": "array", "items": {"type": "integer"}}},
    }
    positive = rule("self.l.all(self, self > 0)", schema)
    assert not positive.uses_old_self
    assert positive.check({"l": [1, 2]}, None, False) is None
    assert positive.check({"l": [1, -2]}, None, False) == failed(
        "Invalid value: failed rule: self.l.all(self, self > 0)"
    )


def test_message_expression_and_its_fallback() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    custom = rule("self.x > 1", schema, messageExpression="'x is ' + string(self.x)")
    assert custom.check({"x": 0}, None, False) == failed("Invalid value: x is 0")
    broken = rule("self.x > 1", schema, message="x too small", messageExpression="self.nope")
    assert broken.check({"x": 0}, None, False) == failed("Invalid value: x too small")


def test_evaluation_errors_name_the_rule() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    assert rule("self.x > 1", schema).check({}, None, False) == RuleFailure(
        "FieldValueInvalid", "Invalid value: no such key: x evaluating rule: self.x > 1", True
    )
    assert rule("1 / 0 == 1", message="m").check({}, None, False) == RuleFailure(
        "FieldValueInvalid", "Invalid value: division by zero evaluating rule: m", True
    )


def test_a_rule_that_does_not_parse_is_rejected_up_front() -> None:
    with pytest.raises(ValueError, match="x-kubernetes-validations rule"):
        rule("self.x >")


def test_reason_and_field_path_through_the_schema() -> None:
    schema = StructuralSchema(
        {
            "type": "object",
            "properties": {
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "properties": {
                        "s": {"type": "string"},
                        "limits": {
                            "type": "object",
                            "additionalProperties": {
                                "type": "integer",
                                "x-kubernetes-validations": [{"rule": "self < 10"}],
                            },
                        },
                    },
                    "x-kubernetes-validations": [
                        {
                            "rule": "size(self.s) > 2",
                            "message": "too short",
                            "reason": "FieldValueForbidden",
                            "fieldPath": ".s",
                        }
                    ],
                },
            },
        }
    )
    obj = {"metadata": {"name": "a"}, "spec": {"s": "ab", "limits": {"cpu": 12}}}
    assert schema.validate(obj, None) == [
        Cause("FieldValueForbidden", "Forbidden: too short", "spec.s"),
        Cause("FieldValueInvalid", "Invalid value: failed rule: self < 10", "spec.limits[cpu]"),
    ]
    # Unchanged values are ratcheted: the same failures on an update that did not touch them.
    assert schema.validate(obj, obj) == []
