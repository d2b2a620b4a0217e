"""Merge and JSON patches, pinned to recorded kube-apiserver v1.36 answers (named per
test)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from trainjob_devcluster.storage.patches import (
    PatchError,
    decode_patch,
    json_merge_patch,
    json_patch,
)

GV = "trainer.kubeflow.org/v1alpha1"
T24 = "2026-12-02T18:33:24Z"
T25 = "2026-12-02T18:33:25Z"


def rec_before_json_patch() -> dict[str, Any]:
    return {
        "apiVersion": GV,
        "kind": "TrainJob",
        "metadata": {
            "creationTimestamp": T24,
            "generation": 1,
            "name": "tj-rec",
            "namespace": "rec",
            "resourceVersion": "221",
            "uid": "5c6290c3-681a-4b9b-a41c-b61bcc31d5db",
        },
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
        "status": {
            "trainerStatus": {
                "estimatedRemainingSeconds": 300,
                "lastUpdatedTime": T25,
                "metrics": [{"name": "loss", "value": "0.31"}],
                "progressPercentage": 41,
            }
        },
    }


@pytest.mark.parametrize(
    "ops",
    [
        # e_json_patch_test_fails
        [
            {"op": "test", "path": "/status/trainerStatus/progressPercentage", "value": 99},
            {"op": "replace", "path": "/status/trainerStatus/progressPercentage", "value": 45},
        ],
        # e_json_patch_bad_path
        [{"op": "replace", "path": "/status/nope/x", "value": 1}],
    ],
)
def test_failing_json_patches_change_nothing_and_answer_422(ops: list[Any]) -> None:
    live = rec_before_json_patch()
    before = copy.deepcopy(live)
    with pytest.raises(PatchError) as caught:
        json_patch(live, ops)
    assert caught.value.code == 422
    assert live == before


def test_malformed_patch_body_is_a_decoding_error() -> None:
    # e_merge_patch_malformed_json
    with pytest.raises(PatchError) as caught:
        decode_patch(b'{"status": {')
    assert (caught.value.code, caught.value.message) == (
        400,
        "error decoding patch: unexpected end of JSON input",
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "unexpected end of JSON input"),
        (b'{"a" 1}', "invalid character '1' after object key"),
        (b'{"a":1 "b":2}', "invalid character '\"' after object key:value pair"),
        (b"[1 2]", "invalid character '2' after array element"),
        (b"{a:1}", "invalid character 'a' looking for beginning of object key string"),
        (b"{} x", "invalid character 'x' after top-level value"),
        (b"NaN", "invalid character 'N' looking for beginning of value"),
    ],
)
def test_decoding_errors_use_go_wording(body: bytes, message: str) -> None:
    with pytest.raises(PatchError) as caught:
        decode_patch(body)
    assert caught.value.message == f"error decoding patch: {message}"


# -- JSON merge patch -------------------------------------------------------------------


def test_merge_patch_merges_objects_deletes_nulls_and_replaces_the_rest() -> None:
    target = {"a": {"b": 1, "c": [1, 2]}, "d": "x", "e": {"f": 1}}
    patch = {"a": {"b": None, "c": [3], "n": {"x": None, "y": 1}}, "d": None, "e": 5}
    assert json_merge_patch(target, patch) == {"a": {"c": [3], "n": {"y": 1}}, "e": 5}
    assert target == {"a": {"b": 1, "c": [1, 2]}, "d": "x", "e": {"f": 1}}


def test_merge_patch_drops_nulls_in_objects_inside_new_arrays_but_keeps_null_items() -> None:
    assert json_merge_patch({}, {"l": [{"a": None, "b": 1}, None]}) == {"l": [{"b": 1}, None]}


@pytest.mark.parametrize("patch", [None, [1], "x", 3])
def test_merge_patch_must_be_an_object(patch: Any) -> None:
    with pytest.raises(PatchError) as caught:
        json_merge_patch({"a": 1}, patch)
    assert (caught.value.code, caught.value.message) == (400, "Invalid JSON Patch")


# -- JSON patch -------------------------------------------------------------------------


def test_json_patch_operations_and_pointer_escapes() -> None:
    doc = {"a/b": {"m~n": 1}, "list": [1, 2, 3], "obj": {"x": {"y": 1}}}
    ops = [
        {"op": "add", "path": "/list/-", "value": 4},
        {"op": "add", "path": "/list/0", "value": 0},
        {"op": "remove", "path": "/list/-1"},
        {"op": "replace", "path": "/a~1b/m~0n", "value": 2},
        {"op": "copy", "from": "/obj/x", "path": "/copied"},
        {"op": "move", "from": "/obj/x/y", "path": "/moved"},
        {"op": "test", "path": "/copied", "value": {"y": 1}},
        {"op": "test", "path": "/absent", "value": None},
        {"op": "add", "path": "/new", "value": {"k": [1]}},
    ]
    assert json_patch(doc, ops) == {
        "a/b": {"m~n": 2},
        "list": [0, 1, 2, 3],
        "obj": {"x": {}},
        "copied": {"y": 1},
        "moved": 1,
        "new": {"k": [1]},
    }
    assert doc["list"] == [1, 2, 3]


@pytest.mark.parametrize(
    "op",
    [
        {"op": "remove", "path": "/missing"},
        {"op": "replace", "path": "/missing", "value": 1},
        {"op": "add", "path": "/list/5", "value": 1},
        {"op": "add", "path": "/nothere/x", "value": 1},
        {"op": "add", "path": "", "value": 1},
        {"op": "move", "from": "/missing", "path": "/x"},
        {"op": "copy", "from": "/list/9", "path": "/x"},
        {"op": "test", "path": "/list/0", "value": 1.0},
        {"op": "test", "path": "/list", "value": [1, 2, 4]},
        {"op": "add", "path": "no-slash", "value": 1},
        {"op": "frobnicate", "path": "/x"},
    ],
)
def test_json_patch_failures(op: dict[str, Any]) -> None:
    with pytest.raises(PatchError) as caught:
        json_patch({"list": [1, 2, 3]}, [op])
    assert caught.value.code == 422


def test_json_patch_document_must_be_a_list_of_operations() -> None:
    with pytest.raises(PatchError) as caught:
        json_patch({}, {"op": "add"})
    assert caught.value.code == 400
