"""Our server and Kubeflow Trainer's own status server, side by side: the same load on the
same real control plane, in one run, the two servers taking turns round by round.

The peer is the Trainer's ``pkg/statusserver`` run by ``tools/trainer``'s
``trainer-status-server`` exactly as the Trainer's controller manager wires it (its
configuration defaults: port 10443's server, its own API client at QPS 5 / burst 10).
Ours is ``trainjob-status-server serve`` with its defaults (token checks against the
issuer's keys with pod binding, the coalescing writer, the same 5 / 10 budget for
writes). Both run pinned to one core; this script's load and the control plane share the
other. Needs ``make kube-assets trainer-assets`` (it exits saying so otherwise), taskset,
and private mount namespaces (root or user namespaces) for the peer.

Printed, per server (ratios ours / peer where more is better, peer / ours where less is):

- saturation (``--connections`` keep-alive connections posting back to back to one
  TrainJob for ``--seconds``): posts/s, server CPU per post, p50/p99 latency, and status
  writes the API server received per post (its own ``apiserver_request_total``);
- freshness at scale: ``--trainjobs`` TrainJobs (e.g. 1, 100, 1000), each with a pod
  posting every ``--interval`` seconds (the SDK's 5 s throttle) for ``--window``
  seconds; then the round waits until every TrainJob shows its last post, or no status
  write has reached the API server for ``--quiet`` seconds (nothing more will show), or
  ``--settle`` seconds. For every post, the time until a watch on the TrainJobs shows it
  (or a newer update of its TrainJob): p50/p99 over the posts that showed, the share
  that never showed, and the p99 with those counted as infinitely late ("> cap": a
  server that drops a post and writes no newer one of that TrainJob leaves it unseen);
- memory: the server's RSS after the largest freshness phase against after the first,
  per TrainJob added;
- answers: to a forged token (signed by a key of our own), to a valid token of another
  TrainJob's pod (right audience, same namespace), and to a body that is not JSON.

With the defaults a run takes about 15 minutes on a 2-core machine: the 1,000-TrainJob
phase alone is most of it (making the TrainJobs, their pods and tokens, then our
server's 200 s cycle through them at 5 writes a second after each window).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import ssl
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    LOAD_CPU,
    SERVER_CPU,
    cpu_seconds,
    loadavg,
    parse_args,
    percentile,
    pin,
    rss_kib,
)
from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.controlplane import AssetsMissing, ControlPlane, find_assets
from trainjob_devcluster.harness.kubeflow_trainer import (
    ChildProcess,
    TrainerAssetsMissing,
    TrainerProcess,
    find_trainer_assets,
    http_ready,
    private_mounts_usable,
    status_server_config,
    tls_ready,
    write_config,
)
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_devcluster.harness.testing import ServingCerts, free_port
from trainjob_status.contract import GROUP, RESOURCE, audience, status_path

ROOT = Path(__file__).resolve().parents[1]
NS = "bench"
START = datetime(2026, 1, 1, tzinfo=UTC)


def stamp(second: int) -> str:
    return (START + timedelta(seconds=second)).strftime("%Y-%m-%dT%H:%M:%SZ")


def body(second: int, progress: int = 42) -> bytes:
    status = {
        "progressPercentage": progress,
        "estimatedRemainingSeconds": 600,
        "metrics": [{"name": f"metric_{i}", "value": f"{i * 0.125:.4f}"} for i in range(8)],
        "lastUpdatedTime": stamp(second),
    }
    return json.dumps({"trainerStatus": status}).encode()


@dataclass
class Job:
    name: str
    token: str
    clock: int = 0  # seconds after START of its newest post: each post is newer

    def next(self) -> int:
        self.clock += 1
        return self.clock


@dataclass
class Server:
    name: str
    process: ChildProcess
    port: int
    samples: dict[str, list[float]] = field(default_factory=dict)
    codes: Counter[int] = field(default_factory=Counter)  # failed posts' answers (0: none)

    def url(self, job: str) -> str:
        return f"https://localhost:{self.port}{status_path(NS, job)}"

    def add(self, row: str, value: float) -> None:
        self.samples.setdefault(row, []).append(value)


Api = RealCluster | DevCluster


class Cluster:
    """The bench's API server: TrainJobs, their pods and the pods' tokens."""

    def __init__(self, cluster: Api) -> None:
        self.cluster = cluster
        self.jobs: list[Job] = []
        cluster.ensure_namespace(NS)

    def grow(self, count: int) -> None:
        while len(self.jobs) < count:
            name = f"job{len(self.jobs)}"
            self.cluster.create_trainjob(NS, name)
            pod = f"{name}-node-0-0"
            self.cluster.create_trainjob_pod(NS, name, pod)
            token = self.cluster.request_token(NS, "default", [audience(NS, name)], pod=pod)
            self.jobs.append(Job(name, token))

    async def settle(self, quiet: float = 2.0, limit: float = 300.0) -> None:
        """Until no status write has reached the API server for ``quiet`` seconds: the
        peer keeps writing posts it queued after their round ended, and one server's
        backlog must not land in the other's round."""
        last, since = self.status_writes(), time.monotonic()
        deadline = since + limit
        while time.monotonic() - since < quiet and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            now = self.status_writes()
            if now != last:
                last, since = now, time.monotonic()

    def status_writes(self) -> float:
        """Status writes to TrainJobs the API server has answered so far."""
        if isinstance(self.cluster, DevCluster):
            return float(self.cluster.faults.count("patch", f"{RESOURCE}/status"))
        code, page = self.cluster.plane.request("GET", "/metrics")
        assert code == 200, page
        found = 0.0
        for line in str(page).splitlines():
            if (
                line.startswith("apiserver_request_total{")
                and f'resource="{RESOURCE}"' in line
                and 'subresource="status"' in line
                and ('verb="PATCH"' in line or 'verb="APPLY"' in line)
            ):
                found += float(line.rsplit(" ", 1)[1])
        return found


