"""Fault injection and request accounting for tests and benchmarks.

A test says "the next 3 PATCHes of trainjobs/status answer 500" or "stall every GET of
pods for 2 s" and later asks "how many PATCHes of trainjobs/status did the server make".
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .status import ApiError

# A Content-Type header's media type (no parameters, lower case), by the header's text.
_MEDIA_TYPES: dict[str, str] = {}


@dataclass(frozen=True)
class RequestInfo:
    """What a request is, in the API server's own terms (its audit/RBAC attributes)."""

    method: str
    path: str
    verb: str  # get, list, watch, create, update, patch, delete, deletecollection, or ""
    resource: str = ""  # plural, e.g. "trainjobs"; "" for non-resource paths
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def resource_key(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


@dataclass
class Fault:
    """Matches requests; ``remaining`` None means forever."""

    code: int | None = None
    delay: float = 0.0
    retry_after: int | None = None
    message: str | None = None
    remaining: int | None = 1
    verb: str | None = None
    resource: str | None = None  # "trainjobs" or "trainjobs/status"
    method: str | None = None
    path: str | None = None  # a regular expression matched against the whole path
    namespace: str | None = None
    name: str | None = None
    hits: int = 0
    _path_re: re.Pattern[str] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.path is not None:
            self._path_re = re.compile(self.path)

    def matches(self, info: RequestInfo) -> bool:
        if self.remaining is not None and self.remaining <= 0:
            return False
        checks = (
            (self.verb, info.verb),
            (self.resource, info.resource_key),
            (self.namespace, info.namespace),
            (self.name, info.name),
        )
        if any(want is not None and want != have for want, have in checks):
            return False
        if self.method is not None and self.method.upper() != info.method:
            return False
        return self._path_re is None or self._path_re.fullmatch(info.path) is not None

    def error(self) -> ApiError | None:
        if self.code is None:
            return None
        headers: dict[str, str] = {}
        details: dict[str, Any] = {}
        if self.retry_after is not None:
            # As the API server says it: in the header and in the Status.
            headers["Retry-After"] = str(self.retry_after)
            details["retryAfterSeconds"] = self.retry_after
        reason, default = _REASONS.get(self.code, ("InternalError", "injected fault"))
        return ApiError(self.code, reason, self.message or default, details, headers)


_REASONS = {
    409: ("Conflict", "Operation cannot be fulfilled: injected conflict"),
    410: ("Expired", "too old resource version: injected fault"),
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "The server is currently unable to handle the request"),
    504: ("Timeout", "Timeout: request did not complete within the allotted time"),
}


class Faults:
    """The fault rules and request counters of one development cluster."""

    def __init__(self) -> None:
        self._rules: list[Fault] = []
        self.counts: Counter[tuple[str, str]] = Counter()
        # The same requests by (verb, resource, media type of the body; "" without one).
        self.by_media_type: Counter[tuple[str, str, str]] = Counter()

    def fail(
        self,
        code: int,
        *,
        times: int | None = 1,
        retry_after: int | None = None,
        message: str | None = None,
        verb: str | None = None,
        resource: str | None = None,
        method: str | None = None,
        path: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
    ) -> Fault:
        """Answer the next ``times`` matching requests with ``code`` (None times: forever)."""
        rule = Fault(
            code=code,
            retry_after=retry_after,
            message=message,
            remaining=times,
            verb=verb,
            resource=resource,
            method=method,
            path=path,
            namespace=namespace,
            name=name,
        )
        self._rules.append(rule)
        return rule

    def stall(
        self,
        delay: float,
        *,
        times: int | None = 1,
        verb: str | None = None,
        resource: str | None = None,
        method: str | None = None,
        path: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
    ) -> Fault:
        """Hold the next ``times`` matching requests for ``delay`` seconds, then serve them."""
        rule = Fault(
            delay=delay,
            remaining=times,
            verb=verb,
            resource=resource,
            method=method,
            path=path,
            namespace=namespace,
            name=name,
        )
        self._rules.append(rule)
        return rule

    def clear(self) -> None:
        self._rules.clear()

    def take(self, info: RequestInfo) -> list[Fault]:
        """The rules that fire for this request (each spends one of its ``times``)."""
        fired = []
        for rule in self._rules:
            if rule.matches(info):
                if rule.remaining is not None:
                    rule.remaining -= 1
                rule.hits += 1
                fired.append(rule)
        self._rules = [r for r in self._rules if r.remaining is None or r.remaining > 0]
        return fired

    # -- accounting ----------------------------------------------------------------------

    def record(self, info: RequestInfo, content_type: str = "") -> None:
        if info.verb:
            resource = info.resource_key
            self.counts[(info.verb, resource)] += 1
            media_type = _MEDIA_TYPES.get(content_type)
            if media_type is None:
                media_type = content_type.partition(";")[0].strip().lower()
                if len(_MEDIA_TYPES) < 256:
                    _MEDIA_TYPES[content_type] = media_type
            self.by_media_type[(info.verb, resource, media_type)] += 1

    def count(
        self,
        verb: str | None = None,
        resource: str | None = None,
        content_type: str | None = None,
    ) -> int:
        """Requests seen, by verb, resource (``"trainjobs/status"``) and/or the media type
        of their body (``"application/apply-patch+yaml"``; "" for none); None = any."""
        if content_type is None:
            return sum(
                n
                for (v, r), n in self.counts.items()
                if (verb is None or v == verb) and (resource is None or r == resource)
            )
        wanted = content_type.lower()
        return sum(
            n
            for (v, r, m), n in self.by_media_type.items()
            if (verb is None or v == verb) and (resource is None or r == resource) and m == wanted
        )

    def reset_counts(self) -> None:
        self.counts.clear()
        self.by_media_type.clear()
