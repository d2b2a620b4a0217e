"""Server-side apply and managedFields, pinned to recorded kube-apiserver v1.36 answers.

Each test names the recording (``b_ssa_status_first`` ...) whose observable result it
reproduces: the object's fields and its managedFields entries (times included where the
recording shows which write set them; uids and resourceVersions are the caller's).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from trainjob_devcluster.common.go_text import go_json, go_sharp_v
from trainjob_devcluster.common.resources import ResourceType, load_trainjob_crd, resource_from_crd
from trainjob_devcluster.common.status import ApiError
from trainjob_devcluster.storage.apply import LAST_APPLIED, server_side_apply
from trainjob_devcluster.storage.fieldmanager import manager_from_user_agent, track_update
from trainjob_devcluster.storage.fieldsets import FieldSet, path_string

GV = "trainer.kubeflow.org/v1alpha1"
T24 = "2026-12-02T18:33:24Z"
T25 = "2026-12-02T18:33:25Z"
TRAINJOB = resource_from_crd(load_trainjob_crd())
POD = ResourceType(
    group="", version="v1", kind="Pod", plural="pods", singular="pod", namespaced=True,
    subresources=("status",),
)  # fmt: skip

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
ALL_STATUS: dict[str, Any] = {
    "f:status": {
        "f:trainerStatus": {
            "f:estimatedRemainingSeconds": {},
            "f:lastUpdatedTime": {},
            "f:metrics": {},
            "f:progressPercentage": {},
        }
    }
}


def entry(
    manager: str,
    operation: str,
    fields: dict[str, Any],
    time: str | None,
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
    if time:
        out["time"] = time
    return out


def entry_of(obj: dict[str, Any], manager: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        e for e in obj["metadata"]["managedFields"] if e["manager"] == manager
    ]
    assert len(found) == 1
    return found[0]


def status_fields(*names: str) -> dict[str, Any]:
    return {"f:status": {"f:trainerStatus": {f"f:{n}": {} for n in names}}}


def created(name: str = "tj-rec", now: str = T24) -> dict[str, Any]:
    """A TrainJob as POST stores it (a_create_trainjob): defaults in, one Update entry."""
    obj: dict[str, Any] = {
        "apiVersion": GV,
        "kind": "TrainJob",
        "metadata": {
            "creationTimestamp": now,
            "generation": 1,
            "name": name,
            "namespace": "rec",
            "resourceVersion": "215",
            "uid": "41713f6b-fa3b-4b28-9c54-5c1dfa434fd1",
        },
        "spec": copy.deepcopy(SPEC),
    }
    track_update(
        None,
        obj,
        manager="Python-urllib",
        subresource=None,
        api_version=GV,
        now=now,
        schema=TRAINJOB.schema,
    )
    return obj


def config(name: str = "tj-rec", **trainer_status: Any) -> dict[str, Any]:
    return {
        "apiVersion": GV,
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "rec"},
        "status": {"trainerStatus": trainer_status},
    }


def apply(
    live: dict[str, Any] | None,
    cfg: dict[str, Any],
    manager: str = "trainer-status",
    *,
    subresource: str | None = "status",
    force: bool = True,
    now: str = T25,
    resource: ResourceType = TRAINJOB,
) -> dict[str, Any]:
    return server_side_apply(
        live,
        cfg,
        manager=manager,
        subresource=subresource,
        force=force,
        resource=resource,
        now=now,
    )


FIRST: dict[str, Any] = {
    "progressPercentage": 40,
    "estimatedRemainingSeconds": 300,
    "metrics": [{"name": "loss", "value": "0.31"}],
    "lastUpdatedTime": T24,
}


def first_applied() -> dict[str, Any]:
    return apply(created(), config(**FIRST), now=T24)


def managers_fixture() -> dict[str, Any]:
    """tj-managers before b_ssa_status_conflict_other_manager: trainer-status owns all."""
    return apply(
        created("tj-managers", T25), config("tj-managers", **{**FIRST, "lastUpdatedTime": T25})
    )


# -- create -----------------------------------------------------------------------------


def test_create_records_one_update_entry_for_everything_sent_and_defaulted() -> None:
    # a_create_trainjob
    assert created()["metadata"]["managedFields"] == [
        entry("Python-urllib", "Update", CREATE_FIELDS, T24)
    ]


def test_manager_is_the_user_agent_up_to_its_first_slash() -> None:
    assert manager_from_user_agent("Python-urllib/3.11") == "Python-urllib"
    assert manager_from_user_agent("kubectl/v1.32.0 (linux/amd64)") == "kubectl"
    assert manager_from_user_agent(None) == ""
    assert manager_from_user_agent("a\x00b/1") == "ab"
    assert manager_from_user_agent("x" * 200) == "x" * 128


# -- b_*: the status apply flow ---------------------------------------------------------


def test_first_status_apply_owns_the_applied_leaves_without_dots() -> None:
    # b_ssa_status_first
    out = first_applied()
    assert out["status"] == {
        "trainerStatus": {
            "estimatedRemainingSeconds": 300,
            "lastUpdatedTime": T24,
            "metrics": [{"name": "loss", "value": "0.31"}],
            "progressPercentage": 40,
        }
    }
    assert out["spec"] == SPEC
    assert out["metadata"]["resourceVersion"] == "215"
    assert out["metadata"]["managedFields"] == [
        entry("trainer-status", "Apply", ALL_STATUS, T24, "status"),
        entry("Python-urllib", "Update", CREATE_FIELDS, T24),
    ]


def test_second_apply_removes_what_it_stopped_applying_and_replaces_atomic_lists() -> None:
    # b_ssa_status_second_omits_progress, and b_get_after_ssa (the same stored state)
    live = first_applied()
    out = apply(
        live,
        config(
            estimatedRemainingSeconds=300,
            metrics=[{"name": "accuracy", "value": "0.88"}, {"name": "eval_loss", "value": "0.42"}],
            lastUpdatedTime=T25,
        ),
    )
    assert out["status"] == {
        "trainerStatus": {
            "estimatedRemainingSeconds": 300,
            "lastUpdatedTime": T25,
            "metrics": [
                {"name": "accuracy", "value": "0.88"},
                {"name": "eval_loss", "value": "0.42"},
            ],
        }
    }
    assert out["metadata"]["managedFields"] == [
        entry(
            "trainer-status",
            "Apply",
            status_fields("estimatedRemainingSeconds", "lastUpdatedTime", "metrics"),
            T25,
            "status",
        ),
        entry("Python-urllib", "Update", CREATE_FIELDS, T24),
    ]
    assert live["status"]["trainerStatus"]["progressPercentage"] == 40  # live untouched


def test_conflicts_with_another_manager_are_a_409_listing_each_field() -> None:
    # b_ssa_status_conflict_other_manager
    live = managers_fixture()
    cfg = config(
        "tj-managers",
        lastUpdatedTime=T25,
        progressPercentage=10,
        metrics=[{"name": "loss", "value": "0.1"}],
    )
    with pytest.raises(ApiError) as caught:
        apply(live, cfg, "other-writer", force=False)
    cause = {
        "reason": "FieldManagerConflict",
        "message": 'conflict with "trainer-status" with subresource "status"',
    }
    assert caught.value.to_json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Apply failed with 2 conflicts: conflicts with "trainer-status" with '
        'subresource "status":\n- .status.trainerStatus.metrics\n'
        "- .status.trainerStatus.progressPercentage",
        "reason": "Conflict",
        "details": {
            "causes": [
                {**cause, "field": ".status.trainerStatus.metrics"},
                {**cause, "field": ".status.trainerStatus.progressPercentage"},
            ]
        },
        "code": 409,
    }


def test_one_conflict_is_worded_in_the_singular() -> None:
    live = managers_fixture()
    cfg = config("tj-managers", progressPercentage=10)
    with pytest.raises(ApiError) as caught:
        apply(live, cfg, "other-writer", force=False)
    assert caught.value.message == (
        'Apply failed with 1 conflict: conflict with "trainer-status" with subresource '
        '"status": .status.trainerStatus.progressPercentage'
    )
    assert caught.value.details == {
        "causes": [
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "trainer-status" with subresource "status"',
                "field": ".status.trainerStatus.progressPercentage",
            }
        ]
    }


def test_conflict_with_an_update_manager_names_its_api_version() -> None:
    live = created()
    cfg = {"apiVersion": GV, "kind": "TrainJob", "metadata": {"name": "tj-rec"}}
    cfg["spec"] = {"suspend": True}
    with pytest.raises(ApiError) as caught:
        apply(live, cfg, "spec-writer", subresource=None, force=False)
    assert caught.value.message == (
        'Apply failed with 1 conflict: conflict with "Python-urllib" using '
        "trainer.kubeflow.org/v1alpha1: .spec.suspend"
    )


def test_forced_apply_takes_changed_fields_and_shares_equal_ones() -> None:
    # b_ssa_status_conflict_forced
    live = managers_fixture()
    out = apply(
        live,
        config("tj-managers", lastUpdatedTime=T25, metrics=[{"name": "loss", "value": "0.1"}]),
        "other-writer",
    )
    assert out["status"]["trainerStatus"] == {
        "estimatedRemainingSeconds": 300,
        "lastUpdatedTime": T25,
        "metrics": [{"name": "loss", "value": "0.1"}],
        "progressPercentage": 40,
    }
    assert out["metadata"]["managedFields"] == [
        entry("other-writer", "Apply", status_fields("lastUpdatedTime", "metrics"), T25, "status"),
        entry(
            "trainer-status",
            "Apply",
            status_fields("estimatedRemainingSeconds", "lastUpdatedTime", "progressPercentage"),
            T25,
            "status",
        ),
        entry("Python-urllib", "Update", CREATE_FIELDS, T25),
    ]


def test_an_omitted_field_another_manager_owns_stays() -> None:
    # b_ssa_status_omit_coowned_field
    live = apply(
        managers_fixture(),
        config("tj-managers", lastUpdatedTime=T25, metrics=[{"name": "loss", "value": "0.1"}]),
        "other-writer",
    )
    out = apply(live, config("tj-managers", progressPercentage=45, estimatedRemainingSeconds=200))
    assert out["status"]["trainerStatus"] == {
        "estimatedRemainingSeconds": 200,
        "lastUpdatedTime": T25,
        "metrics": [{"name": "loss", "value": "0.1"}],
        "progressPercentage": 45,
    }
    assert out["metadata"]["managedFields"] == [
        entry("other-writer", "Apply", status_fields("lastUpdatedTime", "metrics"), T25, "status"),
        entry(
            "trainer-status",
            "Apply",
            status_fields("estimatedRemainingSeconds", "progressPercentage"),
            T25,
            "status",
        ),
        entry("Python-urllib", "Update", CREATE_FIELDS, T25),
    ]


def test_dry_run_object_is_the_apply_result_with_the_live_resource_version() -> None:
    # b_ssa_status_dry_run (the caller does not store it)
    live = first_applied()
    live["metadata"]["resourceVersion"] = "217"
    cfg = config(**{**FIRST, "progressPercentage": 55, "lastUpdatedTime": T25})
    cfg["metadata"]["resourceVersion"] = "217"
    out = apply(live, cfg)
    assert out["metadata"]["resourceVersion"] == "217"
    assert out["status"]["trainerStatus"]["progressPercentage"] == 55
    assert out["metadata"]["managedFields"][0] == entry(
        "trainer-status", "Apply", ALL_STATUS, T25, "status"
    )


def test_status_apply_drops_spec_and_labels_silently() -> None:
    # b_ssa_status_with_spec_change
    live = first_applied()
    cfg = config(**{**FIRST, "progressPercentage": 60, "lastUpdatedTime": T25})
    cfg["metadata"]["labels"] = {"added-via-status": "yes"}
    cfg["spec"] = {"runtimeRef": {"name": "changed-via-status"}}
    out = apply(live, cfg)
    assert out["spec"] == SPEC
    assert "labels" not in out["metadata"]
    assert out["status"]["trainerStatus"]["progressPercentage"] == 60
    assert out["metadata"]["managedFields"] == [
        entry("trainer-status", "Apply", ALL_STATUS, T25, "status"),
        entry("Python-urllib", "Update", CREATE_FIELDS, T24),
    ]


# -- c_*: creating, and configurations the schema refuses -------------------------------


def test_apply_to_a_missing_object_creates_it_owning_only_what_was_sent() -> None:
    # c_ssa_main_missing_trainjob_creates (defaults come later, owned by nobody)
    cfg = {
        "apiVersion": GV,
        "kind": "TrainJob",
        "metadata": {"name": "created-by-apply", "namespace": "rec"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }
    out = apply(None, cfg, subresource=None, force=False)
    assert out == {
        **cfg,
        "metadata": {
            "name": "created-by-apply",
            "namespace": "rec",
            "managedFields": [
                entry("trainer-status", "Apply", {"f:spec": {"f:runtimeRef": {"f:name": {}}}}, T25)
            ],
        },
    }


def test_unknown_field_fails_typed_conversion_with_a_bare_500() -> None:
    # c_ssa_unknown_field and c_ssa_unknown_field_strict
    with pytest.raises(ApiError) as caught:
        apply(first_applied(), config(**FIRST, bogusField=1))
    assert caught.value.to_json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "failed to create typed patch object (rec/tj-rec; "
        "trainer.kubeflow.org/v1alpha1, Kind=TrainJob): .status.trainerStatus.bogusField: "
        "field not declared in schema",
        "code": 500,
    }


@pytest.mark.parametrize(
    ("override", "error"),
    [
        # d_ssa_pp_string
        (
            {"progressPercentage": "40"},
            ".status.trainerStatus.progressPercentage: expected numeric (int or float), got string",
        ),
        # d_ssa_pp_bool
        (
            {"progressPercentage": True},
            ".status.trainerStatus.progressPercentage: expected numeric (int or float), got bool",
        ),
        # d_ssa_metric_value_number
        (
            {"metrics": [{"name": "loss", "value": 0.31}]},
            ".status.trainerStatus.metrics[0].value: expected string, "
            "got &value.valueUnstructured{Value:0.31}",
        ),
    ],
)
def test_type_mismatches_fail_before_validation(override: dict[str, Any], error: str) -> None:
    with pytest.raises(ApiError) as caught:
        apply(first_applied(), config(**{**FIRST, **override}))
    assert caught.value.code == 500
    assert caught.value.reason == ""
    assert caught.value.message == (
        "failed to create typed patch object (rec/tj-rec; trainer.kubeflow.org/v1alpha1, "
        f"Kind=TrainJob): {error}"
    )


def test_status_sent_to_the_main_resource_must_still_fit_the_schema() -> None:
    cfg = config(**FIRST, bogusField=1)
    cfg["spec"] = {"runtimeRef": {"name": "torch-distributed"}}
    with pytest.raises(ApiError) as caught:
        apply(first_applied(), cfg, "spec-writer", subresource=None)
    assert caught.value.code == 500


def test_several_type_errors_are_listed_one_per_line() -> None:
    cfg = config(progressPercentage="1", lastUpdatedTime={"a": 1})
    with pytest.raises(ApiError) as caught:
        apply(first_applied(), cfg)
    assert caught.value.message.endswith(
        "Kind=TrainJob): errors:\n"
        "  .status.trainerStatus.lastUpdatedTime: expected any scalar, got &{map[a:1]}\n"
        "  .status.trainerStatus.progressPercentage: expected numeric (int or float), got string"
    )


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (40.5, 40.5),  # d_ssa_pp_float: a number is numeric; validation answers the 422
        (150, 150),  # d_ssa_pp_150: ranges are validation's too
    ],
)
def test_values_of_the_right_kind_reach_validation(value: float, kept: float) -> None:
    out = apply(first_applied(), config(**{**FIRST, "progressPercentage": value}))
    assert out["status"]["trainerStatus"]["progressPercentage"] == kept


def test_date_time_strings_are_untyped_scalars() -> None:
    # d_ssa_lut_not_a_time gets past the apply; a number there does too (format date-time)
    out = apply(first_applied(), config(**{**FIRST, "lastUpdatedTime": 5}))
    assert out["status"]["trainerStatus"]["lastUpdatedTime"] == 5


def test_another_kind_or_managed_fields_in_the_config_are_bad_requests() -> None:
    with pytest.raises(ApiError) as caught:
        apply(first_applied(), {**config(**FIRST), "kind": "Pod"})
    assert (caught.value.code, caught.value.message) == (
        400,
        "invalid object type: trainer.kubeflow.org/v1alpha1, Kind=Pod",
    )
    cfg = config(**FIRST)
    cfg["metadata"]["managedFields"] = []
    with pytest.raises(ApiError) as caught:
        apply(first_applied(), cfg)
    assert (caught.value.code, caught.value.message) == (
        400,
        "metadata.managedFields must be nil",
    )


# -- d_*: emptied maps ------------------------------------------------------------------


def test_applying_an_empty_trainer_status_empties_it_and_owns_it() -> None:
    # d_ssa_trainer_status_empty (validation then fails the CEL rule on trainerStatus: {})
    out = apply(first_applied(), config())
    assert out["status"] == {"trainerStatus": {}}
    assert out["metadata"]["managedFields"][0] == entry(
        "trainer-status", "Apply", {"f:status": {"f:trainerStatus": {}}}, T25, "status"
    )


def test_applying_an_empty_status_removes_trainer_status() -> None:
    # d_ssa_status_empty (validation then fails minProperties on status: {})
    cfg = config()
    cfg["status"] = {}
    out = apply(first_applied(), cfg)
    assert out["status"] == {}
    assert out["metadata"]["managedFields"][0] == entry(
        "trainer-status", "Apply", {"f:status": {}}, T25, "status"
    )


def test_dropping_status_from_the_config_removes_it_all() -> None:
    cfg = config()
    del cfg["status"]
    out = apply(first_applied(), cfg)
    assert "status" not in out
    assert out["metadata"]["managedFields"] == [
        entry("Python-urllib", "Update", CREATE_FIELDS, T24)
    ]


# -- f_*: the main resource -------------------------------------------------------------


def test_main_resource_apply_ignores_status_and_shares_equal_spec_fields() -> None:
    # f_ssa_main_with_status: the status change is dropped, yet the entry gets a time
    live = apply(created(now=T25), config(**FIRST))
    cfg = config(**{**FIRST, "progressPercentage": 98})
    cfg["spec"] = {"runtimeRef": {"name": "torch-distributed"}}
    out = apply(live, cfg, "spec-writer", subresource=None, force=False)
    assert out["status"] == live["status"]
    assert out["spec"] == SPEC
    assert out["metadata"]["managedFields"] == [
        entry("spec-writer", "Apply", {"f:spec": {"f:runtimeRef": {"f:name": {}}}}, T25),
        entry("trainer-status", "Apply", ALL_STATUS, T25, "status"),
        entry("Python-urllib", "Update", CREATE_FIELDS, T25),
    ]


def test_a_no_op_apply_by_a_new_manager_gets_an_entry_without_time() -> None:
    live = first_applied()
    cfg = {**config(), "spec": {"suspend": False}}
    del cfg["status"]
    out = apply(live, cfg, "observer", subresource=None, force=False)
    assert entry_of(out, "observer") == entry(
        "observer", "Apply", {"f:spec": {"f:suspend": {}}}, None
    )


def test_labels_are_owned_key_by_key() -> None:
    cfg = {**config(), "metadata": {"name": "tj-rec", "labels": {"team": "a"}}}
    del cfg["status"]
    out = apply(first_applied(), cfg, "labeller", subresource=None)
    assert out["metadata"]["labels"] == {"team": "a"}
    assert entry_of(out, "labeller") == entry(
        "labeller", "Apply", {"f:metadata": {"f:labels": {"f:team": {}}}}, T25
    )


def test_kubectl_keeps_the_client_side_apply_annotation_current() -> None:
    live = created()
    live["metadata"]["annotations"] = {LAST_APPLIED: "{}\n"}
    cfg = {
        "apiVersion": GV,
        "kind": "TrainJob",
        "metadata": {"name": "tj-rec", "namespace": "rec"},
        "spec": {"suspend": False, "note": "a<b"},
    }
    out = apply(live, cfg, "kubectl", subresource=None)
    assert out["metadata"]["annotations"][LAST_APPLIED] == (
        '{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob",'
        '"metadata":{"name":"tj-rec","namespace":"rec"},'
        '"spec":{"note":"a\\u003cb","suspend":false}}\n'
    )


# -- list types -------------------------------------------------------------------------


def condition(kind: str, state: str) -> dict[str, Any]:
    return {"type": kind, "status": state}


def test_map_lists_merge_per_key_and_own_each_element() -> None:
    live = apply(
        first_applied(),
        {**config(), "status": {"conditions": [condition("Created", "True")]}},
        "controller",
    )
    out = apply(
        live,
        {**config(), "status": {"conditions": [condition("Running", "True")]}},
        "other",
    )
    assert out["status"]["conditions"] == [
        condition("Created", "True"),
        condition("Running", "True"),
    ]
    owned: dict[str, Any] = {
        "f:status": {
            "f:conditions": {'k:{"type":"Running"}': {".": {}, "f:status": {}, "f:type": {}}}
        }
    }
    assert entry_of(out, "other") == entry("other", "Apply", owned, T25, "status")


def test_map_list_items_the_applier_stops_sending_go_away() -> None:
    both = {"conditions": [condition("Created", "True"), condition("Running", "True")]}
    live = apply(first_applied(), {**config(), "status": both}, "controller")
    out = apply(
        live,
        {**config(), "status": {"conditions": [condition("Running", "False")]}},
        "controller",
    )
    assert out["status"]["conditions"] == [condition("Running", "False")]


def test_merged_map_list_keeps_live_order_and_inserts_new_items_in_config_order() -> None:
    live = first_applied()
    live["status"]["conditions"] = [condition("A", "1"), condition("B", "1"), condition("C", "1")]
    cfg = {
        **config(),
        "status": {"conditions": [condition("C", "2"), condition("N", "2"), condition("A", "2")]},
    }
    out = apply(live, cfg, "other")
    assert [c["type"] for c in out["status"]["conditions"]] == ["B", "C", "N", "A"]


def test_set_lists_are_owned_by_value() -> None:
    cfg = {**config(), "metadata": {"name": "tj-rec", "finalizers": ["a/b"]}}
    del cfg["status"]
    out = apply(first_applied(), cfg, "finalizer", subresource=None)
    assert entry_of(out, "finalizer")["fieldsV1"] == {
        "f:metadata": {"f:finalizers": {'v:"a/b"': {}}}
    }


# -- built-in kinds (no schema) ---------------------------------------------------------


def pod(**extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "rec", "uid": "u-1", **extra},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }


def test_built_in_kinds_are_deduced_maps_merge_lists_replace_and_nothing_is_a_type_error() -> None:
    live = pod()
    track_update(
        None, live, manager="kubectl-create", subresource=None, api_version="v1", now=T24,
        schema=None,
    )  # fmt: skip
    cfg = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"x": 1}},
        "spec": {"containers": [{"name": "d"}]},
        "status": {"phase": "Running"},
    }
    out = apply(live, cfg, "mgr", subresource=None, resource=POD)
    assert out["metadata"]["labels"] == {"x": 1}
    assert out["spec"] == {"containers": [{"name": "d"}]}
    assert "status" not in out
    # The creator keeps only the spec map itself: its containers list was replaced.
    assert out["metadata"]["managedFields"] == [
        {
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {".": {}, "f:x": {}}},
                "f:spec": {".": {}, "f:containers": {}},
            },
            "manager": "mgr",
            "operation": "Apply",
            "time": T25,
        },
        {
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {}},
            "manager": "kubectl-create",
            "operation": "Update",
            "time": T24,
        },
    ]


def test_applying_to_an_untracked_object_attributes_its_fields_first() -> None:
    live = first_applied()
    del live["metadata"]["managedFields"]
    cfg = {**config(), "spec": {"suspend": True}}
    del cfg["status"]
    with pytest.raises(ApiError) as caught:
        apply(live, cfg, "spec-writer", subresource=None, force=False)
    assert caught.value.message == (
        'Apply failed with 1 conflict: conflict with "before-first-apply" using '
        "trainer.kubeflow.org/v1alpha1: .spec.suspend"
    )


# -- formatting helpers the messages rely on --------------------------------------------


def test_go_value_and_json_formatting() -> None:
    assert go_sharp_v({"b": [1, "x"], "a": None}) == (
        'map[string]interface {}{"a":interface {}(nil), "b":[]interface {}{1, "x"}}'
    )
    assert go_json({"b": 1e21, "a": 1e-7, "c": 2.5}) == '{"a":1e-7,"b":1e+21,"c":2.5}'


def test_field_sets_round_trip_and_print_paths() -> None:
    fields: dict[str, Any] = {
        "f:status": {
            ".": {},
            "f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:status": {}}},
        }
    }
    fs = FieldSet.from_fields_v1(fields)
    assert fs.to_fields_v1() == fields
    assert [path_string(p) for p in fs.paths()] == [
        ".status",
        '.status.conditions[type="Ready"]',
        '.status.conditions[type="Ready"].status',
    ]
