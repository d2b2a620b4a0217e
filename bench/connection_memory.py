"""Memory of the ingest server while every connection slot holds a stalled request head,
and after those connections close.

Starts the devcluster and the server (accept-all authenticator, default limits except a
first-request deadline long enough for the measurement) in child processes, measures the
server's idle RSS, opens ``--connections`` TLS connections (default: --max-connections)
that each send a request line and headers up to ``--max-header-bytes`` without the blank
line that ends them, and stall, measures RSS, closes them and measures RSS again once
the server has let them go. The connections come from several loopback addresses
(127.0.0.2 and up) so that --max-connections-per-ip does not refuse them. Prints figures;
asserts nothing. The goal: growth of at most 64 KiB per stalled connection, and back
within 10% of the idle RSS after they close.

    .venv/bin/python bench/connection_memory.py [--connections 1024] [--rounds 2] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import ssl
import sys
import tempfile
import time
from pathlib import Path

from _harness import (
    LOAD_CPU,
    SERVER_CPU,
    free_port,
    parse_args,
    processes,
    rss_kib,
    wait_file,
    wait_port,
)
from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.acceptall import AcceptAll
from trainjob_devcluster.harness.testing import ServingCerts
from trainjob_status.contract import status_path
from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config

NS = "bench"
PATH = status_path(NS, "job")
DEFAULTS = Config()
STALL_SECONDS = 600.0


# -- the child processes ------------------------------------------------------------------


async def serve(port: int, metrics_port: int, work: Path, max_header_bytes: int) -> None:
    config = Config(
        host="127.0.0.1",
        port=port,
        metrics_port=metrics_port,
        probe_port=0,
        webhook_port=0,
        tls_cert_file=work / "tls.crt",
        tls_key_file=work / "tls.key",
        kubeconfig=work / "kubeconfig",
        kube_api_qps=100_000.0,
        kube_api_burst=100_000,
        max_header_bytes=max_header_bytes,
        read_timeout=STALL_SECONDS,  # the stalled heads stay for the measurement
        log_level="warning",
    )
    async with StatusServer(config, AcceptAll()) as server:
        await server.trainjobs.synced.wait()
        await asyncio.Event().wait()


async def cluster(work: Path) -> None:
    async with DevCluster() as running:
        running.ensure_namespace(NS)
        running.create_trainjob(NS, "job")
        shutil.copy(running.kubeconfig_path, work / "kubeconfig.tmp")
        (work / "kubeconfig.tmp").rename(work / "kubeconfig")
        await asyncio.Event().wait()


# -- the driver ---------------------------------------------------------------------------


def stalled_head(limit: int) -> bytes:
    """A request line and headers of ``limit`` bytes, less the blank line's last CRLF."""
    start = (
        f"POST {PATH} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer bench\r\n"
        f"Content-Type: application/json\r\nContent-Length: 2\r\n"
    ).encode()
    pad = b"".join(f"X-Pad-{i}: {'a' * 90}\r\n".encode() for i in range(limit // 100))
    head = (start + pad)[: limit - 4]
    return head[: head.rfind(b"\r\n") + 2]


async def post(port: int, context: ssl.SSLContext) -> None:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="localhost"
    )
    body = json.dumps({"trainerStatus": {"progressPercentage": 1}}).encode()
    writer.write(
        f"POST {PATH} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer bench\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await reader.readuntil(b"\r\n\r\n")
    writer.close()


async def settle(pid: int, quiet: float, seconds: float = 10.0) -> int:
    """RSS once it has not moved for ``quiet`` seconds (or after ``seconds``)."""
    last, since = rss_kib(pid), time.monotonic()
    deadline = since + seconds
    while time.monotonic() < deadline and time.monotonic() - since < quiet:
        await asyncio.sleep(0.25)
        now = rss_kib(pid)
        if now != last:
            last, since = now, time.monotonic()
    return last


async def one_round(
    pid: int, port: int, context: ssl.SSLContext, connections: int, head: bytes, quiet: float
) -> tuple[int, int, int, int]:
    for _ in range(20):
        await post(port, context)
    idle = await settle(pid, quiet)
    streams = []
    opened = 0
    for i in range(connections):
        source = f"127.0.0.{2 + i % 8}"
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1",
                port,
                ssl=context,
                server_hostname="localhost",
                local_addr=(source, 0),
            )
        except (ConnectionError, ssl.SSLError):
            continue
        writer.write(head)
        streams.append((reader, writer))
        opened += 1
    await asyncio.gather(*(writer.drain() for _, writer in streams))
    loaded = await settle(pid, quiet)
    for _, writer in streams:
        writer.close()
    await asyncio.gather(*(writer.wait_closed() for _, writer in streams), return_exceptions=True)
    streams.clear()
    for _ in range(20):
        await post(port, context)
    # The server gives memory back a second after the crowd has gone (memory.TRIM_DELAY).
    after = await settle(pid, quiet + 1.0)
    return idle, opened, loaded, after


async def drive(args: argparse.Namespace, pid: int, port: int, work: Path) -> None:
    pem = (work / "ca.crt").read_text()
    context = ssl.create_default_context(cadata=pem)
    head = stalled_head(args.max_header_bytes)
    print(
        f"{args.connections} TLS connections, each {len(head)} bytes of an unfinished head "
        f"(--max-header-bytes {args.max_header_bytes}), from 8 loopback addresses"
    )
    first_idle = None
    for round_ in range(1, args.rounds + 1):
        idle, opened, loaded, after = await one_round(
            pid, port, context, args.connections, head, args.quiet_seconds
        )
        first_idle = idle if first_idle is None else first_idle
        growth = (loaded - idle) / max(opened, 1)
        print(
            f"round {round_}: idle {idle / 1024:.1f} MiB, {opened} stalled open "
            f"{loaded / 1024:.1f} MiB ({growth:.1f} KiB per connection), after close "
            f"{after / 1024:.1f} MiB ({after / idle:.3f} of idle; "
            f"{after / first_idle:.3f} of the first idle)"
        )


def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp, processes() as procs:
        work = Path(tmp)
        ServingCerts.create(work)
        procs.start([sys.executable, __file__, "--cluster", str(work)], cpu=LOAD_CPU)
        wait_file(work / "kubeconfig")
        port, metrics_port = free_port(), free_port()
        server = procs.start(
            [
                *(sys.executable, __file__, "--serve", str(port), str(metrics_port)),
                *(str(work), str(args.max_header_bytes)),
            ],
            cpu=SERVER_CPU,
        )
        wait_port(port)
        asyncio.run(drive(args, server.pid, port, work))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        asyncio.run(serve(int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5])))
    elif len(sys.argv) > 1 and sys.argv[1] == "--cluster":
        asyncio.run(cluster(Path(sys.argv[2])))
    else:
        parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--connections", type=int, default=DEFAULTS.max_connections)
        parser.add_argument("--max-header-bytes", type=int, default=DEFAULTS.max_header_bytes)
        parser.add_argument("--rounds", type=int, default=2)
        parser.add_argument(
            "--quiet-seconds",
            type=float,
            default=2.0,
            help="RSS is read once it has not moved this long (after a close: 1 s longer)",
        )
        main(parse_args(parser, {"connections": 16, "rounds": 1, "quiet_seconds": 0.5}))
