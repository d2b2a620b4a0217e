"""Valid status posts per second through the ingest server, against the ceiling of a bare
aiohttp HTTPS handler that only reads, parses and echoes the same post, in one run: the
bare handler on asyncio's loop and TLS, and on uvloop's (where uvloop is installed); the
ratio is to the faster of the two.

Layout on a 2-core machine: the server under test alone on CPU 0; wrk (the load, HTTPS
keep-alive) and the devcluster on CPU 1. The server uses the accept-all authenticator
(token checks are measured by their own benchmark) and writes every accepted post to the
devcluster with server-side apply, one write per post as the peer does; the coalescing
writer changes that. Prints figures; asserts nothing. Needs ``wrk`` (apt-get install wrk).

    .venv/bin/python bench/ingest_accept.py [--seconds 10] [--connections 32] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from aiohttp import web

from _harness import (
    LOAD_CPU,
    SERVER_CPU,
    cpu_seconds,
    free_port,
    parse_args,
    post_script,
    processes,
    run_wrk,
    typical_status,
    wait_file,
    wait_port,
)
from trainjob_devcluster import DevCluster
from trainjob_devcluster.acceptall import AcceptAll
from trainjob_devcluster.testing import ServingCerts
from trainjob_status.contract import status_path
from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config

NS = "bench"
PATH = status_path(NS, "job")
BODY = json.dumps({"trainerStatus": typical_status()})


SELF = (sys.executable, __file__)  # this script runs the processes under test too


# -- the processes under test -------------------------------------------------------------


LOOPS = ("asyncio", "uvloop")


def run_on(loop: str, main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on asyncio's event loop or uvloop's (its transports and TLS in C)."""
    if loop == "uvloop":
        import uvloop

        uvloop.run(main)
    else:
        asyncio.run(main)


def uvloop_installed() -> bool:
    return importlib.util.find_spec("uvloop") is not None


async def ceiling_server(port: int, cert: Path, key: Path) -> None:
    """A bare handler: read the body, parse it, echo it. Nothing else; TLS is the loop's."""
    import ssl

    async def handle(request: web.Request) -> web.Response:
        payload = json.loads(await request.read())
        return web.Response(body=json.dumps(payload).encode(), content_type="application/json")

    app = web.Application()
    app.router.add_post(PATH, handle)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
    await asyncio.Event().wait()


async def ingest_server(port: int, cert: Path, key: Path, kubeconfig: Path) -> None:
    config = Config(
        host="127.0.0.1",
        port=port,
        metrics_port=0,
        probe_port=0,
        tls_cert_file=cert,
        tls_key_file=key,
        kubeconfig=kubeconfig,
        kube_api_qps=100_000.0,
        kube_api_burst=100_000,
        log_level="warning",
    )
    async with StatusServer(config, AcceptAll()) as server:
        await server.trainjobs.synced.wait()
        await asyncio.Event().wait()


async def cluster_process(kubeconfig: Path) -> None:
    async with DevCluster() as cluster:
        cluster.ensure_namespace(NS)
        cluster.create_trainjob(NS, "job")
        shutil.copy(cluster.kubeconfig_path, kubeconfig)
        await asyncio.Event().wait()


# -- the driver ---------------------------------------------------------------------------


def measure(
    name: str, pid: int, url: str, script: Path, args: argparse.Namespace
) -> dict[str, float]:
    if args.warm_seconds:
        run_wrk(url, script, args.warm_seconds, args.connections)
    before = cpu_seconds(pid)
    result = run_wrk(url, script, args.seconds, args.connections)
    figures = {
        "rps": result.completed / result.seconds,
        "p50": result.p50_ms,
        "p99": result.p99_ms,
        "non2xx": float(result.non2xx),
        "cpu": (cpu_seconds(pid) - before) / args.seconds,
    }
    print(
        f"{name:<34} {figures['rps']:>8.0f} posts/s  p50 {figures['p50']:6.2f} ms  "
        f"p99 {figures['p99']:6.2f} ms  server CPU {figures['cpu']:.2f}  "
        f"non-2xx {figures['non2xx']:.0f}"
    )
    return figures


def main(args: argparse.Namespace) -> None:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    with tempfile.TemporaryDirectory() as tmp, processes() as procs:
        work = Path(tmp)
        ServingCerts.create(work)
        script = work / "post.lua"
        script.write_text(post_script(BODY))
        kubeconfig = work / "kubeconfig"
        procs.start([*SELF, "--cluster", str(kubeconfig)], cpu=LOAD_CPU, stderr=subprocess.DEVNULL)
        wait_file(kubeconfig, 20)
        ceiling_port, ingest_port = free_port(), free_port()
        tls = (str(work / "tls.crt"), str(work / "tls.key"))
        ceilings = {}
        for loop in LOOPS if uvloop_installed() else LOOPS[:1]:
            ceiling = procs.start(
                [*SELF, "--ceiling", str(ceiling_port), *tls, loop],
                cpu=SERVER_CPU,
                stderr=subprocess.DEVNULL,
            )
            wait_port(ceiling_port)
            ceilings[loop] = measure(
                f"bare aiohttp handler on {loop}", ceiling.pid,
                f"https://127.0.0.1:{ceiling_port}{PATH}", script, args,
            )  # fmt: skip
            procs.stop(ceiling)
        ingest = procs.start(
            [*SELF, "--ingest", str(ingest_port), *tls, str(kubeconfig)],
            cpu=SERVER_CPU,
            stderr=subprocess.DEVNULL,
        )
        wait_port(ingest_port)
        time.sleep(1)
        ours = measure(
            "ingest server, one write per post", ingest.pid,
            f"https://127.0.0.1:{ingest_port}{PATH}", script, args,
        )  # fmt: skip
        faster = max(ceilings, key=lambda loop: ceilings[loop]["rps"])
        for loop, bare in ceilings.items():
            print(f"ratio to the bare handler on {loop}: {ours['rps'] / bare['rps']:.3f}")
        print(
            f"ratio to the ceiling ({faster}, the faster): {ours['rps'] / ceilings[faster]['rps']:.3f}"
        )
        print(
            f"wrk -t1 -c{args.connections} on CPU {LOAD_CPU} with the devcluster; "
            f"server under test alone on CPU {SERVER_CPU}; {args.seconds:.0f} s per figure"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("--ceiling", "--ingest", "--cluster"):
        mode, rest = sys.argv[1], sys.argv[2:]
        if mode == "--ceiling":
            loop = rest[3] if len(rest) > 3 else "asyncio"
            run_on(loop, ceiling_server(int(rest[0]), Path(rest[1]), Path(rest[2])))
        elif mode == "--ingest":
            asyncio.run(ingest_server(int(rest[0]), Path(rest[1]), Path(rest[2]), Path(rest[3])))
        else:
            asyncio.run(cluster_process(Path(rest[0])))
    else:
        parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--seconds", type=float, default=10.0)
        parser.add_argument("--connections", type=int, default=32)
        parser.add_argument("--warm-seconds", type=float, default=2.0, help="0: no warm-up")
        main(parse_args(parser, {"seconds": 1.0, "connections": 4, "warm_seconds": 0.0}))
