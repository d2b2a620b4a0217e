"""The listener's deadlines for a request's head: a client that connects and then sends
nothing, or its headers a byte at a time, loses its connection after
--first-request-timeout instead of holding a slot for ever, and so does one whose later
request's head stalls (after --read-timeout); one that has sent a request keeps its
keep-alive connection."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from prometheus_client import REGISTRY

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.acceptall import AcceptAll
from trainjob_devcluster.harness.testing import eventually
from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config
from trainjob_status_server.http.listener import FirstRequestDeadline

from .conftest import GROUP, NS, ServingCerts, status_path, with_changes

DEADLINE = 0.5


@pytest_asyncio.fixture
async def running(
    config: Config, certs: ServingCerts, devcluster: DevCluster
) -> AsyncIterator[StatusServer]:
    devcluster.create_trainjob(NS, "tj")
    deadlines = with_changes(config, read_timeout=DEADLINE, first_request_timeout=DEADLINE)
    async with StatusServer(deadlines, AcceptAll()) as server:
        await server.trainjobs.synced.wait()
        yield server


def address(server: StatusServer) -> tuple[str, int]:
    host, port = server.url.removeprefix("https://").rsplit(":", 1)
    return host, int(port)


async def connect(
    server: StatusServer, certs: ServingCerts
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = address(server)
    return await asyncio.open_connection(
        host, port, ssl=certs.client_context(), server_hostname="localhost"
    )


async def closed_after(reader: asyncio.StreamReader) -> tuple[float, bytes]:
    """Seconds until the server closed the connection, and what it sent before."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    received = b""
    while True:
        try:
            more = await asyncio.wait_for(reader.read(4096), 10)
        except (ConnectionResetError, ssl.SSLError):
            break
        if not more:
            break
        received += more
    return loop.time() - started, received


def post(body: bytes) -> bytes:
    return (
        f"POST {status_path(NS, 'tj')} HTTP/1.1\r\nHost: localhost\r\n"
        f"Authorization: Bearer t\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def status_rv(devcluster: DevCluster) -> str:
    obj = devcluster.get("trainjobs", NS, "tj", GROUP)
    assert obj is not None
    return str(obj["metadata"]["resourceVersion"])


def header_timeouts() -> float:
    labels = {"listener": "serving", "reason": "header_timeout"}
    return REGISTRY.get_sample_value("trainjob_status_connections_closed_total", labels) or 0.0


async def test_a_connection_that_sends_nothing_is_closed_after_the_deadline(
    running: StatusServer, certs: ServingCerts
) -> None:
    before = header_timeouts()
    reader, writer = await connect(running, certs)
    waited, received = await closed_after(reader)
    writer.close()
    assert received == b""
    assert DEADLINE * 0.8 < waited < 5
    assert header_timeouts() - before == 1


async def test_headers_sent_a_byte_at_a_time_lose_the_connection_and_write_nothing(
    running: StatusServer, certs: ServingCerts, devcluster: DevCluster
) -> None:
    before = status_rv(devcluster)
    reader, writer = await connect(running, certs)
    request = post(b'{"trainerStatus": {"progressPercentage": 5}}')

    async def trickle() -> None:
        for byte in request:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.05)  # the slow client on purpose

    sender = asyncio.create_task(trickle())
    waited, received = await closed_after(reader)
    sender.cancel()
    writer.close()
    assert received == b""
    assert DEADLINE * 0.8 < waited < 5
    assert status_rv(devcluster) == before


async def test_a_connection_that_made_a_request_stays_open_past_the_deadline(
    running: StatusServer, certs: ServingCerts, devcluster: DevCluster
) -> None:
    reader, writer = await connect(running, certs)
    for step in (1, 2):
        body = json.dumps(
            {
                "trainerStatus": {
                    "progressPercentage": step,
                    "lastUpdatedTime": f"2026-12-03T10:00:0{step}Z",
                }
            }
        ).encode()
        writer.write(post(body))
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        answer = json.loads(await reader.readexactly(length))
        assert answer["trainerStatus"]["progressPercentage"] == step
        # Longer than the first-request deadline, shorter than the idle timeout.
        await asyncio.sleep(DEADLINE * 3)
    writer.close()
    await running.writer.wait_idle()  # type: ignore[attr-defined]
    obj = devcluster.get("trainjobs", NS, "tj", GROUP)
    assert obj is not None
    assert obj["status"]["trainerStatus"]["progressPercentage"] == 2


