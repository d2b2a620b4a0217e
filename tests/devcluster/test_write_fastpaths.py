"""The status write's shortcuts give exactly what the general paths give.

- StructuralSchema.admitted (prune and defaults in one copy-on-write walk) against prune
  then apply_defaults on a copy, and against the reference walks;
- an apply to /status that no other manager's fields reach (status_left_to, then
  drop_emptied) against settling it with every manager through the comparison
  (take_over), on seeded managedFields and objects; and whole writes where the shortcut
  must not be taken (another manager owns status fields: a conflict without force, the
  fields moved with force).
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from trainjob_devcluster.common.faults import RequestInfo
from trainjob_devcluster.common.resources import (
    default_resources,
    load_trainjob_crd,
    resource_from_crd,
)
from trainjob_devcluster.common.status import ApiError
from trainjob_devcluster.http.rest import Call, ResourceApi
from trainjob_devcluster.schema.leafchecks import quick_check
from trainjob_devcluster.schema.schema import StructuralSchema
from trainjob_devcluster.schema.schemanode import Node
from trainjob_devcluster.storage.apply import _reset, drop_emptied, status_left_to, take_over
from trainjob_devcluster.storage.fieldmanager import (
    APPLY,
    UPDATE,
    Managed,
    ManagerKey,
    VersionedSet,
)
from trainjob_devcluster.storage.fieldsets import FieldSet
from trainjob_devcluster.storage.store import Store
from trainjob_devcluster.storage.typed import root_type
from trainjob_devcluster.storage.typedops import compare

from . import reference_walks as ref
from .fastpath_inputs import WIDGET, changed, value_for

TRAINJOB = resource_from_crd(load_trainjob_crd())
CASES = [
    (StructuralSchema(WIDGET.schema), root_type(WIDGET.schema)),  # type: ignore[arg-type]
    (StructuralSchema(TRAINJOB.schema), root_type(TRAINJOB.schema)),  # type: ignore[arg-type]
]


def exact(value: Any) -> str:
    """Equal texts for equal JSON values with the same key order and number types."""
    return repr(value)


# -- admission ----------------------------------------------------------------------------


def test_admits_as_is_only_what_prune_and_defaults_leave_exactly_as_it_is() -> None:
    rng = random.Random(11)
    as_is = not_as_is = aliased = 0
    for i in range(4000):
        compiled, t = CASES[i % 2]
        obj = value_for(t, rng, odd=0.05)
        if not isinstance(obj, dict):
            continue
        before = exact(obj)
        verdict = compiled.admits_as_is(obj)
        assert exact(obj) == before, "the test changes nothing"
        # deepcopy keeps the values' sharing, so the in-place walks see it as they would.
        theirs = copy.deepcopy(obj)
        removed = compiled.prune(theirs)
        compiled.apply_defaults(theirs)
        walked = copy.deepcopy(obj)
        walked_removed: list[str] = []
        ref.prune(walked, compiled._root, "", walked_removed, resource=True)
        ref.default(walked, compiled._root)
        assert exact(theirs) == exact(walked)
        assert removed == walked_removed
        untouched = exact(theirs) == before and not removed
        if verdict:
            as_is += 1
            assert untouched
            aliased += containers(obj) != len({id(c) for c in walk(obj)})
        else:
            not_as_is += 1
    assert as_is > 100, as_is
    assert not_as_is > 100, not_as_is
    assert aliased > 5, "some values that are as they are share parts"


def walk(value: Any) -> list[Any]:
    """Every map and list in ``value``, once per place it is found at."""
    found: list[Any] = []
    if isinstance(value, dict | list):
        found.append(value)
        for item in value.values() if isinstance(value, dict) else value:
            found.extend(walk(item))
    return found


def containers(value: Any) -> int:
    return len(walk(value))


def admitted_parts() -> tuple[dict[str, Any], dict[str, Any]]:
    """A TrainJob spec and status that pruning and defaulting leave as they are."""
    spec = {
        "runtimeRef": {"name": "rt", "apiGroup": "a", "kind": "k"},
        "managedBy": "trainer.kubeflow.org/trainjob-controller",
        "suspend": False,
    }
    return spec, {"trainerStatus": {"progressPercentage": 5, "lastUpdatedTime": "x"}}


def test_admits_as_is_says_no_to_each_thing_prune_or_defaults_would_do() -> None:
    compiled, _t = CASES[1]
    spec, status = admitted_parts()
    obj = {"metadata": {"name": "a", "anything": {"x": 1}}, "spec": spec, "status": status}
    assert compiled.admits_as_is(obj)
    assert not compiled.admits_as_is({**obj, "spec": {**spec, "suspend": None}})
    assert not compiled.admits_as_is({**obj, "spec": {"runtimeRef": spec["runtimeRef"]}})
    ts = status["trainerStatus"]
    unknown = {"trainerStatus": {**ts, "bogus": 1}}
    assert not compiled.admits_as_is({**obj, "status": unknown})
    assert not compiled.admits_as_is(
        {**obj, "status": {"trainerStatus": {**ts, "metrics": [{"x": 1}]}}}
    )
    assert not compiled.admits_as_is({**obj, "extra": 1})


def test_admits_as_is_over_a_stored_object_walks_only_what_is_not_its_own() -> None:
    """With the stored object, its very own top-level values are taken as admitted; the
    verdict is that of the whole walk whenever the stored object is as it is."""
    rng = random.Random(12)
    compared = 0
    for i in range(3000):
        compiled, t = CASES[i % 2]
        stored, other = value_for(t, rng, odd=0.05), value_for(t, rng, odd=0.05)
        if not isinstance(stored, dict) or not isinstance(other, dict):
            continue
        if not compiled.admits_as_is(stored):
            continue
        # Each top-level value from the stored object itself or from another object.
        obj = {k: stored[k] if k in stored and rng.random() < 0.5 else v for k, v in other.items()}
        for k in rng.sample(sorted(stored), k=len(stored) // 2):
            obj.setdefault(k, stored[k])
        assert compiled.admits_as_is(obj, stored) == compiled.admits_as_is(obj), obj
        compared += 1
    assert compared > 300, compared


def test_admits_as_is_over_a_stored_object_still_checks_the_rest() -> None:
    compiled, _t = CASES[1]
    spec, status = admitted_parts()
    stored = {"metadata": {"name": "a"}, "spec": spec, "status": status}
    assert compiled.admits_as_is(stored)
    fresh = {"trainerStatus": {"progressPercentage": 6, "lastUpdatedTime": "y"}}
    assert compiled.admits_as_is({**stored, "status": fresh}, stored)
    unknown = {"trainerStatus": {**fresh["trainerStatus"], "bogus": 1}}
    assert not compiled.admits_as_is({**stored, "status": unknown}, stored)
    assert not compiled.admits_as_is({**stored, "extra": 1}, stored)
    # An equal spec that is not the stored one's own is walked: a null in it is seen.
    assert not compiled.admits_as_is({**stored, "spec": {**spec, "suspend": None}}, stored)


def test_an_object_quick_check_passes_only_what_check_finds_nothing_in() -> None:
    node = Node(
        {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 4},
                "n": {"type": "integer", "minimum": 0},
            },
        }
    )
    for child in node.children():
        child.quick = quick_check(child)
    quick = quick_check(node)
    assert quick is not None
    values: list[Any] = [
        {"name": "ab"},
        {"name": "ab", "n": 3, "other": [1]},
        {"name": ""},
        {"name": "abcde"},
        {"n": 1},
        {"name": "a", "n": -1},
        {"name": "a", "n": True},
        {"name": None},
        None,
        [],
        "x",
    ]
    for value in values:
        faults: list[Any] = []
        node.check(value, "", None, False, faults)
        if quick(value):
            assert faults == [], value
    assert [quick(v) for v in values[:2]] == [True, True]
    # A node with something the quick checks do not cover gets no object check.
    assert quick_check(Node({"type": "object", "properties": {"a": {"type": "object"}}})) is None
    assert quick_check(Node({"type": "object", "minProperties": 1})) is None


# -- settling an apply to /status with the other managers ---------------------------------

ELEMENTS = ["f:a", "f:b", 'k:{"type":"x"}', "i:0"]
ROOTS = ["f:spec", "f:status", "f:metadata"]


def random_set(rng: random.Random) -> FieldSet:
    paths = []
    for _ in range(rng.randint(0, 4)):
        depth = rng.randint(0, 2)
        paths.append((rng.choice(ROOTS), *(rng.choice(ELEMENTS) for _ in range(depth))))
    return FieldSet.of(*paths)


def random_managed(rng: random.Random, key: ManagerKey) -> Managed:
    managed = Managed()
    for i in range(rng.randint(0, 4)):
        other = ManagerKey(f"m{i}", rng.choice([APPLY, UPDATE]), "v1", rng.choice(["", "status"]))
        managed.sets[other] = VersionedSet(random_set(rng), "v1", other.operation == APPLY)
        if rng.random() < 0.7:
            managed.times[other] = f"2026-01-01T00:00:0{i}Z"
    if rng.random() < 0.5:
        managed.sets[key] = VersionedSet(random_set(rng), "v1", True)
    return managed


def snapshot(managed: Managed) -> list[tuple[Any, ...]]:
    """Everything about the entries, their sets by identity (memos key on it)."""
    return [
        (key, id(v.fields), sorted(v.fields.paths()), v.api_version, managed.times.get(key))
        for key, v in managed.sets.items()
    ]


def settled(how: str, managed: Managed, key: ManagerKey, base: Any, result: Any, t: Any) -> Any:
    sets = {k: VersionedSet(v.fields, v.api_version, v.applied) for k, v in managed.sets.items()}
    managed = Managed(sets, dict(managed.times))
    try:
        if how == "general":
            take_over(managed, key, compare(base, result, t), force=False)
        else:
            drop_emptied(managed, key)
    except ApiError as exc:
        return ("error", exc.code, json.dumps(exc.to_json(), sort_keys=True))
    return snapshot(managed)


def test_status_left_to_is_exact_where_it_says_the_comparison_cannot_matter() -> None:
    rng = random.Random(12)
    key = ManagerKey("bench", APPLY, "", "status")
    taken = declined = conflicts = 0
    for i in range(3000):
        _compiled, t = CASES[i % 2]
        base = value_for(t, rng, odd=0.02)
        if not isinstance(base, dict):
            continue
        if rng.random() < 0.3:
            base.pop("status", None)
        merged = changed(base, t, rng)
        if not isinstance(merged, dict):
            continue
        result = _reset(base, merged, "status", True)
        managed = random_managed(rng, key)
        general = settled("general", managed, key, base, result, t)
        if status_left_to(managed, key):
            taken += 1
            assert settled("short", managed, key, base, result, t) == general
        else:
            declined += 1
            if isinstance(general, tuple):
                conflicts += 1
    assert taken > 300, taken
    assert declined > 300, declined
    assert conflicts > 20, "some declined applies must conflict without force"


def test_status_left_to_declines_where_another_manager_owns_status_fields() -> None:
    key = ManagerKey("bench", APPLY, "", "status")
    mine = VersionedSet(FieldSet.of(("f:status", "f:a")), "v1", True)
    for owned in [("f:status",), ("f:status", "f:b"), ("f:status", "f:a")]:
        other = ManagerKey("controller", UPDATE, "v1", "status")
        managed = Managed({key: mine, other: VersionedSet(FieldSet.of(owned), "v1", False)})
        assert not status_left_to(managed, key)
    # The same manager with another operation or subresource is another manager.
    for other in [ManagerKey("bench", UPDATE, "v1", "status"), ManagerKey("bench", APPLY)]:
        theirs = VersionedSet(FieldSet.of(("f:status", "f:z")), "v1", True)
        assert not status_left_to(Managed({key: mine, other: theirs}), key)
    spec_only = VersionedSet(FieldSet.of(("f:spec", "f:status")), "v1", False)
    assert status_left_to(Managed({key: mine, ManagerKey("c", UPDATE, "v1"): spec_only}), key)


# -- whole writes where the shortcut is not taken -----------------------------------------

TJ = TRAINJOB
NAMESPACES = next(r for r in default_resources() if r.plural == "namespaces")


def request(
    api: ResourceApi, verb: str, sub: str, query: dict[str, str], body: Any, ctype: str
) -> tuple[int, Any]:
    method, name = ("POST", "") if verb == "create" else ("PATCH", "j")
    info = RequestInfo(method, "/x", verb, "trainjobs", sub, "ns", name)
    call = Call(info, TJ, query, json.dumps(body).encode(), ctype)
    try:
        answer = api.create(call) if verb == "create" else api.patch(call)
    except ApiError as exc:
        return exc.code, exc.to_json()
    return answer.code, answer.body


def status_config(progress: int) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "j"},
        "status": {
            "trainerStatus": {
                "progressPercentage": progress,
                "lastUpdatedTime": "2026-01-01T00:00:00Z",
            }
        },
    }


@pytest.fixture
def api() -> ResourceApi:
    api = ResourceApi(Store(), lambda: 1_800_000_000.0)
    info = RequestInfo("POST", "", "create", "namespaces", "", "", "")
    api.create(Call(info, NAMESPACES, {}, json.dumps({"metadata": {"name": "ns"}}).encode()))
    body = {"metadata": {"name": "j"}, "spec": {"runtimeRef": {"name": "rt"}}}
    code, _ = request(api, "create", "", {"fieldManager": "creator"}, body, "application/json")
    assert code == 201
    return api


APPLY_TYPE = "application/apply-patch+yaml"


def test_an_apply_over_another_managers_status_field_conflicts_without_force(
    api: ResourceApi,
) -> None:
    merge = {
        "status": {
            "trainerStatus": {"progressPercentage": 1, "lastUpdatedTime": "2026-01-01T00:00:00Z"}
        }
    }
    code, _ = request(
        api,
        "patch",
        "status",
        {"fieldManager": "controller"},
        merge,
        "application/merge-patch+json",
    )
    assert code == 200
    code, body = request(
        api, "patch", "status", {"fieldManager": "bench"}, status_config(2), APPLY_TYPE
    )
    assert code == 409
    # The equal lastUpdatedTime is shared, not a conflict.
    assert body["message"] == (
        'Apply failed with 1 conflict: conflict with "controller" with subresource "status" '
        "using trainer.kubeflow.org/v1alpha1: .status.trainerStatus.progressPercentage"
    )
    forced = {"fieldManager": "bench", "force": "true"}
    code, body = request(api, "patch", "status", forced, status_config(3), APPLY_TYPE)
    assert code == 200
    entries = {e["manager"]: e["fieldsV1"] for e in body["metadata"]["managedFields"]}
    assert entries["bench"] == {
        "f:status": {"f:trainerStatus": {"f:lastUpdatedTime": {}, "f:progressPercentage": {}}}
    }
    # The controller lost the forced field and keeps the shared one.
    assert entries["controller"] == {
        "f:status": {".": {}, "f:trainerStatus": {".": {}, "f:lastUpdatedTime": {}}}
    }
    assert body["status"]["trainerStatus"]["progressPercentage"] == 3


def test_repeated_applies_of_the_same_fields_keep_one_entry_and_move_only_the_status(
    api: ResourceApi,
) -> None:
    forced = {"fieldManager": "bench", "force": "true"}
    bodies = []
    for progress in (1, 2, 2):
        code, body = request(api, "patch", "status", forced, status_config(progress), APPLY_TYPE)
        assert code == 200
        bodies.append(body)
    managers = [[e["manager"] for e in b["metadata"]["managedFields"]] for b in bodies]
    assert managers == [["bench", "creator"]] * 3
    versions = [b["metadata"]["resourceVersion"] for b in bodies]
    assert versions[0] != versions[1] == versions[2]  # the last apply changed nothing
    assert bodies[2]["spec"] == {
        "runtimeRef": {
            "name": "rt",
            "apiGroup": "trainer.kubeflow.org",
            "kind": "ClusterTrainingRuntime",
        },
        "managedBy": "trainer.kubeflow.org/trainjob-controller",
        "suspend": False,
    }
