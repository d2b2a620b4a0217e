"""Label and field selectors as the API server parses them (pure)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trainjob_status_server.pods.injection import Requirement, Selector

from ..common.status import ApiError

__all__ = [
    "Requirement",
    "field_value",
    "labels_match",
    "parse_field_selector",
    "parse_label_selector",
    "pinned_value",
    "sole_value",
]


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses (``a in (x,y),b``)."""
    parts: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in (p.strip() for p in parts) if p]


def _bad_selector(kind: str, text: str) -> ApiError:
    return ApiError(
        400, "BadRequest", f'unable to parse requirement: invalid {kind} selector: "{text}"'
    )


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse ``a=b,c!=d,e in (f,g),!h,i``; an empty selector matches everything. The
    server's parser (the pod injector's ``--inject-selector``), with the API server's 400."""
    if not text:
        return []
    try:
        return list(Selector.parse(text).requirements)
    except ValueError:
        raise _bad_selector("label", text) from None


def labels_match(requirements: list[Requirement], obj: Mapping[str, Any]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(r.matches(labels) for r in requirements)


def field_value(obj: Mapping[str, Any], path: str) -> str:
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
    for part in _split_top_level(text):
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
        return all((field_value(obj, key) == value) == equal for key, equal, value in terms)

    return predicate


def sole_value(text: str | None, path: str) -> str | None:
    """The value of a field selector that is ``path=value`` and nothing else, if it is."""
    if not text:
        return None
    terms = _field_terms(text)
    if len(terms) == 1 and terms[0][0] == path and terms[0][1]:
        return terms[0][2]
    return None


def pinned_value(text: str | None, path: str) -> str | None:
    """The value a field selector requires ``path`` to have (``metadata.name=x``), if any:
    only objects whose field_value is that value can match it."""
    if not text:
        return None
    for key, equal, value in _field_terms(text):
        if equal and key == path:
            return value
    return None
