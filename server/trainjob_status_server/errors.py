"""Every error the server answers, as a ``metav1.Status`` object, built in one place.

The peer (Kubeflow Trainer's status server) answers ``{"status": "Failure", "message",
"reason", "code"}``; we add ``kind`` and ``apiVersion`` as the API server does. Clients
depend on ``code``, ``reason`` and ``message`` only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from .validation import Cause


class Answer(web.Response):
    """A response with no ``Server`` header: aiohttp adds one naming itself and the Python
    version (telling a scanner which known bugs to try) when the response is prepared.
    Every answer of the serving port is one, which spares each post the response-prepare
    signal a hook would need."""

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        self.headers.popall("Server", None)


class StatusError(Exception):
    """An answer that is a failure: raise it anywhere on the request path."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details) if details is not None else None
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            out["details"] = self.details
        return out

    def response(self) -> web.Response:
        return Answer(
            status=self.code,
            body=json.dumps(self.body(), separators=(",", ":")).encode(),
            content_type="application/json",
            headers=self.headers,
        )


def not_found() -> StatusError:
    """Any path or method other than POST on the status path (the peer's catch-all)."""
    return StatusError(404, "NotFound", "Not found")


def trainjob_not_found() -> StatusError:
    return StatusError(404, "NotFound", "Train job not found")


def payload_too_large() -> StatusError:
    return StatusError(413, "RequestEntityTooLarge", "Payload too large")


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def unsupported_coding(message: str, accepted: str) -> StatusError:
    """A ``Content-Encoding`` the server does not decode; ``accepted`` lists those it
    does, in the header RFC 9110 asks a 415 for a content coding to carry."""
    return StatusError(415, "UnsupportedMediaType", message, headers={"Accept-Encoding": accepted})


def request_timeout() -> StatusError:
    return StatusError(408, "Timeout", "Request body not received in time")


def invalid_payload(detail: str) -> StatusError:
    return StatusError(422, "Invalid", f"Invalid payload: {detail}")


def invalid_trainjob(name: str, message: str, causes: Sequence[Cause]) -> StatusError:
    """A CRD violation, worded as the API server words it."""
    return StatusError(
        422,
        "Invalid",
        message,
        details={
            "name": name,
            "group": "trainer.kubeflow.org",
            "kind": "TrainJob",
            "causes": [{"reason": c.type, "message": c.message, "field": c.field} for c in causes],
        },
    )


def invalid_from_api(body: Mapping[str, Any]) -> StatusError:
    """A 422 from the API server, passed through with its message and details."""
    details = body.get("details")
    return StatusError(
        422,
        "Invalid",
        str(body.get("message") or "Invalid"),
        details=details if isinstance(details, Mapping) else None,
    )


def unauthorized() -> StatusError:
    return StatusError(401, "Unauthorized", "Unauthorized")


def forbidden() -> StatusError:
    return StatusError(403, "Forbidden", "Forbidden")


def too_many_requests(retry_after: int) -> StatusError:
    return StatusError(
        429,
        "TooManyRequests",
        "Too many requests",
        details={"retryAfterSeconds": retry_after},
        headers={"Retry-After": str(retry_after)},
    )


def internal_error() -> StatusError:
    return StatusError(500, "InternalError", "Internal error")


def unavailable(retry_after: int = 1) -> StatusError:
    return StatusError(
        503,
        "ServiceUnavailable",
        "The Kubernetes API server is unavailable",
        details={"retryAfterSeconds": retry_after},
        headers={"Retry-After": str(retry_after)},
    )


def from_api_error(code: int, body: Mapping[str, Any]) -> StatusError:
    """What a post answers when its write failed with ``code`` from the API server."""
    if code == 404:
        return trainjob_not_found()
    if code == 422:
        return invalid_from_api(body)
    if code in (429, 503, 504):
        return unavailable()
    return internal_error()
