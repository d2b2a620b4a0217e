"""A custom resource's structural schema: defaulting, pruning and validation.

Everything here is driven by the CRD's openAPIV3Schema alone, so a schema change is a
change to the CRD file. The validation reproduces the causes, their order and wording of a
real kube-apiserver (v1.36):

1. the OpenAPI checks (go-openapi), rooted at the whole object for writes to the main
   resource and at the ``status`` schema for writes to the status subresource, which is
   why a status cause has field ``status.trainerStatus.x`` but message path
   ``trainerStatus.x``;
2. the x-kubernetes-list-type map/set uniqueness checks;
3. the x-kubernetes-validations CEL rules on the whole object, unless an earlier cause is
   "blocking" (type, format, required, enum, too long, too many), in which case one
   "some validation rules were not checked" cause stands in for them.

With an old object (an update), ratcheting applies: a value deep-equal to its old
counterpart is not re-checked, and CEL rules that do not read ``oldSelf`` keep quiet on
unchanged values, while rules that do read ``oldSelf`` run only where an old value exists.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import celpy

from ..common.status import Cause
from .celrules import CelRule
from .schemaformats import BLOCKING_REASONS, DUPLICATE, INVALID, field_message
from .schemanode import Fault, Node, fault_cause, same

__all__ = ["NOT_CHECKED", "StructuralSchema"]

NOT_CHECKED = Cause(
    INVALID,
    "Invalid value: null: some validation rules were not checked because the object was "
    "invalid; correct the existing errors to complete validation",
    "<nil>",
)
# Fields of a resource (the root, or an x-kubernetes-embedded-resource) that the schema
# does not describe but that are never pruned.
_META_FIELDS = frozenset({"apiVersion", "kind", "metadata"})


def _child(field: str | None, name: str) -> str:
    return f"{field}.{name}" if field else name


class StructuralSchema:
    """One version's openAPIV3Schema, compiled once (CEL programs included)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self._root = Node(schema)
        self._compile(self._root, celpy.Environment(), root=True)

    def _compile(self, node: Node, env: celpy.Environment, *, root: bool = False) -> None:
        node.rules = [
            CelRule(spec, node.raw, root=root, env=env)
            for spec in node.raw.get("x-kubernetes-validations") or ()
        ]
        for child in node.children():
            self._compile(child, env)

    # -- defaulting -----------------------------------------------------------------

    def apply_defaults(self, obj: dict[str, Any]) -> None:
        """Fill in ``default:`` values in place, as the API server does on decoding.

        As there, a null in a non-nullable field is dropped first (and then defaulted if
        the schema has a default); nulls in nullable fields stay and are not defaulted.
        """
        _default(obj, self._root)

    # -- pruning ----------------------------------------------------------------------

    def prune(self, obj: dict[str, Any]) -> list[str]:
        """Drop fields the schema does not know, in place; return their dotted paths."""
        removed: list[str] = []
        _prune(obj, self._root, "", removed, resource=True)
        return removed

    # -- validation -------------------------------------------------------------------

    def validate(
        self,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        *,
        subresource: str | None = None,
        prior: Sequence[Cause] = (),
    ) -> list[Cause]:
        """Every schema and CEL cause of ``obj``, in the real server's order and words.

        ``old`` is the stored object of an update (None for a create): it enables
        ratcheting and transition rules. ``subresource="status"`` validates a write to the
        status subresource, whose OpenAPI check is rooted at the status schema. ``prior``
        are causes the caller already has (the metadata.name checks): they are not
        returned, but a blocking one among them also keeps the CEL rules from running.
        """
        faults: list[Fault] = []
        if subresource is None:
            self._root.check(obj, "", old, old is not None, faults)
        else:
            node = self._root.properties.get(subresource)
            if node is not None and subresource in obj:
                olds = old or {}
                had = subresource in olds
                node.check(obj[subresource], "", olds.get(subresource), had, faults)
        causes = [fault_cause(f, subresource) for f in faults]
        # An old object with duplicates already does not fail on them again (ratcheting).
        if old is None or not _list_errors(old, self._root, None):
            causes.extend(_list_errors(obj, self._root, None))
        if any(c.reason in BLOCKING_REASONS for c in (*prior, *causes)):
            causes.append(NOT_CHECKED)
        else:
            _run_rules(self._root, obj, old, old is not None, None, causes)
        return causes


# -- helpers -----------------------------------------------------------------------


