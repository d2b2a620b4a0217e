"""Inputs for test_fastpaths: a resource whose schema has every kind of node the write path
treats specially, and seeded generators of values that fit it, nearly fit it, or do not.

Generated pairs share unchanged subtrees by identity, as a stored object and the next
version of it do, because that is where the fast paths take over.
"""

from __future__ import annotations

import random
from typing import Any

from trainjob_devcluster.common.resources import resource_from_crd
from trainjob_devcluster.storage.typed import ListType, MapType, Scalar, TypeRef, resolve

GROUP = "example.dev"
GV = f"{GROUP}/v1"

_CONDITION = {
    "type": "object",
    "required": ["type"],
    "x-kubernetes-preserve-unknown-fields": True,
    "properties": {"type": {"type": "string"}, "status": {"type": "string"}},
}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "properties": {
                "replicas": {"type": "integer", "minimum": 0, "maximum": 10, "default": 1},
                "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                "name": {"type": "string", "minLength": 1, "maxLength": 8},
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["port", "protocol"],
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "integer"},
                            "protocol": {"type": "string", "default": "TCP"},
                            "note": {"type": "string", "nullable": True},
                        },
                    },
                },
                "tags": {
                    "type": "array",
                    "x-kubernetes-list-type": "set",
                    "items": {"type": "string"},
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "opaque": {
                    "type": "object",
                    "x-kubernetes-map-type": "atomic",
                    "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                },
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "size": {"x-kubernetes-int-or-string": True},
                "ratio": {
                    "type": "number",
                    "format": "float",
                    "exclusiveMinimum": True,
                    "minimum": 0,
                },
                "nested": {
                    "type": "object",
                    "properties": {
                        "deep": {
                            "type": "object",
                            "properties": {
                                "x": {"type": "integer", "default": 3},
                                "flag": {"type": "boolean"},
                            },
                        },
                        "rows": {
                            "type": "array",
                            "items": {"type": "object", "properties": {"v": {"type": "number"}}},
                        },
                    },
                },
            },
            "x-kubernetes-validations": [
                {"rule": "!has(self.name) || self.name != 'bad'", "message": "no bad names"},
                {
                    "rule": "!has(self.replicas) || !has(oldSelf.replicas) || "
                    "self.replicas >= oldSelf.replicas",
                    "message": "replicas may not shrink",
                },
            ],
        },
        "status": {
            "type": "object",
            "properties": {
                "conditions": {
                    "type": "array",
                    "maxItems": 4,
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["type"],
                    "items": _CONDITION,
                },
                "phase": {"type": "string", "enum": ["Pending", "Running", "Done"]},
                "count": {"type": "integer", "format": "int32", "minimum": 0},
                "ready": {"type": "boolean"},
                "when": {"type": "string", "format": "date-time"},
                "items": {
                    "type": "array",
                    "x-kubernetes-list-type": "atomic",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string", "minLength": 1}},
                    },
                },
            },
            "x-kubernetes-validations": [
                {"rule": "!has(self.count) || self.count < 1000", "message": "too many"}
            ],
        },
    },
}
CRD: dict[str, Any] = {
    "spec": {
        "group": GROUP,
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": SCHEMA},
            }
        ],
    }
}
WIDGET = resource_from_crd(CRD)

_WORDS = ["a", "b", "TCP", "UDP", "x", "bad", "Ready", "Done", "Running", "", "long-name-here"]
_ODD: list[Any] = [None, {}, [], 0, 1, -1, 2.5, 1.0, True, False, "s", [1, 2], {"k": "v"}]


def scalar_for(kind: str, rng: random.Random) -> Any:
    if kind == "numeric":
        return rng.choice([0, 1, 3, 7, 11, -2, 2.5, 1.0, 10**12])
    if kind == "boolean":
        return rng.choice([True, False])
    if kind == "string":
        return rng.choice(_WORDS)
    return rng.choice(["2026-12-02T18:33:25Z", "not-a-time", 5, "7"])


def value_for(t: TypeRef, rng: random.Random, depth: int = 0, odd: float = 0.08) -> Any:
    """A value of type ``t``: mostly well-formed, sometimes of another shape or null."""
    if rng.random() < odd:
        return rng.choice(_ODD)
    atom = resolve(t, {} if depth < 3 and rng.random() < 0.5 else "x")
    if isinstance(atom, Scalar):
        return scalar_for(atom.kind, rng)
    if isinstance(atom, ListType):
        items = [value_for(atom.element, rng, depth + 1, odd) for _ in range(rng.randint(0, 4))]
        if atom.keys and items and rng.random() < 0.3:
            items.append(items[0])  # a duplicate key
        return items
    if depth > 4:
        return {}
    out: dict[str, Any] = {}
    names = list(atom.fields)
    rng.shuffle(names)
    for name in names[: rng.randint(0, len(names))]:
        out[name] = value_for(atom.fields[name], rng, depth + 1, odd)
    if atom.element is not None or rng.random() < 0.1:
        for _ in range(rng.randint(0, 2)):
            out[rng.choice(["k1", "k2", "extra"])] = value_for(
                atom.element or t, rng, depth + 1, odd
            )
    return out


def changed(value: Any, t: TypeRef, rng: random.Random, depth: int = 0) -> Any:
    """Another version of ``value``: some parts new, the rest the very same objects."""
    roll = rng.random()
    if roll < 0.35:
        return value
    if roll < 0.45:
        return value_for(t, rng, depth)
    atom = resolve(t, value)
    if isinstance(value, dict) and isinstance(atom, MapType):
        out = {}
        for key, item in value.items():
            if rng.random() < 0.15:
                continue
            child = atom.fields.get(key) or atom.element or t
            out[key] = changed(item, child, rng, depth + 1)
        if rng.random() < 0.3 and atom.fields:
            key = rng.choice(list(atom.fields))
            out[key] = value_for(atom.fields[key], rng, depth + 1)
        return out
    if isinstance(value, list) and isinstance(atom, ListType):
        out_list = [changed(item, atom.element, rng, depth + 1) for item in value]
        rng.shuffle(out_list)
        if rng.random() < 0.3:
            out_list.append(value_for(atom.element, rng, depth + 1))
        return out_list
    return value_for(t, rng, depth)
