"""What one tenant can do to another: two red-team scenarios, each against this checkout's
server and, with ``--against CHECKOUT``, another checkout's, in the same run.

``forged``: forged tokens drain a victim's rate limit. The server in ``--token-review``
mode with a per-service-account rate (``--sa-rate-limit``, ``--sa-rate-burst``: 5/s,
burst 10 by default, which the victim's one post a second fits and a flood does not),
its API budgets at their defaults. The victim is a pod of TrainJob ``victim/job`` (made
as the controllers make one) with a real projected token, posting every ``--interval``
seconds through HTTPS from 127.0.0.1; its first post, before the attack, has its token
reviewed and cached, as a pod that has been running has. The attacker, one address
(127.0.9.1) in a child process, sends posts to the same TrainJob as fast as it can on
``--connections`` keep-alive connections: every token distinct, the victim's claims
(issuer, audience, service account, namespace, pod and its uid) with a new ``jti`` and
a signature the issuer never made. Printed: the attacker's posts/s and answers by code,
the TokenReviews the server asked the development cluster for during the attack, and
the victim's posts during the attack by answer.

``share``: no share per tenant. Writes at ``--kube-api-qps`` (5, burst 10,
``--min-write-interval`` 1 s: the defaults). Namespace ``tenant-a`` has ``--trainjobs``
TrainJobs (100), each posting every 1-5 s (its own interval), its progress changing on
every post, so all of them stay dirty; after ``--warmup`` seconds the one TrainJob of
namespace ``tenant-b`` posts ``--b-posts`` times (3), each ``--gap`` seconds after the
last became visible. Updates go straight to the server's writer (``writer.submit``, what
a post that passed its checks does: the writer is under test, not the request path).
The development cluster's store is polled every 10 ms for B's status. Printed: each B
update's delay to visible, their p50 and max, and the status writes A got meanwhile.

Each scenario runs in a child process of its own (the development cluster and the
server in it; the other checkout's ``client``, ``server`` and ``devcluster`` first on
``PYTHONPATH``), ``--rounds`` times, the servers' order reversed every other round.
Server options a checkout does not have are left out, and the line says so. Asserts
nothing. Usage:

    .venv/bin/python bench/tenants.py [--scenarios forged,share] [--seconds 30]
        [--connections 64] [--interval 1] [--sa-rate-limit 5] [--sa-rate-burst 10]
        [--trainjobs 100] [--kube-api-qps 5] [--kube-api-burst 10] [--warmup 25]
        [--b-posts 3] [--gap 3] [--cap 60] [--against CHECKOUT] [--rounds 1] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime as dt
import json
import math
import os
import random
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from _harness import loadavg, parse_args, percentile

BENCH = Path(__file__).resolve()
VICTIM = "victim"
TENANT_A = "tenant-a"
TENANT_B = "tenant-b"
ATTACKER = "127.0.9.1"
VICTIM_SOURCE = "127.0.0.1"
SCENARIOS = ("forged", "share")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def known(config_type: Any, wanted: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The fields of ``wanted`` that ``config_type`` (a dataclass) has, and the names of
    those it lacks (a checkout from before them, run to compare)."""
    fields = getattr(config_type, "__dataclass_fields__", {})
    return (
        {k: v for k, v in wanted.items() if k in fields},
        [k for k in wanted if k not in fields],
    )


# -- the attacker (a child of the forged scenario's process) -------------------------------


