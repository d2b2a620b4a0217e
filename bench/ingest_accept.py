"""Valid status posts per second through the ingest server, against the ceiling of a bare
aiohttp HTTPS handler that only reads, parses and echoes the same post, in one run.

Layout on a 2-core machine: the server under test alone on CPU 0; wrk (the load, HTTPS
keep-alive) and the devcluster on CPU 1. The server uses the accept-all authenticator
(token checks are measured by their own benchmark) and writes every accepted post to the
devcluster with server-side apply, one write per post as the peer does; the coalescing
writer changes that. Prints figures; asserts nothing. Needs ``wrk`` (apt-get install wrk).

    .venv/bin/python bench/ingest_accept.py [--seconds 10] [--connections 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web

from trainjob_devcluster import DevCluster
from trainjob_devcluster.acceptall import AcceptAll
from trainjob_devcluster.pki import CertificateAuthority
from trainjob_status.contract import status_path
from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config

NS = "bench"
PATH = status_path(NS, "job")
BODY = json.dumps(
    {
        "trainerStatus": {
            "progressPercentage": 42,
            "estimatedRemainingSeconds": 3600,
            "metrics": [{"name": f"metric_{i}", "value": f"{i * 0.125:.4f}"} for i in range(8)],
            "lastUpdatedTime": "2026-12-02T18:33:25Z",
        }
    }
)
LUA = """
wrk.method = "POST"
wrk.body = [[%s]]
wrk.headers["Authorization"] = "Bearer bench"
wrk.headers["Content-Type"] = "application/json"
"""


def pin(cpu: int) -> None:
    if (os.cpu_count() or 1) > cpu:
        os.sched_setaffinity(0, {cpu})


# -- the processes under test -------------------------------------------------------------


async def ceiling_server(port: int, cert: Path, key: Path) -> None:
    """A bare handler: read the body, parse it, echo it. Nothing else."""
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


def spawn(cpu: int, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["taskset", "-c", str(cpu), sys.executable, __file__, *args],
        stderr=subprocess.DEVNULL,
    )


def wait_port(port: int, timeout: float = 20) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"nothing listens on {port}")


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(url: str, script: Path, seconds: float, connections: int) -> dict[str, float]:
    out = subprocess.run(
        [
            "taskset", "-c", "1", "wrk", "--latency", "-t", "1", "-c", str(connections),
            "-d", f"{seconds:.0f}s", "-s", str(script), url,
        ],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    figures = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))}  # type: ignore[union-attr]
    for label, key in (("50%", "p50"), ("99%", "p99")):
        value, unit = re.search(rf"{re.escape(label)}\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
        figures[key] = float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    figures["non2xx"] = float(non2xx.group(1)) if non2xx else 0.0
    return figures


def measure(
    name: str, pid: int, url: str, script: Path, args: argparse.Namespace
) -> dict[str, float]:
    run_wrk(url, script, 2, args.connections)  # warm-up
    before = cpu_seconds(pid)
    figures = run_wrk(url, script, args.seconds, args.connections)
    figures["cpu"] = (cpu_seconds(pid) - before) / args.seconds
    print(
        f"{name:<34} {figures['rps']:>8.0f} posts/s  p50 {figures['p50']:6.2f} ms  "
        f"p99 {figures['p99']:6.2f} ms  server CPU {figures['cpu']:.2f}  "
        f"non-2xx {figures['non2xx']:.0f}"
    )
    return figures


def main(args: argparse.Namespace) -> None:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ca = CertificateAuthority()
        cert, key = ca.issue_server_cert(["localhost"], ["127.0.0.1"])
        (work / "tls.crt").write_bytes(cert)
        (work / "tls.key").write_bytes(key)
        script = work / "post.lua"
        script.write_text(LUA % BODY)
        kubeconfig = work / "kubeconfig"
        procs = [spawn(1, "--cluster", str(kubeconfig))]
        try:
            deadline = time.monotonic() + 20
            while not kubeconfig.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            ceiling_port, ingest_port = free_port(), free_port()
            tls = (str(work / "tls.crt"), str(work / "tls.key"))
            ceiling = spawn(0, "--ceiling", str(ceiling_port), *tls)
            procs.append(ceiling)
            wait_port(ceiling_port)
            bare = measure(
                "bare aiohttp handler (ceiling)", ceiling.pid,
                f"https://127.0.0.1:{ceiling_port}{PATH}", script, args,
            )  # fmt: skip
            ceiling.send_signal(signal.SIGTERM)
            ingest = spawn(0, "--ingest", str(ingest_port), *tls, str(kubeconfig))
            procs.append(ingest)
            wait_port(ingest_port)
            time.sleep(1)
            ours = measure(
                "ingest server, one write per post", ingest.pid,
                f"https://127.0.0.1:{ingest_port}{PATH}", script, args,
            )  # fmt: skip
            print(f"ratio to the ceiling: {ours['rps'] / bare['rps']:.3f}")
            print(
                f"wrk -t1 -c{args.connections} on CPU 1 with the devcluster; "
                f"server under test alone on CPU 0; {args.seconds:.0f} s per figure"
            )
        finally:
            for proc in procs:
                proc.kill()
                proc.wait(5)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("--ceiling", "--ingest", "--cluster"):
        mode, rest = sys.argv[1], sys.argv[2:]
        if mode == "--ceiling":
            asyncio.run(ceiling_server(int(rest[0]), Path(rest[1]), Path(rest[2])))
        elif mode == "--ingest":
            asyncio.run(ingest_server(int(rest[0]), Path(rest[1]), Path(rest[2]), Path(rest[3])))
        else:
            asyncio.run(cluster_process(Path(rest[0])))
    else:
        parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--seconds", type=float, default=10.0)
        parser.add_argument("--connections", type=int, default=32)
        main(parser.parse_args())
