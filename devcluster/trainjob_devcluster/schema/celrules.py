"""x-kubernetes-validations rules, compiled once and evaluated with cel-python.

cel-python interprets a rule in hundreds of microseconds, far too slow to run every rule
on every write. Each rule is therefore analysed once to learn which parts of ``self`` and
``oldSelf`` it can observe: a chain of field selections (``self.metadata.name``) needs only
that value, a ``has()`` test only the presence of its field, and anything else (``self``
used whole, indexing, macros) the full value. Evaluation builds a hashable key from exactly
that projection and memoises the outcome on it. CEL is pure, and the projection holds
everything the expression can read, so a hit returns the very result cel-python would
compute; a miss converts only the projected values to CEL and runs the program.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from .schemaformats import INVALID, field_message, parse_date_time

_ROOTS = ("self", "oldSelf")
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
# Outcomes kept per rule; oldest dropped first. Enough for thousands of objects' names.
_MEMO_LIMIT = 8192
_PRESENCE, _SELECT, _FULL = 0, 1, 2


class _Need:
    """What a rule reads of a value: its presence only, some fields, or all of it."""

    __slots__ = ("children", "kind")

    def __init__(self, kind: int = _PRESENCE) -> None:
        self.kind = kind
        self.children: dict[str, _Need] = {}

    def add(self, path: tuple[str, ...], presence_only: bool) -> None:
        node = self
        for name in path:
            if node.kind == _FULL:
                return
            node.kind = _SELECT
            node = node.children.setdefault(name, _Need())
        if not presence_only:
            node.kind = _FULL
            node.children.clear()


@dataclass(frozen=True)
class RuleFailure:
    """A failed (or erroring) rule, ready to become a cause at the rule's field path."""

    reason: str
    message: str
    eval_error: bool


def _unwrap(tree: Any) -> Any:
    """The single meaningful node under a chain of one-child grammar wrappers."""
    while isinstance(tree, lark.Tree) and tree.data not in ("member", "primary"):
        kids = [c for c in tree.children if c is not None]
        if len(kids) != 1:
            return tree
        tree = kids[0]
    return tree


def _chain(member: lark.Tree[Any]) -> tuple[str, tuple[str, ...]] | None:
    """``(root, path)`` if ``member`` is ``root.a.b...`` with root self/oldSelf."""
    path: list[str] = []
    node: Any = member
    while isinstance(node, lark.Tree) and node.data == "member" and len(node.children) == 1:
        inner = node.children[0]
        if inner.data == "member_dot":
            node, ident = inner.children
            path.append(str(ident))
            continue
        if inner.data == "primary" and inner.children[0].data == "ident":
            name = str(inner.children[0].children[0])
            return (name, tuple(reversed(path))) if name in _ROOTS else None
        return None
    return None


def _mentions(tree: lark.Tree[Any], name: str) -> bool:
    return any(
        t.data in ("ident", "dot_ident") and str(t.children[0]) == name
        for t in tree.iter_subtrees()
    )


def _subtrees(tree: lark.Tree[Any]) -> Iterator[lark.Tree[Any]]:
    return (c for c in tree.children if isinstance(c, lark.Tree))


def _collect(tree: lark.Tree[Any], needs: dict[str, _Need]) -> None:
    """Record in ``needs`` every use of self/oldSelf, keeping the maximal select chains."""
    data = tree.data
    if data == "member":
        found = _chain(tree)
        if found is not None:
            if found[0] in needs:
                needs[found[0]].add(found[1], presence_only=False)
            return
    elif data == "ident_arg" and str(tree.children[0]) == "has":
        args = [c for c in tree.children[1:] if c is not None]
        if len(args) == 1 and len(args[0].children) == 1:
            target = _unwrap(args[0].children[0])
            found = _chain(target) if isinstance(target, lark.Tree) else None
            if found is not None and found[1] and found[0] in needs:
                needs[found[0]].add(found[1], presence_only=True)
                return
    elif data == "member_dot_arg" and str(tree.children[1]) in _MACROS:
        arglist = tree.children[2] if len(tree.children) > 2 else None
        first = _unwrap(arglist.children[0]) if isinstance(arglist, lark.Tree) else None
        if isinstance(first, lark.Tree) and _chain(first) in (("self", ()), ("oldSelf", ())):
            # A macro variable shadowing self/oldSelf: give up on projections.
            for need in needs.values():
                need.add((), presence_only=False)
    elif data == "dot_ident" and str(tree.children[0]) in needs:
        needs[str(tree.children[0])].add((), presence_only=False)
    for child in _subtrees(tree):
        _collect(child, needs)