class Forger:
    """Distinct tokens carrying one set of claims: a new ``jti`` each, and 256 random
    bytes where an RS256 signature goes."""

    def __init__(self, header: str, claims: dict[str, Any]) -> None:
        self.header = header
        self.claims = dict(claims)
        self.serial = 0

    def next(self) -> str:
        self.serial += 1
        self.claims["jti"] = f"forged-{self.serial}-{os.urandom(6).hex()}"
        payload = b64url(json.dumps(self.claims, separators=(",", ":")).encode())
        return f"{self.header}.{payload}.{b64url(os.urandom(256))}"


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """One HTTP/1.1 answer: its code, and whether the server closes the connection."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    status_line, *lines = head.split("\r\n")
    headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(":") for line in lines if line)
    }
    await reader.readexactly(int(headers.get("content-length", "0")))
    return int(status_line.split()[1]), headers.get("connection", "").lower() == "close"


async def forge_on(
    target: dict[str, Any], tls: ssl.SSLContext, forger: Forger, until: float, codes: Counter[int]
) -> None:
    """One connection's posts, back to back, reopened whenever the server closes it."""
    body = b'{"trainerStatus": {"progressPercentage": 50}}'
    head = (
        f"POST {target['path']} HTTP/1.1\r\nHost: localhost\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    )
    while time.monotonic() < until:
        writer: asyncio.StreamWriter | None = None
        try:
            reader, writer = await asyncio.open_connection(
                target["host"],
                target["port"],
                ssl=tls,
                server_hostname="localhost",
                local_addr=(target["source"], 0),
            )
            while time.monotonic() < until:
                writer.write(f"{head}Authorization: Bearer {forger.next()}\r\n\r\n".encode() + body)
                code, closing = await read_answer(reader)
                codes[code] += 1
                if closing:
                    break
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError, ValueError):
            codes[0] += 1
            await asyncio.sleep(0.01)
        finally:
            if writer is not None:
                writer.close()


async def attack(target: dict[str, Any]) -> None:
    tls = ssl.create_default_context(cafile=target["cafile"])
    forger = Forger(target["header"], target["claims"])
    codes: Counter[int] = Counter()
    started = time.monotonic()
    until = started + target["seconds"]
    await asyncio.gather(
        *(forge_on(target, tls, forger, until, codes) for _ in range(target["connections"]))
    )
    elapsed = time.monotonic() - started
    print(json.dumps({"seconds": elapsed, "codes": dict(sorted(codes.items()))}), flush=True)


# -- scenario 1: forged tokens drain a victim's rate limit ---------------------------------


async def victim_post(session: aiohttp.ClientSession, url: str, token: str, progress: int) -> int:
    """One of the victim's posts: the answer's code, 0 for none within 10 s."""
    body = json.dumps({"trainerStatus": {"progressPercentage": progress}}).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    try:
        async with asyncio.timeout(10):
            async with session.post(url, data=body, headers=headers) as answer:
                await answer.read()
                return int(answer.status)
    except (OSError, TimeoutError, aiohttp.ClientError):
        return 0


async def forged(args: argparse.Namespace) -> dict[str, Any]:
    # Imported here: the parent process may run another checkout's packages in children.
    from trainjob_devcluster import DevCluster
    from trainjob_devcluster.harness.testing import ServingCerts, server_config
    from trainjob_status.contract import audience, status_path
    from trainjob_status_server.app import StatusServer
    from trainjob_status_server.auth import AuthSettings, TokenAuthenticator
    from trainjob_status_server.config import Config

    with tempfile.TemporaryDirectory() as tmp:
        certs = ServingCerts.create(Path(tmp))
        async with DevCluster() as cluster:
            cluster.create_trainjob(VICTIM, "job")
            pod = "job-node-0-0"
            cluster.create_trainjob_pod(VICTIM, "job", pod, service_account="trainer")
            token = cluster.request_token(VICTIM, "trainer", [audience(VICTIM, "job")], pod=pod)
            defaults = Config()
            # server_config lifts the API budgets for tests: the defaults here.
            fields, lacking = known(
                Config,
                {
                    "token_review": True,
                    "sa_rate_limit": args.sa_rate_limit,
                    "sa_rate_burst": args.sa_rate_burst,
                    "kube_api_qps": defaults.kube_api_qps,
                    "kube_api_burst": defaults.kube_api_burst,
                    "kube_metrics_qps": defaults.kube_metrics_qps,
                    "kube_metrics_burst": defaults.kube_metrics_burst,
                    "min_write_interval": defaults.min_write_interval,
                },
            )
            config = server_config(cluster.kubeconfig_path, certs, **fields)
            rate, lacking_too = known(
                AuthSettings,
                {"sa_rate_limit": args.sa_rate_limit, "sa_rate_burst": args.sa_rate_burst},
            )
            lacking += [f"AuthSettings.{name}" for name in lacking_too]
            settings = AuthSettings(
                issuer=cluster.issuer, own_token_path=None, token_review=True, **rate
            )
            auth = TokenAuthenticator(settings)
            async with StatusServer(config, auth) as server:
                async with asyncio.timeout(30):
                    await auth.wait_ready()
                url = server.url + status_path(VICTIM, "job")
                connector = aiohttp.TCPConnector(
                    ssl=certs.client_context(), local_addr=(VICTIM_SOURCE, 0)
                )
                async with aiohttp.ClientSession(connector=connector) as session:
                    # The victim's token reviewed once and cached, before the attack.
                    deadline = time.monotonic() + 30
                    while await victim_post(session, url, token, 0) != 200:
                        if time.monotonic() > deadline:
                            raise SystemExit("the victim's first post was never answered 200")
                        await asyncio.sleep(0.2)
                    await asyncio.sleep(1.0)  # its bucket full again
                    result = await under_attack(args, cluster, server, session, url, token, certs)
    result["lacking"] = lacking
    return result


