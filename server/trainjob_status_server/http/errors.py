"""Every error the server answers, as a ``metav1.Status`` object, built in one place.

Kubeflow Trainer's status server answers ``{"status": "Failure", "message",
"reason", "code"}``; we add ``kind`` and ``apiVersion`` as the API server does. Clients
depend on ``code``, ``reason`` and ``message`` only.

Domain code raises a ``failures.Failure`` (those of ``failures.py``, ``AuthFailure``, the
payload errors of ``status/validation.py``) and ``answer_for`` turns it into its answer; the HTTP
plumbing (routing, body limits, content codings, the parser) raises its own answers,
built below.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ..auth.failures import AuthFailure
from ..failures import (
    AccessDenied,
    Failure,
    Invalid,
    RateLimited,
    ShuttingDown,
    TrainJobNotFound,
    Unauthenticated,
    Unavailable,
    WriteFailed,
)
from ..status.validation import PayloadError, ValidationFailed
from .responses import Answer, json_answer


class StatusError(Exception):
    """A failure answer as a ``metav1.Status``: the HTTP plumbing raises it; domain code
    raises a ``failures.Failure`` instead, which ``answer_for`` turns into one."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        close: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details) if details is not None else None
        self.headers = dict(headers or {})
        # The connection closes after this answer: the client's retry opens a new one.
        self.close = close

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

    def response(self) -> Answer:
        answer = json_answer(
            json.dumps(self.body(), separators=(",", ":")).encode(),
            status=self.code,
            headers=self.headers,
        )
        if self.close:
            answer.force_close()
        return answer


BUDGET_SPENT_MESSAGE = "The Kubernetes API budget is spent: retry later"
SHUTTING_DOWN_MESSAGE = "The server is shutting down: retry"


def answer_for(failure: Failure) -> StatusError:
    """The answer to a request refused (or not decided) for ``failure``."""
    if isinstance(failure, AuthFailure):
        # Generic: the same for every reason with this code; the reason goes to the log.
        return _forbidden() if failure.forbidden else _unauthorized()
    if isinstance(failure, Unavailable):
        return _unavailable(failure.budget_wait)
    if isinstance(failure, ShuttingDown):
        return _shutting_down()
    if isinstance(failure, RateLimited):
        return _too_many_requests(failure.retry_after)
    if isinstance(failure, PayloadError):
        return StatusError(422, "Invalid", failure.message)
    if isinstance(failure, ValidationFailed):
        return _invalid_trainjob(failure)
    if isinstance(failure, TrainJobNotFound):
        return StatusError(404, "NotFound", "Train job not found")
    if isinstance(failure, Invalid):
        return StatusError(422, "Invalid", failure.message, details=failure.details)
    if isinstance(failure, Unauthenticated):
        return _unauthorized()
    if isinstance(failure, AccessDenied):
        return _access_denied(failure)
    if isinstance(failure, WriteFailed):
        return internal_error()
    raise TypeError(f"no answer for {type(failure).__name__}")


# -- answers of the HTTP plumbing ------------------------------------------------------------


def not_found() -> StatusError:
    """Any path or method other than POST on the status path (Kubeflow Trainer's catch-all)."""
    return StatusError(404, "NotFound", "Not found")


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


def headers_too_large() -> StatusError:
    return StatusError(431, "RequestHeaderFieldsTooLarge", "Request header fields too large")


def expectation_failed() -> StatusError:
    """An ``Expect`` header other than 100-continue: the expectation cannot be met."""
    return StatusError(417, "ExpectationFailed", "Only the expectation 100-continue is supported")


def refused_by_aiohttp(code: int, reason: str) -> StatusError:
    """One of aiohttp's own refusals (e.g. a malformed request line): its code kept."""
    return StatusError(code, reason, reason)


def handler_timed_out() -> StatusError:
    return StatusError(504, "Timeout", "Handler timed out")


def internal_error(code: int = 500) -> StatusError:
    return StatusError(code, "InternalError", "Internal error")


# -- how failures are worded -----------------------------------------------------------------


def _unauthorized() -> StatusError:
    return StatusError(401, "Unauthorized", "Unauthorized")


def _forbidden() -> StatusError:
    return StatusError(403, "Forbidden", "Forbidden")


def _access_denied(denied: AccessDenied) -> StatusError:
    """Worded as the API server words its own 403 for a non-resource URL."""
    message = f'forbidden: User "{denied.user}" cannot {denied.verb} path "{denied.path}"'
    if denied.reason:
        message += f": {denied.reason}"
    return StatusError(403, "Forbidden", message)


def _too_many_requests(retry_after: int) -> StatusError:
    return StatusError(
        429,
        "TooManyRequests",
        "Too many requests",
        details={"retryAfterSeconds": retry_after},
        headers={"Retry-After": str(retry_after)},
    )


def _unavailable(budget_wait: float | None) -> StatusError:
    """A call that was not answered: Retry-After 1. One that was not sent because its
    budget was spent says so, with the budget's wait as Retry-After, in whole seconds and
    never 0 (0 invites a hot retry)."""
    if budget_wait is None:
        seconds, message = 1, "The Kubernetes API server is unavailable"
    else:
        seconds, message = max(1, math.ceil(budget_wait)), BUDGET_SPENT_MESSAGE
    return StatusError(
        503,
        "ServiceUnavailable",
        message,
        details={"retryAfterSeconds": seconds},
        headers={"Retry-After": str(seconds)},
    )


def _shutting_down() -> StatusError:
    """Not accepted, so nothing is lost: the client retries after a second on a new
    connection, which the Service gives to a replica that stays."""
    return StatusError(
        503,
        "ServiceUnavailable",
        SHUTTING_DOWN_MESSAGE,
        details={"retryAfterSeconds": 1},
        headers={"Retry-After": "1"},
        close=True,
    )


def _invalid_trainjob(failed: ValidationFailed) -> StatusError:
    """A CRD violation, worded as the API server words it."""
    return StatusError(
        422,
        "Invalid",
        failed.message,
        details={
            "name": failed.name,
            "group": failed.group,
            "kind": failed.kind,
            "causes": [
                {"reason": c.type, "message": c.message, "field": c.field} for c in failed.causes
            ],
        },
    )