# -- projection keys and CEL values ---------------------------------------------------


def _freeze(value: Any) -> Any:
    """A hashable, type-exact image of decoded JSON (1, 1.0 and True must not collide)."""
    kind = type(value)
    if kind is str or value is None:
        return value
    if kind is dict:
        return ("d", *((k, _freeze(v)) for k, v in value.items()))
    if kind is list:
        return ("l", *(_freeze(v) for v in value))
    return (kind.__name__, value)


def _key(value: Any, need: _Need) -> Any:
    kind = need.kind
    if kind == _FULL:
        return _freeze(value)
    if kind == _PRESENCE:
        return True
    if type(value) is not dict:
        return ("!", _freeze(value))
    # ("s", (name, key), ...) for the selected fields present; a loop, not a generator:
    # this runs for every rule on every write.
    parts: list[Any] = ["s"]
    for n, c in need.children.items():
        if n in value:
            parts.append((n, _key(value[n], c)))
    return tuple(parts)


_META = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "generateName": {"type": "string"}},
}
_STRING = {"type": "string"}


def _field_schema(schema: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    if schema is None:
        return None
    if schema.get("x-kubernetes-embedded-resource") or schema.get("_root"):
        # A resource exposes apiVersion, kind and only name/generateName of its metadata.
        if name == "metadata":
            return _META
        if name in ("apiVersion", "kind"):
            return _STRING
    props = schema.get("properties") or {}
    if name in props:
        found: dict[str, Any] = props[name]
        return found
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def _visible(schema: dict[str, Any] | None, name: str) -> bool:
    if schema is None or (
        schema.get("x-kubernetes-preserve-unknown-fields")
        and not (schema.get("properties") or schema.get("additionalProperties"))
    ):
        return True
    return _field_schema(schema, name) is not None


def to_cel(value: Any, schema: dict[str, Any] | None) -> Any:
    """``value`` as CEL sees it under ``schema``: typed as the API server's CEL types it."""
    kind = type(value)
    if value is None:
        return None
    if kind is dict:
        return celtypes.MapType(
            {
                celtypes.StringType(k): to_cel(v, _field_schema(schema, k))
                for k, v in value.items()
                if _visible(schema, k)
            }
        )
    if kind is list:
        items = schema.get("items") if schema else None
        return celtypes.ListType([to_cel(v, items) for v in value])
    typ = schema.get("type") if schema else None
    if kind is bool:
        return celtypes.BoolType(value)
    if kind is int:
        return celtypes.DoubleType(value) if typ == "number" else celtypes.IntType(value)
    if kind is float:
        if typ == "integer" and value.is_integer():
            return celtypes.IntType(int(value))
        return celtypes.DoubleType(value)
    return _string_to_cel(value, schema.get("format", "") if schema else "")


def _string_to_cel(value: str, fmt: str) -> Any:
    # The API server types formatted strings (date, date-time, duration, byte) in CEL.
    try:
        if fmt in ("date-time", "datetime", "date"):
            stamp = parse_date_time(value if fmt != "date" else value + "T00:00:00Z")
            if stamp is not None:
                return celtypes.TimestampType(stamp)
        elif fmt == "duration":
            return celtypes.DurationType(value)
        elif fmt == "byte":
            return celtypes.BytesType(base64.b64decode(value))
    except ValueError:
        pass
    return celtypes.StringType(value)


def _project(value: Any, need: _Need, schema: dict[str, Any] | None) -> Any:
    """The CEL value of the projection: unread values become null, only ever has()-tested."""
    if need.kind == _PRESENCE:
        return None
    if need.kind == _FULL or type(value) is not dict:
        return to_cel(value, schema)
    return celtypes.MapType(
        {
            celtypes.StringType(n): _project(value[n], c, _field_schema(schema, n))
            for n, c in need.children.items()
            if n in value and _visible(schema, n)
        }
    )


# -- rules ----------------------------------------------------------------------------


class CelRule:
    """One x-kubernetes-validations entry of one schema node."""

    def __init__(
        self,
        spec: dict[str, Any],
        schema: dict[str, Any],
        *,
        root: bool,
        env: celpy.Environment | None = None,
    ) -> None:
        self.rule: str = spec["rule"]
        self.message: str = (spec.get("message") or "").strip()
        self.reason: str = spec.get("reason") or INVALID
        self.field_path: str = (spec.get("fieldPath") or "").lstrip(".")
        self._schema = dict(schema, _root=True) if root else schema
        # Building an environment builds a parser; one schema shares one across its rules.
        env = env or celpy.Environment()
        try:
            ast = env.compile(self.rule)
            message_source = spec.get("messageExpression")
            message_ast = env.compile(message_source) if message_source else None
        except CELParseError as exc:
            raise ValueError(f"x-kubernetes-validations rule {self.rule!r}: {exc}") from exc
        self._program = env.program(ast)
        self._message_program = env.program(message_ast) if message_ast is not None else None
        trees = [ast] if message_ast is None else [ast, message_ast]
        # As in the API server, a rule that names oldSelf is a transition rule.
        self.uses_old_self = any(_mentions(tree, "oldSelf") for tree in trees)
        needs = {"self": _Need()}
        if self.uses_old_self:
            needs["oldSelf"] = _Need()
        for tree in trees:
            _collect(tree, needs)
        self._need_self = needs["self"]
        self._need_old = needs.get("oldSelf", _Need())
        self._memo: dict[Any, RuleFailure | None] = {}

    def _error_label(self) -> str:
        # apiextensions' ruleErrorString: the message if there is one, else the rule.
        return self.message or self.rule.strip()

    @property
    def memo_size(self) -> int:
        """How many distinct projections have been evaluated and kept."""
        return len(self._memo)

    def check(self, value: Any, old: Any, has_old: bool) -> RuleFailure | None:
        """None if the rule holds for ``self=value`` (and ``oldSelf=old`` when it has one)."""
        with_old = has_old and self.uses_old_self
        key = (
            _key(value, self._need_self),
            _key(old, self._need_old) if with_old else None,
        )
        if key in self._memo:
            return self._memo[key]
        outcome = self._evaluate(value, old, with_old)
        if len(self._memo) >= _MEMO_LIMIT:
            del self._memo[next(iter(self._memo))]
        self._memo[key] = outcome
        return outcome

    def _evaluate(self, value: Any, old: Any, with_old: bool) -> RuleFailure | None:
        activation = {"self": _project(value, self._need_self, self._schema)}
        if with_old:
            activation["oldSelf"] = _project(old, self._need_old, self._schema)
        try:
            result = self._program.evaluate(activation)
        except CELEvalError as exc:
            return self._eval_error(_describe(exc))
        except Exception as exc:  # cel-python surfaces some type errors as Python ones
            return self._eval_error(str(exc))
        if isinstance(result, CELEvalError):
            return self._eval_error(_describe(result))
        if not isinstance(result, celtypes.BoolType):
            return self._eval_error("rule did not evaluate to a bool")
        if result:
            return None
        detail = (
            self._custom_message(activation) or self.message or f"failed rule: {self.rule.strip()}"
        )
        return RuleFailure(
            self.reason, field_message(self.reason, None, detail, show_value=False), False
        )

    def _custom_message(self, activation: dict[str, Any]) -> str | None:
        """messageExpression's text; None to fall back (error, non-string, empty, multi-line)."""
        if self._message_program is None:
            return None
        try:
            text = self._message_program.evaluate(activation)
        except Exception:  # a failing messageExpression falls back to the static message
            return None
        if not isinstance(text, str) or not text.strip() or "\n" in text:
            return None
        return text.strip()

    def _eval_error(self, what: str) -> RuleFailure:
        detail = f"{what} evaluating rule: {self._error_label()}"
        return RuleFailure(INVALID, field_message(INVALID, None, detail, show_value=False), True)


def _describe(exc: CELEvalError) -> str:
    """cel-python's error in the words cel-go uses for the same failure, where known."""
    args = exc.args
    text = str(args[0]) if args else str(exc)
    if len(args) > 1 and args[1] is KeyError and text.startswith("no such member"):
        return "no such key: " + text.rsplit(":", 1)[-1].strip().strip("'")
    if len(args) > 1 and args[1] is ZeroDivisionError:
        return "division by zero"
    return text