def client_context(certs: ServingCerts) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=certs.ca.cert_pem.decode())


async def post(
    session: aiohttp.ClientSession, server: Server, job: Job, data: bytes, token: str = ""
) -> tuple[int, float, Any]:
    """One post: its status code (0 when it got no answer within the session's
    timeout), its latency and its decoded answer."""
    started = time.perf_counter()
    headers = {"Authorization": f"Bearer {token or job.token}"}
    try:
        async with session.post(server.url(job.name), data=data, headers=headers) as answer:
            content = await answer.read()
            code = answer.status
    except (TimeoutError, aiohttp.ClientError):
        return 0, time.perf_counter() - started, None
    elapsed = time.perf_counter() - started
    try:
        decoded = json.loads(content)
    except ValueError:
        decoded = content.decode(errors="replace")
    return code, elapsed, decoded


# -- saturation ---------------------------------------------------------------------------


async def saturate(
    session: aiohttp.ClientSession,
    cluster: Cluster,
    server: Server,
    connections: int,
    seconds: float,
) -> None:
    job = cluster.jobs[0]
    latencies: list[float] = []
    failures: Counter[int] = Counter()
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        while time.monotonic() < deadline:
            code, elapsed, _ = await post(session, server, job, body(job.next()))
            if code == 200:
                latencies.append(elapsed)
            else:
                failures[code] += 1

    writes = cluster.status_writes()
    cpu = cpu_seconds(server.process.pid)
    began = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(connections)))
    elapsed = time.monotonic() - began
    # Writes still queued count against the posts that caused them.
    await cluster.settle()
    cpu = cpu_seconds(server.process.pid) - cpu
    writes = cluster.status_writes() - writes
    posts = len(latencies)
    latencies.sort()
    server.add("posts/s", posts / elapsed)
    server.add("CPU us/post", cpu / posts * 1e6 if posts else math.nan)
    server.add("p50 ms", percentile(latencies, 0.5) * 1e3)
    server.add("p99 ms", percentile(latencies, 0.99) * 1e3)
    server.add("writes/post", writes / posts if posts else math.nan)
    server.add("failed posts", failures.total())
    server.codes.update(failures)


# -- freshness ----------------------------------------------------------------------------


class Watch:
    """Every TrainJob's newest lastUpdatedTime as a watch delivers it, with the time."""

    def __init__(self, cluster: Api) -> None:
        self.cluster = cluster
        self.seen: dict[str, list[tuple[str, float]]] = {}
        self.task: asyncio.Task[None] | None = None

    async def run(self, session: aiohttp.ClientSession) -> None:
        path = f"/apis/{GROUP}/v1alpha1/namespaces/{NS}/{RESOURCE}?watch=1"
        headers = {"Authorization": f"Bearer {self.cluster.admin_token}"}
        context = self.cluster.client_ssl_context()
        forever = aiohttp.ClientTimeout(total=None)
        async with session.get(
            self.cluster.url + path, headers=headers, ssl=context, timeout=forever
        ) as stream:
            async for line in stream.content:
                at = time.monotonic()
                obj = json.loads(line)["object"]
                status = obj.get("status", {}).get("trainerStatus") or {}
                when = status.get("lastUpdatedTime")
                if when:
                    self.seen.setdefault(obj["metadata"]["name"], []).append((when, at))

    def shown(self, job: str, when: str, after: float) -> float | None:
        for seen, at in self.seen.get(job, ()):
            if seen >= when and at >= after:
                return at
        return None