async def under_attack(
    args: argparse.Namespace,
    cluster: Any,
    server: Any,
    session: aiohttp.ClientSession,
    url: str,
    token: str,
    certs: Any,
) -> dict[str, Any]:
    header, payload, _ = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    host, port = server.url.removeprefix("https://").rsplit(":", 1)
    lead = 1.0  # the attack under way before the victim's first post of the window
    target = {
        "host": host,
        "port": int(port),
        "source": ATTACKER,
        "path": url.removeprefix(server.url),
        "cafile": str(certs.ca_file),
        "header": header,
        "claims": claims,
        "connections": args.connections,
        "seconds": lead + args.seconds + 0.5,
    }
    reviews = cluster.faults.count("create", "tokenreviews")
    attacker = await asyncio.create_subprocess_exec(
        sys.executable,
        str(BENCH),
        "--attacker",
        stdout=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.PIPE,
    )
    assert attacker.stdin is not None
    assert attacker.stdout is not None
    attacker.stdin.write(json.dumps(target).encode())
    attacker.stdin.close()
    try:
        await asyncio.sleep(lead)
        codes: list[int] = []
        start = time.monotonic()
        posts = max(1, round(args.seconds / args.interval))
        for k in range(posts):
            await asyncio.sleep(max(0.0, start + k * args.interval - time.monotonic()))
            codes.append(await victim_post(session, url, token, 1 + k % 99))
        out = await attacker.stdout.read()
        await attacker.wait()
    finally:
        if attacker.returncode is None:
            attacker.kill()
            await attacker.wait()
    flood = json.loads(out.decode().strip().splitlines()[-1])
    return {
        "attacker_seconds": flood["seconds"],
        "attacker_codes": flood["codes"],
        "reviews": cluster.faults.count("create", "tokenreviews") - reviews,
        "victim_codes": codes,
    }


# -- scenario 2: no share per tenant --------------------------------------------------------


class Tenants:
    """Namespace A's TrainJobs and namespace B's one, their updates submitted to the
    server's writer as a post that passed its checks submits them."""

    def __init__(self, cluster: Any, writer: Any, names: list[str]) -> None:
        # Imported here: the parent process may run another checkout's packages in children.
        from trainjob_status_server.status.validation import parse_trainer_status

        self.parse = parse_trainer_status
        self.cluster = cluster
        self.writer = writer
        self.names = names
        self.rng = random.Random(1)
        self.stop = asyncio.Event()

    def submit(self, namespace: str, name: str, progress: int) -> None:
        wall = dt.datetime.now(dt.UTC)
        body = {
            "progressPercentage": progress,
            "metrics": [{"name": "loss", "value": f"{self.rng.random():.4f}"}],
            "lastUpdatedTime": wall.isoformat(),
        }
        parsed = self.parse({"trainerStatus": body}, trainjob=name, received=wall)
        assert parsed is not None
        self.writer.submit((namespace, name), parsed.encoded(wall))

    def writes(self) -> int:
        return int(self.cluster.faults.count("patch", "trainjobs/status"))

    async def post_a(self) -> None:
        """Every A TrainJob posts at an interval of its own, 1-5 s, its progress moving
        by one every post (never 100), until ``stop``."""
        start = time.monotonic()
        every = {n: self.rng.uniform(1.0, 5.0) for n in self.names}
        due = {n: start + self.rng.uniform(0, every[n]) for n in self.names}
        step = dict.fromkeys(self.names, 0)
        while not self.stop.is_set():
            now = time.monotonic()
            for name in self.names:
                if due[name] <= now:
                    step[name] += 1
                    self.submit(TENANT_A, name, 1 + step[name] % 99)
                    due[name] += every[name]
            await asyncio.sleep(0.02)

    async def post_b(self, progress: int, cap: float) -> tuple[float, int]:
        """B's post of ``progress``: seconds until its status shows it (inf after
        ``cap``), and the status writes made meanwhile that were not B's."""
        from trainjob_status.contract import GROUP, RESOURCE

        writes = self.writes()
        sent = time.monotonic()
        self.submit(TENANT_B, "b", progress)
        while time.monotonic() - sent < cap:
            # The store itself, every 10 ms: what a client outside the server would see.
            obj = self.cluster.get(RESOURCE, TENANT_B, "b", GROUP) or {}
            trainer = (obj.get("status") or {}).get("trainerStatus") or {}
            if trainer.get("progressPercentage") == progress:
                return time.monotonic() - sent, self.writes() - writes - 1
            await asyncio.sleep(0.01)
        return math.inf, self.writes() - writes


