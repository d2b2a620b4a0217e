"""What a failed Kubernetes API call raises: the API's answer, or no answer at all."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Bodies that are not a metav1.Status (a proxy's HTML page) are cut to this in messages.
_MAX_FOREIGN_MESSAGE = 256


class KubeUnavailable(Exception):
    """The API server could not be reached or did not answer within the timeout."""


class KubeBudgetExhausted(KubeUnavailable):
    """The request was not sent: its share of the client-side API budget would not be
    free within the caller's limit. ``retry_after`` is the seconds until it would be."""

    def __init__(self, budget: str, retry_after: float) -> None:
        super().__init__(f"the {budget} API budget is spent for the next {retry_after:.1f}s")
        self.budget = budget
        self.retry_after = retry_after


class KubeConfigError(Exception):
    """No usable Kubernetes client configuration (kubeconfig or in-cluster)."""


class KubeError(Exception):
    """The API server answered with an error status (a ``metav1.Status`` as a rule).

    ``status`` is the HTTP code, ``reason``/``message`` come from the Status body (or the
    HTTP reason phrase when the body is not one), ``body`` is the parsed Status (empty
    when there was none) and ``retry_after`` the seconds the server asked us to wait.
    """

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        body: Mapping[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body: dict[str, Any] = dict(body or {})
        self.retry_after = retry_after

    @property
    def details(self) -> dict[str, Any]:
        details = self.body.get("details")
        return details if isinstance(details, dict) else {}


def parse_retry_after(value: str | None) -> int | None:
    """Seconds from a ``Retry-After`` header; the API server only sends delta-seconds, so
    an HTTP-date (or anything else) counts as absent."""
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit():
        return None
    return int(text)


def error_from_status(
    status: Mapping[str, Any],
    *,
    code: int | None = None,
    http_reason: str = "",
    retry_after: int | None = None,
) -> KubeError:
    """A KubeError from a ``metav1.Status`` (an error response's body, or the object of a
    watch ERROR event); ``code`` is the HTTP status when there was one."""
    if code is None:
        found = status.get("code")
        code = found if isinstance(found, int) else 500
    details = status.get("details")
    if retry_after is None and isinstance(details, dict):
        # The API server also says it in the Status details (429s, some 5xx).
        seconds = details.get("retryAfterSeconds")
        if isinstance(seconds, int) and seconds >= 0:
            retry_after = seconds
    reason = str(status.get("reason") or http_reason or "Unknown")
    message = str(status.get("message") or http_reason)
    return KubeError(code, reason, message, status, retry_after)


def error_from_response(
    status: int, http_reason: str, headers: Mapping[str, str], data: bytes
) -> KubeError:
    """A KubeError from an error response's status code, reason phrase, headers and body."""
    text = data.decode("utf-8", "replace")
    try:
        decoded = json.loads(text) if text else None
    except ValueError:
        decoded = None
    retry_after = parse_retry_after(headers.get("Retry-After"))
    if isinstance(decoded, dict) and decoded.get("kind", "Status") == "Status":
        return error_from_status(
            decoded, code=status, http_reason=http_reason, retry_after=retry_after
        )
    # Not the API server's own answer (a proxy or load balancer in between).
    message = text[:_MAX_FOREIGN_MESSAGE] or http_reason
    return KubeError(status, http_reason or "Unknown", message, None, retry_after)
