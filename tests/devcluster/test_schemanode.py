"""Generic structural-schema keywords, with the messages a real kube-apiserver gives them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from trainjob_devcluster.common.go_text import go_quote
from trainjob_devcluster.schema.schema import NOT_CHECKED, StructuralSchema
from trainjob_devcluster.schema.schemaformats import go_value, is_date_time
from trainjob_devcluster.schema.schemanode import same

WIDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "properties": {
                "mode": {"type": "string", "enum": ["Fast", "Slow"]},
                "level": {"type": "integer", "enum": [1, 2]},
                "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "ratio": {"type": "number", "minimum": 0, "maximum": 1, "exclusiveMaximum": True},
                "step": {"type": "integer", "multipleOf": 5},
                "count": {"type": "integer", "format": "int64"},
                "tags": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "string"},
                    "x-kubernetes-list-type": "set",
                },
                "labels": {
                    "type": "object",
                    "maxProperties": 2,
                    "additionalProperties": {"type": "string", "maxLength": 3},
                },
                "note": {"type": "string", "nullable": True},
                "port": {
                    "x-kubernetes-int-or-string": True,
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                },
                "blob": {"type": "string", "format": "byte"},
                "id": {"type": "string", "format": "uuid"},
                "day": {"type": "string", "format": "date"},
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "size": {"type": "integer", "default": 1},
                        },
                    },
                },
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "properties": {
                        "spec": {"type": "object", "properties": {"a": {"type": "string"}}}
                    },
                },
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
    },
}
SCHEMA = StructuralSchema(WIDGET_SCHEMA)


def check(
    spec: dict[str, Any], old_spec: dict[str, Any] | None = None
) -> list[tuple[str, str, str]]:
    obj = {"metadata": {"name": "w"}, "spec": spec}
    old = None if old_spec is None else {"metadata": {"name": "w"}, "spec": old_spec}
    return [(c.reason, c.message, c.field) for c in SCHEMA.validate(obj, old)]


NC = (NOT_CHECKED.reason, NOT_CHECKED.message, NOT_CHECKED.field)

CASES = [
    pytest.param(
        {"mode": "Medium"},
        [
            (
                "FieldValueNotSupported",
                'Unsupported value: "Medium": supported values: "Fast", "Slow"',
                "spec.mode",
            ),
            NC,
        ],
        id="enum",
    ),
    pytest.param(
        {"level": 3},
        [
            (
                "FieldValueNotSupported",
                'Unsupported value: 3: supported values: "1", "2"',
                "spec.level",
            ),
            NC,
        ],
        id="enum_numbers",
    ),
    pytest.param(
        {"code": "abc"},
        [
            (
                "FieldValueInvalid",
                "Invalid value: \"abc\": spec.code in body should match '^[A-Z]{3}$'",
                "spec.code",
            )
        ],
        id="pattern",
    ),
    pytest.param(
        {"ratio": 1},
        [
            (
                "FieldValueInvalid",
                "Invalid value: 1: spec.ratio in body should be less than 1",
                "spec.ratio",
            )
        ],
        id="exclusive_maximum",
    ),
    pytest.param(
        {"ratio": -0.5},
        [
            (
                "FieldValueInvalid",
                "Invalid value: -0.5: spec.ratio in body should be greater than or equal to 0",
                "spec.ratio",
            )
        ],
        id="minimum_float",
    ),
    pytest.param(
        {"step": 7},
        [
            (
                "FieldValueInvalid",
                "Invalid value: 7: spec.step in body should be a multiple of 5",
                "spec.step",
            )
        ],
        id="multiple_of",
    ),
    pytest.param(
        {"count": 2**63},
        [
            (
                "FieldValueInvalid",
                'Invalid value: "": Checked value must be of type integer with format int64 '
                "in spec.count",
                "<nil>",
            )
        ],
        id="int64_range_on_the_main_resource_has_no_field",
    ),
    pytest.param(
        {"tags": []},
        [
            (
                "FieldValueInvalid",
                "Invalid value: 0: spec.tags in body should have at least 1 items",
                "spec.tags",
            )
        ],
        id="min_items",
    ),
    pytest.param(
        {"tags": ["a", "b", "a"]},
        [("FieldValueDuplicate", 'Duplicate value: "a"', "spec.tags[2]")],
        id="set_duplicate",
    ),
    pytest.param(
        {"labels": {"a": "1", "b": "2", "c": "3"}},
        [("FieldValueTooMany", "Too many: 3: must have at most 2 items", "spec.labels"), NC],
        id="max_properties",
    ),
    pytest.param(
        {"labels": {"k": "long"}},
        [("FieldValueTooLong", "Too long: may not be more than 3 bytes", "spec.labels.k"), NC],
        id="additional_properties",
    ),
    pytest.param({"note": None}, [], id="nullable"),
    pytest.param(
        {"code": None},
        [
            (
                "FieldValueTypeInvalid",
                'Invalid value: "null": spec.code in body must be of type string: "null"',
                "spec.code",
            ),
            NC,
        ],
        id="null_without_nullable",
    ),
    pytest.param({"port": 80}, [], id="int_or_string_int"),
    pytest.param({"port": "http"}, [], id="int_or_string_string"),
    pytest.param(
        {"port": True},
        [
            (
                "FieldValueInvalid",
                'Invalid value: "": spec.port must validate at least one schema (anyOf)',
                "<nil>",
            ),
            (
                "FieldValueTypeInvalid",
                'Invalid value: "boolean": spec.port in body must be of type integer: "boolean"',
                "spec.port",
            ),
            NC,
        ],
        id="int_or_string_bool",
    ),
    pytest.param(
        {"blob": "!!", "id": "nope", "day": "2026-02-30"},
        [
            (
                "FieldValueTypeInvalid",
                'Invalid value: "!!": spec.blob in body must be of type byte: "!!"',
                "spec.blob",
            ),
            (
                "FieldValueTypeInvalid",
                'Invalid value: "nope": spec.id in body must be of type uuid: "nope"',
                "spec.id",
            ),
            (
                "FieldValueTypeInvalid",
                'Invalid value: "2026-02-30": spec.day in body must be of type date: "2026-02-30"',
                "spec.day",
            ),
            NC,
        ],
        id="formats",
    ),
    pytest.param(
        {"blob": "aGk=", "id": "41713f6b-fa3b-4b28-9c54-5c1dfa434fd1", "day": "2026-02-28"},
        [],
        id="formats_ok",
    ),
    pytest.param(
        {"ports": [{"name": "a"}, {"name": "a"}, {"size": 2}]},
        [
            ("FieldValueRequired", "Required value", "spec.ports[2].name"),
            (
                "FieldValueDuplicate",
                'Duplicate value: map[string]interface {}{"name":"a"}',
                "spec.ports[1]",
            ),
            NC,
        ],
        id="map_list",
    ),
    pytest.param(
        {"tags": "a"},
        [
            (
                "FieldValueTypeInvalid",
                'Invalid value: "string": spec.tags in body must be of type array: "string"',
                "spec.tags",
            ),
            NC,
        ],
        id="wrong_type",
    ),
]


@pytest.mark.parametrize(("spec", "expected"), CASES)
def test_keyword(spec: dict[str, Any], expected: list[tuple[str, str, str]]) -> None:
    assert check(spec) == expected


def test_defaults_apply_inside_list_items_and_keep_nullable_nulls() -> None:
    obj: dict[str, Any] = {"spec": {"ports": [{"name": "a"}], "note": None, "code": None}}
    SCHEMA.apply_defaults(obj)
    assert obj == {"spec": {"ports": [{"name": "a", "size": 1}], "note": None}}


def test_prune_keeps_embedded_resource_metadata_and_preserved_fields() -> None:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Widget",
        "metadata": {"name": "w", "anything": 1},
        "spec": {
            "bogus": 1,
            "ports": [{"name": "a", "junk": True}],
            "template": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"x": 1},
                "spec": {"a": "b", "c": 1},
            },
            "free": {"whatever": {"deep": [1]}},
        },
    }
    expected = copy.deepcopy(obj)
    del expected["spec"]["bogus"], expected["spec"]["ports"][0]["junk"]
    del expected["spec"]["template"]["spec"]["c"]
    assert SCHEMA.prune(obj) == ["spec.bogus", "spec.ports[0].junk", "spec.template.spec.c"]
    assert obj == expected


def test_ratcheting_correlates_map_list_items_by_key() -> None:
    old = {"ports": [{"name": "a", "size": "big"}, {"name": "b"}]}
    assert check({"ports": [{"name": "b", "size": 2}, {"name": "a", "size": "big"}]}, old) == []
    assert check({"ports": [{"name": "c", "size": "big"}]}, old) == [
        (
            "FieldValueTypeInvalid",
            'Invalid value: "string": spec.ports[0].size in body must be of type integer: "string"',
            "spec.ports[0].size",
        ),
        NC,
    ]


def test_ratcheting_tells_1_from_1_0_and_true() -> None:
    # A changed type is a change (reflect.DeepEqual), although True == 1 in Python.
    assert check({"level": True}, {"level": 1}) == [
        (
            "FieldValueTypeInvalid",
            'Invalid value: "boolean": spec.level in body must be of type integer: "boolean"',
            "spec.level",
        ),
        (
            "FieldValueNotSupported",
            'Unsupported value: true: supported values: "1", "2"',
            "spec.level",
        ),
        NC,
    ]
    assert not same(1, 1.0)
    assert not same({"a": [True]}, {"a": [1]})
    assert same({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]})


def test_go_value_and_quote() -> None:
    assert go_value(None) == "null"
    assert go_value(True) == "true"
    assert go_value(150) == "150"
    assert go_value({"b": 1, "a": "x"}) == 'map[string]interface {}{"a":"x", "b":1}'
    assert go_quote('a"b\\c\n\x01é') == '"a\\"b\\\\c\\n\\x01é"'


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("2026-12-02T18:33:25Z", True),
        ("2026-12-02t18:33:25.123+02:00", True),
        ("2026-12-02T18:33:25", False),
        ("2026-02-30T00:00:00Z", False),
        ("2026-12-02T24:00:00Z", False),
        ("2026-12-02 18:33:25Z", False),
        ("not-a-time", False),
    ],
)
def test_date_time_format(text: str, ok: bool) -> None:
    assert is_date_time(text) is ok
