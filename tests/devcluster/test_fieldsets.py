"""Field sets behave as sets of paths, and round-trip through FieldsV1."""

from __future__ import annotations

import random

from trainjob_devcluster.storage.fieldsets import FieldSet


def paths(fs: FieldSet) -> set[tuple[str, ...]]:
    return set(fs.paths())


def canonical(fs: FieldSet) -> bool:
    """No empty node below the top."""
    return all(
        (child.members or child.children) and canonical(child) for child in fs.children.values()
    )


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


def test_field_sets_round_trip_through_fields_v1() -> None:
    rng = random.Random(6)
    for _ in range(500):
        fs = FieldSet.of(*random_paths(rng))
        assert paths(FieldSet.from_fields_v1(fs.to_fields_v1())) == paths(fs)
