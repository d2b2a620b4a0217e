"""The bound on a request's head, against aiohttp's own parser, and the wording of the
parser's refusals: where a head ends, what is counted (line and headers, never bodies),
and that no refusal repeats the client's bytes."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http_exceptions import (
    BadHttpMessage,
    BadHttpMethod,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
)
from aiohttp.http_parser import HttpRequestParser

from trainjob_status_server.http.protocol import (
    HeadBudget,
    HeadersTooLarge,
    head_end,
    parser_refusal,
)

LIMIT = 200


def budget(limit: int = LIMIT) -> HeadBudget:
    loop = asyncio.get_running_loop()
    parser = HttpRequestParser(
        BaseProtocol(loop), loop, 2**16, max_line_size=limit, max_field_size=limit
    )
    return HeadBudget(parser, limit)


def request(head_bytes: int, body: bytes = b"") -> bytes:
    """A request whose line and headers are exactly ``head_bytes`` long."""
    start = f"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\nX-Pad: ".encode()
    pad = head_bytes - len(start) - 4
    assert pad >= 0
    return start + b"a" * pad + b"\r\n\r\n" + body


@pytest.mark.parametrize(
    ("tail", "data", "end"),
    [
        (b"", b"GET / HTTP/1.1\r\n\r\n", 18),
        (b"", b"GET / HTTP/1.1\r\nHost: x\r\n", -1),
        (b"\r\n\r", b"\nbody", 1),
        (b"\n\r\n", b"x\r\n\r\n", 5),
        (b"x\r\n", b"\r\nrest", 2),
        (b"a\r", b"\n\r\n", 3),
        (b"", b"", -1),
    ],
)
def test_where_a_head_ends(tail: bytes, data: bytes, end: int) -> None:
    assert head_end(tail, data) == end


async def test_a_head_of_exactly_the_limit_passes_and_one_byte_more_is_refused() -> None:
    exact = budget()
    messages, _, _ = exact.feed_data(request(LIMIT))
    assert len(messages) == 1

    over = budget()
    with pytest.raises(HeadersTooLarge) as refused:
        over.feed_data(request(LIMIT + 1))
    assert refused.value.code == 431
    # Refused once, it takes nothing more.
    assert over.feed_data(request(10 + LIMIT // 2)) == ((), False, b"")


async def test_a_head_is_counted_across_reads_before_its_blank_line() -> None:
    head = budget()
    data = request(LIMIT + 1)
    head.feed_data(data[:100])
    assert head.pending == 100
    with pytest.raises(HeadersTooLarge):
        head.feed_data(data[100:150] + data[150:])


async def test_bodies_are_not_counted_and_every_request_has_the_bound() -> None:
    head = budget()
    body = b"{" + b" " * 5000 + b"}"
    first = request(LIMIT, body)
    messages, _, _ = head.feed_data(first[: LIMIT + 10])
    assert len(messages) == 1
    for start in range(LIMIT + 10, len(first), 1000):
        assert head.feed_data(first[start : start + 1000])[0] == ()
    assert head.pending == 0
    # The body is in: the next request's head counts from zero, and has the same bound.
    messages, _, _ = head.feed_data(request(LIMIT))
    assert len(messages) == 1
    with pytest.raises(HeadersTooLarge):
        head.feed_data(request(LIMIT + 1))


async def test_pipelined_requests_in_one_read_each_have_their_own_bound() -> None:
    head = budget()
    data = b"".join(f"GET /{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for i in range(20))
    assert len(data) > LIMIT
    messages, _, _ = head.feed_data(data)
    assert [m.path for m, _ in messages] == [f"/{i}" for i in range(20)]
    assert head.idle


async def test_empty_lines_before_a_request_line_do_not_end_its_head() -> None:
    head = budget()
    messages, _, _ = head.feed_data(b"\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n")
    assert messages == [] or messages == ()
    assert head.pending > 0
    messages, _, _ = head.feed_data(b"\r\n")
    assert len(messages) == 1


def test_parser_refusals_are_worded_without_the_clients_bytes() -> None:
    token = b"Bearer eyJhbGciOiJSUzI1NiJ9.secret"
    assert parser_refusal(LineTooLong(token[:100] + b"...", 8190)).body() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Request header fields too large",
        "reason": "RequestHeaderFieldsTooLarge",
        "code": 431,
    }
    assert parser_refusal(HeadersTooLarge(8192)).code == 431
    cases = [
        (BadHttpMethod(token.decode()), "Malformed request line"),
        (InvalidURLError(token.decode()), "Invalid request target"),
        (InvalidHeader(token), "Invalid header"),
        (
            BadHttpMessage(f"Invalid character in chunk size:\n\n  {token!r}\n  ^"),
            "Bad request: Invalid character in chunk size",
        ),
        (BadHttpMessage("Too many headers received"), "Bad request: Too many headers received"),
        # Not one of the parsers' fixed reasons: nothing of it is repeated.
        (BadHttpMessage(f"{token.decode()}:\n\n  x"), "Bad request"),
        (BadHttpMessage(f"Expected HTTP/, got {token.decode()}:\n\n  x"), "Bad request"),
        (BadHttpMessage("Missing 'Host' header in request."), "Bad request"),
        (None, "Bad request"),
    ]
    for exc, message in cases:
        status = parser_refusal(exc)
        assert (status.code, status.reason, status.message) == (400, "BadRequest", message)
