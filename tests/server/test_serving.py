"""The serving port's own routing (``http/serving.py``): status paths match as aiohttp's
router matched them, the other routes and methods answer as before, and ``Expect`` is
handled as Go's server (the Trainer's) handles it: ``100 Continue`` only once the body is
waited for, 417 for any other expectation. Over real sockets, with stand-ins for the
authenticator, the TrainJob look-up and the writer; nothing is written on a refusal."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import RawTestServer, make_mocked_request
from hypothesis import given
from hypothesis import strategies as st

from trainjob_status.contract import STATUS_PATH, status_path
from trainjob_status_server.auth import Identity, failures
from trainjob_status_server.auth.failures import AuthFailure
from trainjob_status_server.http.endpoint import StatusEndpoint
from trainjob_status_server.http.responses import Answer
from trainjob_status_server.http.serving import ServingHandler, status_target
from trainjob_status_server.status.validation import EncodedStatus

NS, TJ = "team-a", "tj"
RECEIVED = dt.datetime(2026, 12, 2, 18, 33, 25, tzinfo=dt.UTC)
BODY = b'{"trainerStatus":{"progressPercentage":42,"lastUpdatedTime":"2026-12-02T18:33:25Z"}}'
ECHO = b'{"trainerStatus":{"progressPercentage":42,"lastUpdatedTime":"2026-12-02T18:33:25Z"}}'
TOKEN_REFUSED = "tok-refused"


# -- the status path, as aiohttp's router matched it --------------------------------------


def routed(path: str) -> dict[str, str] | None:
    """What aiohttp's router makes of ``path`` for a POST to the status route."""
    router = web.UrlDispatcher()
    router.add_post(STATUS_PATH, _unused)
    request = make_mocked_request("POST", path)
    match = asyncio.run(router.resolve(request))
    if match.http_exception is not None:
        return None
    return dict(match)


async def _unused(_request: web.Request) -> web.Response:
    raise AssertionError("not called")


def ours(path: str) -> dict[str, str] | None:
    target = status_target(make_mocked_request("POST", path).rel_url.path_safe)
    return None if target is None else {"namespace": target[0], "name": target[1]}


SEGMENT = st.lists(
    st.sampled_from(["a", "-", ".", "{", "}", "%2F", "%25", "%41", "%", "é", " ", "/"]),
    max_size=6,
).map("".join)


@given(SEGMENT, SEGMENT)
def test_a_status_path_matches_as_aiohttps_router_matches_it(namespace: str, name: str) -> None:
    path = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
    assert ours(path) == routed(path)


@pytest.mark.parametrize(
    "path",
    [
        status_path(NS, TJ),
        status_path("a%2Fb", "c%25d"),
        status_path(NS, TJ) + "/",
        status_path(NS, TJ).replace("/status", "/statuses"),
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces//trainjobs/tj/status",
        "/apis/trainer.kubeflow.org/v1/namespaces/team-a/trainjobs/tj/status",
        "/x" + status_path(NS, TJ),
    ],
)
def test_these_paths_match_as_aiohttps_router_matches_them(path: str) -> None:
    assert ours(path) == routed(path)


def test_percent_escapes_in_a_segment_are_decoded_as_the_router_did() -> None:
    assert ours(status_path("a%2Fb", "c%25d")) == {"namespace": "a/b", "name": "c%d"}


# -- over a socket ---------------------------------------------------------------------


@dataclass
class Rig:
    asked: list[str | None] = field(default_factory=list)
    written: list[tuple[str, str, EncodedStatus]] = field(default_factory=list)

    async def authenticate(
        self, authorization: str | None, namespace: str, trainjob: str, source: str = ""
    ) -> Identity:
        self.asked.append(authorization)
        if authorization == f"Bearer {TOKEN_REFUSED}":
            raise AuthFailure(failures.SIGNATURE)
        return Identity(namespace, "trainer", "tj-node-0-0")

    async def trainjob_exists(self, _namespace: str, _name: str) -> bool:
        return True

    async def write(self, namespace: str, name: str, update: EncodedStatus) -> None:
        self.written.append((namespace, name, update))


