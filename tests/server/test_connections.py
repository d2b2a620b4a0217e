"""What one connection, or one source address, may hold of the server: the bytes of a
request's head (431 beyond --max-header-bytes, on every request of a connection), its
slot (--max-connections-per-ip, idle keep-alive connections closed to make room), its
writes (--write-timeout), and the probes on their own port answering while the metrics
port is full. Requests aiohttp's parser refuses are answered as a Status, logged in one
line without header bytes. Every client here is a real socket against the server."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client import REGISTRY

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.acceptall import AcceptAll
from trainjob_devcluster.harness.testing import eventually
from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config

from .conftest import GROUP, NS, ServingCerts, status_path, with_changes
from .test_metrics_secure import grant_metrics_reader, token_for

HEAD_LIMIT = 4096
FLOODER = "127.0.0.2"  # loopback answers the whole of 127/8: a second source address
TOKEN = "s3cr3t-" + "x" * 1500  # a bearer token the size of a projected one


@pytest_asyncio.fixture
async def running(
    config: Config, certs: ServingCerts, devcluster: DevCluster
) -> AsyncIterator[StatusServer]:
    devcluster.create_trainjob(NS, "tj")
    limited = with_changes(
        config, max_header_bytes=HEAD_LIMIT, max_connections=8, max_connections_per_ip=4
    )
    async with StatusServer(limited, AcceptAll()) as server:
        await server.trainjobs.synced.wait()
        yield server


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def address(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


async def connect(server: StatusServer, certs: ServingCerts, source: str = "127.0.0.1") -> Stream:
    host, port = address(server.url)
    return await asyncio.open_connection(
        host,
        port,
        ssl=certs.client_context(),
        server_hostname="localhost",
        local_addr=(source, 0),
    )


def head(path: str = status_path(NS, "tj"), *, length: int = 0, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n{extra}\r\n"
    ).encode()


def post(progress: int) -> bytes:
    body = json.dumps(
        {
            "trainerStatus": {
                "progressPercentage": progress,
                "lastUpdatedTime": f"2026-12-03T10:00:{progress:02d}Z",
            }
        }
    ).encode()
    return head(length=len(body)) + body


async def answer(reader: asyncio.StreamReader) -> tuple[bytes, dict[bytes, bytes], Any]:
    """One answer: its status line, headers (lower-case names) and JSON body."""
    raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    status, *lines = raw[:-4].split(b"\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(b":", 1) for line in lines)}
    body = await asyncio.wait_for(reader.readexactly(int(headers[b"content-length"])), 10)
    return status, headers, json.loads(body)


async def closed(reader: asyncio.StreamReader) -> bytes:
    """What the server sent until it closed the connection."""
    received = b""
    while True:
        try:
            more = await asyncio.wait_for(reader.read(65536), 10)
        except (ConnectionResetError, ssl.SSLError):
            return received
        if not more:
            return received
        received += more


def status_rv(devcluster: DevCluster) -> str:
    obj = devcluster.get("trainjobs", NS, "tj", GROUP)
    assert obj is not None
    return str(obj["metadata"]["resourceVersion"])


def counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


TOO_LARGE = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Request header fields too large",
    "reason": "RequestHeaderFieldsTooLarge",
    "code": 431,
}


# -- the bytes of a request's head --------------------------------------------------------


@pytest.mark.parametrize(
    "padding",
    [
        "X-Pad: " + "a" * HEAD_LIMIT + "\r\n",  # one header line
        "".join(f"X-Pad-{i}: {'a' * 90}\r\n" for i in range(HEAD_LIMIT // 100)),  # many short
    ],
    ids=["one-long-header", "many-short-headers"],
)
async def test_a_head_over_the_limit_is_answered_431_and_closed_and_writes_nothing(
    running: StatusServer, certs: ServingCerts, devcluster: DevCluster, padding: str
) -> None:
    before = status_rv(devcluster)
    reader, writer = await connect(running, certs)
    # The blank line never comes: the server must not wait for it to refuse.
    writer.write(head(length=2, extra=padding)[:-2])
    await writer.drain()
    status, headers, body = await answer(reader)
    assert status == b"HTTP/1.0 431 Request Header Fields Too Large"
    assert headers[b"content-type"] == b"application/json"
    assert b"server" not in headers
    assert body == TOO_LARGE
    assert await closed(reader) == b""
    writer.close()
    assert status_rv(devcluster) == before


async def test_every_request_of_a_keep_alive_connection_has_the_limit(
    running: StatusServer, certs: ServingCerts, devcluster: DevCluster
) -> None:
    reader, writer = await connect(running, certs)
    writer.write(post(7))
    status, _, body = await answer(reader)
    assert status == b"HTTP/1.1 200 OK"
    assert body["trainerStatus"]["progressPercentage"] == 7
    await running.writer.wait_idle()  # type: ignore[attr-defined]
    before = status_rv(devcluster)
    writer.write(head(length=2, extra="X-Pad: " + "a" * HEAD_LIMIT + "\r\n")[:-2])
    status, _, body = await answer(reader)
    assert (status, body) == (b"HTTP/1.0 431 Request Header Fields Too Large", TOO_LARGE)
    assert await closed(reader) == b""
    writer.close()
    assert status_rv(devcluster) == before


async def test_a_post_with_a_projected_token_fits_the_default_limit(
    config: Config, certs: ServingCerts, devcluster: DevCluster
) -> None:
    devcluster.create_trainjob(NS, "tj")
    assert config.max_header_bytes == Config().max_header_bytes
    async with StatusServer(config, AcceptAll()) as server:
        await server.trainjobs.synced.wait()
        reader, writer = await connect(server, certs)
        # A head of about 2 KiB with the usual client headers.
        extra = "User-Agent: trainjob-status/1\r\nAccept: */*\r\nAccept-Encoding: gzip\r\n"
        body = json.dumps({"trainerStatus": {"progressPercentage": 3}}).encode()
        writer.write(head(length=len(body), extra=extra) + body)
        status, _, answered = await answer(reader)
        writer.close()
    assert status == b"HTTP/1.1 200 OK"
    assert answered["trainerStatus"]["progressPercentage"] == 3


# -- requests aiohttp's parser refuses ---------------------------------------------------


def bad_request(message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "BadRequest",
        "code": 400,
    }


PATH = status_path(NS, "tj")
AUTH = f"Authorization: Bearer {TOKEN}\r\n"
REFUSED = {
    "bad-chunking": (
        f"POST {PATH} HTTP/1.1\r\nHost: x\r\n{AUTH}Transfer-Encoding: chunked\r\n\r\n"
        "zz\r\n{}\r\n0\r\n\r\n",
        b"HTTP/1.0 400 Bad Request",
        bad_request("Bad request: Invalid character in chunk size"),
    ),
    "length-and-chunked": (
        f"POST {PATH} HTTP/1.1\r\nHost: x\r\n{AUTH}Content-Length: 2\r\n"
        "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"HTTP/1.0 400 Bad Request",
        bad_request("Bad request: Transfer-Encoding can't be present with Content-Length"),
    ),
    "malformed-request-line": (
        f"POST {PATH} HTTP/9.Z\r\nHost: x\r\n{AUTH}\r\n",
        b"HTTP/1.0 400 Bad Request",
        bad_request("Malformed request line"),
    ),
    "header-line-too-long": (
        f"POST {PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN * 4}\r\n\r\n",
        b"HTTP/1.0 431 Request Header Fields Too Large",
        TOO_LARGE,
    ),
    "invalid-header-name": (
        f"POST {PATH} HTTP/1.1\r\nHost: x\r\n{AUTH}Bad Name{TOKEN}: 1\r\n\r\n",
        b"HTTP/1.0 400 Bad Request",
        bad_request("Bad request: Invalid header token"),
    ),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
async def test_parser_refusals_are_a_status_logged_in_one_line_without_header_bytes(
    running: StatusServer,
    certs: ServingCerts,
    devcluster: DevCluster,
    caplog: pytest.LogCaptureFixture,
    case: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    sent, status_line, expected = REFUSED[case]
    before = status_rv(devcluster)
    reader, writer = await connect(running, certs)
    writer.write(sent.encode())
    status, headers, body = await answer(reader)
    assert status == status_line
    assert headers[b"content-type"] == b"application/json"
    assert b"server" not in headers
    assert body == expected
    assert await closed(reader) == b""
    writer.close()
    assert status_rv(devcluster) == before
    refusals = [r for r in caplog.records if r.getMessage() == "request refused by the parser"]
    assert len(refusals) == 1
    assert refusals[0].levelno == logging.INFO
    assert refusals[0].__dict__["code"] == expected["code"]
    for record in caplog.records:
        assert record.exc_info is None
        assert "s3cr3t" not in record.getMessage()
        assert "s3cr3t" not in json.dumps(record.__dict__, default=repr)


# -- slots ---------------------------------------------------------------------------------


async def stalled(server: StatusServer, certs: ServingCerts, source: str) -> Stream:
    """A connection in the middle of its first request's headers (fresh)."""
    reader, writer = await connect(server, certs, source)
    writer.write(head()[:40])
    await writer.drain()
    return reader, writer


