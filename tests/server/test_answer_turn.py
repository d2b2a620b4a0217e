"""What the answer written one loop turn later (``responses.Answer``) relies on, over real
sockets: posts that arrive together on several connections are all read and handled
before the first of their answers is sent, so the answers go out together after the
reads (docs/measurements/2026-12-05-request-path.md, "Readability against the
budget").

The stand-in writer looks, each time the endpoint hands it an update, whether any client
socket has received an answer yet. Written at once, the first post's answer would be in
its client's socket before the second post is handled."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest_asyncio
from aiohttp.test_utils import RawTestServer

from trainjob_status_server.auth import Identity
from trainjob_status_server.http.endpoint import StatusEndpoint
from trainjob_status_server.http.serving import ServingHandler
from trainjob_status_server.status.validation import EncodedStatus

CONNECTIONS = 8
BODY = b'{"trainerStatus":{"progressPercentage":42,"lastUpdatedTime":"2026-12-02T18:33:25Z"}}'
PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/job/status"
POST = (
    f"POST {PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t0k\r\n"
    f"Content-Length: {len(BODY)}\r\n\r\n"
).encode() + BODY


@dataclass
class Rig:
    """Authenticator, TrainJob look-up and writer; the writer records, for each update,
    how many clients had an answer waiting in their socket when it was handed over."""

    clients: list[socket.socket] = field(default_factory=list)
    answered_before: list[int] = field(default_factory=list)

    async def authenticate(
        self, authorization: str | None, namespace: str, trainjob: str, source: str = ""
    ) -> Identity:
        return Identity(namespace, "trainer")

    async def trainjob_exists(self, namespace: str, name: str) -> bool:
        return True

    async def write(self, namespace: str, name: str, update: EncodedStatus) -> None:
        self.answered_before.append(sum(_has_bytes(client) for client in self.clients))


def _has_bytes(client: socket.socket) -> bool:
    try:
        return bool(client.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return False


async def _answer(client: socket.socket) -> bytes:
    """One whole answer (head and Content-Length bytes of body) from ``client``."""
    loop = asyncio.get_running_loop()
    got = b""
    while b"\r\n\r\n" not in got:
        got += await loop.sock_recv(client, 65536)
    head, _, body = got.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += await loop.sock_recv(client, 65536)
    return head


@pytest_asyncio.fixture
async def rig() -> AsyncIterator[Rig]:
    rig = Rig()
    endpoint = StatusEndpoint(rig, rig, rig, read_timeout=5.0)
    server = RawTestServer(ServingHandler(endpoint.handle, gets={}))
    await server.start_server()
    loop = asyncio.get_running_loop()
    assert server.port is not None
    try:
        for _ in range(CONNECTIONS):
            client = socket.socket()
            client.setblocking(False)
            await loop.sock_connect(client, ("127.0.0.1", server.port))
            rig.clients.append(client)
        yield rig
    finally:
        for client in rig.clients:
            client.close()
        await server.close()


async def test_posts_that_arrive_together_are_all_handled_before_any_answer(rig: Rig) -> None:
    # A first post on each connection: every connection is open and idle in the server.
    for client in rig.clients:
        client.send(POST)
        assert (await _answer(client)).startswith(b"HTTP/1.1 200 OK")
    rig.answered_before.clear()
    # Then one post on each, sent before the server's loop runs again: it finds them all
    # readable at once.
    for client in rig.clients:
        client.send(POST)
    heads = [await _answer(client) for client in rig.clients]
    assert [head.split(b"\r\n", 1)[0] for head in heads] == [b"HTTP/1.1 200 OK"] * CONNECTIONS
    assert rig.answered_before == [0] * CONNECTIONS