async def test_a_later_request_whose_head_stalls_loses_the_connection_after_the_deadline(
    running: StatusServer, certs: ServingCerts, devcluster: DevCluster
) -> None:
    reader, writer = await connect(running, certs)
    body = json.dumps({"trainerStatus": {"progressPercentage": 9}}).encode()
    writer.write(post(body))
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)
    await running.writer.wait_idle()  # type: ignore[attr-defined]
    before, timeouts = status_rv(devcluster), header_timeouts()
    # The next request's head starts and never ends: the connection goes after
    # --read-timeout, not after --idle-timeout.
    writer.write(post(b'{"trainerStatus": {"progressPercentage": 10}}')[:60])
    await writer.drain()
    waited, received = await closed_after(reader)
    writer.close()
    assert received == b""
    assert DEADLINE * 0.8 < waited < 5
    assert header_timeouts() - timeouts == 1
    assert status_rv(devcluster) == before


async def test_a_tcp_connection_that_never_starts_tls_is_closed_after_the_deadline(
    running: StatusServer,
) -> None:
    host, port = address(running)
    reader, writer = await asyncio.open_connection(host, port)
    waited, received = await closed_after(reader)
    writer.close()
    assert received == b""
    assert DEADLINE * 0.8 < waited < 5


# -- the protocol wrapper alone ----------------------------------------------------------


class Recorder(asyncio.Protocol):
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.calls.append(("made", transport))

    def data_received(self, data: bytes) -> None:
        self.calls.append(("data", data))

    def eof_received(self) -> bool | None:
        self.calls.append(("eof", None))
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.calls.append(("lost", exc))

    def pause_writing(self) -> None:
        self.calls.append(("pause", None))

    def resume_writing(self) -> None:
        self.calls.append(("resume", None))


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    "chunks",
    [
        [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"],
        [b"GET / HTTP/1.1\r\nHost: x\r\n", b"\r\n"],
        [b"GET / HTTP/1.1\r\nHost: x\r", b"\n\r", b"\n"],
        [b"GET / HTTP/1.1\r\nHost: x\r\n\r", b"\n{}"],
        [bytes([b]) for b in b"GET / HTTP/1.1\r\n\r\n"],
    ],
)
async def test_the_end_of_the_headers_is_found_across_reads(chunks: list[bytes]) -> None:
    inner, transport = Recorder(), Transport()
    wrapper = FirstRequestDeadline(inner, 0.2)
    wrapper.connection_made(transport)
    for chunk in chunks:
        wrapper.data_received(chunk)
    await asyncio.sleep(0.4)  # past the deadline: proving that nothing happens
    assert not transport.closed
    assert not wrapper.timed_out
    assert wrapper.eof_received() is True
    wrapper.pause_writing()
    wrapper.resume_writing()
    wrapper.connection_lost(None)
    assert inner.calls == [
        ("made", transport),
        *(("data", chunk) for chunk in chunks),
        ("eof", None),
        ("pause", None),
        ("resume", None),
        ("lost", None),
    ]


async def test_headers_without_their_blank_line_time_out() -> None:
    inner, transport = Recorder(), Transport()
    wrapper = FirstRequestDeadline(inner, 0.2)
    wrapper.connection_made(transport)
    wrapper.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r")
    wrapper.data_received(b"X-A: b\r\n")

    async def closed() -> bool:
        return transport.closed

    await eventually(closed, "the connection closed at its deadline", within=10, every=0.01)
    assert wrapper.timed_out


async def test_a_connection_lost_before_the_deadline_cancels_it() -> None:
    inner, transport = Recorder(), Transport()
    wrapper = FirstRequestDeadline(inner, 0.2)
    wrapper.connection_made(transport)
    wrapper.connection_lost(None)
    await asyncio.sleep(0.4)  # past the deadline: proving that nothing happens
    assert not transport.closed
    assert not wrapper.timed_out
