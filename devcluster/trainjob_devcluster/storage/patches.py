"""The two non-apply patch formats: JSON merge patch and JSON patch.

They follow the library a real API server uses (evanphx/json-patch) where it differs
from the RFCs in ways a client can see: a merge patch must be a JSON object, nulls
inside objects a merge patch adds are dropped, ``test`` with a null value passes on a
missing member, and array indices may count from the end.

All functions return a new document; their arguments are never modified.
"""

from __future__ import annotations

from typing import Any

from ..common.go_text import go_json_loads
from .objects import json_copy, json_equal

__all__ = [
    "PatchError",
    "decode_patch",
    "json_merge_patch",
    "json_patch",
]


class PatchError(Exception):
    """A patch that cannot be applied. ``code`` is what a real server answers: 422 for a
    JSON patch operation that fails, 400 for a patch document of the wrong shape."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


# -- decoding ---------------------------------------------------------------------------


def decode_patch(body: bytes) -> Any:
    """A patch document's JSON; PatchError (400) ``error decoding patch: ...`` if it is
    not JSON, worded as a real server words it."""
    try:
        return go_json_loads(body)
    except ValueError as exc:
        raise PatchError(f"error decoding patch: {exc}", 400) from exc


# -- JSON merge patch (RFC 7386) --------------------------------------------------------


def _prune_nulls(value: Any) -> Any:
    """Drop null members of objects, at any depth (null array items stay)."""
    if isinstance(value, dict):
        return {k: _prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune_nulls(v) for v in value]
    return value


def _merge_into(doc: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        current = doc.get(key)
        if value is None:
            doc.pop(key, None)
        elif isinstance(current, dict) and isinstance(value, dict):
            _merge_into(current, value)
        elif isinstance(current, dict):
            # Replacing an object by a non-object keeps the new value as sent.
            doc[key] = json_copy(value)
        else:
            doc[key] = _prune_nulls(value)


def json_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge member by member, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        raise PatchError("Invalid JSON Patch", 400)
    if not isinstance(target, dict):
        return _prune_nulls(patch)
    doc = json_copy(target)
    _merge_into(doc, patch)
    return doc


# -- JSON patch (RFC 6902) and pointers (RFC 6901) --------------------------------------


def _tokens(pointer: Any) -> list[str]:
    if not isinstance(pointer, str):
        raise PatchError("path must be a string")
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f'JSON pointer must be empty or start with a "/": {pointer}')
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _index(token: str, size: int, *, inserting: bool) -> int:
    """An array index; negative ones count from the end, ``-`` appends when inserting."""
    if inserting and token == "-":
        return size
    text = token[1:] if token[:1] in "+-" else token
    if not text.isdigit():
        raise PatchError(f"invalid array index: {token}")
    index = int(token)
    limit = size if inserting else size - 1
    if index < -size or index > limit:
        raise PatchError(f"array index out of bounds: {token}")
    return index + size if index < 0 else index


def _container(doc: Any, tokens: list[str], pointer: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            try:
                node = node[_index(token, len(node), inserting=False)]
            except PatchError as exc:
                raise PatchError(f"doc is missing path: {pointer}") from exc
        else:
            raise PatchError(f"doc is missing path: {pointer}")
    if not isinstance(node, dict | list):
        raise PatchError(f"doc is missing path: {pointer}")
    return node


def _get(doc: Any, pointer: Any) -> Any:
    tokens = _tokens(pointer)
    if not tokens:
        return doc
    node, last = _container(doc, tokens, pointer), tokens[-1]
    if isinstance(node, dict):
        if last not in node:
            raise PatchError(f"doc is missing key: {pointer}")
        return node[last]
    return node[_index(last, len(node), inserting=False)]


def _add(doc: Any, pointer: Any, value: Any) -> None:
    tokens = _tokens(pointer)
    if not tokens:
        raise PatchError("add operation does not apply: doc is missing path: ")
    node, last = _container(doc, tokens, pointer), tokens[-1]
    if isinstance(node, dict):
        node[last] = value
    else:
        node.insert(_index(last, len(node), inserting=True), value)


def _remove(doc: Any, pointer: Any) -> Any:
    tokens = _tokens(pointer)
    if not tokens:
        raise PatchError("remove operation does not apply: doc is missing path: ")
    node, last = _container(doc, tokens, pointer), tokens[-1]
    if isinstance(node, dict):
        if last not in node:
            raise PatchError(f"remove operation does not apply: doc is missing key: {pointer}")
        return node.pop(last)
    return node.pop(_index(last, len(node), inserting=False))


def _replace(doc: Any, pointer: Any, value: Any) -> None:
    tokens = _tokens(pointer)
    if not tokens:
        raise PatchError("replace operation does not apply: doc is missing path: ")
    node, last = _container(doc, tokens, pointer), tokens[-1]
    if isinstance(node, dict):
        if last not in node:
            raise PatchError(f"replace operation does not apply: doc is missing key: {pointer}")
        node[last] = value
    else:
        node[_index(last, len(node), inserting=False)] = value


def _test(doc: Any, pointer: Any, value: Any) -> None:
    try:
        current = _get(doc, pointer)
    except PatchError:
        # A null test value matches a missing member (evanphx/json-patch v4).
        if value is None and _tokens(pointer):
            _container(doc, _tokens(pointer), pointer)
            return
        raise
    if not _same(current, value):
        raise PatchError(f"testing value {pointer} failed")


def _same(a: Any, b: Any) -> bool:
    # Scalars compare as their JSON text does: 41 does not equal 41.0.
    if isinstance(a, int | float) and isinstance(b, int | float) and type(a) is not type(b):
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return json_equal(a, b)


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 add, remove, replace, move, copy and test, applied in order, all or none."""
    if not isinstance(operations, list):
        raise PatchError(
            f"json: cannot unmarshal {_json_kind(operations)} "
            "into Go value of type jsonpatch.Patch",
            400,
        )
    doc = json_copy(target)
    for op in operations:
        if not isinstance(op, dict):
            raise PatchError(
                "json: cannot unmarshal into Go value of type jsonpatch.Operation", 400
            )
        kind, path = op.get("op"), op.get("path")
        value = json_copy(op.get("value"))
        if kind == "add":
            _add(doc, path, value)
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _replace(doc, path, value)
        elif kind == "move":
            moved = _remove(doc, op.get("from"))
            _add(doc, path, moved)
        elif kind == "copy":
            _add(doc, path, json_copy(_get(doc, op.get("from"))))
        elif kind == "test":
            _test(doc, path, value)
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc


def _json_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    if value is None:
        return "null"
    return "number"