async def share(args: argparse.Namespace) -> dict[str, Any]:
    from trainjob_devcluster import DevCluster
    from trainjob_devcluster.harness.testing import ServingCerts, running_server, server_config
    from trainjob_status_server.config import Config

    names = [f"a-{i:03d}" for i in range(args.trainjobs)]
    with tempfile.TemporaryDirectory() as tmp:
        certs = ServingCerts.create(Path(tmp))
        async with DevCluster() as cluster:
            for name in names:
                cluster.create_trainjob(TENANT_A, name)
            cluster.create_trainjob(TENANT_B, "b")
            fields, lacking = known(
                Config,
                {
                    "kube_api_qps": args.kube_api_qps,
                    "kube_api_burst": args.kube_api_burst,
                    "min_write_interval": Config().min_write_interval,
                    "kube_api_timeout": 5.0,
                    "drain_timeout": 0.0,  # what A left dirty at the end is not measured
                },
            )
            config = server_config(cluster.kubeconfig_path, certs, **fields)
            async with running_server(config) as server:
                tenants = Tenants(cluster, server.writer, names)
                posting = asyncio.create_task(tenants.post_a())
                try:
                    await asyncio.sleep(args.warmup)
                    started, writes = time.monotonic(), tenants.writes()
                    waits = []
                    for k in range(args.b_posts):
                        if k:
                            await asyncio.sleep(args.gap)
                        waits.append(await tenants.post_b(10 * (k + 1), args.cap))
                    writes_per_s = (tenants.writes() - writes) / (time.monotonic() - started)
                finally:
                    tenants.stop.set()
                    await posting
    return {
        "delays": [delay for delay, _ in waits],
        "a_writes": [others for _, others in waits],
        "writes_per_s": writes_per_s,
        "lacking": lacking,
    }


# -- the parent: scenarios, servers, the lines ----------------------------------------------


def child_args(args: argparse.Namespace) -> list[str]:
    names = (
        "seconds",
        "connections",
        "interval",
        "sa_rate_limit",
        "sa_rate_burst",
        "trainjobs",
        "kube_api_qps",
        "kube_api_burst",
        "warmup",
        "b_posts",
        "gap",
        "cap",
    )
    return [
        part for name in names for part in (f"--{name.replace('_', '-')}", str(getattr(args, name)))
    ]


