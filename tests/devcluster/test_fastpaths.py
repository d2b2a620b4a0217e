"""The write path's fast paths give exactly what the general paths give.

Two kinds of evidence: the rewritten walks against the algorithms they replace
(reference_walks) on thousands of seeded inputs, and whole writes (server-side apply,
merge patches, conflicts, fields left out, validation failures, managedFields times) made
once with everything the caches and identity shortcuts can use, and once more with every
stored object copied and every memo emptied before each write, so that nothing is reused.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Iterator
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
from trainjob_devcluster.schema import schema
from trainjob_devcluster.schema.schema import StructuralSchema
from trainjob_devcluster.storage import fieldmanager, fieldsets, objects
from trainjob_devcluster.storage.fieldmanager import decode_managed_fields
from trainjob_devcluster.storage.fieldsets import FieldSet, decode_fields_v1
from trainjob_devcluster.storage.store import Store, dumps
from trainjob_devcluster.storage.typed import root_type, typed_errors
from trainjob_devcluster.storage.typedfields import fitted_field_set, to_field_set
from trainjob_devcluster.storage.typedops import compare, json_equal, merge

from . import reference_walks as ref
from .fastpath_inputs import GV, WIDGET, changed, value_for

TRAINJOB = resource_from_crd(load_trainjob_crd())
TYPES = [root_type(WIDGET.schema), root_type(TRAINJOB.schema)]


def exact(value: Any) -> str:
    """Equal texts for equal JSON values with the same key order and number types."""
    return repr(value)


def paths(fs: FieldSet) -> set[tuple[str, ...]]:
    return set(fs.paths())


def canonical(fs: FieldSet) -> bool:
    return all(
        (child.members or child.children) and canonical(child) for child in fs.children.values()
    )


def pairs(count: int, seed: int) -> Iterator[tuple[Any, Any, Any]]:
    rng = random.Random(seed)
    for i in range(count):
        t = TYPES[i % len(TYPES)]
        lhs = value_for(t, rng)
        yield t, lhs, changed(lhs, t, rng)


# -- the walks ----------------------------------------------------------------------------


def test_merge_matches_the_generic_walk() -> None:
    for t, lhs, rhs in pairs(3000, 1):
        for a, b in ((lhs, rhs), (rhs, lhs), (lhs, lhs)):
            assert exact(merge(a, b, t)) == exact(ref.merge(a, b, t))


def test_compare_matches_the_generic_walk() -> None:
    for t, lhs, rhs in pairs(3000, 2):
        for a, b in ((lhs, rhs), (rhs, lhs), (lhs, lhs)):
            found = compare(a, b, t)
            got = (paths(found.added), paths(found.modified), paths(found.removed))
            assert got == ref.compare(a, b, t)
            assert all(canonical(fs) for fs in (found.added, found.modified, found.removed))


def test_fitted_field_set_is_to_field_set_when_typed_errors_finds_nothing() -> None:
    rng = random.Random(3)
    fitting = 0
    for i in range(4000):
        t = TYPES[i % len(TYPES)]
        value = value_for(t, rng, odd=0.03)
        fitted = fitted_field_set(value, t)
        assert (fitted is None) == (typed_errors(value, t) is not None)
        assert paths(to_field_set(value, t)) == ref.field_paths(value, t)
        if fitted is not None:
            fitting += 1
            assert paths(fitted) == ref.field_paths(value, t)
            assert canonical(fitted)
    assert fitting > 500


def test_json_equal_matches_the_plain_walk() -> None:
    values: list[Any] = [0, 1, 1.0, True, False, None, "1", [1], [1.0], [True], {"a": 1}]
    values += [{"a": 1.0}, {"a": True}, {"a": [1, {"b": 2}]}, {"a": [1, {"b": 2.0}]}, float("nan")]
    for a in values:
        for b in values:
            assert json_equal(a, b) == ref.json_equal(a, b)
    for _t, lhs, rhs in pairs(2000, 4):
        assert json_equal(lhs, rhs) == ref.json_equal(lhs, rhs)
        assert json_equal(lhs, copy.deepcopy(lhs)) == ref.json_equal(lhs, copy.deepcopy(lhs))


# -- field sets ---------------------------------------------------------------------------


def random_paths(rng: random.Random) -> set[tuple[str, ...]]:
    elements = ["f:a", "f:b", "f:c", 'k:{"type":"x"}', 'v:"y"', "i:0"]
    return {
        tuple(rng.choice(elements) for _ in range(rng.randint(1, 4)))
        for _ in range(rng.randint(0, 6))
    }


def test_field_set_operations_are_the_set_operations_on_paths() -> None:
    rng = random.Random(5)
    for _ in range(3000):
        a, b = random_paths(rng), random_paths(rng)
        if rng.random() < 0.2:
            b = set(a)
        fa, fb = FieldSet.of(*a), FieldSet.of(*b)
        under_b = {p for p in a if any(p[:i] in b for i in range(1, len(p) + 1))}
        results = {
            "union": (fa.union(fb), a | b),
            "intersection": (fa.intersection(fb), a & b),
            "difference": (fa.difference(fb), a - b),
            "recursive_difference": (fa.recursive_difference(fb), a - under_b),
            "self difference": (fa.difference(fa), set()),
        }
        for name, (got, want) in results.items():
            assert paths(got) == want, name
            assert canonical(got), name
        assert fa.same(fb) == (a == b)
        assert fa.subset_of(fb) == (a <= b)
        assert fa.empty() == (not a)
        assert paths(fa) == a  # operations never change their operands


def test_shared_fields_v1_decode_to_the_very_set_and_equal_a_fresh_encoding() -> None:
    rng = random.Random(6)
    for _ in range(500):
        fs = FieldSet.of(*random_paths(rng))
        shared = fieldsets.shared_fields_v1(fs)
        assert shared == fs.to_fields_v1()
        assert shared is fieldsets.shared_fields_v1(fs)
        assert decode_fields_v1(shared) is fs
        assert paths(FieldSet.from_fields_v1(shared)) == paths(fs)
        # A dict it did not make is decoded, even an equal one.
        assert decode_fields_v1(copy.deepcopy(shared)) is not fs


# -- admission ----------------------------------------------------------------------------


SCHEMAS = [StructuralSchema(WIDGET.schema), StructuralSchema(TRAINJOB.schema)]  # type: ignore[arg-type]


def test_prune_and_defaults_match_the_walks_that_visit_everything() -> None:
    rng = random.Random(7)
    for i in range(3000):
        compiled = SCHEMAS[i % 2]
        obj = value_for(TYPES[i % 2], rng, odd=0.05)
        if not isinstance(obj, dict):
            continue
        mine, theirs = copy.deepcopy(obj), copy.deepcopy(obj)
        removed: list[str] = []
        ref.prune(theirs, compiled._root, "", removed, resource=True)
        assert compiled.prune(mine) == removed
        assert exact(mine) == exact(theirs)
        ref.default(theirs, compiled._root)
        compiled.apply_defaults(mine)
        assert exact(mine) == exact(theirs)


def without_shortcuts(compiled: StructuralSchema) -> Iterator[None]:
    nodes = [compiled._root]
    saved: list[tuple[Any, Any]] = []
    while nodes:
        node = nodes.pop()
        saved.append((node, node.quick))
        node.quick = None
        nodes.extend(node.children())
    try:
        yield
    finally:
        for node, quick in saved:
            node.quick = quick


@pytest.mark.parametrize("subresource", [None, "status"])
def test_validation_shortcuts_change_no_cause(
    subresource: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(8)
    cases = []
    for i in range(1500):
        t = TYPES[i % 2]
        old = value_for(t, rng, odd=0.03)
        new = changed(old, t, rng)
        if isinstance(old, dict) and isinstance(new, dict):
            cases.append((SCHEMAS[i % 2], new, old if i % 3 else None))

    def outcome(compiled: StructuralSchema, new: Any, old: Any) -> Any:
        try:
            return compiled.validate(new, old, subresource=subresource)
        except TypeError as exc:  # a map-list key that is not a scalar (see the report)
            return repr(exc)

    fast = [outcome(c, new, old) for c, new, old in cases]
    assert any(isinstance(f, list) and f for f in fast), "some cases must fail validation"

    def untouched(node: Any, value: Any, field: str | None, out: list[Any]) -> None:
        schema._run_rules(node, value, value, True, field, out)

    monkeypatch.setattr(schema, "_run_untouched", untouched)
    for index, (compiled, new, old) in enumerate(cases):
        for _ in without_shortcuts(compiled):
            assert outcome(compiled, new, old) == fast[index]


def test_unchanged_matches_the_full_comparison() -> None:
    rng = random.Random(9)
    for _ in range(2000):
        old = {"metadata": {"resourceVersion": "1", "managedFields": [{"time": "t", "x": 1}]}}
        old.update({k: value_for(TYPES[0], rng, odd=0.2) for k in ("spec", "status")})
        new = {
            **old,
            "metadata": {
                "resourceVersion": rng.choice(["1", "2"]),
                "managedFields": [{"time": rng.choice(["t", "u"]), "x": rng.choice([1, 2])}],
            },
        }
        if rng.random() < 0.5:
            new["status"] = changed(old["status"], TYPES[0], rng)
        if rng.random() < 0.1:
            del new["spec"]
        assert objects.unchanged(old, new) == ref.unchanged(old, new)


# -- whole writes, warm and cold --------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def forget_everything(api: ResourceApi) -> None:
    """Copy every stored object and empty every memo: nothing is reused by identity."""
    for objs in api.store._objects.values():
        for key, obj in list(objs.items()):
            objs[key] = copy.deepcopy(obj)
    fieldsets._KNOWN.clear()
    fieldmanager._DECODED.clear()
    fieldmanager._MADE.clear()
    schema._UNTOUCHED.clear()


NAMESPACES = next(r for r in default_resources() if r.plural == "namespaces")


def new_api(clock: Clock) -> ResourceApi:
    api = ResourceApi(Store(), clock)
    info = RequestInfo("POST", "", "create", "namespaces", "", "", "")
    api.create(Call(info, NAMESPACES, {}, json.dumps({"metadata": {"name": "ns"}}).encode()))
    return api


def widget_config(rng: random.Random, part: str) -> dict[str, Any]:
    t = root_type(WIDGET.schema)
    body = value_for(t, rng, odd=0.02)
    body = body if isinstance(body, dict) else {}
    config: dict[str, Any] = {"apiVersion": GV, "kind": "Widget", "metadata": {"name": "w"}}
    if part in body and rng.random() < 0.9:
        config[part] = body[part]
    elif rng.random() < 0.8:
        config[part] = {"phase": "Running", "count": rng.randint(0, 5)}
    return config


def operations(seed: int, count: int) -> list[tuple[str, dict[str, str], bytes, str, float]]:
    """(subresource, query, body, content type, seconds to wait first), seeded."""
    rng = random.Random(seed)
    ops = []
    managers = ["alpha", "beta", "gamma"]
    remembered: dict[str, dict[str, Any]] = {}
    for _ in range(count):
        wait = rng.choice([0.0, 0.0, 1.0])
        manager = rng.choice(managers)
        query = {"fieldManager": manager}
        if rng.random() < 0.5:
            query["force"] = "true"
        if rng.random() < 0.05:
            query["dryRun"] = "All"
        roll = rng.random()
        if roll < 0.55:
            sub = "status"
            if manager in remembered and rng.random() < 0.5:
                config = copy.deepcopy(remembered[manager])  # the same fields again
                status = config.setdefault("status", {})
                if isinstance(status, dict):
                    status["count"] = rng.randint(0, 2000)
            else:
                config = widget_config(rng, "status")
                remembered[manager] = config
            ops.append(
                (sub, query, json.dumps(config).encode(), "application/apply-patch+yaml", wait)
            )
        elif roll < 0.8:
            config = widget_config(rng, "spec")
            ops.append(
                ("", query, json.dumps(config).encode(), "application/apply-patch+yaml", wait)
            )
        else:
            sub = rng.choice(["", "status"])
            t = root_type(WIDGET.schema)
            patch = value_for(t, rng, odd=0.02)
            patch = patch if isinstance(patch, dict) else {}
            keep = {k: v for k, v in patch.items() if k in ("spec", "status")}
            ops.append(
                (sub, query, json.dumps(keep).encode(), "application/merge-patch+json", wait)
            )
    return ops


def run(ops: list[Any], cold: bool) -> list[str]:
    clock = Clock()
    api = new_api(clock)
    created = {
        "apiVersion": GV,
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"name": "w", "ports": [{"port": 80}], "tags": ["x"]},
    }
    info = RequestInfo("POST", "", "create", "widgets", "", "ns", "")
    query = {"fieldManager": "creator"}
    api.create(Call(info, WIDGET, query, json.dumps(created).encode()))
    log = []
    for sub, query, body, content_type, wait in ops:
        clock.now += wait
        if cold:
            forget_everything(api)
        info = RequestInfo("PATCH", "/x", "patch", "widgets", sub, "ns", "w")
        call = Call(info, WIDGET, query, body, content_type)
        try:
            answer = api.patch(call)
            log.append(f"{answer.code} {dumps(answer.body).decode()} {call.warnings}")
        except ApiError as exc:
            log.append(f"{exc.code} {dumps(exc.to_json()).decode()}")
        stored = api.store.get(WIDGET.qualified, "ns", "w")
        log.append(dumps(stored).decode())
    return log


def uid_free(lines: list[str]) -> list[str]:
    return [re.sub(r'"uid":"[^"]*"', '"uid":"-"', line) for line in lines]


@pytest.mark.parametrize("seed", range(6))
def test_writes_reusing_everything_match_writes_reusing_nothing(seed: int) -> None:
    ops = operations(seed, 80)
    warm = run(ops, cold=False)
    assert fieldmanager._DECODED, "the warm run must use the memos"
    assert fieldsets._KNOWN, "the warm run must use the memos"
    cold = run(ops, cold=True)
    assert uid_free(warm) == uid_free(cold)
    answers = [line.split(" ", 1)[0] for line in warm[::2]]
    assert {"200", "409", "422"} <= set(answers), answers


def test_a_repeated_status_apply_reuses_the_stored_field_sets() -> None:
    clock = Clock()
    api = new_api(clock)
    info = RequestInfo("POST", "", "create", "widgets", "", "ns", "")
    body = {"apiVersion": GV, "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}
    api.create(Call(info, WIDGET, {"fieldManager": "creator"}, json.dumps(body).encode()))
    versions = []
    for count in range(3):
        config = {**body, "status": {"phase": "Running", "count": count}}
        info = RequestInfo("PATCH", "/x", "patch", "widgets", "status", "ns", "w")
        query = {"fieldManager": "writer", "force": "true"}
        api.patch(
            Call(info, WIDGET, query, json.dumps(config).encode(), "application/apply-patch+yaml")
        )
        versions.append(api.store.get(WIDGET.qualified, "ns", "w"))
    first, second, third = (
        [e["fieldsV1"] for e in v["metadata"]["managedFields"]] for v in versions
    )
    assert [id(f) for f in second] == [id(f) for f in third]
    assert second == first


def test_decoding_a_stored_entry_twice_gives_equal_managers() -> None:
    clock = Clock()
    api = new_api(clock)
    info = RequestInfo("POST", "", "create", "widgets", "", "ns", "")
    body = {"apiVersion": GV, "kind": "Widget", "metadata": {"name": "w"}, "spec": {"name": "n"}}
    api.create(Call(info, WIDGET, {"fieldManager": "creator"}, json.dumps(body).encode()))
    stored = api.store.get(WIDGET.qualified, "ns", "w")
    assert stored is not None
    entries = stored["metadata"]["managedFields"]
    warm = decode_managed_fields(entries)
    cold = decode_managed_fields(copy.deepcopy(entries))
    assert warm.times == cold.times
    assert list(warm.sets) == list(cold.sets)
    for key, versioned in warm.sets.items():
        other = cold.sets[key]
        assert (versioned.api_version, versioned.applied) == (other.api_version, other.applied)
        assert versioned.fields.same(other.fields)
