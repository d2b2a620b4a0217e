"""Many strangers, not one: crowds from several source addresses hold connections to the
serving port that do not move (connected and silent; through TLS and silent; dripping a
request head a byte every half second; idle after one request; a whole head of an
admission review or a status post, then its body a byte a second), each reopened the moment the server
closes it, while another address sends valid status posts and admission reviews (to the
webhook's port, as the API server does), each on a new connection. Prints, for each kind of crowd, the share of posts answered 200
within ``--deadline`` seconds, their latency, and the share of reviews answered.

The server runs with its default connection limits (``--max-connections`` 1,024,
``--max-connections-per-ip`` 256, ``--first-request-timeout`` 5 s; the same flags here
change them) on loopback, on an
event loop in a thread of this process with the development cluster (accept-all
authentication: the slots, not the tokens, are under test); the crowd runs in a child
process of its own, sources 127.0.3.x. Bounded: ``--addresses`` x ``--per-address``
connections, ``--posts`` posts and ``--reviews`` reviews of at most ``--deadline``
seconds each per crowd. Asserts nothing.

    .venv/bin/python bench/crowds.py [--addresses 5] [--per-address 230] [--posts 40]
        [--reviews 10] [--kinds connect-only,tls-only,slow-headers,idle-keepalive,drip-body]
        [--max-connections N] [--max-connections-per-ip N] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import parse_args, processes, scrape, total
from trainjob_devcluster.harness.testing import BackgroundStack, ServingCerts
from trainjob_status.contract import ANCESTOR_STEP_LABEL, JOBSET_NAME_LABEL, status_path

NS = "bench"
KINDS = ("connect-only", "tls-only", "slow-headers", "idle-keepalive", "drip-body")
HEAD = (
    f"POST {status_path(NS, 'job')} HTTP/1.1\r\nHost: localhost\r\n"
    f"Authorization: Bearer {'x' * 1200}\r\nContent-Length: 2\r\n\r\n{{}}"
).encode()
BODY = b'{"trainerStatus": {"progressPercentage": 1}}'
# Whole heads whose bodies are then dripped: an admission review's (read within the
# webhook's 2 s) and a status post's (read within --read-timeout, 10 s).
DRIP_HEADS = (
    f"POST /mutate-pods HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len(BODY)}\r\n\r\n",
    f"POST {status_path(NS, 'job')} HTTP/1.1\r\nHost: localhost\r\n"
    f"Authorization: Bearer bench\r\nContent-Length: {len(BODY)}\r\n\r\n",
)


# -- the crowd (a child process) ----------------------------------------------------------


async def drip(
    data: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pace: float
) -> None:
    """``data`` a byte every ``pace`` seconds, until the server closes the connection."""
    for byte in data:
        writer.write(bytes([byte]))
        with contextlib.suppress(TimeoutError):
            # asyncio.timeout, not wait_for: on 3.11 wait_for can drop a read that
            # completes as it times out (the close, here).
            async with asyncio.timeout(pace):
                if not await reader.read(1):
                    return


async def member(host: str, port: int, tls: ssl.SSLContext, kind: str, source: str) -> None:
    pace = 1.0 if kind == "drip-body" else 0.5
    while True:
        writer: asyncio.StreamWriter | None = None
        try:
            secure = None if kind == "connect-only" else tls
            reader, writer = await asyncio.open_connection(
                host,
                port,
                ssl=secure,
                server_hostname="localhost" if secure else None,
                local_addr=(source, 0),
            )
            if kind in ("slow-headers", "drip-body"):
                if kind == "drip-body":
                    # A whole head, then the body a byte a second.
                    writer.write(DRIP_HEADS[int(source.rsplit(".", 1)[1]) % 2].encode())
                await drip(HEAD if kind == "slow-headers" else BODY, reader, writer, pace)
            else:
                if kind == "idle-keepalive":
                    writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                await reader.read()  # until the server closes it
        except (OSError, ssl.SSLError):
            await asyncio.sleep(0.01)  # refused at once: not a busy loop
        finally:
            if writer is not None:
                writer.close()


async def crowd(host: str, port: int, cafile: str, kind: str, sources: list[str]) -> None:
    tls = ssl.create_default_context(cafile=cafile)
    await asyncio.gather(*(member(host, port, tls, kind, s) for s in sources))


# -- the measurement ----------------------------------------------------------------------


def review(i: int) -> bytes:
    labels = {JOBSET_NAME_LABEL: "job", ANCESTOR_STEP_LABEL: "trainer"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"job-{i}", "namespace": NS, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    request = {
        "uid": f"u-{i}",
        "namespace": NS,
        "operation": "CREATE",
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "object": pod,
    }
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(body).encode()


def send(port: int, tls: ssl.SSLContext, path: str, body: bytes, deadline: float) -> float | None:
    """Seconds to a 200 on a new connection from 127.0.0.1, or None (other answer, error,
    or none within ``deadline``)."""
    started = time.perf_counter()
    connection = http.client.HTTPSConnection(
        "127.0.0.1", port, context=tls, timeout=deadline, source_address=("127.0.0.1", 0)
    )
    try:
        connection.request(
            "POST", path, body, {"Authorization": "Bearer bench", "Host": "localhost"}
        )
        response = connection.getresponse()
        response.read()
        took = time.perf_counter() - started
        return took if response.status == 200 and took <= deadline else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def evictions(metrics_url: str) -> float:
    """Serving connections closed to make room for a newcomer, whatever the reason."""
    samples = scrape(metrics_url + "/metrics", "trainjob_status_connections_closed")
    return sum(
        total(
            samples, "trainjob_status_connections_closed_total", listener="serving", reason=reason
        )
        for reason in ("fresh_evicted", "idle_evicted", "stalled_evicted", "slow_body_evicted")
    )


def run_kind(
    stack: BackgroundStack, certs: ServingCerts, args: argparse.Namespace, kind: str
) -> None:
    server = stack.server
    host, port = server.url.removeprefix("https://").rsplit(":", 1)
    # Admissions go where the API server sends them: the webhook's own port (a checkout
    # from before it, run through PYTHONPATH to compare, has them on the status port).
    webhook_url = getattr(server, "webhook_url", None) or server.url
    webhook_port = int(webhook_url.rsplit(":", 1)[1])
    sources = [f"127.0.3.{a + 1}" for a in range(args.addresses) for _ in range(args.per_address)]
    tls = certs.client_context()
    before = evictions(server.metrics_url)
    with processes() as children:
        child = children.start(
            [sys.executable, __file__, "--crowd", kind, host, port, str(certs.ca_file), *sources]
        )
        # Until the crowd holds every slot it can (the server closing its members for
        # others once they are more than the slots).
        slots = server._site.slots if server._site is not None else None
        want = min(len(sources), server.config.max_connections)
        settle = time.monotonic() + args.settle
        while time.monotonic() < settle and (slots is None or len(slots) < want):
            time.sleep(0.2)
        held = 0 if slots is None else len(slots)
        # The attack in its steady state: its first connections as old as its later ones.
        time.sleep(min(args.settle, 2.0))
        posts: list[float | None] = []
        reviews: list[float | None] = []
        step = max(1, args.posts // max(1, args.reviews))  # reviews spread among the posts
        for i in range(args.posts):
            body = {"trainerStatus": {"progressPercentage": i % 101}}
            posts.append(
                send(
                    int(port), tls, status_path(NS, "job"), json.dumps(body).encode(), args.deadline
                )
            )
            if len(reviews) < args.reviews and i % step == 0:
                reviews.append(send(webhook_port, tls, "/mutate-pods", review(i), args.deadline))
        churn = evictions(server.metrics_url) - before
        children.stop(child)
    served = sorted(t for t in posts if t is not None)
    answered = sum(t is not None for t in reviews)
    latency = (
        f"median {statistics.median(served) * 1000:.0f} ms, max {served[-1] * 1000:.0f} ms"
        if served
        else "none served"
    )
    print(
        f"{kind}: {args.addresses} addresses x {args.per_address} connections "
        f"({held} slots held at the start); posts answered 200 within {args.deadline:g} s: "
        f"{len(served)}/{len(posts)} ({100 * len(served) / max(1, len(posts)):.0f}%), {latency}; "
        f"admission reviews answered: {answered}/{len(reviews)}; "
        f"crowd connections closed for newcomers: {churn:.0f}",
        flush=True,
    )


def first_request(config: Any) -> str:
    """The first-request deadline; a checkout from before the flag (run through
    PYTHONPATH, to compare) had --read-timeout's."""
    seconds = getattr(config, "first_request_timeout", None)
    return (
        f"{seconds:g} s"
        if seconds is not None
        else f"none (--read-timeout {config.read_timeout:g} s)"
    )


