"""aiohttp's per-connection protocol with two changes: the bytes of a request's line and
headers are bounded, and requests aiohttp's parser refuses are answered as the API
server answers (a JSON ``metav1.Status``), logged in one line without header bytes.

The head bound is what keeps memory flat before authentication: aiohttp's own limits are
per line and per header, so a client may otherwise send a hundred or so lines of 8 KiB
each and hold them for as long as it stays silent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp import streams, web
from aiohttp.http_exceptions import (
    BadHttpMessage,
    BadStatusLine,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
)

from . import errors
from .aiohttp_internals import RequestHandlerBase

log = logging.getLogger("trainjob_status_server.access")

_BLANK_LINE = b"\r\n\r\n"

HEAD_TIMEOUT = "header_timeout"

# A parser message may quote the client's bytes (a bearer token among them): only these
# fixed reasons of llhttp and aiohttp are repeated in an answer.
_REPEATED_REASONS = frozenset(
    {
        "Content-Length can't be present with Transfer-Encoding",
        "Transfer-Encoding can't be present with Content-Length",
        "Duplicate Content-Length",
        "Content-Length overflow",
        "Invalid character in Content-Length",
        "Invalid `Transfer-Encoding` header value",
        "Request has invalid `Transfer-Encoding`",
        "Invalid character in chunk size",
        "Invalid character in chunk extensions",
        "Missing expected CR after chunk size",
        "Expected LF after chunk size",
        "Missing expected CR after chunk data",
        "Expected LF after chunk data",
        "Invalid header token",
        "Invalid header field char",
        "Invalid header value char",
        "Missing expected CR after header value",
        "Missing expected LF after header value",
        "Unexpected whitespace after header value",
        "Expected LF after headers",
        "Too many headers received",
        "Data after `Connection: close`",
    }
)


class HeadersTooLarge(BadHttpMessage):
    code = 431

    def __init__(self, limit: int) -> None:
        super().__init__(f"request line and headers over {limit} bytes")


def head_end(tail: bytes, data: bytes) -> int:
    """Where in ``data`` the blank line that ends a head ends (the index after it), given
    the last bytes (at most three) of the same head received before; -1 if not in it."""
    if tail:
        joined = (tail + data[:3]).find(_BLANK_LINE)
        if joined >= 0:
            return joined + 4 - len(tail)
    found = data.find(_BLANK_LINE)
    return -1 if found < 0 else found + 4


class HeadBudget:
    """Stands in for aiohttp's request parser. It counts the bytes of each request's line
    and headers, refusing the head that goes over ``limit``, and holds an unfinished head
    in one buffer of its own until its blank line arrives: the parser, which makes a few
    objects of every header line, sees a head only once it is whole, so a connection that
    stalls in the middle of one holds its bytes and nothing more. Bodies are not counted
    or held: a head begins once the previous request's body is in.

    The count restarts at the read in which a request comes out of the parser, so bytes of
    a pipelined head that arrive in that same read go to the parser uncounted: the bound
    is ``limit`` plus one read (one TLS record on the serving port)."""

    def __init__(self, parser: Any, limit: int) -> None:
        self._parser = parser
        self.limit = limit
        self.pending = 0  # bytes of the current head received so far
        self._held = bytearray()  # those of them the parser has not seen yet
        self._tail = b""
        self._body: streams.StreamReader | None = None  # the body still arriving
        self._refused = False

    @property
    def idle(self) -> bool:
        """Nothing received since the last request came out of the parser."""
        return self.pending == 0 and not self._tail and self._body is None

    def feed_data(self, data: bytes) -> tuple[Any, bool, bytes]:
        if self._refused:
            return (), False, b""
        if self._body is not None and self._body.is_eof():
            self._body = None
        end = -1
        # No data: aiohttp asks the parser for requests it holds back while its queue is
        # full, bytes that were counted when they came.
        if self._body is None and data:
            end = head_end(self._tail, data)
            if self.pending + (len(data) if end < 0 else end) > self.limit:
                self._refused, self._held = True, bytearray()
                raise HeadersTooLarge(self.limit)
            if end < 0:
                self.pending += len(data)
                self._tail = (self._tail + data[-3:])[-3:]
                self._held += data
                return (), False, b""
            if self._held:
                data = bytes(self._held) + data
                end += len(self._held)
                self._held = bytearray()
        try:
            messages, upgraded, tail = self._parser.feed_data(data)
        except HttpProcessingError:
            # Answered once (aiohttp closes after the answer): what follows is not parsed.
            self._refused, self._held = True, bytearray()
            raise
        if messages:
            payload = messages[-1][1]
            self._body = None if payload.is_eof() else payload
            self.pending, self._tail = 0, b""
        elif end >= 0:
            # A blank line and no request: empty lines before a request line, which the
            # parser skips. What follows them is the head.
            self.pending, self._tail = len(data) - end, data[-3:] if len(data) > end else b""
        return messages, upgraded, tail

    def detach(self) -> None:
        """Takes no more: drops what it holds, the parser and the body (both refer back to
        the connection's protocol)."""
        self._parser = None
        self._body = None
        self._held = bytearray()
        self._refused = True

    def feed_eof(self) -> Any:
        return self._parser.feed_eof()

    def message_consumed(self) -> None:
        self._parser.message_consumed()

    def set_upgraded(self, val: bool) -> None:
        self._parser.set_upgraded(val)

    def pause_reading(self) -> None:
        self._parser.pause_reading()


def parser_refusal(exc: BaseException | None) -> errors.StatusError:
    """The answer to a request aiohttp's parser refused (``exc``), worded without any of
    the request's bytes."""
    if isinstance(exc, LineTooLong | HeadersTooLarge):
        return errors.headers_too_large()
    if isinstance(exc, BadStatusLine):
        return errors.bad_request("Malformed request line")
    if isinstance(exc, InvalidURLError):
        return errors.bad_request("Invalid request target")
    if isinstance(exc, InvalidHeader):
        return errors.bad_request("Invalid header")
    if isinstance(exc, HttpProcessingError):
        reason = exc.message.split(":\n", 1)[0].rstrip(".")
        if reason in _REPEATED_REASONS:
            return errors.bad_request(f"Bad request: {reason}")
    return errors.bad_request("Bad request")


class StatusRequestHandler(RequestHandlerBase):
    """aiohttp's protocol for one connection, with the head bound, a deadline for each
    head once its first byte is in (``head_timeout``: aiohttp would otherwise wait for the
    rest of a later request's head until its keep-alive timeout), and Status answers.
    ``closed`` is told when the deadline closes the connection."""

    def __init__(
        self,
        manager: web.Server,
        *,
        max_head_bytes: int,
        head_timeout: float | None = None,
        closed: Callable[[str], None] = lambda _reason: None,
        **kwargs: Any,
    ) -> None:
        kwargs["max_line_size"] = kwargs["max_field_size"] = max_head_bytes
        super().__init__(manager, **kwargs)
        self.head = self.wrap_parser(lambda parser: HeadBudget(parser, max_head_bytes))
        self._head_timeout = head_timeout
        self._head_timer: asyncio.TimerHandle | None = None
        self._closed_by_deadline = closed
        # Since when (time.monotonic) the request's body has been awaited from the client,
        # and since when a later request's head has been coming in.
        self.body_awaited_since: float | None = None
        self.head_pending_since: float | None = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.head.pending and self._head_timer is None and self._head_timeout is not None:
            self._head_timer = asyncio.get_running_loop().call_later(
                self._head_timeout, self._head_expired
            )
            self.head_pending_since = time.monotonic()
        elif not self.head.pending and self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
            self.head_pending_since = None

    def _head_expired(self) -> None:
        self._head_timer = None
        self.head_pending_since = None
        if self.head.pending and self.transport is not None:
            self._closed_by_deadline(HEAD_TIMEOUT)
            self.force_close()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)
        # aiohttp drops its parser here so that the connection is freed by reference
        # counting, not left to the cycle collector: so does the budget around it.
        self.head.detach()

    @property
    def waiting_since(self) -> float | None:
        """Since when (``time.monotonic``) it has been waiting for its client's bytes of
        a request: the body a handler awaits, or a later request's head coming in."""
        body, head = self.body_awaited_since, self.head_pending_since
        if body is None or head is None:
            return head if body is None else body
        return min(body, head)

    @property
    def idle(self) -> bool:
        """Waiting for the next request of a keep-alive connection, with none of it in:
        closing it now loses nothing."""
        return self.between_requests and self.head.idle

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not isinstance(exc, HttpProcessingError):
            # A handler's failure, not the client's: aiohttp logs it with its traceback.
            self.log_exception("Error handling request", exc_info=exc)
            answer = errors.handler_timed_out() if status == 504 else errors.internal_error(status)
        else:
            answer = parser_refusal(exc)
            log.info(
                "request refused by the parser",
                extra={
                    "code": answer.code,
                    "error": type(exc).__name__,
                    "remote": request.remote,
                },
            )
        if request.writer.output_size > 0:
            raise ConnectionError("an answer was already sent on this connection")
        response = answer.response()
        response.force_close()
        return response


def awaiting_body(request: web.BaseRequest, since: float | None) -> None:
    """Tell ``request``'s connection since when (``time.monotonic``) its handler has been
    waiting for the body from the client, None once it has it: ``Slots`` may close a
    connection whose body is slow in coming."""
    handler = request.protocol
    if isinstance(handler, StatusRequestHandler):
        handler.body_awaited_since = since