async def freshness(
    session: aiohttp.ClientSession,
    cluster: Cluster,
    server: Server,
    watch: Watch,
    count: int,
    args: argparse.Namespace,
) -> None:
    """One round: each of ``count`` TrainJobs' pods posts every ``--interval`` seconds
    for ``--window`` seconds; then the round waits until every TrainJob shows its last
    post, or until no status write has reached the API server for a while (nothing
    more can show), or ``--settle`` seconds, whichever comes first."""
    jobs = cluster.jobs[:count]
    sent: list[tuple[str, str, float]] = []
    last: dict[str, tuple[str, float]] = {}
    failures: Counter[int] = Counter()

    async def reporter(job: Job, offset: float) -> None:
        await asyncio.sleep(offset)
        end = time.monotonic() + args.window
        while time.monotonic() < end:
            second = job.next()
            at = time.monotonic()
            sent.append((job.name, stamp(second), at))
            last[job.name] = (stamp(second), at)
            code, _, _ = await post(session, server, job, body(second))
            if code != 200:
                failures[code] += 1
            await asyncio.sleep(max(0.0, args.interval - (time.monotonic() - at)))

    # Spread over the interval, as independent training pods are.
    interval = args.interval
    await asyncio.gather(*(reporter(job, interval * i / len(jobs)) for i, job in enumerate(jobs)))
    waited = await settled(cluster, lambda: all(watch.shown(j, *last[j]) for j in last), args)
    delays: list[float] = []
    for job, when, at in sent:
        shown = watch.shown(job, when, at)
        if shown is not None:
            delays.append(shown - at)
    delays.sort()
    unseen = len(sent) - len(delays)
    label = f"{count} TJ"
    server.add(f"freshness p50 s, {label}", percentile(delays, 0.5))
    server.add(f"freshness p99 s, {label}", percentile(delays, 0.99))
    # A post never shown, nor any newer one of its TrainJob, by the end of the wait
    # counts as infinitely late here: a quantile that reaches one reads "> cap".
    padded = delays + [math.inf] * unseen
    server.add(f"freshness p99 s, unseen = inf, {label}", percentile(padded, 0.99))
    server.add(f"% of posts never shown, {label}", 100 * unseen / len(sent) if sent else 0)
    server.add(f"failed posts, {label}", failures.total())
    server.add(f"wait after the window s, {label}", waited)
    server.codes.update(failures)


async def settled(cluster: Cluster, done: Callable[[], bool], args: argparse.Namespace) -> float:
    """Waits until ``done()``, or no status write for ``--quiet`` seconds, or
    ``--settle`` seconds; the seconds waited."""
    began = time.monotonic()
    writes, since = cluster.status_writes(), began
    while not done() and time.monotonic() - began < args.settle:
        await asyncio.sleep(0.5)
        now = cluster.status_writes()
        if now != writes:
            writes, since = now, time.monotonic()
        elif time.monotonic() - since >= args.quiet:
            break
    return time.monotonic() - began


# -- answers ------------------------------------------------------------------------------


async def answers(session: aiohttp.ClientSession, cluster: Cluster, server: Server) -> None:
    job, other = cluster.jobs[0], cluster.jobs[1]
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    claims = jwt.decode(job.token, options={"verify_signature": False})
    forged = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "forged"})
    # Another TrainJob's pod asks for a token for this TrainJob's audience: the
    # API server mints it, bound to that pod.
    theirs = cluster.cluster.request_token(
        NS, "default", [audience(NS, job.name)], pod=f"{other.name}-node-0-0"
    )
    for row, token, data in (
        ("forged token", forged, body(job.next())),
        ("another TrainJob's pod", theirs, body(job.next())),
        ("malformed body", job.token, b"{not json"),
    ):
        code, _, answer = await post(session, server, job, data, token)
        reason = answer.get("reason", "") if isinstance(answer, dict) else ""
        server.samples.setdefault(f"answer: {row}", []).append(f"{code} {reason}".strip())  # type: ignore[arg-type]  # a table cell, not a figure


# -- the run ------------------------------------------------------------------------------


