"""The cluster's HTTP/1.1 layer over raw TLS sockets: framing, pipelining, limits, what
it refuses, and watches that end when their client goes."""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.testing import eventually

from .conftest import TJ

NS = "wire"
LIMIT = 3 * 1024 * 1024


class Raw:
    """One TLS connection that sends bytes as given and reads answers one by one."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, cluster: DevCluster) -> "Raw":
        port = int(cluster.url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=cluster.client_ssl_context(), server_hostname="127.0.0.1"
        )
        return cls(reader, writer)

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def answer(self) -> tuple[int, dict[str, str], bytes]:
        """The next answer: code, headers (lower-case names), body (chunks joined)."""
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 5)
        lines = head.decode("latin-1").split("\r\n")
        code = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            body = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding") == "chunked":
            body = b"".join([chunk async for chunk in self.chunks()])
        else:
            body = b""
        return code, headers, body

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            size = int((await asyncio.wait_for(self.reader.readline(), 5)).strip(), 16)
            data = await self.reader.readexactly(size + 2)
            if size == 0:
                return
            yield data[:-2]

    async def closed(self) -> bool:
        """True when the server has closed the connection (nothing more to read)."""
        return await asyncio.wait_for(self.reader.read(), 5) == b""

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


def request(method: str, path: str, token: str, body: bytes = b"", **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {token}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    if body or method in ("POST", "PATCH", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def status_patch_head(cluster: DevCluster, name: str, framing: str) -> bytes:
    """The line and headers of a merge patch to a TrainJob's status; ``framing`` is the
    Content-Length or Transfer-Encoding header."""
    return (
        f"PATCH {TJ}/namespaces/{NS}/trainjobs/{name}/status HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {cluster.admin_token}\r\n"
        f"Content-Type: application/merge-patch+json\r\n{framing}\r\n\r\n"
    ).encode()


def chunks(*pieces: bytes) -> bytes:
    """``pieces`` in chunked framing; none at all: the last chunk, which ends a body."""
    if not pieces:
        return b"0\r\n\r\n"
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)


def merge_patch(progress: int) -> bytes:
    status = {
        "trainerStatus": {"progressPercentage": progress, "lastUpdatedTime": "2026-12-03T10:00:00Z"}
    }
    return json.dumps({"status": status}).encode()


async def test_pipelined_requests_are_answered_in_order(devcluster: DevCluster) -> None:
    devcluster.create_trainjob(NS, "a")
    devcluster.create_trainjob(NS, "b")
    raw = await Raw.open(devcluster)
    token = devcluster.admin_token
    path = f"{TJ}/namespaces/{NS}/trainjobs"
    # Three requests in one write: a write, a read of what it wrote, and a 404.
    raw.send(
        request(
            "PATCH",
            f"{path}/a/status",
            token,
            merge_patch(7),
            Content_Type="application/merge-patch+json",
        )
        + request("GET", f"{path}/a", token)
        + request("GET", f"{path}/missing", token)
    )
    first, second, third = [await raw.answer() for _ in range(3)]
    assert first[0] == 200
    assert json.loads(first[2])["status"]["trainerStatus"]["progressPercentage"] == 7
    assert second[0] == 200
    assert json.loads(second[2])["status"]["trainerStatus"]["progressPercentage"] == 7
    assert (third[0], json.loads(third[2])["reason"]) == (404, "NotFound")
    assert all(a[1]["content-type"] == "application/json" for a in (first, second, third))
    assert all("connection" not in a[1] for a in (first, second, third))  # kept alive
    assert all("server" not in a[1] for a in (first, second, third))  # as kube-apiserver
    await raw.close()


async def test_a_body_over_the_limit_is_refused_before_it_is_read(devcluster: DevCluster) -> None:
    created = devcluster.create_trainjob(NS, "big")
    raw = await Raw.open(devcluster)
    # No body follows: the answer must not wait for it.
    raw.send(status_patch_head(devcluster, "big", f"Content-Length: {LIMIT + 1}"))
    code, headers, body = await raw.answer()
    assert (code, headers["connection"]) == (413, "close")
    assert json.loads(body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"Request entity too large: limit is {LIMIT}",
        "reason": "RequestEntityTooLarge",
        "code": 413,
    }
    assert await raw.closed()
    stored = devcluster.get("trainjobs", NS, "big", "trainer.kubeflow.org")
    assert stored == created


async def test_a_chunked_body_over_the_limit_is_refused(devcluster: DevCluster) -> None:
    created = devcluster.create_trainjob(NS, "chunked")
    raw = await Raw.open(devcluster)
    head = status_patch_head(devcluster, "chunked", "Transfer-Encoding: chunked")
    chunk = b"x" * (1024 * 1024)
    raw.send(head + chunks(*[chunk] * 4))
    code, _, body = await raw.answer()
    assert (code, json.loads(body)["reason"]) == (413, "RequestEntityTooLarge")
    assert devcluster.get("trainjobs", NS, "chunked", "trainer.kubeflow.org") == created


async def test_a_chunked_body_within_the_limit_is_read_whole(devcluster: DevCluster) -> None:
    devcluster.create_trainjob(NS, "pieces")
    raw = await Raw.open(devcluster)
    body = merge_patch(42)
    head = status_patch_head(devcluster, "pieces", "Transfer-Encoding: chunked")
    raw.send(head + chunks(body[:10], body[10:]) + chunks())  # the last: the end
    code, _, answer = await raw.answer()
    assert code == 200
    assert json.loads(answer)["status"]["trainerStatus"]["progressPercentage"] == 42


async def test_what_cannot_be_parsed_gets_a_400_and_a_close(devcluster: DevCluster) -> None:
    raw = await Raw.open(devcluster)
    raw.send(b"GET /version HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n")
    code, headers, _body = await raw.answer()
    # Go's net/http says "400 Bad Request"; aiohttp's words differ, the code and the
    # close do not.
    assert code == 400
    assert headers["content-type"].startswith("text/plain")
    assert await raw.closed()


@pytest.mark.parametrize("keep_alive_first", [False, True])
async def test_endless_headers_get_a_400_and_a_close(
    devcluster: DevCluster, keep_alive_first: bool
) -> None:
    raw = await Raw.open(devcluster)
    if keep_alive_first:  # on a connection that has served a request too
        raw.send(request("GET", "/version", devcluster.admin_token))
        assert (await raw.answer())[0] == 200
    raw.send(b"GET /version HTTP/1.1\r\nHost: x\r\n")
    line = b"X-Filler: " + b"f" * 8000 + b"\r\n"
    answered = asyncio.create_task(raw.answer())
    for _ in range(200):  # 1.6 MB of headers, never finished
        if answered.done():
            break
        raw.send(line)
        await raw.writer.drain()
    # Go's net/http answers 431 past 1 MiB of headers; aiohttp answers 400 past 128 of
    # them. Either way the head is refused before it ends, and the connection closes.
    code, _headers, _body = await answered
    assert code == 400
    assert await raw.closed()


async def test_a_long_header_is_taken(devcluster: DevCluster) -> None:
    """One header of 100 KiB: within Go's 1 MiB for a request's head."""
    raw = await Raw.open(devcluster)
    raw.send(request("GET", "/version", devcluster.admin_token, X_Filler="f" * 100_000))
    assert (await raw.answer())[0] == 200
    await raw.close()


async def test_head_gets_the_length_and_no_body(devcluster: DevCluster) -> None:
    raw = await Raw.open(devcluster)
    token = devcluster.admin_token
    raw.send(request("GET", "/version", token))
    _, got_headers, got_body = await raw.answer()
    raw.send(request("HEAD", "/version", token) + request("GET", "/healthz", token))
    head = await asyncio.wait_for(raw.reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert f"Content-Length: {len(got_body)}\r\n".encode() in head
    assert got_headers["content-length"] == str(len(got_body))
    # The next answer starts right after the head: nothing of a body was sent.
    assert (await raw.answer())[::2] == (200, b"ok")


async def test_expect_100_continue_is_honoured(devcluster: DevCluster) -> None:
    devcluster.create_trainjob(NS, "expect")
    raw = await Raw.open(devcluster)
    body = merge_patch(3)
    framing = f"Content-Length: {len(body)}\r\nExpect: 100-continue"
    raw.send(status_patch_head(devcluster, "expect", framing))  # the body waits for the 100
    interim = await asyncio.wait_for(raw.reader.readuntil(b"\r\n\r\n"), 5)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    raw.send(body)
    code, _, answer = await raw.answer()
    assert code == 200
    assert json.loads(answer)["status"]["trainerStatus"]["progressPercentage"] == 3


@pytest.mark.parametrize(
    ("version", "extra"),
    [("HTTP/1.1", "Connection: close\r\n"), ("HTTP/1.0", "")],
)
async def test_connections_close_when_the_client_asks(
    devcluster: DevCluster, version: str, extra: str
) -> None:
    raw = await Raw.open(devcluster)
    raw.send(f"GET /version {version}\r\nHost: x\r\n{extra}\r\n".encode())
    code, headers, body = await raw.answer()
    assert code == 200
    if version == "HTTP/1.1":  # in HTTP/1.0 no header is needed to say so
        assert headers["connection"] == "close"
    assert json.loads(body)["major"] == "1"
    assert await raw.closed()


async def until_watchers(cluster: DevCluster, count: int) -> None:
    """Until exactly ``count`` watches of TrainJobs are registered in ``cluster``."""
    resource = cluster.resource("trainjobs", "trainer.kubeflow.org").qualified

    async def registered() -> bool:
        return len(cluster.store.watchers(resource)) == count

    await eventually(registered, f"{count} registered TrainJob watches", within=10, every=0.01)


async def test_an_answer_after_a_watch_on_one_connection_comes_after_its_end(
    devcluster: DevCluster,
) -> None:
    devcluster.create_trainjob(NS, "seq")
    raw = await Raw.open(devcluster)
    token = devcluster.admin_token
    # A watch that ends by itself, and a request pipelined behind it.
    raw.send(
        request("GET", f"{TJ}/namespaces/{NS}/trainjobs?watch=true&timeoutSeconds=1", token)
        + request("GET", f"{TJ}/namespaces/{NS}/trainjobs/seq", token)
    )
    await until_watchers(devcluster, 1)
    devcluster.create_trainjob(NS, "later")  # an event written at the end of a loop turn
    code, _, streamed = await raw.answer()
    events = [json.loads(line) for line in streamed.splitlines()]
    assert code == 200
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "seq"),
        ("ADDED", "later"),
    ]
    code, _, body = await raw.answer()
    assert (code, json.loads(body)["metadata"]["name"]) == (200, "seq")
    await raw.close()


async def test_a_watch_whose_client_goes_is_unregistered_at_once(devcluster: DevCluster) -> None:
    devcluster.create_trainjob(NS, "watched")
    raw = await Raw.open(devcluster)
    raw.send(request("GET", f"{TJ}/namespaces/{NS}/trainjobs?watch=true", devcluster.admin_token))
    head = await asyncio.wait_for(raw.reader.readuntil(b"\r\n\r\n"), 5)
    assert b"Transfer-Encoding: chunked" in head
    chunks = raw.chunks()
    assert json.loads(await chunks.__anext__())["type"] == "ADDED"
    resource = devcluster.resource("trainjobs", "trainer.kubeflow.org").qualified
    assert len(devcluster.store.watchers(resource)) == 1
    await raw.close()
    await until_watchers(devcluster, 0)  # no write or bookmark needed to notice


async def test_a_watch_whose_client_stops_reading_is_cut_off(devcluster: DevCluster) -> None:
    devcluster.app.watch_buffer_limit = 64 * 1024
    job = devcluster.create_trainjob(NS, "flood")
    raw = await Raw.open(devcluster)
    raw.send(request("GET", f"{TJ}/namespaces/{NS}/trainjobs?watch=true", devcluster.admin_token))
    await asyncio.wait_for(raw.reader.readuntil(b"\r\n\r\n"), 5)
    resource = devcluster.resource("trainjobs", "trainer.kubeflow.org").qualified
    # Stop reading: the kernel's buffers fill, then the server's, then the watch goes.
    raw.writer.transport.pause_reading()
    padding = "x" * 4000
    for i in range(20_000):
        new = {**job, "metadata": {**job["metadata"], "annotations": {"pad": f"{i}{padding}"}}}
        job = devcluster.store.update(resource, new, job)
        if not devcluster.store.watchers(resource) or devcluster.store.watchers(resource)[0].closed:
            break
        if i % 100 == 0:
            await asyncio.sleep(0)
    await until_watchers(devcluster, 0)
    raw.writer.transport.resume_reading()
    # The stream ends properly (the last chunk) long before the events run out.
    received = 0
    async for _ in raw.chunks():
        received += 1
    # The initial ADDED and every event up to the one that overfilled the buffer.
    assert received == i + 2
    assert i < 19_999
    await raw.close()


async def test_stopping_closes_idle_keep_alive_connections(devcluster: DevCluster) -> None:
    raw = await Raw.open(devcluster)
    raw.send(request("GET", "/version", devcluster.admin_token))
    assert (await raw.answer())[0] == 200
    await devcluster.stop()
    assert await raw.closed()