async def in_flight(server: StatusServer, certs: ServingCerts, source: str) -> Stream:
    """A connection whose first request is in progress: its head is in, its body not."""
    reader, writer = await connect(server, certs, source)
    writer.write(head(length=100) + b'{"trainerStatus":')
    await writer.drain()
    return reader, writer


def closed_count(reason: str, listener: str = "serving") -> float:
    return counted("trainjob_status_connections_closed_total", listener=listener, reason=reason)


async def refused_at_once(server: StatusServer, certs: ServingCerts, source: str) -> None:
    """The connection is closed before its TLS handshake completes."""
    with pytest.raises((ConnectionError, ssl.SSLError)):
        await connect(server, certs, source)


async def test_a_flood_from_one_address_does_not_stop_posts_from_another(
    running: StatusServer, certs: ServingCerts, devcluster: DevCluster
) -> None:
    before = closed_count("fresh_evicted")
    # Ten silent connections from one address, which may hold four: each one over the
    # cap closes that address's own oldest silent one.
    flood = [await stalled(running, certs, FLOODER) for _ in range(10)]
    for reader, _ in flood[:6]:
        assert await closed(reader) == b""
    assert closed_count("fresh_evicted") - before == 6
    reader, writer = await connect(running, certs, "127.0.0.1")
    writer.write(post(11))
    status, _, body = await answer(reader)
    writer.close()
    for _, flooding in flood:
        flooding.close()
    assert status == b"HTTP/1.1 200 OK"
    assert body["trainerStatus"]["progressPercentage"] == 11
    await running.writer.wait_idle()  # type: ignore[attr-defined]
    obj = devcluster.get("trainjobs", NS, "tj", GROUP)
    assert obj is not None
    assert obj["status"]["trainerStatus"]["progressPercentage"] == 11


