"""``kubectl trainjob progress`` fails as kubectl does: one line per error, a TrainJob
that is not there is NotFound with exit status 1, a missing kubeconfig says so, and a
watch that loses the API server says what happened in words, not the HTTP library's."""

from __future__ import annotations

import socket
from pathlib import Path

import aiohttp
import pytest

from kubectl_trainjob.follow import reason_of
from trainjob_devcluster import DevCluster
from trainjob_status_server.kube.errors import KubeUnavailable

from .test_progress import Kubectl, interrupted, jobs, kube, read_line, read_table

__all__ = ["jobs", "kube"]  # fixtures the tests below take

NOT_FOUND = 'Error from server (NotFound): trainjobs.trainer.kubeflow.org "{}" not found\n'
RETRYING = " (retrying; rows are marked stale until the API server answers)\n"
LOST = "error: lost the connection to the API server: it closed the connection" + RETRYING


@pytest.fixture
def kubectl(devcluster: DevCluster, tmp_path: Path) -> Kubectl:
    return Kubectl(devcluster, tmp_path)


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


async def test_connection_failures_read_as_what_happened() -> None:
    port = _closed_port()
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorError) as refused:
            await session.get(f"http://127.0.0.1:{port}/apis")
    unavailable = KubeUnavailable(f"GET /apis: ClientConnectorError: {refused.value}")
    unavailable.__cause__ = refused.value
    assert reason_of(unavailable) == (
        f"cannot connect to the API server at 127.0.0.1:{port}: connection refused"
    )
    cut = aiohttp.ClientPayloadError(
        "Response payload is not completed: <TransferEncodingError: 400, "
        "message='Not enough data to satisfy transfer length header.'>"
    )
    lost = KubeUnavailable(f"GET /apis/x?watch=1: ClientPayloadError: {cut}")
    lost.__cause__ = cut
    assert reason_of(lost) == "lost the connection to the API server: it closed the connection"
    lost.__cause__ = aiohttp.ServerDisconnectedError()
    assert reason_of(lost) == "lost the connection to the API server: it closed the connection"
    # Anything else keeps its own words, on one line.
    assert reason_of(KubeUnavailable("GET /apis:\n  no answer within 30s")) == (
        "GET /apis: no answer within 30s"
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
