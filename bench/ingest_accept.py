"""Valid status posts per second through the ingest server, against the ceiling of a bare
aiohttp HTTPS handler that only reads, parses and echoes the same post, in interleaved
rounds of one run: the bare handler on asyncio's loop and TLS, the bare handler on
uvloop's (where uvloop is installed) and ours are each measured once per round, in that
order every round, so that the machine's drift falls on all of them alike. The ratio is
ours to the faster of the two bare handlers.

Layout on a 2-core machine: every server under test is started up front and pinned to
CPU 0, where only the one being loaded does any work; wrk (the load, HTTPS keep-alive)
and the devcluster share CPU 1.

Our server checks every post's token for real (``--auth token``, the default): the
devcluster holds the TrainJob, a service account and a pod of the TrainJob (labelled and
shaped as the Trainer's JobSet makes it, so the pod binding and membership checks pass),
and mints one token bound to that pod with the TrainJob's audience; the server verifies
it against the devcluster's issuer and keys, with its verified-token cache and pod cache,
as ``serve`` does. The per-service-account rate limit is raised out of the way (one
account posts everything; its bucket is still spent on every post). ``--auth
accept-all`` measures the server without token checks instead, for comparison. Every
post goes through the coalescing writer and is answered at once; the TrainJob's status
is written to the devcluster at most once a second. Every server gets the same post
(progress, ETA, 8 metrics; the token in its Authorization header).

Before round 1 each server must answer one real post with 200 (for ours: token checks
ready, keys loaded and pods listed) and is then warmed once (``--warm-seconds``). Every
measured window must answer every post 2xx: one that does not is printed loudly and the
run exits 1. The report: per server the median posts/s and server CPU per post (its CPU
seconds over the posts answered) over the rounds; ours over the faster bare handler in
each round; the ratio of the medians, with the rounds' min and max as the run's noise.
``--against CHECKOUT`` adds, to the same rounds, the server of another checkout of this
repository (``git worktree add /tmp/base COMMIT``): its CPU per post over ours, by round
and of the medians, tells a change's effect apart from the machine's drift.
``--floor`` adds the bare handler's work with no web framework at all (httptools'
parser on an asyncio protocol, asyncio's TLS): the bare handler on asyncio's CPU per post
less its CPU per post is what aiohttp's own machinery costs a post.
``--profile`` samples each server during round 1 with py-spy (``pip install py-spy``)
and prints a table of CPU per post by layer (``_layers.py``). Needs ``wrk`` (apt-get
install wrk) and ``taskset``.

    .venv/bin/python bench/ingest_accept.py [--seconds 10] [--connections 32] [--rounds 3]
        [--warm-seconds 2] [--auth token|accept-all] [--against CHECKOUT] [--floor] [--profile]
        [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.helpers import rfc822_formatted_time

import _layers
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
from _ingest.objects import pod_body, trainjob_body
from trainjob_devcluster import DevCluster
from trainjob_status.contract import GROUP, audience, status_path
from trainjob_status_server.app import StatusServer
from trainjob_status_server.auth import TokenAuthenticator
from trainjob_status_server.auth.authenticator import Authenticator
from trainjob_status_server.config import Config

# --against runs this script on another checkout's packages, perhaps one from before the
# development cluster was grouped into subpackages.
try:
    from trainjob_devcluster.harness.acceptall import AcceptAll
    from trainjob_devcluster.harness.testing import ServingCerts
except ImportError:  # a flat checkout
    from trainjob_devcluster.acceptall import AcceptAll
    from trainjob_devcluster.testing import ServingCerts

NS = "bench"
JOB = "job"
ACCOUNT = f"{JOB}-trainer"
POD = f"{JOB}-node-0-0"
PATH = status_path(NS, JOB)
BODY = json.dumps({"trainerStatus": typical_status()})
AUTH_MODES = ("token", "accept-all")
SA_RATE = 1e9  # posts/s and burst per service account: the one account is never throttled


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


async def floor_server(port: int, cert: Path, key: Path) -> None:
    """The same work as the bare handler (read the body, parse it, echo it) with no web
    framework: httptools' parser (llhttp) on a bare asyncio protocol, asyncio's TLS. What
    it costs less than the bare handler on asyncio is what aiohttp's own request and
    answer machinery costs a post."""
    import httptools  # in the test dependency group

    class Echo(asyncio.Protocol):
        def __init__(self) -> None:
            self.parser = httptools.HttpRequestParser(self)
            self.body: list[bytes] = []
            self.transport: asyncio.Transport | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError:
                assert self.transport is not None
                self.transport.close()

        def on_message_begin(self) -> None:
            self.body = []

        def on_body(self, chunk: bytes) -> None:
            self.body.append(chunk)

        def on_message_complete(self) -> None:
            answer = json.dumps(json.loads(b"".join(self.body))).encode()
            head = FLOOR_HEAD % (rfc822_formatted_time().encode(), len(answer))
            assert self.transport is not None
            self.transport.write(head + answer)
            if not self.parser.should_keep_alive():
                self.transport.close()

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", port, ssl=context)
    await asyncio.Event().wait()


FLOOR_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n"
    b"Date: %s\r\nContent-Length: %d\r\n\r\n"
)


async def ingest_server(port: int, cert: Path, key: Path, work: Path, auth: str) -> None:
    """Our server with the server's defaults (the coalescing writer included), but for
    the listener, no metrics or probe port, and the per-account rate limit raised;
    ``auth``: real token checks against the devcluster's issuer, or accept-all."""
    config = Config(
        host="127.0.0.1",
        port=port,
        metrics_port=0,
        probe_port=0,
        webhook_port=0,
        tls_cert_file=cert,
        tls_key_file=key,
        kubeconfig=work / "kubeconfig",
        issuer=(work / "issuer").read_text(),
        sa_rate_limit=SA_RATE,
        sa_rate_burst=int(SA_RATE),
        log_level="warning",
    )
    authenticator: Authenticator = AcceptAll()
    if auth == "token":
        # As ``serve`` builds it; the issuer is given, so no own token is read for it.
        settings = dataclasses.replace(config.auth_settings(), own_token_path=None)
        authenticator = TokenAuthenticator(settings)
    async with StatusServer(config, authenticator) as server:
        await server.trainjobs.synced.wait()
        await asyncio.Event().wait()