def run_child(args: argparse.Namespace, scenario: str, checkout: Path | None) -> dict[str, Any]:
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            str(checkout / part) for part in ("client", "server", "devcluster")
        )
    command = [sys.executable, str(BENCH), "--child", scenario, *child_args(args)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            parsed: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return parsed
    raise SystemExit(
        f"{scenario} with {checkout or 'this checkout'} failed:\n{out.stdout}\n{out.stderr}"
    )


def by_code(codes: dict[str, int]) -> str:
    return ", ".join(f"{'error' if code == '0' else code}: {n:,}" for code, n in codes.items())


def report_forged(label: str, r: dict[str, Any]) -> str:
    attacked = sum(r["attacker_codes"].values())
    victim = Counter(r["victim_codes"])
    posts = len(r["victim_codes"])
    other = posts - victim[200] - victim[429]
    lacking = f"; lacks {', '.join(r['lacking'])}" if r["lacking"] else ""
    return (
        f"forged  {label:<16} attacker {attacked / r['attacker_seconds']:,.0f} posts/s "
        f"({by_code(r['attacker_codes'])}); TokenReviews made: {r['reviews']}; "
        f"victim's genuine posts answered 200: {victim[200]}/{posts}, 429: {victim[429]}/{posts}, "
        f"other: {other}{lacking}"
    )


def seconds(value: float) -> str:
    return "unseen" if value == math.inf else f"{value:.2f}"


def report_share(label: str, r: dict[str, Any]) -> str:
    delays = sorted(r["delays"])
    lacking = f"; lacks {', '.join(r['lacking'])}" if r["lacking"] else ""
    return (
        f"share   {label:<16} B visible after p50 {seconds(percentile(delays, 0.5))} s, "
        f"max {seconds(delays[-1])} s ({', '.join(seconds(d) for d in r['delays'])} s); "
        f"A's writes meanwhile: {', '.join(str(n) for n in r['a_writes'])}; "
        f"status writes/s {r['writes_per_s']:.2f}{lacking}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    forged_group = parser.add_argument_group("forged")
    forged_group.add_argument("--seconds", type=float, default=30.0, help="the attack's window")
    forged_group.add_argument("--connections", type=int, default=64, help="the attacker's")
    forged_group.add_argument("--interval", type=float, default=1.0, help="the victim's posts")
    forged_group.add_argument("--sa-rate-limit", type=float, default=5.0)
    forged_group.add_argument("--sa-rate-burst", type=int, default=10)
    share_group = parser.add_argument_group("share")
    share_group.add_argument("--trainjobs", type=int, default=100, help="namespace A's")
    share_group.add_argument("--kube-api-qps", type=float, default=5.0)
    share_group.add_argument("--kube-api-burst", type=int, default=10)
    share_group.add_argument("--warmup", type=float, default=25.0, help="A alone, seconds")
    share_group.add_argument("--b-posts", type=int, default=3)
    share_group.add_argument("--gap", type=float, default=3.0, help="seconds between B's posts")
    share_group.add_argument("--cap", type=float, default=60.0, help="seconds B's post is awaited")
    parser.add_argument("--against", type=Path, help="another checkout, run the same way")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="runs of every scenario, the servers' order reversed every other round",
    )
    parser.add_argument("--child", choices=SCENARIOS, help=argparse.SUPPRESS)
    args = parse_args(
        parser,
        {
            "seconds": 2.0,
            "connections": 4,
            "trainjobs": 10,
            "warmup": 1.5,
            "b_posts": 2,
            "gap": 0.2,
            "cap": 10.0,
            "rounds": 1,
        },
    )
    if args.child is not None:
        result = asyncio.run(forged(args) if args.child == "forged" else share(args))
        print("RESULT " + json.dumps(result))
        return
    scenarios = args.scenarios.split(",")
    servers: list[tuple[str, Path | None]] = [("ours", None)]
    if args.against is not None:
        servers.append((f"at {args.against.resolve().name}", args.against.resolve()))
    print(f"# load average before: {loadavg()}", flush=True)
    if "forged" in scenarios:
        print(
            f"# forged: --token-review, --sa-rate-limit {args.sa_rate_limit:g} "
            f"--sa-rate-burst {args.sa_rate_burst}; attacker {ATTACKER}, "
            f"{args.connections} keep-alive connections; victim {VICTIM_SOURCE}, a post "
            f"every {args.interval:g} s for {args.seconds:g} s",
            flush=True,
        )
    if "share" in scenarios:
        print(
            f"# share: --kube-api-qps {args.kube_api_qps:g} --kube-api-burst "
            f"{args.kube_api_burst}; A: {args.trainjobs} TrainJobs posting every 1-5 s; "
            f"B: 1 TrainJob, {args.b_posts} posts from {args.warmup:g} s in, "
            f"{args.gap:g} s apart (writer.submit)",
            flush=True,
        )
    for scenario in scenarios:
        if scenario not in SCENARIOS:
            raise SystemExit(f"unknown scenario {scenario!r}: {', '.join(SCENARIOS)}")
        for turn in range(args.rounds):
            for label, checkout in servers if turn % 2 == 0 else servers[::-1]:
                result = run_child(args, scenario, checkout)
                line = report_forged if scenario == "forged" else report_share
                print(line(label, result), flush=True)
    print(f"# load average after: {loadavg()}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--attacker"]:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(attack(json.loads(sys.stdin.read())))
        sys.exit(0)
    main()
