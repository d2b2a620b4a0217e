"""Every error the server answers, as a ``metav1.Status`` object, built in one place.

The peer (Kubeflow Trainer's status server) answers ``{"status": "Failure", "message",
"reason", "code"}``; we add ``kind`` and ``apiVersion`` as the API server does. Clients
depend on ``code``, ``reason`` and ``message`` only.

Domain code raises a ``failures.Failure`` (those of ``failures.py``, ``AuthFailure``, the
payload errors of ``status/validation.py``) and ``answer_for`` turns it into its answer; the HTTP
plumbing (routing, body limits, content codings, the parser) raises its own answers,
built below.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from typing import Any, TypeGuard

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.helpers import must_be_empty_body, rfc822_formatted_time, should_remove_content_length
from aiohttp.http import HttpVersion10, HttpVersion11

from ..auth.failures import AuthFailure
from ..failures import (
    AccessDenied,
    Failure,
    Invalid,
    RateLimited,
    TrainJobNotFound,
    Unauthenticated,
    Unavailable,
    WriteFailed,
)
from ..status.validation import PayloadError, ValidationFailed


class Answer(web.Response):
    """A response whose head this class writes itself, with the body, in one write: the
    status line, its own headers, then ``Content-Length``, ``Date`` and ``Connection`` as
    aiohttp would add them, and no ``Server`` header (aiohttp's names itself and the
    Python version, telling a scanner which known bugs to try). Every answer of the
    serving port is one: aiohttp's general path (a header map filled in several steps,
    a prepare hook, a serializer and a writer each in their own call) costs a post
    several µs more. A body aiohttp would stream or compress takes aiohttp's path."""

    _message: bytes | None = None  # head and body, once prepared on the lean path

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self._eof_sent:
            return None
        if self._payload_writer is not None:
            return self._payload_writer
        body = self._body
        if self._chunked or self._compression or self._cookies or not _plain_body(body):
            return await super().prepare(request)
        self._req = request
        writer = self._payload_writer = request._payload_writer
        head = self._frame(request, len(body) if body else 0)
        self._message = head if self._must_be_empty_body or not body else head + body
        return writer

    async def _prepare_headers(self) -> None:  # aiohttp's path: only the Server header
        await super()._prepare_headers()
        self.headers.popall(hdrs.SERVER, None)

    def _frame(self, request: web.BaseRequest, length: int) -> bytes:
        method = request.method
        status = self.status
        empty = self._must_be_empty_body = must_be_empty_body(method, status)
        keep_alive = self._keep_alive
        if keep_alive is None:
            keep_alive = self._keep_alive = request.keep_alive
        version = request.version
        headers = self._headers
        lines = [f"HTTP/{version.major}.{version.minor} {status} {self.reason}"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                raise ValueError("a newline in a response header")
            lines.append(f"{name}: {value}")
        if hdrs.CONTENT_LENGTH not in headers:
            if empty:
                if not should_remove_content_length(method, status) and length:
                    lines.append(f"Content-Length: {length}")
            elif length or (status != 304 and method != hdrs.METH_HEAD):
                lines.append(f"Content-Length: {length}")
        if length and not empty and hdrs.CONTENT_TYPE not in headers:
            lines.append("Content-Type: application/octet-stream")
        if hdrs.DATE not in headers:
            lines.append(f"Date: {rfc822_formatted_time()}")
        if hdrs.CONNECTION not in headers:
            if keep_alive:
                if version == HttpVersion10:
                    lines.append("Connection: keep-alive")
            elif version == HttpVersion11:
                lines.append("Connection: close")
        lines.append("\r\n")
        return "\r\n".join(lines).encode()

    async def write_eof(self, data: bytes = b"") -> None:
        message = self._message
        writer = self._payload_writer
        if message is None or writer is None or self._eof_sent:
            await super().write_eof(data)
            return
        self._message = None
        # Written one loop turn later: after the loop has read (and started) the other
        # requests that are ready now, the answers go out together. Measured under load
        # on loopback (docs/scaling.md, "Answers written a loop turn later"): 81 against
        # 115 µs of server CPU per post, the same number of system calls, the send's
        # share smaller; why it costs less in the kernel is not established.
        await asyncio.sleep(0)
        await writer.write_eof(message)
        self._eof_sent = True
        self._req = None
        self._body_length = writer.output_size
        self._payload_writer = None


def _plain_body(body: object) -> TypeGuard[bytes | bytearray | None]:
    return body is None or isinstance(body, bytes | bytearray)


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


BUDGET_SPENT_MESSAGE = "The Kubernetes API budget is spent: retry later"


def answer_for(failure: Failure) -> StatusError:
    """The answer to a request refused (or not decided) for ``failure``."""
    if isinstance(failure, AuthFailure):
        # Generic: the same for every reason with this code; the reason goes to the log.
        return _forbidden() if failure.forbidden else _unauthorized()
    if isinstance(failure, Unavailable):
        return _unavailable(failure.budget_wait)
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
    """Any path or method other than POST on the status path (the peer's catch-all)."""
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
