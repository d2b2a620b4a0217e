"""``kubectl trainjob progress`` fails as kubectl does: one line per error, a TrainJob
that is not there is NotFound with exit status 1, a missing kubeconfig says so, and a
watch that loses the API server says what happened in words, not the HTTP library's. The
plugin's client is also driven against small servers that answer as a network that fails
or a proxy in the API server's place would."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import yaml

from kubectl_trainjob.follow import reason_of
from kubectl_trainjob.kube import (
    TRAINJOBS,
    KubeClient,
    KubeError,
    KubeUnavailable,
    ObjectList,
    WatchEvent,
    load_config,
)
from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_real_server

from .test_progress import Kubectl, interrupted, jobs, kube, read_line, read_table

__all__ = ["jobs", "kube"]  # fixtures the tests below take

NOT_FOUND = 'Error from server (NotFound): trainjobs.trainer.kubeflow.org "{}" not found\n'
RETRYING = " (retrying; rows are marked stale until the API server answers)\n"
LOST = "error: lost the connection to the API server: it closed the connection" + RETRYING


@pytest.fixture
def kubectl(kube_api: KubeAPI, tmp_path: Path) -> Kubectl:
    return Kubectl(kube_api, tmp_path)


@on_real_server
@pytest.mark.usefixtures("jobs")
async def test_a_missing_trainjob_is_not_found_as_kubectl_get_says(kubectl: Kubectl) -> None:
    nope = await kubectl.run("trainjob", "progress", "-n", "team-a", "nope")
    assert (nope.code, nope.out, nope.err) == (1, "", NOT_FOUND.format("nope"))
    # What was found is shown; each name that was not is an error line.
    some = await kubectl.run("trainjob", "progress", "-n", "team-a", "tj-b", "nope", "gone")
    assert some.code == 1
    assert some.out.splitlines() == [
        "NAME   STATE   PROGRESS   ETA   UPDATED",
        "tj-b   -       -          -     -",
    ]
    assert some.err == NOT_FOUND.format("nope") + NOT_FOUND.format("gone")
    # A watch of a name that is not there does not wait for it, as kubectl get -w.
    watched = await kubectl.run("trainjob", "progress", "-n", "team-a", "nope", "-w")
    assert (watched.code, watched.out, watched.err) == (1, "", NOT_FOUND.format("nope"))
    scripted = await kubectl.run("trainjob", "progress", "-n", "team-a", "nope", "-o", "json")
    assert (scripted.code, scripted.out, scripted.err) == (1, "", NOT_FOUND.format("nope"))
    # In another namespace the name is not there either.
    elsewhere = await kubectl.run("trainjob", "progress", "-n", "team-b", "tj-a")
    assert (elsewhere.code, elsewhere.err) == (1, NOT_FOUND.format("tj-a"))


async def test_no_kubeconfig_is_one_line(kubectl: Kubectl, tmp_path: Path) -> None:
    # HOME is tmp_path, which has no .kube/config.
    result = await kubectl.run("trainjob", "progress", env={"KUBECONFIG": ""})
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        f"error: no kubeconfig: {tmp_path}/.kube/config does not exist"
        " (set KUBECONFIG or --kubeconfig)\n"
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def http_server(answer: Answer) -> AsyncIterator[str]:
    """A server on a free port that reads one request's head and leaves the rest to
    ``answer``; its URL."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        try:
            await answer(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


async def client_of(url: str, tmp_path: Path) -> KubeClient:
    """The plugin's client of a kubeconfig naming ``url``, as the command makes it."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    configuration, _ = await load_config(str(path), None)
    return KubeClient(configuration, timeout=0.5)


async def failure_of(client: KubeClient, read: Callable[[KubeClient], Awaitable[object]]) -> str:
    """What the plugin says of ``read``'s failure."""
    async with client:
        with pytest.raises((KubeError, KubeUnavailable)) as failed:
            await read(client)
    return reason_of(failed.value)


async def watched(client: KubeClient, seen: list[WatchEvent] | None = None) -> None:
    """Watch until the watch ends; each event into ``seen``."""
    seen = [] if seen is None else seen
    async for event in client.watch(TRAINJOBS, "1", namespace="team-a"):
        seen.append(event)


def listed(client: KubeClient) -> Awaitable[ObjectList]:
    return client.list(TRAINJOBS, namespace="team-a")


async def test_failures_without_an_answer_read_as_what_happened(tmp_path: Path) -> None:
    port = _closed_port()
    refused = await failure_of(await client_of(f"http://127.0.0.1:{port}", tmp_path), listed)
    assert refused == f"cannot connect to the API server at 127.0.0.1:{port}: connection refused"

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up

    async with http_server(silent) as url:
        late = await failure_of(await client_of(url, tmp_path), listed)
    assert (
        late
        == "GET /apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs: no answer within 0.5s"
    )

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A watch's answer, one event, then the middle of a chunk and the connection closed.
        event = json.dumps({"type": "ADDED", "object": {"metadata": {"name": "tj"}}}) + "\n"
        head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        writer.write(f"{head}{len(event):x}\r\n{event}\r\n40\r\n{{".encode())
        await writer.drain()

    async with http_server(cut) as url:
        lost = await failure_of(await client_of(url, tmp_path), watched)
    assert lost == "lost the connection to the API server: it closed the connection"


async def test_error_answers_read_as_the_api_server_or_the_proxy_says_them(
    tmp_path: Path,
) -> None:
    status = {
        "kind": "Status",
        "status": "Failure",
        "reason": "TooManyRequests",
        "message": "too many requests,\n please try again later",
        "code": 429,
        "details": {"retryAfterSeconds": 3},
    }
    answers = [
        ("429 Too Many Requests", "application/json", json.dumps(status), ""),
        ("502 Bad Gateway", "text/html", "<html><body>bad\ngateway</body></html>", "Retry-After: 7\r\n"),
    ]  # fmt: skip
    said = []
    for line, kind, body, extra in answers:

        async def answer(
            reader: asyncio.StreamReader,
            writer: asyncio.StreamWriter,
            line: str = line,
            kind: str = kind,
            body: str = body,
            extra: str = extra,
        ) -> None:
            head = (
                f"HTTP/1.1 {line}\r\nContent-Type: {kind}\r\n{extra}Content-Length: {len(body)}\r\n"
            )
            writer.write(f"{head}Connection: close\r\n\r\n{body}".encode())
            await writer.drain()

        async with http_server(answer) as url:
            client = await client_of(url, tmp_path)
            async with client:
                with pytest.raises(KubeError) as refused:
                    await listed(client)
        said.append((refused.value.status, refused.value.retry_after, reason_of(refused.value)))
    assert said == [
        (429, 3, "Error from server (TooManyRequests): too many requests, please try again later"),
        (502, 7, "Error from server (Bad Gateway): <html><body>bad gateway</body></html>"),
    ]


async def test_a_watch_error_event_is_the_api_servers_error(tmp_path: Path) -> None:
    expired = {
        "type": "ERROR",
        "object": {"kind": "Status", "reason": "Expired", "message": "too old", "code": 410},
    }
    lines = [
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}},
        expired,
    ]

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = "".join(json.dumps(line) + "\n" for line in lines)
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        )
        writer.write(f"{head}\r\n{body}".encode())
        await writer.drain()

    async with http_server(answer) as url:
        client = await client_of(url, tmp_path)
        seen: list[WatchEvent] = []
        async with client:
            with pytest.raises(KubeError) as gone:
                await watched(client, seen)
    assert seen == [WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "7"}})]
    assert (gone.value.status, reason_of(gone.value)) == (
        410,
        "Error from server (Expired): too old",
    )


async def test_a_watch_that_loses_the_api_server_says_so_in_one_line(tmp_path: Path) -> None:
    cluster = DevCluster()
    await cluster.__aenter__()
    try:
        cluster.create_trainjob("team-a", "tj")
        kubectl = Kubectl(cluster, tmp_path)
        proc = await kubectl.start("trainjob", "progress", "-n", "team-a", "-w")
        assert proc.stdout is not None
        assert proc.stderr is not None
        assert (await read_table(proc.stdout))[1].split()[0] == "tj"
        port = int(cluster.url.rsplit(":", 1)[1])
    finally:
        # The API server goes away in the middle of the plugin's watch.
        await cluster.__aexit__(None, None, None)
    refused = f"error: cannot connect to the API server at 127.0.0.1:{port}: connection refused"
    lines = [await read_line(proc.stderr)]
    if lines[0] == LOST:  # the cut watch first, then the relist that finds no server
        lines.append(await read_line(proc.stderr))
    assert lines[-1] == refused + RETRYING, lines
    # Each retry that failed the same way since said nothing more.
    assert await interrupted(proc) == (130, "")