def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as work:
        certs = ServingCerts.create(Path(work))
        limits = {
            name: getattr(args, name)
            for name in ("max_connections", "max_connections_per_ip", "first_request_timeout")
            if getattr(args, name) is not None
        }
        stack = BackgroundStack(certs, **limits)
        try:
            stack.call(stack.cluster.ensure_namespace, NS)
            stack.call(stack.cluster.create_trainjob, NS, "job")
            config = stack.server.config
            print(
                f"# server: --max-connections {config.max_connections}, "
                f"--max-connections-per-ip {config.max_connections_per_ip}, "
                f"--first-request-timeout {first_request(config)}",
                flush=True,
            )
            for kind in args.kinds.split(","):
                run_kind(stack, certs, args, kind)
        finally:
            stack.close()


def child(argv: list[str]) -> None:
    kind, host, port, cafile, *sources = argv
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(crowd(host, int(port), cafile, kind, sources))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--crowd"]:
        child(sys.argv[2:])
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addresses", type=int, default=5)
    parser.add_argument("--per-address", type=int, default=230)
    parser.add_argument("--posts", type=int, default=40)
    parser.add_argument("--reviews", type=int, default=10)
    parser.add_argument("--deadline", type=float, default=2.0, help="seconds a post may take")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds to wait for the crowd")
    parser.add_argument("--kinds", default=",".join(KINDS))
    for flag, kind in (
        ("--max-connections", int),
        ("--max-connections-per-ip", int),
        ("--first-request-timeout", float),
    ):
        parser.add_argument(flag, type=kind, help="the server's flag (default: its default)")
    parsed = parse_args(
        parser, {"addresses": 2, "per_address": 10, "posts": 3, "reviews": 1, "settle": 2.0}
    )
    main(parsed)
