"""Shortcuts for the OpenAPI checks of plain scalar values.

Most leaves of a write are a well-formed string, integer or boolean. For such schema nodes
a test that is true only when Node.check would find nothing lets the walk skip the call and
the message path it builds; anything the test does not accept gets the full check.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .schemanode import INT_RANGES, Node

__all__ = ["quick_check"]


def quick_check(node: Node) -> Callable[[Any], bool] | None:
    """What check() finds nothing wrong with, for plain scalar schemas and objects of
    them (others: None). An object's test uses its properties' tests: they must be set
    first (the owner compiles children before parents)."""
    if node.enum is not None or node.int_or_string:
        return None
    if node.type == "object":
        return _quick_object(node)
    if node.type == "boolean":
        return lambda v: type(v) is bool
    if node.type == "string" and node.pattern_re is None and node.format_check is None:
        short = node.min_length or 0
        long = node.max_length if node.max_length is not None else math.inf
        return lambda v: type(v) is str and short <= len(v) <= long
    if node.type == "integer" and node.multiple_of is None:
        low, high = INT_RANGES.get(node.format, INT_RANGES[""])
        floor, ceiling = node.minimum, node.maximum
        above: Callable[[int], bool] = (
            (lambda v: True)
            if floor is None
            else (lambda v: v > floor)
            if node.excl_min
            else (lambda v: v >= floor)
        )
        below: Callable[[int], bool] = (
            (lambda v: True)
            if ceiling is None
            else (lambda v: v < ceiling)
            if node.excl_max
            else (lambda v: v <= ceiling)
        )
        return lambda v: type(v) is int and low <= v <= high and above(v) and below(v)
    return None


def _quick_object(node: Node) -> Callable[[Any], bool] | None:
    """For an object schema whose every property has a test and that allows nothing else
    (no additionalProperties, no property counts): a map passes when each of its
    properties passes and every required one is there. check() then finds nothing: the
    object validator checks the counts, each known property and the required ones, and
    leaves other keys alone (pruning's business)."""
    if node.additional is not None or node.min_props is not None or node.max_props is not None:
        return None
    tests = {name: prop.quick for name, prop in node.properties.items()}
    if not tests or any(test is None for test in tests.values()):
        return None
    required = node.required

    def quick(value: Any) -> bool:
        if type(value) is not dict:
            return False
        for key, item in value.items():
            test = tests.get(key)
            if test is not None and not test(item):
                return False
        return all(name in value for name in required)

    return quick