def start_ours(cluster: Api, certs: ServingCerts) -> Server:
    port, probe, metrics = free_port(), free_port(), free_port()
    argv = [
        "taskset",
        "-c",
        str(SERVER_CPU),
        str(Path(sys.executable).parent / "trainjob-status-server"),
        "serve",
        f"--kubeconfig={cluster.kubeconfig_path}",
        f"--tls-cert-file={certs.cert_file}",
        f"--tls-key-file={certs.key_file}",
        "--host=127.0.0.1",
        f"--port={port}",
        f"--probe-port={probe}",
        f"--metrics-port={metrics}",
        "--no-inject-pods",
        # Every pod here shares one service account; its rate limit would answer 429
        # to most of the saturating load, which measures the limit, not the server.
        "--sa-rate-limit=1000000",
        "--sa-rate-burst=1000000",
        "--log-level=warning",
    ]
    process = ChildProcess(argv, ready=http_ready(probe), name="ours")
    process.start()
    return Server("ours", process, port)


def start_peer(cluster: Api, certs: ServingCerts) -> Server:
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="peer-config-"))
    config = write_config(folder, status_server_config(status_port=port))
    assets = find_trainer_assets(ROOT / "tools" / "trainer" / "go.mod")
    # Its own service account's token: the status server reads its issuer from it.
    token = cluster.request_token(NS, "default", [cluster.url])
    process = TrainerProcess(
        ["taskset", "-c", str(SERVER_CPU), str(assets.status_server), f"--config={config}"],
        token=token,
        kubeconfig=cluster.kubeconfig_path,
        ready=tls_ready(port),
        certs={"tls.crt": certs.cert_file.read_bytes(), "tls.key": certs.key_file.read_bytes()},
        name="peer",
    )
    process.start()
    return Server("peer", process, port)


async def interleaved(
    servers: list[Server],
    rounds: int,
    step: Callable[[Server], Awaitable[None]],
    settle: Callable[[], Awaitable[None]],
) -> None:
    for i in range(rounds):
        for server in servers if i % 2 == 0 else reversed(servers):
            await step(server)
            await settle()


def table(servers: list[Server], less_is_better: tuple[str, ...]) -> None:
    """Median over rounds; "ours ahead" is ours / peer where more is better and peer /
    ours where less is (so above 1 means ours is ahead either way); where a row has
    several rounds, their range (the noise) follows."""
    ours, peer = servers
    print(
        f"\n{'row (median of rounds)':<40} {'ours':>16} {'peer':>16} {'ours ahead':>11}"
        "  range of rounds (ours; peer)"
    )
    for row, mine in ours.samples.items():
        theirs = peer.samples.get(row, [])
        if mine and isinstance(mine[0], str):
            print(f"{row:<40} {mine[0]:>16} {(theirs or ['-'])[0]:>16}")
            continue
        x = statistics.median(mine)
        y = statistics.median(theirs) if theirs else math.nan
        better, worse = (y, x) if row.startswith(less_is_better) else (x, y)
        ratio = _ratio(better, worse)
        if math.isnan(ratio):
            shown = "-"
        else:
            shown = "unbounded" if math.isinf(ratio) else f"x{_cell(ratio)}"
        spread = f"  {_range(mine)}; {_range(theirs)}" if len(mine) > 1 else ""
        print(f"{row:<40} {_cell(x):>16} {_cell(y):>16} {shown:>11}{spread}")
    for server in servers:
        codes = ", ".join(f"{code or 'no answer'}: {n}" for code, n in sorted(server.codes.items()))
        print(f"failed posts of {server.name}, by answer: {codes or 'none'}")


def _ratio(top: float, bottom: float) -> float:
    """``top / bottom``; unbounded where only ``bottom`` is 0 (none lost against some),
    undefined where both are."""
    if bottom == 0 or math.isnan(bottom):
        return math.inf if top > 0 else math.nan
    return top / bottom


def _range(values: list[float]) -> str:
    return f"{_cell(min(values))}-{_cell(max(values))}" if values else "-"


def _cell(value: float) -> str:
    """Three significant digits, never in exponent notation (a table to read)."""
    if math.isinf(value):
        return "> cap"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if value == 0 or abs(value) >= 0.001:
        return f"{value:.3g}"
    return f"{value:.6f}"


