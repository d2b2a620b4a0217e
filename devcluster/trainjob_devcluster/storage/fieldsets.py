"""Sets of field paths, as managedFields records them (the ``FieldsV1`` format).

A path element is kept as its FieldsV1 key: ``f:name`` (a struct field or map key),
``k:{"type":"Ready"}`` (an element of a list keyed by x-kubernetes-list-map-keys),
``v:"x"`` (an element of a set list) or ``i:3`` (a list index). A path is a tuple of them.

A set is a tree. At each level, ``members`` are the elements that are themselves in the set
and ``children`` hold the deeper paths. In FieldsV1 an element that is both a member and a
parent is written with a ``"."`` entry: ``{"f:spec": {".": {}, "f:suspend": {}}}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..common.go_text import go_json, go_value_string

__all__ = [
    "FieldSet",
    "Path",
    "field_pe",
    "index_pe",
    "key_pe",
    "path_string",
    "pe_string",
    "value_pe",
]

Path = tuple[str, ...]


def field_pe(name: str) -> str:
    return "f:" + name


def key_pe(keys: Mapping[str, Any]) -> str:
    return "k:" + go_json(dict(keys))


def value_pe(value: Any) -> str:
    return "v:" + go_json(value)


def index_pe(index: int) -> str:
    return f"i:{index}"


def _value_rank(value: Any) -> tuple[Any, ...]:
    # structured-merge-diff orders values: numbers < strings < booleans < lists < maps < null.
    if isinstance(value, bool):
        return (2, value)
    if isinstance(value, int | float):
        return (0, float(value))
    if isinstance(value, str):
        return (1, value)
    if isinstance(value, list):
        return (3, tuple(_value_rank(v) for v in value))
    if isinstance(value, dict):
        return (4, tuple((k, _value_rank(value[k])) for k in sorted(value)))
    return (5,)


def _pe_order(pe: str) -> tuple[Any, ...]:
    kind, text = pe[0], pe[2:]
    if kind == "f":
        return (0, text)
    if kind == "k":
        keys = json.loads(text)
        return (1, tuple((k, _value_rank(keys[k])) for k in sorted(keys)))
    if kind == "v":
        return (2, _value_rank(json.loads(text)))
    return (3, int(text))


def pe_string(pe: str) -> str:
    """A path element as a message prints it: ``.name``, ``[type="Ready"]``, ``[0]``."""
    kind, text = pe[0], pe[2:]
    if kind == "f":
        return "." + text
    if kind == "k":
        keys = json.loads(text)
        return "[" + ",".join(f"{k}={go_value_string(keys[k])}" for k in sorted(keys)) + "]"
    if kind == "v":
        return "[=" + go_value_string(json.loads(text)) + "]"
    return f"[{text}]"


def path_string(path: Path) -> str:
    return "".join(pe_string(pe) for pe in path)


class FieldSet:
    """A set of paths.

    A set is never changed once built: operations return new sets (which may share
    subtrees with their operands), and only ``insert`` (for a set being built) mutates.
    A child node is never empty, so a node is empty exactly when it has no members and
    no children.
    """

    __slots__ = ("children", "members")

    def __init__(
        self, members: Iterable[str] = (), children: Mapping[str, FieldSet] | None = None
    ) -> None:
        self.members: set[str] = set(members)
        self.children: dict[str, FieldSet] = (
            {pe: child for pe, child in children.items() if not child.empty()} if children else {}
        )

    def __repr__(self) -> str:
        return f"FieldSet({self.to_fields_v1()!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FieldSet):
            return NotImplemented
        return self.same(other)

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def of(cls, *paths: Path) -> FieldSet:
        built = cls()
        for path in paths:
            built.insert(path)
        return built

    def insert(self, path: Path) -> None:
        if not path:
            return
        node = self
        for pe in path[:-1]:
            node = node.children.setdefault(pe, FieldSet())
        node.members.add(path[-1])

    def empty(self) -> bool:
        # No child is empty (see above), so a node with a child is not empty either.
        return not self.members and not self.children

    def same(self, other: FieldSet) -> bool:
        """Whether both hold exactly the same paths."""
        return set(self.paths()) == set(other.paths())

    def subset_of(self, other: FieldSet) -> bool:
        """Whether every path of self is a path of other."""
        return set(self.paths()) <= set(other.paths())

    def union(self, other: FieldSet) -> FieldSet:
        children = dict(self.children)
        for pe, theirs in other.children.items():
            mine = children.get(pe)
            children[pe] = theirs if mine is None else mine.union(theirs)
        return FieldSet(self.members | other.members, children)

    def intersection(self, other: FieldSet) -> FieldSet:
        children: dict[str, FieldSet] = {}
        for pe, mine in self.children.items():
            theirs = other.children.get(pe)
            if theirs is not None:
                children[pe] = mine.intersection(theirs)
        return FieldSet(self.members & other.members, children)

    def difference(self, other: FieldSet) -> FieldSet:
        """Paths of self that are not paths of other (exact paths, not prefixes)."""
        children: dict[str, FieldSet] = {}
        for pe, mine in self.children.items():
            theirs = other.children.get(pe)
            children[pe] = mine if theirs is None else mine.difference(theirs)
        return FieldSet(self.members - other.members, children)

    def recursive_difference(self, other: FieldSet) -> FieldSet:
        """Like difference, and also drops every path under a member of ``other``."""
        children: dict[str, FieldSet] = {}
        for pe, mine in self.children.items():
            if pe in other.members:
                continue
            theirs = other.children.get(pe)
            children[pe] = mine if theirs is None else mine.recursive_difference(theirs)
        return FieldSet(self.members - other.members, children)

    def paths(self, prefix: Path = ()) -> Iterator[Path]:
        """Every member path: this level's members first, then each child, in key order."""
        for pe in sorted(self.members, key=_pe_order):
            yield (*prefix, pe)
        for pe in sorted(self.children, key=_pe_order):
            yield from self.children[pe].paths((*prefix, pe))

    def to_fields_v1(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for pe in sorted(self.members | set(self.children), key=_pe_order):
            child = self.children.get(pe)
            inner = child.to_fields_v1() if child is not None and not child.empty() else {}
            if pe in self.members and inner:
                inner = {".": {}, **inner}
            if pe in self.members or inner:
                out[pe] = inner
        return out

    @classmethod
    def from_fields_v1(cls, fields: Any) -> FieldSet:
        """Decode FieldsV1 JSON; raises ValueError on anything that is not one."""
        if not isinstance(fields, dict):
            raise ValueError("FieldsV1 must be a JSON object")
        built = cls()
        for pe, inner in fields.items():
            if pe == ".":
                continue
            if not isinstance(pe, str) or pe[:2] not in ("f:", "k:", "v:", "i:"):
                raise ValueError(f"unknown path element {pe!r}")
            if pe[0] in "kv":
                try:
                    decoded = json.loads(pe[2:])
                except json.JSONDecodeError as exc:
                    raise ValueError(f"bad path element {pe!r}") from exc
                if pe[0] == "k" and not isinstance(decoded, dict):
                    raise ValueError(f"bad path element {pe!r}")
                pe = key_pe(decoded) if pe[0] == "k" else value_pe(decoded)
            elif pe[0] == "i" and not pe[2:].isdigit():
                raise ValueError(f"bad path element {pe!r}")
            if not isinstance(inner, dict):
                raise ValueError(f"path element {pe!r} must map to an object")
            sub = cls.from_fields_v1(inner)
            if "." in inner or not inner:
                built.members.add(pe)
            if not sub.empty():
                built.children[pe] = sub
        return built
