"""How much the development cluster takes on one core: TrainJob status writes per second
(server-side apply to /status over HTTPS keep-alive), alone and with 1,000 open watches.

The cluster runs in a child process pinned to CPU 0; the load is pinned to CPU 1. The
writes come from wrk (``--load wrk``, the default: one thread, keep-alive connections, a
Lua script written into the run's temporary directory that sends every write a status it
has not had before) or from an aiohttp client in this process (``--load aiohttp``). The
watches are aiohttp streams of this process either way. Every write is checked to have
changed its object: the store's resourceVersion moves once per stored change. With the
watches open, each round of writes to the watched jobs is followed by a round of the same
writes to as many jobs no watch selects: the difference in CPU per write, over the events
a write caused, is the CPU each delivered watch event adds (the alone rounds are minutes
away, and the machine drifts in between). At the end, the machine's floor under that
figure: the CPU of one loopback TCP send of an event's size.
Each phase (no watches, then the watches open) is measured ``--rounds`` times, and the
ratios to the goal (2,000 writes/s with 1,000 watches open, on one core) are given for the
median round and the range. The machines these run on are virtual and their speed drifts
by a fifth from hour to hour, so every round also gives the share of CPU 0 the host took
back (steal time) while it ran. Prints figures; asserts nothing. Needs ``wrk`` and
``taskset``. Usage:

    .venv/bin/python bench/devcluster_bench.py [--seconds 10] [--rounds 3]
        [--load wrk|aiohttp] [--connections 32] [--watches 1000] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import resource
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from _harness import LOAD_CPU, SERVER_CPU, cpu_seconds, loadavg, parse_args, parse_wrk, pin

TJ = "/apis/trainer.kubeflow.org/v1alpha1"
NS = "bench"
JOBS = 200
# The jobs the writes go to: the TrainJob watches select these by name...
WATCHED = "job-"
# ...and none of these, which take the same writes with the watches open and no events.
QUIET = "quiet-"
GOAL_WRITES_PER_S = 2_000  # with 1,000 watches open, on one core


def start_cluster(workdir: Path) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    kubeconfig = workdir / "kubeconfig"
    command = [
        "taskset", "-c", str(SERVER_CPU),
        sys.executable, "-m", "trainjob_devcluster.harness.cli", "serve",
        "--port", "0", "--kubeconfig-out", str(kubeconfig),
    ]  # fmt: skip
    proc = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    for _ in range(200):
        if kubeconfig.exists():
            return proc, yaml.safe_load(kubeconfig.read_text())
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("the devcluster did not start")


class Client:
    def __init__(self, config: dict[str, Any], connections: int) -> None:
        cluster = config["clusters"][0]["cluster"]
        self.url = cluster["server"]
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        self.ssl = ssl.create_default_context(cadata=ca)
        self.headers = {"Authorization": f"Bearer {config['users'][0]['user']['token']}"}
        self.connections = connections
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Client:
        connector = aiohttp.TCPConnector(ssl=self.ssl, limit=self.connections)
        self.session = aiohttp.ClientSession(connector=connector, headers=self.headers)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.session is not None
        await self.session.close()

    async def call(self, method: str, path: str, body: Any, content_type: str) -> int:
        assert self.session is not None
        data = json.dumps(body).encode()
        async with self.session.request(
            method, self.url + path, data=data, headers={"Content-Type": content_type}
        ) as response:
            await response.read()
            return response.status

    async def resource_version(self) -> int:
        """The store's resourceVersion: it moves once per stored change."""
        assert self.session is not None
        async with self.session.get(f"{self.url}{TJ}/namespaces/{NS}/trainjobs?limit=1") as r:
            return int((await r.json())["metadata"]["resourceVersion"])


@dataclass
class Load:
    """One run of the write load."""

    seconds: float
    completed: int  # answers received
    non2xx: int
    p50_ms: float
    p99_ms: float
    load_cpu: float  # CPU seconds of the load generator
    errors: dict[str, int] = field(default_factory=dict)  # socket errors (wrk)
    codes: dict[int, int] = field(default_factory=dict)  # answers by code (aiohttp)

    @property
    def accepted(self) -> int:
        return self.completed - self.non2xx

    @property
    def writes_per_s(self) -> float:
        return self.accepted / self.seconds

    def answers(self) -> str:
        parts = [f"{self.accepted} 2xx", f"{self.non2xx} non-2xx"]
        if self.codes:
            parts.append(f"by code {dict(sorted(self.codes.items()))}")
        if any(self.errors.values()):
            parts.append(f"socket errors {self.errors}")
        return ", ".join(parts)