async def cluster_process(work: Path) -> None:
    """The devcluster: the TrainJob, its service account, one pod of it and that pod's
    bound token; the issuer, the token and the kubeconfig (last) into ``work``."""
    async with DevCluster() as cluster:
        cluster.ensure_namespace(NS)
        cluster.create("trainjobs", trainjob_body(JOB), NS, GROUP)
        cluster.create("serviceaccounts", {"metadata": {"name": ACCOUNT}}, NS)
        owner = cluster.create_trainjob_job(NS, JOB)["metadata"]["uid"]
        cluster.create("pods", pod_body(NS, JOB, POD, ACCOUNT, 0, owner), NS)
        token = cluster.request_token(NS, ACCOUNT, [audience(NS, JOB)], pod=POD)
        (work / "token").write_text(token)
        (work / "issuer").write_text(cluster.issuer)
        shutil.copy(cluster.kubeconfig_path, work / "kubeconfig.tmp")
        (work / "kubeconfig.tmp").rename(work / "kubeconfig")
        await asyncio.Event().wait()


# -- the driver ---------------------------------------------------------------------------


@dataclasses.dataclass
class Window:
    """One wrk window against one server, and the server's CPU time meanwhile."""

    posts: int  # responses received
    seconds: float
    non2xx: int
    errors: int  # socket errors: connect, read, write, timeout
    cpu: float  # the server's CPU seconds
    p50_ms: float
    p99_ms: float

    @property
    def rps(self) -> float:
        return self.posts / self.seconds

    @property
    def us_per_post(self) -> float:
        return self.cpu / max(1, self.posts) * 1e6

    def text(self) -> str:
        errors = f"  socket errors {self.errors}" if self.errors else ""
        return (
            f"{self.rps:>8.0f} posts/s  p50 {self.p50_ms:6.2f} ms  p99 {self.p99_ms:6.2f} ms  "
            f"server CPU {self.cpu / self.seconds:.2f}  {self.us_per_post:5.0f} us/post  "
            f"non-2xx {self.non2xx}{errors}"
        )


