"""metav1.Status answers of the development cluster, built in one place.

Messages, reasons and details follow what a real kube-apiserver sends; the tests pin
them against recorded answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .go_text import go_quote


@dataclass(frozen=True)
class Cause:
    """One entry of ``details.causes`` (metav1.StatusCause)."""

    reason: str
    message: str
    field: str

    def to_json(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}


class ApiError(Exception):
    """An error answer: raised anywhere in a handler, rendered by the middleware."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        list_meta: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}
        # The Status's own metadata (a ListMeta): an expired paged list's next token.
        self.list_meta = list_meta or {}

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.list_meta),
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(name: str | None, group: str, kind: str) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name is not None:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = kind
    return details


def no_route() -> ApiError:
    """A path the API server has no handler for under a known resource (a named review)."""
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def not_found(qualified: str, group: str, plural: str, name: str) -> ApiError:
    """``trainjobs.trainer.kubeflow.org "x" not found``; details.kind is the plural."""
    return ApiError(
        404, "NotFound", f"{qualified} {go_quote(name)} not found", _details(name, group, plural)
    )


def already_exists(qualified: str, group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f"{qualified} {go_quote(name)} already exists",
        _details(name, group, plural),
    )


def conflict(qualified: str, group: str, plural: str, name: str) -> ApiError:
    """The optimistic-concurrency conflict (stale resourceVersion)."""
    return ApiError(
        409,
        "Conflict",
        f"Operation cannot be fulfilled on {qualified} {go_quote(name)}: the object has been "
        "modified; please apply your changes to the latest version and try again",
        _details(name, group, plural),
    )


def invalid(kind_qualified: str, group: str, kind: str, name: str, causes: list[Cause]) -> ApiError:
    """422 Invalid: ``Kind.group "name" is invalid: field: message`` (bracketed if many)."""
    parts = [f"{c.field}: {c.message}" for c in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details = _details(name, group, kind)
    details["causes"] = [c.to_json() for c in causes]
    return ApiError(
        422, "Invalid", f"{kind_qualified} {go_quote(name)} is invalid: {joined}", details
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


_JSON_TYPES = {
    str: "a string",
    int: "a 64-bit integer",
    dict: "an object",
    list: "a list of strings",
}


def body_field(obj: Mapping[str, Any], key: str, want: type, path: str) -> Any:
    """``obj[key]`` of a decoded request body, None when absent or null; 400 naming ``path``
    when it has another JSON type than ``want`` (str, int for int64, dict, list of str)."""
    value = obj.get(key)
    if value is None:
        return None
    ok = isinstance(value, want) and not isinstance(value, bool)
    if want is int:
        ok = ok and -(1 << 63) <= value < 1 << 63
    elif want is list:
        ok = ok and all(isinstance(item, str) for item in value)
    if not ok:
        raise bad_request(f"{path} must be {_JSON_TYPES[want]}")
    return value


def internal(message: str) -> ApiError:
    """A bare 500 with no reason or details (what a failed typed apply answers)."""
    return ApiError(500, "", message)


def unsupported_media_type() -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, "
        "application/apply-patch+yaml",
    )


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message, {})