async def test_an_address_whose_connections_are_all_in_flight_is_refused_at_its_cap(
    running: StatusServer, certs: ServingCerts
) -> None:
    before = counted(
        "trainjob_status_connections_refused_total",
        listener="serving",
        reason="max_connections_per_ip",
    )
    busy = [await in_flight(running, certs, FLOODER) for _ in range(4)]
    await refused_at_once(running, certs, FLOODER)
    after = counted(
        "trainjob_status_connections_refused_total",
        listener="serving",
        reason="max_connections_per_ip",
    )
    assert after - before == 1
    for _, writer in busy:
        writer.close()


async def test_an_idle_keep_alive_connection_makes_room_for_a_new_one(
    running: StatusServer, certs: ServingCerts
) -> None:
    evicted = counted(
        "trainjob_status_connections_closed_total", listener="serving", reason="idle_evicted"
    )
    sources = ["127.0.0.2", "127.0.0.3"]
    # Four in the middle of a request (busy), then four idle after one answered post.
    busy = [await in_flight(running, certs, sources[i % 2]) for i in range(4)]
    idle: list[Stream] = []
    for i in range(4):
        reader, writer = await connect(running, certs, sources[i % 2] if i < 2 else "127.0.0.4")
        writer.write(post(20 + i))
        status, _, _ = await answer(reader)
        assert status == b"HTTP/1.1 200 OK"
        idle.append((reader, writer))
    # Every slot is taken: the next connection closes the oldest idle one and is served.
    reader, writer = await connect(running, certs, "127.0.0.1")
    writer.write(post(30))
    status, _, body = await answer(reader)
    assert (status, body["trainerStatus"]["progressPercentage"]) == (b"HTTP/1.1 200 OK", 30)
    assert await closed(idle[0][0]) == b""
    assert (
        counted(
            "trainjob_status_connections_closed_total", listener="serving", reason="idle_evicted"
        )
        - evicted
        == 1
    )
    for _, other in [*busy, *idle, (reader, writer)]:
        other.close()