# -- the write load: aiohttp --------------------------------------------------------------


def status_body(name: str, pp: int) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": NS},
        "status": {
            "trainerStatus": {
                "progressPercentage": pp % 101,
                "estimatedRemainingSeconds": pp,
                "metrics": [{"name": f"m{i}", "value": str(pp * 0.001 + i)} for i in range(5)],
                "lastUpdatedTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        },
    }


class AiohttpWrites:
    """Closed-loop writers in this process; ``counter`` makes every status a new one."""

    def __init__(self, client: Client, writers: int) -> None:
        self.client = client
        self.writers = writers
        self.counter = 0

    async def run(self, seconds: float, prefix: str = WATCHED) -> Load:
        latencies: list[float] = []
        codes: dict[int, int] = {}
        deadline = time.monotonic() + seconds

        async def writer() -> None:
            while time.monotonic() < deadline:
                self.counter += 1
                name = f"{prefix}{self.counter % JOBS}"
                path = f"{TJ}/namespaces/{NS}/trainjobs/{name}/status?fieldManager=bench&force=true"
                body = status_body(name, self.counter)
                start = time.perf_counter()
                code = await self.client.call("PATCH", path, body, "application/apply-patch+yaml")
                latencies.append(time.perf_counter() - start)
                codes[code] = codes.get(code, 0) + 1

        cpu_before = time.process_time()
        started = time.monotonic()
        await asyncio.gather(*(writer() for _ in range(self.writers)))
        elapsed = time.monotonic() - started
        latencies.sort()
        return Load(
            seconds=elapsed,
            completed=len(latencies),
            non2xx=sum(n for code, n in codes.items() if not 200 <= code < 300),
            p50_ms=1000 * statistics.median(latencies),
            p99_ms=1000 * latencies[int(len(latencies) * 0.99)],
            load_cpu=time.process_time() - cpu_before,
            codes=codes,
        )


# -- the write load: wrk ------------------------------------------------------------------

LUA = """-- generated by bench/devcluster_bench.py
-- Server-side apply of a TrainJob status to /status, round robin over the jobs; the
-- request counter is in every status, so each write changes its object.
local jobs, n, prefix = @JOBS@, @START@, "@NAMES@"
local headers = {["Authorization"] = "Bearer @TOKEN@",
                 ["Content-Type"] = "application/apply-patch+yaml"}
local second, stamp = -1, ""

function request()
  n = n + 1
  local name = prefix .. (n % jobs)
  local now = os.time()
  if now ~= second then second, stamp = now, os.date("!%Y-%m-%dT%H:%M:%SZ", now) end
  local metrics = {}
  for i = 0, 4 do
    metrics[i + 1] = string.format('{"name":"m%d","value":"%d.%03d"}',
                                   i, i + math.floor(n / 1000), n % 1000)
  end
  local body = string.format(
    '{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob",' ..
    '"metadata":{"name":"%s","namespace":"@NS@"},"status":{"trainerStatus":{' ..
    '"progressPercentage":%d,"estimatedRemainingSeconds":%d,"metrics":[%s],' ..
    '"lastUpdatedTime":"%s"}}}',
    name, n % 101, n, table.concat(metrics, ","), stamp)
  return wrk.format("PATCH", "@PREFIX@" .. name .. "/status?fieldManager=bench&force=true",
                    headers, body)
end
"""


def lua_script(token: str, start: int, prefix: str = WATCHED) -> str:
    values = {
        "@JOBS@": str(JOBS),
        "@START@": str(start),
        "@NAMES@": prefix,
        "@TOKEN@": token,
        "@NS@": NS,
        "@PREFIX@": f"{TJ}/namespaces/{NS}/trainjobs/",
    }
    script = LUA
    for key, value in values.items():
        script = script.replace(key, value)
    return script


class WrkWrites:
    """wrk (one thread) on the load CPU; each run gets a script whose counter starts past
    the previous run's, so no status repeats."""

    def __init__(self, config: dict[str, Any], workdir: Path, connections: int) -> None:
        self.url = config["clusters"][0]["cluster"]["server"]
        self.token = config["users"][0]["user"]["token"]
        self.workdir = workdir
        self.connections = connections
        self.runs = 0

    async def run(self, seconds: float, prefix: str = WATCHED) -> Load:
        self.runs += 1
        script = self.workdir / f"writes-{self.runs}.lua"
        script.write_text(lua_script(self.token, self.runs * 100_000_000, prefix))
        command = [
            "taskset", "-c", str(LOAD_CPU), "wrk", "--latency", "-t", "1",
            "-c", str(self.connections), "-d", f"{max(1, round(seconds))}s",
            "--timeout", "30s", "-s", str(script), self.url,
        ]  # fmt: skip
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await proc.communicate()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise SystemExit(f"wrk failed ({proc.returncode}): {err.decode()}")
        result = parse_wrk(out.decode())
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return Load(
            seconds=result.seconds,
            completed=result.completed,
            non2xx=result.non2xx,
            p50_ms=result.p50_ms,
            p99_ms=result.p99_ms,
            load_cpu=cpu,
            errors=result.errors,
        )


# -- watches ------------------------------------------------------------------------------


async def open_watches(
    client: Client, count: int, received: list[int], all_open: asyncio.Event
) -> list[asyncio.Task[None]]:
    """``count`` watches: half on TrainJobs (each with its own name selector, as per-job
    watchers do), half on pods in namespaces of their own (like many informers).
    ``all_open`` is set once every watch's response has begun (the server serves it)."""
    assert client.session is not None
    session = client.session
    opened = [0]
    if count == 0:
        all_open.set()

    async def watch(path: str) -> None:
        async with session.get(client.url + path, timeout=aiohttp.ClientTimeout(total=None)) as r:
            opened[0] += 1
            if opened[0] == count:
                all_open.set()
            async for _line in r.content:
                received[0] += 1

    tasks = []
    for i in range(count):
        if i % 2 == 0:
            # Every job is watched (2 or 3 times), so each write has watchers to reach
            # whichever jobs the writers happen to pick.
            path = f"{TJ}/namespaces/{NS}/trainjobs?watch=true&fieldSelector=metadata.name%3D{WATCHED}{i // 2 % JOBS}&resourceVersion=0"
        else:
            path = f"/api/v1/namespaces/{NS}/pods?watch=true&labelSelector=app%3Dw{i}&resourceVersion=0"
        tasks.append(asyncio.create_task(watch(path)))
    return tasks


def watchers_per_job(watches: int) -> list[int]:
    """How many of the TrainJob watches select each job."""
    counts = [0] * JOBS
    for i in range(0, watches, 2):
        counts[i // 2 % JOBS] += 1
    return counts


# -- figures ------------------------------------------------------------------------------


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident set (VmHWM), read while it still runs."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def steal_ticks(cpu: int) -> int:
    """Clock ticks the hypervisor has kept ``cpu`` from running so far (/proc/stat)."""
    with open("/proc/stat") as handle:
        for line in handle:
            if line.startswith(f"cpu{cpu} "):
                return int(line.split()[8])
    return 0


@dataclass
class Measured:
    load: Load
    server_cpu: float  # cores
    stored: int  # changes stored (resourceVersions used)
    steal: float  # share of the server's CPU the host took while the load ran


async def measure(
    writes: AiohttpWrites | WrkWrites,
    probe: Client,
    pid: int,
    seconds: float,
    prefix: str = WATCHED,
) -> Measured:
    rv_before = await probe.resource_version()
    before = cpu_seconds(pid)
    stolen = steal_ticks(SERVER_CPU)
    started = time.monotonic()
    load = await writes.run(seconds, prefix)
    elapsed = time.monotonic() - started
    server_cpu = (cpu_seconds(pid) - before) / elapsed
    steal = (steal_ticks(SERVER_CPU) - stolen) / os.sysconf("SC_CLK_TCK") / elapsed
    stored = await probe.resource_version() - rv_before
    return Measured(load, server_cpu, stored, steal)


def median_round(rounds: list[Measured]) -> Measured:
    """The round with the median write rate (the lower middle one of an even number)."""
    ranked = sorted(rounds, key=lambda m: m.load.writes_per_s)
    return ranked[(len(ranked) - 1) // 2]


def rates(rounds: list[Measured]) -> str:
    return ", ".join(f"{m.load.writes_per_s:.0f}" for m in rounds)


def cpu_per_write_us(m: Measured) -> float:
    """The devcluster's CPU time per accepted write: the figure to trust when other work
    shares the machine (a fully busy core does 1e6 / this many writes a second)."""
    return m.server_cpu / max(m.load.writes_per_s, 1e-9) * 1e6


def report(label: str, m: Measured, connections: int) -> None:
    load = m.load
    print(
        f"status writes, {label}: {load.writes_per_s:.0f}/s "
        f"(p50 {load.p50_ms:.1f} ms, p99 {load.p99_ms:.1f} ms), "
        f"devcluster CPU {m.server_cpu:.2f} cores ({cpu_per_write_us(m):.0f} us per write), "
        f"load generator CPU {load.load_cpu / load.seconds:.2f} cores, "
        f"host steal on CPU {SERVER_CPU} {100 * m.steal:.0f}%"
    )
    # Writes still in flight when the load stops are stored but not counted by the load.
    in_flight = m.stored - load.accepted
    verdict = "one per accepted write" if 0 <= in_flight <= connections else "NOT one per write"
    print(
        f"  answers: {load.answers()}; changes stored: {m.stored} ({verdict}, "
        f"{in_flight} of them by writes in flight at the end)"
    )


# -- the machine ---------------------------------------------------------------------------


def loopback_send_us(connections: int = 20, sends: int = 20_000, size: int = 1500) -> float:
    """CPU microseconds one ``size``-byte send costs on a loopback TCP connection whose
    reader is on the load CPU: the floor under every watch event the cluster writes (the
    kernel delivers to the reader within the sender's system call)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    pairs = []
    for _ in range(connections):
        client = socket.create_connection(("127.0.0.1", port))
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        server, _ = listener.accept()
        pairs.append((client, server))
    listener.close()

    def read(sock: socket.socket) -> None:
        pin(LOAD_CPU)
        while sock.recv(65536):
            pass

    readers = [threading.Thread(target=read, args=(s,), daemon=True) for _, s in pairs]
    for reader in readers:
        reader.start()
    result: list[float] = []

    def send() -> None:
        pin(SERVER_CPU)
        data = b"x" * size
        started = time.thread_time()
        for k in range(sends):
            pairs[k % connections][0].sendall(data)
            if k % 50 == 0:
                time.sleep(0.0005)  # let the readers keep up, as watch clients do
        result.append((time.thread_time() - started) / sends * 1e6)

    sender = threading.Thread(target=send)
    sender.start()
    sender.join()
    for client, _ in pairs:
        client.close()  # each reader then sees the end and returns
    for reader in readers:
        reader.join(5)
    for _, server in pairs:
        server.close()
    return result[0]


# -- the run ------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> None:
    if args.load == "wrk" and shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    pin(LOAD_CPU)
    print(f"load average before: {loadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        proc, config = start_cluster(Path(tmp))
        try:
            await run(args, config, proc.pid, Path(tmp))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
    print(f"load average after: {loadavg()}")
    print(
        f"this machine: one 1,500-byte loopback TCP send costs {loopback_send_us():.0f} us of "
        f"CPU on CPU {SERVER_CPU} (the floor under each watch event written)"
    )


async def run(args: argparse.Namespace, config: dict[str, Any], pid: int, workdir: Path) -> None:
    async with Client(config, args.connections) as client:
        await client.call(
            "POST", "/api/v1/namespaces", {"metadata": {"name": NS}}, "application/json"
        )
        for prefix in (WATCHED, QUIET):
            for i in range(JOBS):
                body = {
                    "metadata": {"name": f"{prefix}{i}"},
                    "spec": {"runtimeRef": {"name": "rt"}},
                }
                path = f"{TJ}/namespaces/{NS}/trainjobs"
                await client.call("POST", path, body, "application/json")
        writes: AiohttpWrites | WrkWrites
        if args.load == "wrk":
            writes = WrkWrites(config, workdir, args.connections)
        else:
            writes = AiohttpWrites(client, args.connections)
        await writes.run(min(2.0, args.seconds))  # warm-up
        alone_rounds = []
        for r in range(args.rounds):
            alone_rounds.append(await measure(writes, client, pid, args.seconds))
            report(f"no watches, round {r + 1}", alone_rounds[-1], args.connections)
        alone = median_round(alone_rounds)

        received = [0]
        all_open = asyncio.Event()
        async with Client(config, args.watches + 10) as watchers:
            tasks = await open_watches(watchers, args.watches, received, all_open)
            # Measure with every watch open, not while TLS handshakes still compete for the
            # server's core (1,000 of them take a few seconds of it).
            started = time.monotonic()
            try:
                await asyncio.wait_for(all_open.wait(), 60)
            except TimeoutError:
                print("not every watch opened within 60 s")
            print(f"watches opening took {time.monotonic() - started:.1f} s")
            await asyncio.sleep(1)
            open_before = sum(not t.done() for t in tasks)
            per_job = watchers_per_job(args.watches)
            loaded_rounds = []
            per_event: list[float] = []
            for r in range(args.rounds):
                received[0] = 0
                watch_cpu = time.process_time()
                loaded_rounds.append(await measure(writes, client, pid, args.seconds))
                loaded = loaded_rounds[-1]
                watch_cpu = time.process_time() - watch_cpu
                await asyncio.sleep(0.5)  # the last events on their way
                events = received[0]
                report(f"{args.watches} watches open, round {r + 1}", loaded, args.connections)
                expected = loaded.stored * sum(per_job) / JOBS
                print(
                    f"  watch events delivered: {events} (about {expected:.0f} "
                    f"expected: {sum(per_job)} TrainJob watches over {JOBS} jobs), "
                    f"watch client CPU {watch_cpu / loaded.load.seconds:.2f} cores"
                    + (" (with the writers)" if args.load == "aiohttp" else "")
                )
                # The same writes to jobs no watch selects, right after: what the events
                # cost is the difference, measured minutes closer than the alone rounds.
                received[0] = 0
                quiet = await measure(writes, client, pid, args.seconds, QUIET)
                await asyncio.sleep(0.5)
                report(
                    f"{args.watches} watches open, writes to unwatched jobs, round {r + 1}",
                    quiet,
                    args.connections,
                )
                print(f"  watch events delivered: {received[0]} (0 expected)")
                if events:
                    extra = cpu_per_write_us(loaded) - cpu_per_write_us(quiet)
                    per_event.append(extra / (events / max(loaded.load.accepted, 1)))
                    print(
                        f"  CPU per delivered watch event: {per_event[-1]:.0f} us "
                        f"({events / max(loaded.load.accepted, 1):.2f} events per write)"
                    )
            open_after = sum(not t.done() for t in tasks)
            print(f"watches open before/after the load: {open_before}/{open_after}")
            loaded = median_round(loaded_rounds)
            print(
                f"median rounds: alone {alone.load.writes_per_s:.0f}/s "
                f"({cpu_per_write_us(alone):.0f} us per write), with the watches "
                f"{loaded.load.writes_per_s:.0f}/s ({cpu_per_write_us(loaded):.0f} us per "
                f"write); ratio with/without watches "
                f"{loaded.load.writes_per_s / alone.load.writes_per_s:.2f}"
            )
            if per_event:
                print(
                    f"CPU per delivered watch event: median {statistics.median(per_event):.0f} "
                    f"us (rounds: {', '.join(f'{e:.0f}' for e in per_event)}; each from a "
                    f"round of writes to watched jobs and the next to unwatched ones)"
                )
            goal = GOAL_WRITES_PER_S
            print(
                f"against the goal of {goal:,} writes/s: alone "
                f"{alone.load.writes_per_s / goal:.2f} (rounds: {rates(alone_rounds)}/s), "
                f"with the watches {loaded.load.writes_per_s / goal:.2f} "
                f"(rounds: {rates(loaded_rounds)}/s)"
            )
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    peak = peak_rss_kib(pid)
    print(
        f"load ({args.load}, {args.connections} connections) on CPU {LOAD_CPU}; devcluster on "
        f"CPU {SERVER_CPU} (its peak RSS {peak / 1024:.0f} MiB)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each round")
    parser.add_argument(
        "--rounds", type=int, default=3, help="measurements of each phase (median reported)"
    )
    parser.add_argument("--load", choices=("wrk", "aiohttp"), default="wrk")
    parser.add_argument(
        "--connections", "--writers", type=int, default=32, help="keep-alive write connections"
    )
    parser.add_argument("--watches", type=int, default=1000)
    arguments = parse_args(parser, {"seconds": 1.0, "rounds": 1, "connections": 4, "watches": 20})
    if arguments.rounds < 1:
        parser.error("--rounds must be at least 1")
    asyncio.run(main(arguments))
