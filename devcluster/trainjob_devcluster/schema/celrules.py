"""x-kubernetes-validations rules, compiled once and evaluated with cel-python.

``self`` (and ``oldSelf`` for a transition rule) are the whole values, converted to CEL
the way the API server types them.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from .schemaformats import INVALID, field_message, parse_date_time


@dataclass(frozen=True)
class RuleFailure:
    """A failed (or erroring) rule, ready to become a cause at the rule's field path."""

    reason: str
    message: str
    eval_error: bool


def _mentions(tree: lark.Tree[Any], name: str) -> bool:
    return any(
        t.data in ("ident", "dot_ident") and str(t.children[0]) == name
        for t in tree.iter_subtrees()
    )


# -- CEL values ------------------------------------------------------------------------


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

    def _error_label(self) -> str:
        # apiextensions' ruleErrorString: the message if there is one, else the rule.
        return self.message or self.rule.strip()

    def check(self, value: Any, old: Any, has_old: bool) -> RuleFailure | None:
        """None if the rule holds for ``self=value`` (and ``oldSelf=old`` when it has one)."""
        activation = {"self": to_cel(value, self._schema)}
        if has_old and self.uses_old_self:
            activation["oldSelf"] = to_cel(old, self._schema)
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