def window(pid: int, url: str, script: Path, seconds: float, connections: int) -> Window:
    before = cpu_seconds(pid)
    result = run_wrk(url, script, seconds, connections)
    return Window(
        posts=result.completed,
        seconds=result.seconds,
        non2xx=result.non2xx,
        errors=sum(result.errors.values()),
        cpu=cpu_seconds(pid) - before,
        p50_ms=result.p50_ms,
        p99_ms=result.p99_ms,
    )


def measure(
    name: str, pid: int, url: str, script: Path, args: argparse.Namespace
) -> dict[str, float]:
    """A warm-up (``args.warm_seconds``), then one window; prints one line. For the
    benchmarks that measure one server at a time (auth_verify.py)."""
    if args.warm_seconds:
        run_wrk(url, script, args.warm_seconds, args.connections)
    measured = window(pid, url, script, args.seconds, args.connections)
    figures = {
        "rps": measured.rps,
        "p50": measured.p50_ms,
        "p99": measured.p99_ms,
        "non2xx": float(measured.non2xx),
        "cpu": measured.cpu / args.seconds,
    }
    print(
        f"{name:<34} {figures['rps']:>8.0f} posts/s  p50 {figures['p50']:6.2f} ms  "
        f"p99 {figures['p99']:6.2f} ms  server CPU {figures['cpu']:.2f}  "
        f"non-2xx {figures['non2xx']:.0f}"
    )
    return figures


@dataclasses.dataclass
class Target:
    """A server under test, started and answering."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    short: str  # a column's heading
    windows: list[Window] = dataclasses.field(default_factory=list)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}{PATH}"

    def median(self, figure: str) -> float:
        return statistics.median(float(getattr(w, figure)) for w in self.windows)


def post_once(url: str, token: str, context: ssl.SSLContext) -> int:
    """One real post; its HTTP status (0 when nothing answered)."""
    request = urllib.request.Request(
        url,
        data=BODY.encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return int(refused.code)
    except (urllib.error.URLError, OSError):
        return 0


def wait_answering(target: Target, token: str, context: ssl.SSLContext) -> None:
    """Until ``target`` answers a real post with 200 (token checks ready: keys loaded,
    pods listed); exits with its log's tail after a minute."""
    wait_port(target.port)
    deadline = time.monotonic() + 60
    while (status := post_once(target.url, token, context)) != 200:
        if time.monotonic() > deadline or target.proc.poll() is not None:
            tail = target.log.read_text(errors="replace").splitlines()[-20:]
            raise SystemExit(
                f"{target.name}: a real post got {status or 'no answer'}, not 200; "
                "its log ends:\n" + "\n".join(tail)
            )
        time.sleep(0.2)


def report(
    targets: list[Target],
    ours: Target,
    rounds: int,
    theirs: Target | None,
    floor: Target | None = None,
) -> None:
    bare = [t for t in targets if t not in (ours, theirs, floor)]
    width = max(len(t.name) for t in targets)
    print()
    print(f"medians of {rounds} round{'s' if rounds > 1 else ''}:")
    for target in targets:
        print(
            f"  {target.name:<{width}} {target.median('rps'):>8.0f} posts/s  "
            f"{target.median('us_per_post'):5.0f} us CPU per post"
        )
    by_round = []
    for r in range(rounds):
        faster = max(bare, key=lambda t: t.windows[r].rps)
        by_round.append((ours.windows[r].rps / faster.windows[r].rps, faster.name.split()[-1]))
    print(
        "ours / the faster bare handler, by round: "
        + "  ".join(f"{r}: {ratio:.3f} ({loop})" for r, (ratio, loop) in enumerate(by_round, 1))
    )
    for target in bare:
        print(
            f"ratio to the {target.name.replace('bare aiohttp handler', 'bare handler')}: "
            f"{ours.median('rps') / target.median('rps'):.3f} of the medians' posts/s, "
            f"{target.median('us_per_post') / ours.median('us_per_post'):.3f} by CPU per post"
        )
    if floor is not None:
        asyncio_bare = next(t for t in bare if t.name.endswith("asyncio"))
        framework = asyncio_bare.median("us_per_post") - floor.median("us_per_post")
        print(
            f"no framework: {floor.median('us_per_post'):.0f} us CPU per post; aiohttp's own "
            f"request and answer machinery costs the bare handler on asyncio {framework:.0f} "
            f"us per post; ours is {ours.median('us_per_post') / floor.median('us_per_post'):.2f}"
            " times the no-framework figure"
        )
    faster = max(bare, key=lambda t: t.median("rps"))
    ratios = [ratio for ratio, _ in by_round]
    print(
        f"ratio to the ceiling ({faster.name.split()[-1]}, the faster): "
        f"{ours.median('rps') / faster.median('rps'):.3f} of the medians; "
        f"per round min {min(ratios):.3f}, max {max(ratios):.3f} "
        f"(noise {max(ratios) - min(ratios):.3f})"
    )
    if theirs is not None:
        by_cpu = [
            theirs.windows[r].us_per_post / ours.windows[r].us_per_post for r in range(rounds)
        ]
        print(
            f"ours against {theirs.name}: CPU per post there / here "
            f"{theirs.median('us_per_post') / ours.median('us_per_post'):.3f} of the medians; "
            "by round " + "  ".join(f"{r}: {ratio:.3f}" for r, ratio in enumerate(by_cpu, 1))
        )