async def test_with_every_slot_busy_a_new_connection_is_refused_and_counted(
    running: StatusServer, certs: ServingCerts
) -> None:
    before = counted(
        "trainjob_status_connections_refused_total", listener="serving", reason="max_connections"
    )
    busy = [await in_flight(running, certs, f"127.0.0.{2 + i % 2}") for i in range(8)]
    await refused_at_once(running, certs, "127.0.0.1")
    after = counted(
        "trainjob_status_connections_refused_total", listener="serving", reason="max_connections"
    )
    assert after - before == 1
    for _, writer in busy:
        writer.close()


# -- writes -------------------------------------------------------------------------------


async def test_a_client_that_never_reads_is_closed_after_the_write_timeout(
    config: Config, devcluster: DevCluster
) -> None:
    async with StatusServer(with_changes(config, write_timeout=0.2), AcceptAll()) as server:
        before = counted(
            "trainjob_status_connections_closed_total", listener="metrics", reason="write_timeout"
        )
        host, port = address(server.metrics_url)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(sock, (host, port))
        request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 8

        async def send_until_closed() -> None:
            while True:
                await loop.sock_sendall(sock, request)

        # Answers pile up unread until the server gives up on the connection.
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            await asyncio.wait_for(send_until_closed(), 60)
        sock.close()
        after = counted(
            "trainjob_status_connections_closed_total", listener="metrics", reason="write_timeout"
        )
    assert after - before == 1


async def test_a_tls_client_that_never_reads_is_closed_after_the_write_timeout(
    config: Config, certs: ServingCerts, devcluster: DevCluster
) -> None:
    """On the secure metrics port: every TLS listener is the same ``CappedSite``, and its
    answers are large, so a few pipelined scrapes fill the kernel's buffers. (A stream of
    small answers, such as the serving port's ``/healthz``, needs tens of thousands of
    requests for that, which on a loaded machine overflow the server's receive buffer on
    loopback and leave the client in TCP's retransmission backoff for longer than the
    test waits.)"""
    secure = with_changes(config, metrics_secure=True, write_timeout=0.2)
    async with StatusServer(secure, AcceptAll()) as server:
        token = token_for(devcluster, "prometheus")
        grant_metrics_reader(devcluster, "prometheus")
        before = counted(
            "trainjob_status_connections_closed_total", listener="metrics", reason="write_timeout"
        )
        sock = socket.create_connection(address(server.metrics_url))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        _, writer = await asyncio.open_connection(
            sock=sock, ssl=certs.client_context(), server_hostname="localhost"
        )
        scrape = f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
        requests = scrape.encode() * 8

        async def send_until_closed() -> None:
            while True:
                writer.write(requests)
                await writer.drain()

        with pytest.raises((ConnectionError, ssl.SSLError)):
            await asyncio.wait_for(send_until_closed(), 60)
        writer.close()
        after = counted(
            "trainjob_status_connections_closed_total", listener="metrics", reason="write_timeout"
        )
    assert after - before == 1


# -- probes -------------------------------------------------------------------------------