def _default(value: Any, node: Node) -> None:
    if type(value) is dict:
        props, extra = node.properties, node.additional
        for key in [k for k, v in value.items() if v is None]:
            prop = props.get(key) or extra
            if prop is not None and not prop.nullable:
                if prop.has_default:
                    value[key] = copy.deepcopy(prop.default)
                else:
                    del value[key]
        for key, prop in props.items():
            if prop.has_default and key not in value:
                value[key] = copy.deepcopy(prop.default)
        for key, item in value.items():
            prop = props.get(key) or extra
            if prop is not None:
                _default(item, prop)
    elif type(value) is list and node.items is not None:
        items = node.items
        for i, item in enumerate(value):
            if item is None and not items.nullable and items.has_default:
                value[i] = item = copy.deepcopy(items.default)
            _default(item, items)


def _prune(value: Any, node: Node, path: str, removed: list[str], *, resource: bool) -> None:
    if type(value) is dict:
        for key in list(value):
            if resource and key in _META_FIELDS:
                continue
            sub = f"{path}.{key}" if path else key
            prop = node.properties.get(key) or node.additional
            if prop is not None:
                _prune(value[key], prop, sub, removed, resource=prop.embedded)
            elif not node.preserve_unknown:
                removed.append(sub)
                del value[key]
    elif type(value) is list and node.items is not None:
        for i, item in enumerate(value):
            _prune(item, node.items, f"{path}[{i}]", removed, resource=node.items.embedded)


def _list_errors(value: Any, node: Node, field: str | None) -> list[Cause]:
    """x-kubernetes-list-type map/set uniqueness, over the whole object."""
    out: list[Cause] = []
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            prop = node.properties.get(key)
            if prop is not None:
                out.extend(_list_errors(item, prop, _child(field, key)))
            elif node.additional is not None:
                out.extend(_list_errors(item, node.additional, f"{field or ''}[{key}]"))
    elif kind is list:
        if node.list_type == "map":
            out.extend(_map_list_errors(value, node, field or ""))
        elif node.list_type == "set":
            seen: list[Any] = []
            for i, item in enumerate(value):
                if any(same(item, s) for s in seen):
                    where = f"{field or ''}[{i}]"
                    out.append(Cause(DUPLICATE, field_message(DUPLICATE, item, ""), where))
                else:
                    seen.append(item)
        if node.items is not None:
            for i, item in enumerate(value):
                out.extend(_list_errors(item, node.items, f"{field or ''}[{i}]"))
    return out


def _map_list_errors(value: list[Any], node: Node, field: str) -> list[Cause]:
    for i, item in enumerate(value):
        if item is not None and type(item) is not dict:
            detail = "must be an object for an array of list-type map"
            return [Cause(INVALID, field_message(INVALID, item, detail), f"{field}[{i}]")]
    out: list[Cause] = []
    seen: set[Any] = set()
    for i, item in enumerate(value):
        if item is None or any(k not in item for k in node.list_keys):
            continue
        key = node.map_key(item)
        if key in seen:
            shown = {k: item[k] for k in node.list_keys}
            out.append(Cause(DUPLICATE, field_message(DUPLICATE, shown, ""), f"{field}[{i}]"))
        else:
            seen.add(key)
    return out


def _run_rules(
    node: Node, value: Any, old: Any, has_old: bool, field: str | None, out: list[Cause]
) -> None:
    """Evaluate the CEL rules of ``node`` and below, parents before children."""
    if value is None:
        return
    if node.rules:
        unchanged = has_old and same(value, old)
        for rule in node.rules:
            # A transition rule needs an old value; any other rule is ratcheted on a value
            # that did not change, so its verdict there cannot matter and is not computed.
            skip = not has_old if rule.uses_old_self else unchanged
            if skip:
                continue
            failure = rule.check(value, old, has_old)
            if failure is not None:
                where = _child(field, rule.field_path) if rule.field_path else field
                out.append(Cause(failure.reason, failure.message, where or "<nil>"))
    kind = type(value)
    if kind is dict:
        olds = old if has_old and type(old) is dict else None
        props, extra = node.properties, node.additional
        for key, item in value.items():
            prop = props.get(key)
            if prop is not None:
                sub = _child(field, key)
            elif extra is not None:
                prop, sub = extra, f"{field or ''}[{key}]"
            else:
                continue
            if olds is not None and key in olds:
                _run_rules(prop, item, olds[key], True, sub, out)
            else:
                _run_rules(prop, item, None, False, sub, out)
    elif kind is list and node.items is not None:
        items = node.items
        by_key = (
            {node.map_key(o): o for o in old}
            if has_old and type(old) is list and node.list_type == "map"
            else None
        )
        for i, item in enumerate(value):
            sub = f"{field or ''}[{i}]"
            if by_key is not None and node.map_key(item) in by_key:
                _run_rules(items, item, by_key[node.map_key(item)], True, sub, out)
            elif has_old and node.list_type == "set" and any(same(item, o) for o in old):
                _run_rules(items, item, item, True, sub, out)
            else:
                _run_rules(items, item, None, False, sub, out)