def main(args: argparse.Namespace) -> None:
    if shutil.which("wrk") is None or shutil.which("taskset") is None:
        raise SystemExit("needs wrk and taskset: apt-get install wrk util-linux")
    with tempfile.TemporaryDirectory() as tmp, processes() as procs:
        work = Path(tmp)
        ServingCerts.create(work)
        procs.start([*SELF, "--cluster", str(work)], cpu=LOAD_CPU, stderr=subprocess.DEVNULL)
        wait_file(work / "kubeconfig", 30)
        token = (work / "token").read_text()
        script = work / "post.lua"
        script.write_text(post_script(BODY, token))
        tls = (str(work / "tls.crt"), str(work / "tls.key"))

        def start(
            name: str, short: str, child: list[str], env: dict[str, str] | None = None
        ) -> Target:
            port = free_port()
            log = work / f"server-{port}.log"
            with log.open("wb") as sink:
                proc = procs.start(
                    [*SELF, *child[:1], str(port), *tls, *child[1:]],
                    cpu=SERVER_CPU,
                    stdout=subprocess.DEVNULL,
                    stderr=sink,
                    env=env,
                )
            return Target(name, proc, port, log, short)

        targets = [
            start(f"bare aiohttp handler on {loop}", f"bare {loop}", ["--ceiling", loop])
            for loop in (LOOPS if uvloop_installed() else LOOPS[:1])
        ]
        checks = "token checks" if args.auth == "token" else "accept-all"
        ours = start(
            f"ingest server ({checks}, coalescing writer)", "ours", ["--ingest", tmp, args.auth]
        )
        targets.append(ours)
        floor = None
        if args.floor:
            floor = start("no framework: httptools on asyncio's TLS", "floor", ["--floor-server"])
            targets.append(floor)
        theirs = None
        if args.against is not None:
            # The same server process, built from another checkout's three packages.
            other = Path(args.against).resolve()
            packages = os.pathsep.join(
                str(other / part) for part in ("client", "server", "devcluster")
            )
            theirs = start(
                f"ingest server at {other.name}",
                f"at {other.name}"[:12],
                ["--ingest", tmp, args.auth],
                {**os.environ, "PYTHONPATH": packages},
            )
            targets.append(theirs)
        context = ssl.create_default_context(cafile=str(work / "ca.crt"))
        for target in targets:
            wait_answering(target, token, context)
        if args.auth == "token":
            print(
                "# ours verifies one token, bound to a pod of the TrainJob, with the TrainJob's "
                "audience, against the devcluster's issuer and keys; per-service-account rate "
                f"limit raised to {SA_RATE:,.0f}/s, burst {SA_RATE:,.0f}: the one account is "
                "never throttled"
            )
        else:
            print("# ours accepts every token (accept-all): no token checks")
        print(
            f"# all servers on CPU {SERVER_CPU}, only the loaded one working; wrk -t1 "
            f"-c{args.connections} and the devcluster on CPU {LOAD_CPU}; {args.rounds} "
            f"round(s) of {args.seconds:.0f} s per server, in this order: "
            + ", ".join(t.name for t in targets)
        )
        if args.profile and not _layers.available():
            raise SystemExit("--profile needs py-spy: pip install py-spy")
        if args.warm_seconds:
            for target in targets:
                run_wrk(target.url, script, args.warm_seconds, args.connections)
        width = max(len(t.name) for t in targets)
        invalid = []
        profiles: list[tuple[str, dict[str, float], float]] = []
        for r in range(1, args.rounds + 1):
            for target in targets:
                sampler = None
                if args.profile and r == 1:
                    sampler = _layers.record(target.proc.pid, args.seconds - 1, work / "spy.raw")
                measured = window(
                    target.proc.pid, target.url, script, args.seconds, args.connections
                )
                target.windows.append(measured)
                if sampler is not None:
                    _, problem = sampler.communicate()
                    if sampler.returncode != 0:
                        raise SystemExit(f"py-spy failed: {problem.decode().strip()}")
                    found = _layers.shares(work / "spy.raw")
                    profiles.append((target.short, found, measured.us_per_post))
                print(f"round {r}: {target.name:<{width}} {measured.text()}", flush=True)
                if measured.non2xx:
                    invalid.append(f"round {r}, {target.name}: {measured.non2xx} non-2xx")
                    print(
                        f"!!! round {r}, {target.name}: {measured.non2xx} of {measured.posts} "
                        "posts answered non-2xx: this window's figures are not valid posts",
                        flush=True,
                    )
        report(targets, ours, args.rounds, theirs, floor)
        if profiles:
            print()
            print(
                f"where the CPU per post goes (round 1; py-spy at {_layers.RATE} Hz on each "
                "server's event-loop thread; uvloop's own C code is not seen, and falls in "
                "the rest):"
            )
            for line in _layers.table(profiles):
                print(line)
        print(
            f"wrk -t1 -c{args.connections} on CPU {LOAD_CPU} with the devcluster; servers "
            f"under test on CPU {SERVER_CPU}; {args.seconds:.0f} s per window"
        )
    if invalid:
        print(f"!!! {len(invalid)} window(s) with non-2xx answers: " + "; ".join(invalid))
        raise SystemExit(1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in (
        "--ceiling",
        "--floor-server",
        "--ingest",
        "--cluster",
    ):
        mode, rest = sys.argv[1], sys.argv[2:]
        if mode == "--ceiling":  # port cert key [loop]
            loop = rest[3] if len(rest) > 3 else "asyncio"
            run_on(loop, ceiling_server(int(rest[0]), Path(rest[1]), Path(rest[2])))
        elif mode == "--floor-server":  # port cert key
            asyncio.run(floor_server(int(rest[0]), Path(rest[1]), Path(rest[2])))
        elif mode == "--ingest":  # port cert key work auth
            port, cert, key, work, auth = rest
            asyncio.run(ingest_server(int(port), Path(cert), Path(key), Path(work), auth))
        else:  # work
            asyncio.run(cluster_process(Path(rest[0])))
    else:
        parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--seconds", type=float, default=10.0, help="per window")
        parser.add_argument("--connections", type=int, default=32)
        parser.add_argument("--rounds", type=int, default=3, help="windows per server, interleaved")
        parser.add_argument(
            "--warm-seconds", type=float, default=2.0, help="once per server; 0: no warm-up"
        )
        parser.add_argument(
            "--auth", choices=AUTH_MODES, default="token", help="our server's token checks"
        )
        parser.add_argument(
            "--profile",
            action="store_true",
            help="sample each server in round 1 with py-spy and print its CPU per post by layer",
        )
        parser.add_argument(
            "--floor",
            action="store_true",
            help="also measure the bare handler's work with no web framework (httptools on "
            "an asyncio protocol, asyncio's TLS), and print what aiohttp costs a post",
        )
        parser.add_argument(
            "--against",
            metavar="CHECKOUT",
            help="also measure the server of another checkout (e.g. a git worktree of an "
            "older commit) in the same rounds, and print its CPU per post against ours",
        )
        main(
            parse_args(parser, {"seconds": 1.0, "connections": 4, "rounds": 1, "warm_seconds": 0.0})
        )