async def test_probes_and_a_new_scrape_answer_while_the_metrics_port_is_full(
    config: Config,
) -> None:
    async with StatusServer(config, AcceptAll()) as server:
        await server.trainjobs.synced.wait()
        host, port = address(server.metrics_url)
        scrapers = []
        # 64 connections (the metrics port's cap) from four addresses, each mid-request.
        for i in range(64):
            _, writer = await asyncio.open_connection(
                host, port, local_addr=(f"127.0.0.{2 + i % 4}", 0)
            )
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            await writer.drain()
            scrapers.append(writer)
        async with aiohttp.ClientSession() as session:
            # Each is mid-head, so a new scrape closes one to take its slot.
            async with session.get(server.metrics_url + "/healthz") as response:
                assert (response.status, await response.text()) == (200, "ok")
            for path in ("/healthz", "/readyz"):
                async with session.get(server.probe_url + path) as response:
                    assert (response.status, await response.text()) == (200, "ok")
        for writer in scrapers:
            writer.close()


async def test_concurrent_tls_connections_sharing_the_receive_buffer_each_get_their_answer(
    running: StatusServer, certs: ServingCerts
) -> None:
    """Bodies of several TLS records, sent at once on many connections: the receive
    buffer the connections share never mixes their bytes."""

    async def one(progress: int, source: str) -> int:
        reader, writer = await connect(running, certs, source)
        body = json.dumps({"trainerStatus": {"progressPercentage": progress}}).encode()
        body = body[:-1] + b" " * 40_000 + body[-1:]
        for _ in range(2):
            writer.write(head(length=len(body)))
            for start in range(0, len(body), 5000):
                writer.write(body[start : start + 5000])
                await writer.drain()
            status, _, answered = await answer(reader)
            assert status == b"HTTP/1.1 200 OK"
            assert answered["trainerStatus"]["progressPercentage"] == progress
        writer.close()
        return progress

    done = await asyncio.gather(*(one(p, f"127.0.0.{2 + p % 4}") for p in range(1, 9)))
    assert done == list(range(1, 9))


async def test_pipelined_requests_beyond_the_parsers_queue_are_all_answered(
    running: StatusServer, certs: ServingCerts
) -> None:
    """aiohttp parses at most a few dozen requests ahead and asks for the rest once it
    has answered them: the head bound passes that request on."""
    reader, writer = await connect(running, certs)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 100)
    await writer.drain()
    for _ in range(100):
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert raw.startswith(b"HTTP/1.1 200 OK\r\n")
        assert await reader.readexactly(2) == b"ok"
    writer.close()


async def test_a_client_gone_in_the_middle_of_its_body_is_no_server_error(
    running: StatusServer, certs: ServingCerts, caplog: pytest.LogCaptureFixture
) -> None:
    """The connection lost while the body is awaited: logged at info, not as a failure
    with its traceback, and not counted as a post (nothing failed here, and no answer
    can reach it)."""
    errors_before = REGISTRY.get_sample_value("trainjob_status_requests_total", {"code": "500"})
    _, writer = await connect(running, certs)
    writer.write(head(length=100) + b'{"trainerSta')
    await writer.drain()

    assert running._site is not None
    slots = running._site.slots

    async def head_in() -> bool:
        return slots.count("127.0.0.1") == 1 and slots.fresh("127.0.0.1") == 0

    await eventually(head_in, "the server has the head and waits for the body")
    writer.transport.abort()  # a reset, as a peer that died or was closed for others
    caplog.set_level(logging.INFO)

    async def abandoned() -> bool:
        return any(r.getMessage() == "request abandoned: connection lost" for r in caplog.records)

    await eventually(abandoned, "the lost request is logged")
    [record] = [r for r in caplog.records if r.getMessage() == "request abandoned: connection lost"]
    assert record.levelno == logging.INFO
    assert not [r for r in caplog.records if r.getMessage() == "request failed"]
    errors_after = REGISTRY.get_sample_value("trainjob_status_requests_total", {"code": "500"})
    assert errors_after == errors_before