async def run(args: argparse.Namespace, cluster: Api) -> None:
    certs = ServingCerts.create(Path(tempfile.mkdtemp(prefix="side-by-side-")))
    state = Cluster(cluster)
    state.grow(max(2, args.trainjobs[0]))
    # In threads: the development cluster answers their start-up on this event loop.
    servers = list(
        await asyncio.gather(
            asyncio.to_thread(start_ours, cluster, certs),
            asyncio.to_thread(start_peer, cluster, certs),
        )
    )
    connector = aiohttp.TCPConnector(limit=0, ssl=client_context(certs))
    try:
        # A client that gives up, as the SDK's does: the peer then drops the write it
        # queued for that post instead of making it late.
        timeout = aiohttp.ClientTimeout(total=args.timeout)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            print(f"# saturation: {args.connections} connections, {args.seconds:.0f} s a round")
            await interleaved(
                servers,
                args.rounds,
                lambda s: saturate(session, state, s, args.connections, args.seconds),
                state.settle,
            )
            for server in servers:
                await answers(session, state, server)
            watch = Watch(cluster)
            watch.task = asyncio.create_task(watch.run(session))
            rss_first: dict[str, int] = {}
            for count in args.trainjobs:
                state.grow(count)
                print(
                    f"# freshness: {count} TrainJobs, a post each {args.interval:g} s for "
                    f"{args.window:g} s, then up to {args.settle:g} s for the last to show"
                )
                await interleaved(
                    servers,
                    args.freshness_rounds,
                    lambda s, n=count: freshness(  # type: ignore[misc]  # bound per phase
                        session, state, s, watch, n, args
                    ),
                    state.settle,
                )
                for server in servers:
                    rss_first.setdefault(server.name, rss_kib(server.process.pid))
            added = args.trainjobs[-1] - args.trainjobs[0]
            for server in servers:
                grown = rss_kib(server.process.pid) - rss_first[server.name]
                server.add("memory KiB per TrainJob", grown / added if added else math.nan)
            watch.task.cancel()
    finally:
        for server in servers:
            server.process.close()
    print(f"# load average at the end: {loadavg()}")
    table(servers, ("CPU", "p50", "p99", "writes", "freshness", "memory", "failed", "%", "wait"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--api",
        choices=("real", "devcluster"),
        default="real",
        help="the real control plane (make kube-assets), or the development cluster",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds per phase and server")
    parser.add_argument("--seconds", type=float, default=10, help="saturation round length")
    parser.add_argument("--connections", type=int, default=16, help="saturation connections")
    parser.add_argument(
        "--trainjobs",
        type=lambda v: [int(n) for n in v.split(",")],
        default=[1, 100, 1000],
        help="TrainJob counts of the freshness phases (comma-separated, ascending)",
    )
    parser.add_argument(
        "--freshness-rounds", type=int, default=1, help="rounds per freshness phase and server"
    )
    parser.add_argument("--timeout", type=float, default=10, help="a post's client timeout, s")
    parser.add_argument("--interval", type=float, default=5, help="seconds between a pod's posts")
    parser.add_argument(
        "--window",
        type=float,
        default=30,
        help="how long a freshness round posts, s (then it waits)",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=300,
        help="after a freshness round's window, the longest wait for every TrainJob to "
        "show its last post (1,000 TrainJobs at 5 writes/s take 200 s a cycle)",
    )
    parser.add_argument(
        "--quiet",
        type=float,
        default=15,
        help="the wait after a window also ends once no status write has reached the API "
        "server for this long (a server that lost posts writes no more)",
    )
    args = parse_args(
        parser,
        {
            "rounds": 1,
            "seconds": 1,
            "connections": 2,
            "trainjobs": [1, 3],
            "window": 2,
            "interval": 1,
            "settle": 10,
            "quiet": 3,
        },
    )
    try:
        trainer = find_trainer_assets(ROOT / "tools" / "trainer" / "go.mod")
    except TrainerAssetsMissing as missing:
        sys.exit(f"trainer_side_by_side: {missing}")
    why = private_mounts_usable()
    if why:
        sys.exit(f"trainer_side_by_side: {why}")
    pin(LOAD_CPU)
    print(f"# Kubeflow Trainer {trainer.root.name}; API server: {args.api}")
    print(f"# load average at the start: {loadavg()}")
    if args.api == "devcluster":
        asyncio.run(on_devcluster(args))
        return
    try:
        kube = find_assets()
    except AssetsMissing as missing:
        sys.exit(f"trainer_side_by_side: {missing}")
    with ControlPlane(kube, issuer=None) as plane:
        asyncio.run(run(args, RealCluster(plane)))


async def on_devcluster(args: argparse.Namespace) -> None:
    # The Trainer discovers its issuer at the issuer's own URL: this server's.
    port = free_port()
    async with DevCluster(port=port, issuer=f"https://127.0.0.1:{port}") as cluster:
        await run(args, cluster)


if __name__ == "__main__":
    main()
