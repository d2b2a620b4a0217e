"""The answer written one event-loop turn later, against written at once, on loopback and
across a network path where the client's receive work runs on the client's own CPU.

Two servers run the serving port's stack (``listener.CappedSite`` with its TLS layer,
``serving.ServingHandler``, ``endpoint.StatusEndpoint`` and its answers), with a token
check that only parses the header, a TrainJob that always exists and a writer that drops
the update: what differs between them is only how the answer is written. "ours" is this
checkout's; ``--against CHECKOUT`` runs the same stack from another checkout of this
repository (e.g. one whose answers are written at once). Both are pinned to CPU 0 and
loaded in turn, in interleaved rounds, by wrk (HTTPS keep-alive) on CPU 1:

- ``loopback``: wrk to 127.0.0.1. The server's ``send`` also does the receiving side's
  TCP work and wakes wrk, on the server's CPU.
- ``veth``: wrk in a network namespace of its own, across a veth pair, with receive
  packet steering sending each side's receive work to that side's CPU (the server's
  packets to wrk are received on CPU 1, wrk's to the server on CPU 0), as a NIC on
  another machine would take it off the server's send. Needs root and ``ip``; without
  them only loopback is measured, and the report says so. (A delay qdisc such as netem
  would model the wire's latency too; where the kernel lacks it, it is not used.)

Per path, number of connections and server: the median over the rounds of posts/s,
server CPU per post and wrk's p50 and p99 latency; then, per path and load, theirs over
ours for CPU per post and each latency, with each round's ratio as the noise.

    .venv/bin/python bench/answer_delay.py --against CHECKOUT [--seconds 5] [--rounds 3]
        [--connections 1,4,32] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from _harness import (
    LOAD_CPU,
    SERVER_CPU,
    cpu_seconds,
    loadavg,
    parse_args,
    parse_wrk,
    post_script,
    processes,
    typical_status,
    wait_file,
    wrk_command,
)

# Named by this process, so that two runs on one machine do not meet.
NAMESPACE = f"tjs-answer-delay-{os.getpid()}"
HOST_SIDE, CLIENT_SIDE = f"tjad{os.getpid()}h", f"tjad{os.getpid()}c"
HOST_IP, CLIENT_IP = f"10.203.{os.getpid() % 250}.1", f"10.203.{os.getpid() % 250}.2"
PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/job/status"
BODY = json.dumps({"trainerStatus": typical_status()})
SELF = (sys.executable, __file__)


# -- the server under test (a child process) ----------------------------------------------


async def serve(ports_file: Path, work: Path, hosts: list[str]) -> None:
    from aiohttp import web

    from trainjob_status_server.auth import Identity
    from trainjob_status_server.auth.bearer import bearer_token
    from trainjob_status_server.http.endpoint import StatusEndpoint
    from trainjob_status_server.http.listener import CappedSite, Limits
    from trainjob_status_server.http.serving import ServingHandler
    from trainjob_status_server.status.validation import EncodedStatus

    class HeaderOnly:
        async def authenticate(
            self, authorization: str | None, namespace: str, trainjob: str, source: str = ""
        ) -> Identity:
            bearer_token(authorization)
            return Identity(namespace, "bench")

    class Always:
        async def trainjob_exists(self, namespace: str, name: str) -> bool:
            return True

    class Dropped:
        async def write(self, namespace: str, name: str, update: EncodedStatus) -> None:
            return None

    import ssl

    endpoint = StatusEndpoint(HeaderOnly(), Always(), Dropped(), read_timeout=10.0)
    settings = {"access_log": None, "auto_decompress": False}
    runner = web.ServerRunner(web.Server(ServingHandler(endpoint.handle, gets={}), **settings))
    await runner.setup()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(work / "tls.crt", work / "tls.key")
    limits = Limits(
        max_connections=1024,
        max_connections_per_ip=1024,
        first_request_timeout=10.0,
        header_timeout=10.0,
        write_timeout=10.0,
        max_head_bytes=16384,
    )
    ports = {}
    for host in hosts:
        site = CappedSite(
            runner, host, 0, ssl_context=context, limits=limits, handler_settings=settings
        )
        await site.start()
        ports[host] = site.port
    ready = ports_file.with_suffix(".tmp")
    ready.write_text(json.dumps(ports))
    ready.rename(ports_file)  # whole when it appears
    await asyncio.Event().wait()


# -- the network path ---------------------------------------------------------------------


def _ip(*args: str, netns: bool = False) -> None:
    prefix = ["ip", "netns", "exec", NAMESPACE] if netns else []
    subprocess.run([*prefix, "ip", *args], check=True, capture_output=True)


def _steer(device: str, cpu: int, netns: bool) -> None:
    """Receive packet steering: ``device``'s received packets are processed on ``cpu``."""
    mask = f"{1 << cpu:x}"
    command = f"echo {mask} > /sys/class/net/{device}/queues/rx-0/rps_cpus"
    prefix = ["ip", "netns", "exec", NAMESPACE] if netns else []
    subprocess.run([*prefix, "sh", "-c", command], check=True, capture_output=True)


