"""Merge, JSON and strategic merge patches, and the Update entries they leave in
managedFields, pinned to recorded kube-apiserver v1.36 answers (named per test)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from trainjob_devcluster.common.resources import load_trainjob_crd, resource_from_crd
from trainjob_devcluster.storage.fieldmanager import track_update
from trainjob_devcluster.storage.patches import (
    PatchError,
    decode_patch,
    json_merge_patch,
    json_patch,
    strategic_merge_patch,
)

GV = "trainer.kubeflow.org/v1alpha1"
T24 = "2026-12-02T18:33:24Z"
T25 = "2026-12-02T18:33:25Z"
SCHEMA = resource_from_crd(load_trainjob_crd()).schema

SPEC = {
    "managedBy": "trainer.kubeflow.org/trainjob-controller",
    "runtimeRef": {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "torch-distributed",
    },
    "suspend": False,
}
CREATE_FIELDS: dict[str, Any] = {
    "f:spec": {
        ".": {},
        "f:managedBy": {},
        "f:runtimeRef": {".": {}, "f:apiGroup": {}, "f:kind": {}, "f:name": {}},
        "f:suspend": {},
    }
}


def entry(
    manager: str,
    operation: str,
    fields: dict[str, Any],
    time: str,
    subresource: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "apiVersion": GV,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        "manager": manager,
        "operation": operation,
    }
    if subresource:
        out["subresource"] = subresource
    out["time"] = time
    return out


def status_fields(*names: str) -> dict[str, Any]:
    return {"f:status": {"f:trainerStatus": {f"f:{n}": {} for n in names}}}


def trainjob(name: str, trainer_status: dict[str, Any], managed: list[Any]) -> dict[str, Any]:
    return {
        "apiVersion": GV,
        "kind": "TrainJob",
        "metadata": {
            "creationTimestamp": T24,
            "generation": 1,
            "managedFields": managed,
            "name": name,
            "namespace": "rec",
            "resourceVersion": "221",
            "uid": "5c6290c3-681a-4b9b-a41c-b61bcc31d5db",
        },
        "spec": copy.deepcopy(SPEC),
        "status": {"trainerStatus": trainer_status},
    }


def status_write(live: dict[str, Any], patched: dict[str, Any]) -> dict[str, Any]:
    """What a write to /status stores: the live object with the patched status."""
    new = copy.deepcopy(live)
    new["status"] = copy.deepcopy(patched["status"])
    return new


def main_write(live: dict[str, Any], patched: dict[str, Any]) -> dict[str, Any]:
    """What a write to the main resource stores: .status stays the live one."""
    new = copy.deepcopy(patched)
    new["status"] = copy.deepcopy(live["status"])
    return new


def track(
    live: dict[str, Any], new: dict[str, Any], subresource: str | None, now: str = T25
) -> list[Any]:
    track_update(
        live,
        new,
        manager="Python-urllib",
        subresource=subresource,
        api_version=GV,
        now=now,
        schema=SCHEMA,
    )
    result: list[Any] = new["metadata"].get("managedFields", [])
    return result


# -- Update entries from patches --------------------------------------------------------


def test_merge_patch_on_status_moves_changed_fields_to_an_update_entry() -> None:
    # b_merge_status_ok, from the state b_ssa_status_omit_coowned_field left
    live = trainjob(
        "tj-managers",
        {
            "estimatedRemainingSeconds": 200,
            "lastUpdatedTime": T25,
            "metrics": [{"name": "loss", "value": "0.1"}],
            "progressPercentage": 45,
        },
        [
            entry(
                "other-writer", "Apply", status_fields("lastUpdatedTime", "metrics"), T25, "status"
            ),
            entry(
                "trainer-status",
                "Apply",
                status_fields("estimatedRemainingSeconds", "progressPercentage"),
                T25,
                "status",
            ),
            entry("Python-urllib", "Update", CREATE_FIELDS, T25),
        ],
    )
    patch = {"status": {"trainerStatus": {"progressPercentage": 70, "lastUpdatedTime": T25}}}
    new = status_write(live, json_merge_patch(live, patch))
    assert track(live, new, "status") == [
        entry("other-writer", "Apply", status_fields("lastUpdatedTime", "metrics"), T25, "status"),
        entry("trainer-status", "Apply", status_fields("estimatedRemainingSeconds"), T25, "status"),
        entry("Python-urllib", "Update", CREATE_FIELDS, T25),
        entry("Python-urllib", "Update", status_fields("progressPercentage"), T25, "status"),
    ]
    assert new["status"]["trainerStatus"] == {
        "estimatedRemainingSeconds": 200,
        "lastUpdatedTime": T25,
        "metrics": [{"name": "loss", "value": "0.1"}],
        "progressPercentage": 70,
    }


ALL_FOUR = ("estimatedRemainingSeconds", "lastUpdatedTime", "metrics", "progressPercentage")
REC_STATUS = {
    "estimatedRemainingSeconds": 300,
    "lastUpdatedTime": T25,
    "metrics": [{"name": "loss", "value": "0.31"}],
    "progressPercentage": 41,
}


def rec_before_json_patch() -> dict[str, Any]:
    return trainjob(
        "tj-rec",
        copy.deepcopy(REC_STATUS),
        [
            entry("trainer-status", "Apply", status_fields(*ALL_FOUR), T25, "status"),
            entry("Python-urllib", "Update", CREATE_FIELDS, T24),
        ],
    )


AFTER_JSON_PATCH = [
    entry(
        "trainer-status",
        "Apply",
        status_fields("estimatedRemainingSeconds", "lastUpdatedTime", "metrics"),
        T25,
        "status",
    ),
    entry("Python-urllib", "Update", CREATE_FIELDS, T24),
    entry("Python-urllib", "Update", status_fields("progressPercentage"), T25, "status"),
]


def test_json_patch_whose_test_passes_is_applied_and_tracked() -> None:
    # e_json_patch_ok
    live = rec_before_json_patch()
    ops = [
        {"op": "test", "path": "/status/trainerStatus/progressPercentage", "value": 41},
        {"op": "replace", "path": "/status/trainerStatus/progressPercentage", "value": 46},
    ]
    new = status_write(live, json_patch(live, ops))
    assert track(live, new, "status") == AFTER_JSON_PATCH
    assert new["status"]["trainerStatus"]["progressPercentage"] == 46


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


def test_merge_patch_to_main_resource_tracks_labels_with_a_dot_for_the_new_map() -> None:
    # f_merge_main_with_status: the label lands, the status change is the caller's to drop
    live = trainjob("tj-rec", {**REC_STATUS, "progressPercentage": 46}, AFTER_JSON_PATCH)
    patch = {
        "metadata": {"labels": {"touched": "yes"}},
        "status": {"trainerStatus": {"progressPercentage": 99}},
    }
    new = main_write(live, json_merge_patch(live, patch))
    labels_and_spec = {"f:metadata": {"f:labels": {".": {}, "f:touched": {}}}, **CREATE_FIELDS}
    assert track(live, new, None) == [
        AFTER_JSON_PATCH[0],
        entry("Python-urllib", "Update", labels_and_spec, T25),
        AFTER_JSON_PATCH[2],
    ]
    assert new["metadata"]["labels"] == {"touched": "yes"}
    assert new["status"]["trainerStatus"]["progressPercentage"] == 46


PUT_MANAGED = [
    entry("spec-writer", "Apply", {"f:spec": {"f:runtimeRef": {"f:name": {}}}}, T25),
    AFTER_JSON_PATCH[0],
    entry(
        "Python-urllib",
        "Update",
        {"f:metadata": {"f:labels": {".": {}, "f:touched": {}}}, **CREATE_FIELDS},
        T25,
    ),
    AFTER_JSON_PATCH[2],
]


def test_put_changing_only_status_leaves_managed_fields_as_they_were() -> None:
    # f_put_main_with_status
    live = trainjob("tj-rec", {**REC_STATUS, "progressPercentage": 46}, PUT_MANAGED)
    live["metadata"]["labels"] = {"touched": "yes"}
    body = copy.deepcopy(live)
    body["status"]["trainerStatus"]["progressPercentage"] = 97
    new = main_write(live, body)
    assert track(live, new, None, now="2026-12-02T18:40:00Z") == PUT_MANAGED


def test_merge_patch_of_a_pruned_unknown_field_changes_no_entry() -> None:
    # c_merge_unknown_field: the caller prunes bogusField, so nothing changed
    live = rec_before_json_patch()
    patched = json_merge_patch(live, {"status": {"trainerStatus": {"bogusField": 1}}})
    del patched["status"]["trainerStatus"]["bogusField"]
    new = status_write(live, patched)
    assert track(live, new, "status") == live["metadata"]["managedFields"]


def test_merge_patch_setting_trainer_status_null_removes_its_fields_from_every_entry() -> None:
    # d_merge_trainer_status_null (validation then refuses status: {})
    live = rec_before_json_patch()
    new = status_write(live, json_merge_patch(live, {"status": {"trainerStatus": None}}))
    assert new["status"] == {}
    assert track(live, new, "status") == [entry("Python-urllib", "Update", CREATE_FIELDS, T24)]


def test_managed_fields_sent_with_an_update_replace_the_stored_ones() -> None:
    live = rec_before_json_patch()
    new = copy.deepcopy(live)
    new["metadata"]["managedFields"] = [entry("someone", "Update", CREATE_FIELDS, T24)]
    assert track(live, new, None) == [entry("someone", "Update", CREATE_FIELDS, T24)]


@pytest.mark.parametrize("reset", [[], [{}]])
def test_empty_managed_fields_reset_tracking(reset: list[Any]) -> None:
    live = rec_before_json_patch()
    new = copy.deepcopy(live)
    new["metadata"]["managedFields"] = reset
    track(live, new, None)
    assert "managedFields" not in new["metadata"]


def test_an_untracked_object_stays_untracked_through_updates() -> None:
    live = rec_before_json_patch()
    del live["metadata"]["managedFields"]
    new = json_merge_patch(live, {"metadata": {"labels": {"a": "b"}}})
    track(live, new, None)
    assert "managedFields" not in new["metadata"]


def test_only_server_set_metadata_changing_records_nothing() -> None:
    live = rec_before_json_patch()
    new = json_merge_patch(live, {"metadata": {"resourceVersion": "999", "generation": 2}})
    assert track(live, new, None) == live["metadata"]["managedFields"]


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


# -- strategic merge patch --------------------------------------------------------------


def pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "rec", "uid": "u", "labels": {"a": "1"}},
        "spec": {"containers": [{"name": "c", "image": "i"}], "nodeSelector": {"k": "v"}},
    }


def test_kubectl_label_patch_merges_labels_and_is_tracked_per_key() -> None:
    live = pod()
    track_update(
        None, live, manager="kubectl-create", subresource=None, api_version="v1", now=T24,
        schema=None,
    )  # fmt: skip
    new = strategic_merge_patch(live, {"metadata": {"labels": {"x": "y", "a": None}}})
    assert new["metadata"]["labels"] == {"x": "y"}
    track_update(
        live, new, manager="kubectl-label", subresource=None, api_version="v1", now=T25,
        schema=None,
    )  # fmt: skip
    assert new["metadata"]["managedFields"] == [
        {
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {}},
                "f:spec": {".": {}, "f:containers": {}, "f:nodeSelector": {".": {}, "f:k": {}}},
            },
            "manager": "kubectl-create",
            "operation": "Update",
            "time": T24,
        },
        {
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:x": {}}}},
            "manager": "kubectl-label",
            "operation": "Update",
            "time": T25,
        },
    ]


def test_strategic_patch_directives_on_maps() -> None:
    live = pod()
    replaced = strategic_merge_patch(
        live, {"spec": {"nodeSelector": {"$patch": "replace", "z": "1", "n": None}}}
    )
    assert replaced["spec"]["nodeSelector"] == {"z": "1"}
    deleted = strategic_merge_patch(live, {"spec": {"nodeSelector": {"$patch": "delete"}}})
    assert "nodeSelector" not in deleted["spec"]
    retained = strategic_merge_patch(
        live, {"spec": {"$retainKeys": ["nodeSelector"], "nodeSelector": {"k": "w"}}}
    )
    assert retained["spec"] == {"nodeSelector": {"k": "w"}}
    assert strategic_merge_patch(live, {"$patch": "delete"}) == {}
    assert live == pod()


def test_strategic_patch_lists_are_replaced_and_primitive_deletes_apply() -> None:
    live = {"metadata": {"finalizers": ["a", "b", "c"]}, "spec": {"l": [1, 2]}}
    patch = {
        "metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]},
        "spec": {"$setElementOrder/l": [{"name": "x"}], "l": [{"name": "x", "$patch": "merge"}]},
    }
    assert strategic_merge_patch(live, patch) == {
        "metadata": {"finalizers": ["a", "c"]},
        "spec": {"l": [{"name": "x"}]},
    }


def test_strategic_patch_new_maps_lose_nulls_and_directives() -> None:
    assert strategic_merge_patch({}, {"m": {"a": None, "b": {"$patch": "merge", "c": 1}}}) == {
        "m": {"b": {"c": 1}}
    }


def test_unknown_strategic_directive_is_a_server_error() -> None:
    with pytest.raises(PatchError) as caught:
        strategic_merge_patch(pod(), {"spec": {"$patch": "explode"}})
    assert (caught.value.code, caught.value.message) == (
        500,
        "unknown patch type: explode in map: map[$patch:explode]",
    )


def test_retain_keys_must_cover_the_patch() -> None:
    with pytest.raises(PatchError) as caught:
        strategic_merge_patch(pod(), {"spec": {"$retainKeys": ["a"], "b": 1}})
    assert caught.value.code == 422
