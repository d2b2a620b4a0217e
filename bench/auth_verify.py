"""Verified status posts per second with real service-account tokens, with and without the
verified-token cache, against the accept-all server and a bare aiohttp handler, in one
run.

Layout on a 2-core machine: the server under test alone on CPU 0; wrk (HTTPS keep-alive)
and the devcluster on CPU 1. The token is minted by the devcluster's TokenRequest for a
pod of the TrainJob (real RS256 key, real claims, pod binding and membership checked on
every post). The body is a typical post (progress, ETA, 8 metrics) under a key the
server ignores, so every post is authenticated, read and decoded, and nothing is
written: ingest_accept.py measures the whole path, writer included, and here the writer
would only measure the devcluster. The per-account rate limit is raised out of the way (its bucket
is still spent on every post). Besides posts/s it prints the server's CPU time per
post (steadier when other work shares the machine and wrk cannot saturate the server's
core) and the CPU cost of one ``authenticate()`` call, cached and uncached, measured in a
loop. Prints figures; asserts nothing. Needs ``wrk``.

    .venv/bin/python bench/auth_verify.py [--seconds 10] [--connections 32] [--calls 20000]
        [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import (
    LOAD_CPU,
    SERVER_CPU,
    free_port,
    parse_args,
    post_script,
    processes,
    typical_status,
    wait_file,
    wait_port,
)
from ingest_accept import (  # type: ignore[import-not-found]  # bench/ is not a package
    PATH,
    ceiling_server,
    measure,
)
from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.acceptall import AcceptAll
from trainjob_devcluster.harness.testing import ServingCerts
from trainjob_status.contract import audience
from trainjob_status_server.app import StatusServer
from trainjob_status_server.auth import AuthSettings, TokenAuthenticator
from trainjob_status_server.auth.authenticator import Authenticator
from trainjob_status_server.config import Config
from trainjob_status_server.kube.client import KubeClient

NS = "bench"  # PATH (the ceiling's route too) is .../namespaces/bench/trainjobs/job/status
JOB = "job"
POD = "job-node-0-0"
AUDIENCE = audience(NS, JOB)
BODY = json.dumps({"report": typical_status()})
MODES = ("accept-all", "verified-cached", "verified-uncached")
SELF = (sys.executable, __file__)  # this script runs the processes under test too


# -- the processes under test -------------------------------------------------------------


async def status_server(mode: str, port: int, cert: Path, key: Path, work: Path) -> None:
    config = Config(
        host="127.0.0.1",
        port=port,
        metrics_port=0,
        probe_port=0,
        webhook_port=0,
        tls_cert_file=cert,
        tls_key_file=key,
        kubeconfig=work / "kubeconfig",
        log_level="warning",
    )
    kube: KubeClient | None = None
    auth: TokenAuthenticator | None = None
    authenticator: Authenticator = AcceptAll()
    if mode != "accept-all":
        settings = AuthSettings(
            issuer=(work / "issuer").read_text(),
            own_token_path=None,
            sa_rate_limit=1e9,
            sa_rate_burst=10**9,
            token_cache_size=0 if mode == "verified-uncached" else AuthSettings.token_cache_size,
        )
        kube = await KubeClient(config.kubeconfig).start()
        auth = TokenAuthenticator(settings)
        await auth.start(kube)
        await auth.wait_ready()
        authenticator = auth
    async with StatusServer(config, authenticator) as server:
        await server.trainjobs.synced.wait()
        await asyncio.Event().wait()


async def authenticate_cost(work: Path, calls: int) -> None:
    """Microseconds per ``authenticate()`` call in a loop, cached and uncached: the
    request path's own cost, steadier than throughput on a shared machine."""
    settings = AuthSettings(
        issuer=(work / "issuer").read_text(),
        own_token_path=None,
        sa_rate_limit=1e9,
        sa_rate_burst=10**9,
    )
    header = "Bearer " + (work / "token").read_text()
    kube = await KubeClient(work / "kubeconfig").start()
    for size, n in ((settings.token_cache_size, calls), (0, max(1, calls // 20))):
        auth = TokenAuthenticator(dataclasses.replace(settings, token_cache_size=size))
        await auth.start(kube)
        await auth.wait_ready()
        await auth.authenticate(header, NS, JOB)
        started = time.process_time()
        for _ in range(n):
            await auth.authenticate(header, NS, JOB)
        cost = (time.process_time() - started) / n * 1e6
        label = "cached" if size else "uncached (RS256 each time)"
        print(f"authenticate(), {label:<27} {cost:8.1f} us CPU per call")
        await auth.stop()
    await kube.close()


async def cluster_process(work: Path) -> None:
    async with DevCluster() as cluster:
        cluster.create_trainjob(NS, JOB)
        cluster.create_trainjob_pod(NS, JOB, POD, service_account="trainer")
        token = cluster.request_token(NS, "trainer", [AUDIENCE], pod=POD)
        (work / "token").write_text(token)
        (work / "issuer").write_text(cluster.issuer)
        shutil.copy(cluster.kubeconfig_path, work / "kubeconfig.tmp")
        (work / "kubeconfig.tmp").rename(work / "kubeconfig")
        await asyncio.Event().wait()


# -- the driver ---------------------------------------------------------------------------


def report(figures: dict[str, dict[str, float]]) -> None:
    """Ratios of posts/s, and of server CPU per post: on a machine shared with other
    work the load generator may not saturate the server's core, and then CPU per post
    is the steadier figure (a saturated core would serve 1 / that many posts/s)."""
    cost = {mode: f["cpu"] / f["rps"] * 1e6 for mode, f in figures.items()}
    accept, ceiling = figures["accept-all"]["rps"], figures["ceiling"]["rps"]
    print()
    print(f"{'':<18} {'posts/s ratio to':>32}   {'server CPU':>10}   {'CPU ratio to':>22}")
    print(f"{'':<18} {'accept-all':>15} {'ceiling':>16}   {'us/post':>10}   {'accept-all':>11}")
    for mode in ("ceiling", *MODES):
        rps = figures[mode]["rps"]
        print(
            f"{mode:<18} {rps / accept:15.3f} {rps / ceiling:16.3f}   {cost[mode]:10.0f}   "
            f"{cost['accept-all'] / cost[mode]:11.3f}"
        )


def main(args: argparse.Namespace) -> None:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    with tempfile.TemporaryDirectory() as tmp, processes() as procs:
        work = Path(tmp)
        ServingCerts.create(work)
        procs.start([*SELF, "--cluster", str(work)], cpu=LOAD_CPU, stderr=subprocess.DEVNULL)
        wait_file(work / "kubeconfig", 20)
        script = work / "post.lua"
        script.write_text(post_script(BODY, (work / "token").read_text()))
        tls = (str(work / "tls.crt"), str(work / "tls.key"))
        port = free_port()
        ceiling = procs.start(
            [*SELF, "--ceiling", str(port), *tls], cpu=SERVER_CPU, stderr=subprocess.DEVNULL
        )
        wait_port(port)
        figures = {
            "ceiling": measure(
                "bare aiohttp handler (ceiling)",
                ceiling.pid,
                f"https://127.0.0.1:{port}{PATH}",
                script,
                args,
            )
        }
        procs.stop(ceiling)
        for mode in MODES:
            port = free_port()
            proc = procs.start(
                [*SELF, "--server", mode, str(port), *tls, str(work)],
                cpu=SERVER_CPU,
                stderr=subprocess.DEVNULL,
            )
            wait_port(port)
            time.sleep(1)
            figures[mode] = measure(
                f"server, {mode}", proc.pid, f"https://127.0.0.1:{port}{PATH}", script, args
            )
            procs.stop(proc)
        report(figures)
        print(
            f"wrk -t1 -c{args.connections} on CPU {LOAD_CPU} with the devcluster; "
            f"server under test alone on CPU {SERVER_CPU}; {args.seconds:.0f} s per figure"
        )
        print()
        subprocess.run(
            ["taskset", "-c", str(SERVER_CPU), *SELF, "--micro", str(work), str(args.calls)],
            check=True,
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("--ceiling", "--server", "--cluster", "--micro"):
        mode, rest = sys.argv[1], sys.argv[2:]
        if mode == "--ceiling":
            asyncio.run(ceiling_server(int(rest[0]), Path(rest[1]), Path(rest[2])))
        elif mode == "--server":
            asyncio.run(
                status_server(rest[0], int(rest[1]), Path(rest[2]), Path(rest[3]), Path(rest[4]))
            )
        elif mode == "--micro":
            asyncio.run(authenticate_cost(Path(rest[0]), int(rest[1])))
        else:
            asyncio.run(cluster_process(Path(rest[0])))
    else:
        parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--seconds", type=float, default=10.0)
        parser.add_argument("--connections", type=int, default=32)
        parser.add_argument(
            "--calls",
            type=int,
            default=20_000,
            help="authenticate() calls timed with the cache (a twentieth of that without)",
        )
        parser.add_argument("--warm-seconds", type=float, default=2.0, help="0: no warm-up")
        main(
            parse_args(
                parser, {"seconds": 1.0, "connections": 4, "calls": 400, "warm_seconds": 0.0}
            )
        )