@contextmanager
def veth_path() -> Iterator[str | None]:
    """The veth pair and namespace, torn down after; None (and why, printed) where they
    cannot be made."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        print("# veth: not measured (needs root and iproute2's ip)")
        yield None
        return
    try:
        subprocess.run(["ip", "netns", "add", NAMESPACE], check=True, capture_output=True)
    except subprocess.CalledProcessError as exc:
        print(f"# veth: not measured (ip netns add: {exc.stderr.decode().strip()})")
        yield None
        return
    try:
        _ip("link", "add", HOST_SIDE, "type", "veth", "peer", "name", CLIENT_SIDE)
        _ip("link", "set", CLIENT_SIDE, "netns", NAMESPACE)
        _ip("addr", "add", f"{HOST_IP}/24", "dev", HOST_SIDE)
        _ip("link", "set", HOST_SIDE, "up")
        _ip("addr", "add", f"{CLIENT_IP}/24", "dev", CLIENT_SIDE, netns=True)
        _ip("link", "set", CLIENT_SIDE, "up", netns=True)
        _ip("link", "set", "lo", "up", netns=True)
        _steer(HOST_SIDE, SERVER_CPU, netns=False)
        _steer(CLIENT_SIDE, LOAD_CPU, netns=True)
    except subprocess.CalledProcessError as exc:
        failed = " ".join(map(str, exc.cmd))
        print(f"# veth: not measured ({failed}: {exc.stderr.decode().strip()})")
        subprocess.run(["ip", "netns", "del", NAMESPACE], check=False, capture_output=True)
        yield None
        return
    try:
        yield HOST_IP
    finally:
        # Deleting the namespace deletes the veth pair with it.
        subprocess.run(["ip", "netns", "del", NAMESPACE], check=False, capture_output=True)


# -- measuring ----------------------------------------------------------------------------


@dataclass
class Figures:
    posts_per_s: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)


def window(
    pid: int, url: str, script: Path, seconds: float, connections: int, netns: bool
) -> tuple[float, float, float, float]:
    command = wrk_command(url, script, seconds, connections, timeout=10)
    if netns:
        command = ["ip", "netns", "exec", NAMESPACE, *command]
    before = cpu_seconds(pid)
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    used = cpu_seconds(pid) - before
    result = parse_wrk(out)
    if result.non2xx or result.accepted == 0 or any(result.errors.values()):
        raise SystemExit(f"a window answered other than 2xx or failed:\n{out}")
    return result.accepted_per_s, used / result.accepted * 1e6, result.p50_ms, result.p99_ms


def main(args: argparse.Namespace) -> None:
    from trainjob_status_server.certificates import pki

    if shutil.which("wrk") is None or shutil.which("taskset") is None:
        raise SystemExit("needs wrk and taskset: apt-get install wrk util-linux")
    loads = [int(n) for n in args.connections.split(",")]
    other = Path(args.against).resolve()
    with tempfile.TemporaryDirectory() as tmp, processes() as procs, veth_path() as veth:
        work = Path(tmp)
        bundle = pki.new_bundle(["localhost"], dt.datetime.now(dt.UTC), pki.Policy())
        (work / "tls.crt").write_bytes(bundle.tls_cert)
        (work / "tls.key").write_bytes(bundle.tls_key)
        script = work / "post.lua"
        script.write_text(post_script(BODY))
        hosts = ["127.0.0.1"] + ([veth] if veth else [])
        servers: dict[str, tuple[int, dict[str, int]]] = {}
        checkout = os.pathsep.join(str(other / p) for p in ("client", "server", "devcluster"))
        for name, env in (("ours", None), (f"at {other.name}", checkout)):
            ports_file = work / f"ports-{len(servers)}"
            proc = procs.start(
                [*SELF, "--serve", str(ports_file), str(work), *hosts],
                cpu=SERVER_CPU,
                env=None if env is None else {**os.environ, "PYTHONPATH": env},
            )
            wait_file(ports_file, 30)
            servers[name] = (proc.pid, json.loads(ports_file.read_text()))
        paths = [("loopback", "127.0.0.1", False)] + ([("veth", veth, True)] if veth else [])
        figures: dict[tuple[str, int, str], Figures] = {}
        print(f"# load average before: {loadavg()}")
        for number in range(1, args.rounds + 1):
            for path, host, netns in paths:
                for load in loads:
                    for name, (pid, ports) in servers.items():
                        url = f"https://{host}:{ports[host]}{PATH}"
                        got = window(pid, url, script, args.seconds, load, netns)
                        into = figures.setdefault((path, load, name), Figures())
                        into.posts_per_s.append(got[0])
                        into.cpu_us.append(got[1])
                        into.p50_ms.append(got[2])
                        into.p99_ms.append(got[3])
                        print(
                            f"round {number}: {path:8} c={load:<3} {name:24} {got[0]:8.0f} "
                            f"posts/s {got[1]:6.1f} us/post  p50 {got[2]:6.3f} ms  "
                            f"p99 {got[3]:6.3f} ms",
                            flush=True,
                        )
        report(figures, paths, loads, list(servers), args)
        print(f"# load average after: {loadavg()}")


def report(
    figures: dict[tuple[str, int, str], Figures],
    paths: list[tuple[str, str, bool]],
    loads: list[int],
    names: list[str],
    args: argparse.Namespace,
) -> None:
    ours, theirs = names
    print(f"\nmedians of {args.rounds} rounds of {args.seconds:.0f} s:")
    for path, _host, _netns in paths:
        for load in loads:
            for name in names:
                f = figures[(path, load, name)]
                print(
                    f"  {path:8} c={load:<3} {name:24} {statistics.median(f.posts_per_s):8.0f} "
                    f"posts/s {statistics.median(f.cpu_us):6.1f} us/post  "
                    f"p50 {statistics.median(f.p50_ms):6.3f} ms  "
                    f"p99 {statistics.median(f.p99_ms):6.3f} ms"
                )
    print(f"\n{theirs} over {ours} (median; by round):")
    for path, _host, _netns in paths:
        for load in loads:
            a, b = figures[(path, load, ours)], figures[(path, load, theirs)]
            parts = []
            for label in ("cpu_us", "p50_ms", "p99_ms"):
                mine, other = getattr(a, label), getattr(b, label)
                rounds = ", ".join(f"{y / x:.3f}" for x, y in zip(mine, other, strict=True))
                ratio = statistics.median(other) / statistics.median(mine)
                parts.append(f"{label} {ratio:.3f} ({rounds})")
            print(f"  {path:8} c={load:<3} " + "; ".join(parts))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":  # ports_file work host...
        asyncio.run(serve(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, metavar="CHECKOUT")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", default="1,4,32", help="comma-separated loads")
    main(parse_args(parser, {"seconds": 1.0, "rounds": 1, "connections": "1,4"}))
