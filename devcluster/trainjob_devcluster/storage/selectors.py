"""Label and field selectors as the API server parses them (pure).

The label selector parser is the cluster's own, not the status server's (whose pod
injector parses ``--inject-selector``): the cluster answers the server's lists, so a
mistake in one parser shows as a difference instead of agreeing with itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..common.status import ApiError

__all__ = [
    "Requirement",
    "labels_match",
    "parse_field_selector",
    "parse_label_selector",
]


@dataclass(frozen=True, slots=True)
class Requirement:
    """One term of a label selector: ``key`` ``in`` or ``notin`` a set of values, or
    ``exists`` or ``!exists`` (``k=v`` is ``in {v}``, ``k!=v`` is ``notin {v}``)."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "exists":
            return present
        if self.operator == "!exists":
            return not present
        inside = present and labels[self.key] in self.values
        # notin (and !=) select an object without the label too, as a real server does.
        return inside if self.operator == "in" else not inside


# apimachinery's selector lexer: operators and parentheses, commas, and identifiers (runs
# of anything else but whitespace); "in" and "notin" are identifiers read by position.
_TOKENS = re.compile(r"\s*(==|!=|=|!|\(|\)|,|[^\s!=(),]+)\s*")
_SYMBOLS = frozenset({"==", "!=", "=", "!", "(", ")", ","})


class _BadSelector(Exception):
    pass


def _tokens(text: str) -> list[str]:
    found: list[str] = []
    at = 0
    while at < len(text):
        token = _TOKENS.match(text, at)
        if token is None:
            raise _BadSelector
        found.append(token.group(1))
        at = token.end()
    return found


def _identifier(tokens: Sequence[str], at: int) -> str:
    if at >= len(tokens) or tokens[at] in _SYMBOLS:
        raise _BadSelector
    return tokens[at]


def _value_set(tokens: Sequence[str], at: int) -> tuple[frozenset[str], int]:
    """``(a, b)`` from the opening parenthesis at ``at``; the index after the closing one.
    A slot left empty between commas is the empty value, as apimachinery reads ``(a,)``."""
    if at + 1 >= len(tokens) or tokens[at] != "(" or tokens[at + 1] == ")":
        raise _BadSelector
    values: set[str] = set()
    at += 1
    while at < len(tokens):
        if tokens[at] in _SYMBOLS:
            values.add("")
        else:
            values.add(tokens[at])
            at += 1
        if at < len(tokens) and tokens[at] == ")":
            return frozenset(values), at + 1
        if at >= len(tokens) or tokens[at] != ",":
            raise _BadSelector
        at += 1
    raise _BadSelector


def _requirement(tokens: Sequence[str], at: int) -> tuple[Requirement, int]:
    """The requirement starting at ``at``, and the index of the token after it."""
    if tokens[at] == "!":
        return Requirement(_identifier(tokens, at + 1), "!exists"), at + 2
    key = _identifier(tokens, at)
    operator = tokens[at + 1] if at + 1 < len(tokens) else ","
    if operator == ",":
        return Requirement(key, "exists"), at + 1
    if operator in ("in", "notin"):
        values, end = _value_set(tokens, at + 2)
        return Requirement(key, operator, values), end
    if operator in ("=", "==", "!="):
        # An empty value is allowed: ``a=`` selects objects whose label a is "".
        value, end = "", at + 2
        if end < len(tokens) and tokens[end] not in _SYMBOLS:
            value, end = tokens[end], end + 1
        return Requirement(key, "notin" if operator == "!=" else "in", frozenset({value})), end
    raise _BadSelector


def _label_requirements(text: str) -> list[Requirement]:
    tokens = _tokens(text)
    found: list[Requirement] = []
    at = 0
    while True:
        if at >= len(tokens):
            raise _BadSelector  # a selector ending in a comma
        requirement, at = _requirement(tokens, at)
        found.append(requirement)
        if at == len(tokens):
            return found
        if tokens[at] != ",":
            raise _BadSelector
        at += 1


def _bad_selector(kind: str, text: str) -> ApiError:
    return ApiError(
        400, "BadRequest", f'unable to parse requirement: invalid {kind} selector: "{text}"'
    )


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse ``a=b,c!=d,e in (f,g),!h,i``; an empty selector matches everything;
    one that does not parse is the API server's 400."""
    if not text or text.isspace():
        return []
    try:
        return _label_requirements(text)
    except _BadSelector:
        raise _bad_selector("label", text) from None


def labels_match(requirements: list[Requirement], obj: Mapping[str, Any]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(r.matches(labels) for r in requirements)


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    """The value a field selector compares for ``path`` ("" when there is none)."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return ""
        current = current[part]
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def _field_terms(text: str) -> list[tuple[str, bool, str]]:
    terms: list[tuple[str, bool, str]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "!=" in part:
            key, _, value = part.partition("!=")
            terms.append((key.strip(), False, value.strip()))
        elif "=" in part:
            key, _, value = part.partition("==" if "==" in part else "=")
            terms.append((key.strip(), True, value.strip()))
        else:
            raise _bad_selector("field", text)
    return terms


def parse_field_selector(text: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """``metadata.name=x,involvedObject.uid=y,status.phase!=Running``: a predicate.

    Any dotted path is accepted (the real server restricts each type to a few indexed
    fields; our clients only use the indexed ones).
    """
    if not text:
        return lambda _obj: True
    terms = _field_terms(text)

    def predicate(obj: Mapping[str, Any]) -> bool:
        return all((_field_value(obj, key) == value) == equal for key, equal, value in terms)

    return predicate