@dataclass
class Served:
    rig: Rig
    port: int

    async def exchange(self, head: str, body: bytes = b"", *, wait: float = 0.0) -> bytes:
        """Send ``head`` (request line and headers, no blank line) and ``body``, the body
        ``wait`` seconds later if asked; everything the server sends up to the end of its final
        answer (or until it closes, or falls silent for two seconds)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            got = b""
            if wait:
                writer.write(head.encode() + b"\r\n\r\n")
                await writer.drain()
                got += await _read_for(reader, wait)
                writer.write(body)
            else:  # in one write: the body is in when the handler starts
                writer.write(head.encode() + b"\r\n\r\n" + body)
            await writer.drain()
            while not _final_answer_in(got, head.startswith("HEAD ")):
                chunk = await _read_for(reader, 2.0, once=True)
                if not chunk:
                    break
                got += chunk
            return got
        finally:
            writer.close()


def _final_answer_in(raw: bytes, to_head: bool) -> bool:
    """Whether ``raw`` holds a whole answer other than 100 Continue."""
    while raw.startswith(b"HTTP/"):
        head, blank, rest = raw.partition(b"\r\n\r\n")
        if not blank:
            return False
        if head.startswith(b"HTTP/1.1 100 "):
            raw = rest
            continue
        lengths = [
            line.split(b":", 1)[1]
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ]
        return to_head or len(rest) >= int(lengths[0])
    return False


async def _read_for(reader: asyncio.StreamReader, seconds: float, *, once: bool = False) -> bytes:
    """What arrives until the connection closes or is silent for ``seconds``; with
    ``once``, the first read only."""
    got = b""
    try:
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), seconds)
            if not chunk or once:
                return got + chunk
            got += chunk
    except TimeoutError:
        return got


async def _healthz(_request: web.BaseRequest) -> web.Response:
    return Answer(text="ok")


@pytest_asyncio.fixture
async def served() -> AsyncIterator[Served]:
    rig = Rig()
    endpoint = StatusEndpoint(
        authenticator=rig,
        trainjobs=rig,
        writer=rig,
        read_timeout=5.0,
        clock=lambda: RECEIVED,
    )
    handler = ServingHandler(endpoint.handle, gets={"/healthz": _healthz}, uncounted=["/healthz"])
    server = RawTestServer(handler)
    await server.start_server()
    try:
        assert server.port is not None
        yield Served(rig, server.port)
    finally:
        await server.close()


def post_head(token: str = "t0k", *, expect: str | None = None, version: str = "1.1") -> str:
    lines = [
        f"POST {status_path(NS, TJ)} HTTP/{version}",
        "Host: status",
        f"Authorization: Bearer {token}",
        "Content-Type: application/json",
        f"Content-Length: {len(BODY)}",
    ]
    if expect is not None:
        lines.append(f"Expect: {expect}")
    return "\r\n".join(lines)


def split(raw: bytes) -> tuple[list[str], bytes]:
    """Status lines and header lines of every answer in ``raw``, and the last body."""
    lines: list[str] = []
    while raw.startswith(b"HTTP/"):
        head, _, raw = raw.partition(b"\r\n\r\n")
        lines.extend(head.decode().split("\r\n"))
    return lines, raw


CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


async def test_100_continue_is_sent_when_the_body_is_waited_for(served: Served) -> None:
    raw = await served.exchange(post_head(expect="100-continue"), BODY, wait=0.5)
    assert raw.startswith(CONTINUE + b"HTTP/1.1 200 OK\r\n")
    assert raw.endswith(b"\r\n\r\n" + ECHO)
    assert len(served.rig.written) == 1


async def test_the_expectation_is_matched_without_regard_to_case(served: Served) -> None:
    raw = await served.exchange(post_head(expect="100-Continue"), BODY, wait=0.5)
    assert raw.startswith(CONTINUE + b"HTTP/1.1 200 OK\r\n")


async def test_a_body_sent_without_waiting_gets_no_100(served: Served) -> None:
    raw = await served.exchange(post_head(expect="100-continue"), BODY)
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n")
    assert CONTINUE not in raw
    assert len(served.rig.written) == 1


async def test_a_post_refused_before_its_body_gets_no_100(served: Served) -> None:
    raw = await served.exchange(post_head(TOKEN_REFUSED, expect="100-continue"), wait=0.5)
    lines, body = split(raw)
    assert lines[0] == "HTTP/1.1 401 Unauthorized"
    assert CONTINUE not in raw
    assert json.loads(body)["reason"] == "Unauthorized"
    assert served.rig.written == []


async def test_any_other_expectation_is_417_before_the_token_is_asked(served: Served) -> None:
    raw = await served.exchange(post_head(expect="200-ok"), BODY)
    lines, body = split(raw)
    assert lines[0] == "HTTP/1.1 417 Expectation Failed"
    assert "Connection: close" in lines
    assert json.loads(body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Only the expectation 100-continue is supported",
        "reason": "ExpectationFailed",
        "code": 417,
    }
    assert b"200-ok" not in raw  # the header's value is not repeated
    assert served.rig.asked == []
    assert served.rig.written == []


async def test_http_1_0_has_no_expectations(served: Served) -> None:
    raw = await served.exchange(post_head(expect="200-ok", version="1.0"), BODY)
    assert raw.startswith(b"HTTP/1.0 200 OK\r\n")
    assert len(served.rig.written) == 1


@pytest.mark.parametrize(
    ("head", "first_line", "body"),
    [
        ("GET /healthz HTTP/1.1", "HTTP/1.1 200 OK", b"ok"),
        ("HEAD /healthz HTTP/1.1", "HTTP/1.1 200 OK", b""),
        ("POST /healthz HTTP/1.1\r\nContent-Length: 0", "HTTP/1.1 404 Not Found", None),
        (f"GET {status_path(NS, TJ)} HTTP/1.1", "HTTP/1.1 404 Not Found", None),
        (f"HEAD {status_path(NS, TJ)} HTTP/1.1", "HTTP/1.1 404 Not Found", b""),
        ("OPTIONS * HTTP/1.1", "HTTP/1.1 404 Not Found", None),
        ("GET /readyz HTTP/1.1", "HTTP/1.1 404 Not Found", None),
    ],
)
async def test_the_other_routes_and_methods(
    served: Served, head: str, first_line: str, body: bytes | None
) -> None:
    raw = await served.exchange(head + "\r\nHost: status")
    lines, got = split(raw)
    assert lines[0] == first_line
    assert not any(line.lower().startswith("server:") for line in lines)
    if body is None:
        answer: Any = json.loads(got)
        assert (answer["code"], answer["reason"], answer["message"]) == (
            404,
            "NotFound",
            "Not found",
        )
    else:
        assert got == body
    assert served.rig.asked == []
    assert served.rig.written == []


async def test_a_status_path_with_escapes_is_routed_by_its_decoded_segments(
    served: Served,
) -> None:
    head = post_head().replace(status_path(NS, TJ), status_path("team%2Da", "t%6A"))
    raw = await served.exchange(head, BODY)
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n")
    assert [(namespace, name) for namespace, name, _ in served.rig.written] == [(NS, TJ)]
