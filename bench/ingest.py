"""The coalescing writer end to end: accepted posts/s, latency, API writes, freshness and
memory for 1, 100 and 10,000 TrainJobs, against our own server writing once per post
at the peer's budget (the baseline), in one run.

Layout on a 2-core machine: the server under test, started as ``trainjob-status-server
serve`` builds it (real token checks against the devcluster's issuer, JSON logs at info,
every default but the flags printed), alone on CPU 0. wrk (HTTPS keep-alive, a Lua
script), the devcluster and the bench's TrainJob watcher share CPU 1, so under load the
API server, the watch that measures freshness and the load generator compete for it: a
server that is not kept busy shows as CPU below 1.0, and then CPU per post is the
figure to trust (posts/s per fully busy core = 1e6 / us per post). The same run
measures the bare aiohttp HTTPS handler of ingest_accept.py (the ceiling) first.

Every simulated pod is a real pod object (labelled ``jobset.sigs.k8s.io/jobset-name``,
a JobSet-like spec) with its own token, minted by the devcluster's TokenRequest, bound
to the pod, with the TrainJob's audience; the pods of one TrainJob share a service
account. Posts carry a typical body (progress, ETA, 8 metrics) and a unique, increasing
``lastUpdatedTime``: the wall-clock microsecond the post was sent, so coalescing is
exercised honestly and freshness can be measured.

Scenarios: 1,000 pods of 1 TrainJob, 10 pods of each of 100, 1 pod of each of 10,000.
Loads: ``saturate`` (closed loop, 32 connections, as fast as the server answers) and
``paced`` (each pod posts every 5 s, as the SDK's throttle does, over 64 connections,
more when needed to leave 100 ms between two posts of one connection). Configurations:
``ours`` (coalescing at the peer's 5 QPS / burst 10, our default); ``ours, 200 QPS``
(a budget that fits 100 TrainJobs written once a second, ``--sized-qps``);
``baseline (direct)`` (``--write-mode direct``: one write per post, answered with its
outcome, at 5 QPS / burst 10, as the peer does; its window is longer by the queue its
connections build, connections / 5 s). The per-service-account rate limit is raised out
of the way everywhere (the peer has none; its bucket is still spent on every post).

Memory: the server's RSS with 0 TrainJobs tracked, after the 1- and 100-TrainJob
scenarios and after the 10,000 (each TrainJob with its pod, token and service account,
all posted to); per open connection from 1,000 connections held open, each posting every
5 s.

Freshness is measured from outside: a watch on the TrainJobs (KubeClient, its own
process) logs when each new ``lastUpdatedTime`` becomes visible through the API; a post
sent at t is fresh once any status with ``lastUpdatedTime >= t`` is visible. Posts
superseded by newer ones count too (the status they were waiting for is visible when the
newer one is), and posts not visible when the bench stops waiting count as infinitely
late. The server's own ``trainjob_status_write_freshness_seconds`` is printed beside it
but is not the figure: it observes only the updates that won (a superseded post is never
observed), it starts when the winner was accepted (not when the oldest waiting post was)
and it stops at the API's answer, not at visibility.

Prints figures; asserts nothing. Needs ``wrk`` (apt-get install wrk) and ``taskset``.

    .venv/bin/python bench/ingest.py [--seconds 10] [--paced-seconds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import datetime as dt
import json
import math
import os
import random
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _harness import (
    LOAD_CPU,
    SERVER_CPU,
    Processes,
    Samples,
    WrkResult,
    cpu_seconds,
    free_port,
    histogram_quantile,
    loadavg,
    parse_wrk,
    percentile,
    processes,
    rss_kib,
    run_wrk,
    scrape,
    total,
    wait_file,
    wait_port,
    wrk_command,
)
from ingest_accept import BODY as CEILING_BODY  # type: ignore[import-not-found]
from ingest_accept import LUA as CEILING_LUA
from ingest_accept import PATH as CEILING_PATH
from ingest_accept import ceiling_server
from trainjob_devcluster import DevCluster
from trainjob_devcluster.pki import CertificateAuthority
from trainjob_status.contract import (
    ANCESTOR_STEP_LABEL,
    CA_CERT_ENV,
    GROUP,
    TOKEN_ENV,
    URL_ENV,
    audience,
    status_path,
)
from trainjob_status.contract import JOBSET_NAME_LABEL as MEMBERSHIP_LABEL
from trainjob_status_server.kube.cache import WatchCache
from trainjob_status_server.kube.client import KubeClient
from trainjob_status_server.kube.resources import PODS, TRAINJOBS
from trainjob_status_server.kube.store import CacheEvent

POST_INTERVAL = 5.0  # seconds between two posts of one pod (the SDK's throttle)
PEER_BUDGET = ("5", "10")  # QPS, burst
NO_SA_LIMIT = ("--sa-rate-limit", "1000000", "--sa-rate-burst", "1000000")


@dataclass(frozen=True)
class Scenario:
    name: str
    trainjobs: int
    pods: int  # per TrainJob

    @property
    def namespace(self) -> str:
        return f"bench-{self.name}"

    @property
    def total_pods(self) -> int:
        return self.trainjobs * self.pods

    @property
    def label(self) -> str:
        return f"{self.trainjobs:,} TJ x {self.pods:,} pods"


SCENARIOS = {s.name: s for s in (Scenario("1", 1, 1000), Scenario("100", 100, 10), Scenario("10k", 10_000, 1))}  # fmt: skip


# -- what the devcluster holds ------------------------------------------------------------


def trainjob_body(name: str) -> dict[str, object]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": {"team": "bench"}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": 2,
                "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
                "command": ["torchrun", "/workspace/train.py"],
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}},
            },
        },
    }


def pod_body(namespace: str, job: str, name: str, account: str, index: int) -> dict[str, object]:
    """A pod shaped like a JobSet's trainer pod with the status volume injected."""
    uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{job}/node-0"))
    env = {
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "auto",
        "PET_NODE_RANK": str(index),
        "PET_MASTER_ADDR": f"{job}-node-0-0.{job}",
        "PET_MASTER_PORT": "29400",
        URL_ENV: "https://trainjob-status.kubeflow-system.svc:10443" + status_path(namespace, job),
        CA_CERT_ENV: "/var/run/secrets/kubeflow/trainer/ca.crt",
        TOKEN_ENV: "/var/run/secrets/kubeflow/trainer/token",
    }
    return {
        "metadata": {
            "name": name,
            "labels": {
                MEMBERSHIP_LABEL: job,
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "jobset.sigs.k8s.io/job-index": "0",
                "batch.kubernetes.io/job-completion-index": str(index),
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": f"{job}-node-0",
                ANCESTOR_STEP_LABEL: "trainer",
            },
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": f"{job}-node-0",
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "serviceAccountName": account,
            "restartPolicy": "OnFailure",
            "subdomain": job,
            "containers": [
                {
                    "name": "node",
                    "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
                    "command": ["torchrun", "/workspace/train.py"],
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "ports": [{"containerPort": 29400, "protocol": "TCP"}],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    "volumeMounts": [
                        {
                            "name": "kubeflow-trainer-status",
                            "mountPath": "/var/run/secrets/kubeflow/trainer",
                            "readOnly": True,
                        }
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "kubeflow-trainer-status",
                    "projected": {
                        "sources": [
                            {
                                "serviceAccountToken": {
                                    "audience": audience(namespace, job),
                                    "expirationSeconds": 3600,
                                    "path": "token",
                                }
                            },
                            {"configMap": {"name": "trainjob-status-ca"}},
                        ]
                    },
                }
            ],
        },
    }


# -- child: the devcluster, answering commands on stdin ----------------------------------


async def cluster_process(work: Path) -> None:
    async with DevCluster() as cluster:
        (work / "issuer").write_text(cluster.issuer)
        shutil.copy(cluster.kubeconfig_path, work / "kubeconfig.tmp")
        (work / "kubeconfig.tmp").rename(work / "kubeconfig")
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            command, *rest = line.split()
            answer: object
            if command == "populate":
                answer = await populate(cluster, work, SCENARIOS[rest[0]])
            elif command == "object":  # plural group namespace name
                plural, group, namespace, name = rest
                answer = cluster.get(plural, namespace, name, group.strip("-"))
            else:  # counts
                counts = cluster.faults.counts
                answer = {f"{verb} {resource}": n for (verb, resource), n in counts.items()}
            print("@@" + json.dumps(answer), flush=True)


async def populate(cluster: DevCluster, work: Path, scenario: Scenario) -> dict[str, float]:
    """TrainJobs, service accounts, pods and one token per pod; the targets file for wrk."""
    started = time.monotonic()
    namespace = scenario.namespace
    cluster.ensure_namespace(namespace)
    lines = []
    for j in range(scenario.trainjobs):
        job = f"job-{j:05d}"
        account = f"{job}-trainer"
        cluster.create("trainjobs", trainjob_body(job), namespace, GROUP)
        cluster.create("serviceaccounts", {"metadata": {"name": account}}, namespace)
        for p in range(scenario.pods):
            pod = f"{job}-node-0-{p}"
            cluster.create("pods", pod_body(namespace, job, pod, account, p), namespace)
            token = cluster.request_token(namespace, account, [audience(namespace, job)], pod=pod)
            lines.append(f"{namespace}/{job} {status_path(namespace, job)} {token}\n")
            if len(lines) % 25 == 0:
                await asyncio.sleep(0)  # keep serving the watches meanwhile
    # wrk posts for the pods in this order, round and round: shuffled, the pods of one
    # TrainJob post at scattered moments of each 5 s round, as independent pods do (in
    # creation order they would post back to back, a burst per TrainJob per round).
    random.Random(scenario.name).shuffle(lines)
    (work / f"targets-{scenario.name}").write_text("".join(lines))
    return {"seconds": time.monotonic() - started}


# -- child: the watcher that logs when each status becomes visible ------------------------


def stamp_us(text: object) -> int | None:
    if not isinstance(text, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return (parsed - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def _lut(obj: dict[str, object] | None) -> object:
    status = (obj or {}).get("status")
    trainer = status.get("trainerStatus") if isinstance(status, dict) else None
    return trainer.get("lastUpdatedTime") if isinstance(trainer, dict) else None


async def watcher_process(work: Path) -> None:
    kube = await KubeClient(work / "kubeconfig", qps=1e6, burst=10**6, timeout=60).start()
    trainjobs = WatchCache(kube, TRAINJOBS)
    pods = WatchCache(kube, PODS, label_selector=MEMBERSHIP_LABEL)
    out = (work / "visible.log").open("a")

    def seen(event: CacheEvent) -> None:
        new = _lut(event.new)
        if new is None or new == _lut(event.old):
            return
        visible = stamp_us(new)
        if visible is not None:
            out.write(f"{event.key[0]}/{event.key[1]} {visible} {time.time_ns() // 1000}\n")

    trainjobs.add_listener(seen)
    await trainjobs.start()
    await pods.start()
    while True:
        await asyncio.sleep(0.05)
        out.flush()
        (work / "counts.tmp").write_text(f"{len(trainjobs)} {len(pods)}")
        (work / "counts.tmp").rename(work / "counts")


# -- the load: wrk with a Lua script ------------------------------------------------------

LUA = """-- generated by bench/ingest.py
local ffi = require("ffi")
ffi.cdef[[ typedef struct { long tv_sec; long tv_nsec; } bench_ts;
           int clock_gettime(int, bench_ts *); ]]
local ts = ffi.new("bench_ts")
local targets, n, i, last, sends = {}, 0, 0, 0, nil
local second, second_text = -1, ""
local head, tail = [[@HEAD@]], [[@TAIL@]]
local interval, connections, delays = @INTERVAL@, @CONNECTIONS@, 0

function init(args)
  for line in io.lines("@TARGETS@") do
    local key, path, token = line:match("^(%S+) (%S+) (%S+)$")
    n = n + 1
    targets[n] = {key, path, {["Authorization"] = "Bearer " .. token,
                              ["Content-Type"] = "application/json"}}
  end
  math.randomseed(@SEED@)
  i = math.random(n) - 1
  sends = io.open("@SENDS@", "w")
end

function request()
  i = i % n + 1
  local target = targets[i]
  ffi.C.clock_gettime(0, ts)  -- CLOCK_REALTIME: the watcher's time.time() clock
  local us = tonumber(ts.tv_sec) * 1000000 + math.floor(tonumber(ts.tv_nsec) / 1000)
  if us <= last then us = last + 1 end  -- unique and increasing
  last = us
  local s = math.floor(us / 1000000)
  if s ~= second then second, second_text = s, os.date("!%Y-%m-%dT%H:%M:%S", s) end
  sends:write(target[1], " ", string.format("%d", us), "\\n")
  local stamp = second_text .. string.format(".%06dZ", us % 1000000)
  return wrk.format("POST", target[2], target[3], head .. stamp .. tail)
end
"""
PACING = """
function delay()
  -- Each connection waits `interval` ms between posts; the first waits are spread so the
  -- connections do not post in lockstep.
  delays = delays + 1
  if delays <= connections then return math.random(0, interval) end
  return interval
end
"""


def body_parts() -> tuple[str, str]:
    body = json.dumps(
        {
            "trainerStatus": {
                "progressPercentage": 42,
                "estimatedRemainingSeconds": 3600,
                "metrics": [{"name": f"metric_{i}", "value": f"{i * 0.125:.4f}"} for i in range(8)],
                "lastUpdatedTime": "@@",
            }
        },
        separators=(",", ":"),
    )
    head, tail = body.split("@@")
    return head, tail


def lua_script(targets: Path, sends: Path, connections: int, interval_ms: int) -> str:
    head, tail = body_parts()
    values = {
        "@HEAD@": head,
        "@TAIL@": tail,
        "@INTERVAL@": str(interval_ms),
        "@CONNECTIONS@": str(connections),
        "@TARGETS@": str(targets),
        "@SENDS@": str(sends),
        "@SEED@": str(time.time_ns() % 2**31),
    }
    script = LUA + (PACING if interval_ms > 0 else "")
    for key, value in values.items():
        script = script.replace(key, value)
    return script


# -- freshness ----------------------------------------------------------------------------


@dataclass
class Visible:
    """When statuses became visible, per TrainJob: observation times (us) and the newest
    lastUpdatedTime visible at each (a running maximum, so bisect finds the first)."""

    seen_at: list[int] = field(default_factory=list)
    newest: list[int] = field(default_factory=list)


def read_visible(path: Path) -> dict[str, Visible]:
    table: dict[str, Visible] = {}
    if not path.exists():
        return table
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue  # a line being written
        key, stamp, seen_at = parts[0], int(parts[1]), int(parts[2])
        entry = table.setdefault(key, Visible())
        entry.seen_at.append(seen_at)
        entry.newest.append(max(stamp, entry.newest[-1] if entry.newest else stamp))
    return table


def freshness(sends: Path, visible: dict[str, Visible]) -> list[float]:
    """Seconds from each post's send to the first visible status at least as new, sorted;
    inf for a post never covered."""
    values = []
    for line in sends.read_text().splitlines():
        key, text = line.split()
        sent = int(text)
        entry = visible.get(key)
        index = bisect.bisect_left(entry.newest, sent) if entry else 0
        if entry and index < len(entry.newest):
            values.append((entry.seen_at[index] - sent) / 1e6)
        else:
            values.append(math.inf)
    values.sort()
    return values


# -- the driver ---------------------------------------------------------------------------


@dataclass
class Server:
    label: str
    proc: subprocess.Popen[bytes]
    port: int
    metrics_port: int
    log: Path
    coalescing: bool

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def metrics(self) -> Samples:
        return scrape(f"http://127.0.0.1:{self.metrics_port}/metrics", "trainjob_status_")


@dataclass
class Row:
    config: str
    scenario: Scenario
    load: str
    offered: float | None
    wrk: WrkResult
    cpu: float  # server cores busy
    writes: int
    other_api: int
    fresh: list[float]
    settle: float
    hist_p50: float = math.nan
    hist_p99: float = math.nan
    log_bytes: int = 0

    @property
    def posts(self) -> float:
        return self.wrk.accepted_per_s

    @property
    def cpu_us(self) -> float:
        return self.cpu * self.wrk.seconds / max(1, self.wrk.accepted) * 1e6

    @property
    def writes_per_s(self) -> float:
        return self.writes / self.wrk.seconds

    @property
    def writes_per_post(self) -> float:
        return self.writes / max(1, self.wrk.accepted)

    def fresh_at(self, q: float) -> float:
        return percentile(self.fresh, q)

    @property
    def visible_share(self) -> float:
        return sum(1 for v in self.fresh if math.isfinite(v)) / max(1, len(self.fresh))


def seconds_text(value: float, settle: float) -> str:
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return f">{settle:.0f}s"
    return f"{value:.2f}s" if value < 100 else f"{value:.0f}s"


HEADER = (
    f"{'config':<20} {'scenario':<19} {'load':<14} {'posts/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
    f"{'bad':>5} {'CPU':>5} {'us/post':>7} {'writes/s':>8} {'wr/post':>9} {'other':>6} "
    f"{'fresh p50':>9} {'fresh p99':>9} {'visible':>7} {'srv hist p50/p99':>17}"
)


def row_text(row: Row) -> str:
    load = "saturate" if row.offered is None else f"paced {row.offered:,.0f}/s"
    bad = row.wrk.non2xx + sum(row.wrk.errors.values())
    hist = (
        f"{seconds_text(row.hist_p50, row.settle)}/{seconds_text(row.hist_p99, row.settle)}"
        if not math.isnan(row.hist_p50)
        else "-"
    )
    return (
        f"{row.config:<20} {row.scenario.label:<19} {load:<14} {row.posts:>8,.0f} "
        f"{row.wrk.p50_ms:>8.1f} {row.wrk.p99_ms:>8.1f} {bad:>5} {row.cpu:>5.2f} "
        f"{row.cpu_us:>7.0f} {row.writes_per_s:>8.2f} {row.writes_per_post:>9.5f} "
        f"{row.other_api / row.wrk.seconds:>6.1f} "
        f"{seconds_text(row.fresh_at(0.5), row.settle):>9} "
        f"{seconds_text(row.fresh_at(0.99), row.settle):>9} {row.visible_share:>7.1%} {hist:>17}"
    )


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path, procs: Processes) -> None:
        self.args = args
        self.work = work
        self.procs = procs
        self.populated: list[Scenario] = []
        self.runs = 0
        self.rows: list[Row] = []
        self.cluster = procs.start(
            [sys.executable, __file__, "--cluster", str(work)],
            cpu=LOAD_CPU,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        wait_file(work / "kubeconfig")
        self.issuer = (work / "issuer").read_text()
        procs.start(
            [sys.executable, __file__, "--watcher", str(work)],
            cpu=LOAD_CPU,
            stderr=subprocess.DEVNULL,
        )
        self.client_tls = ssl.create_default_context(cafile=str(work / "ca.crt"))

    # -- the devcluster --------------------------------------------------------------

    def ask(self, command: str) -> dict[str, Any]:
        assert self.cluster.stdin is not None
        assert self.cluster.stdout is not None
        self.cluster.stdin.write(command.encode() + b"\n")
        self.cluster.stdin.flush()
        while True:
            line = self.cluster.stdout.readline()
            if not line:
                raise SystemExit("the devcluster exited")
            if line.startswith(b"@@"):
                answer: dict[str, Any] = json.loads(line[2:])
                return answer

    def writes_and_reads(self) -> tuple[int, int]:
        """PATCHes of trainjobs/status, and every GET and LIST (cache misses, relists; the
        watches themselves are not counted)."""
        counts = self.ask("counts")
        writes = int(counts.get("patch trainjobs/status", 0))
        reads = int(sum(n for key, n in counts.items() if key.startswith(("get ", "list "))))
        return writes, reads

    def populate(self, scenario: Scenario) -> None:
        took = self.ask(f"populate {scenario.name}")["seconds"]
        self.populated.append(scenario)
        want_jobs = sum(s.trainjobs for s in self.populated)
        want_pods = sum(s.total_pods for s in self.populated)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                jobs, pods = map(int, (self.work / "counts").read_text().split())
                if jobs >= want_jobs and pods >= want_pods:
                    break
            time.sleep(0.1)
        else:
            raise SystemExit("the watcher never saw the populated objects")
        time.sleep(1)  # a margin for the server's own watches
        print(
            f"# populated {scenario.label}: {scenario.trainjobs:,} TrainJobs, "
            f"{scenario.total_pods:,} pods and tokens in {took:.1f} s"
        )

    def targets(self, scenario: Scenario) -> Path:
        return self.work / f"targets-{scenario.name}"

    # -- servers ---------------------------------------------------------------------

    def start_server(self, label: str, flags: list[str], *, coalescing: bool = True) -> Server:
        port, metrics_port = free_port(), free_port()
        log = self.work / f"server-{label.split()[0].strip(',')}-{port}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINJOB_STATUS_")}
        command = [
            sys.executable, "-m", "trainjob_status_server.cli", "serve",
            "--host", "127.0.0.1", "--port", str(port), "--metrics-port", str(metrics_port),
            "--probe-port", "0",
            "--kubeconfig", str(self.work / "kubeconfig"), "--issuer", self.issuer,
            "--tls-cert-file", str(self.work / "tls.crt"),
            "--tls-key-file", str(self.work / "tls.key"), *flags,
        ]  # fmt: skip
        with log.open("wb") as sink:
            proc = self.procs.start(
                command, cpu=SERVER_CPU, env=env, stdout=subprocess.DEVNULL, stderr=sink
            )
        server = Server(label, proc, port, metrics_port, log, coalescing)
        wait_port(port)
        deadline = time.monotonic() + 120
        while not self._ready(server):
            if time.monotonic() > deadline or proc.poll() is not None:
                tail = log.read_text(errors="replace").splitlines()[-20:]
                raise SystemExit(f"{label}: not ready; its log ends:\n" + "\n".join(tail))
            time.sleep(0.2)
        print(f"# started {label}: serve {' '.join(flags)}")
        return server

    def _ready(self, server: Server) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{server.metrics_port}/readyz", timeout=5
            ) as answer:
                if answer.status != 200:
                    return False
        except (urllib.error.URLError, OSError):
            return False
        return not self.populated or self._probe(server, self.populated[0])

    def _probe(self, server: Server, scenario: Scenario) -> bool:
        """One real post: 200 once token checks are ready (keys, pod cache)."""
        _, path, token = self.targets(scenario).read_text().split("\n", 1)[0].split()
        head, tail = body_parts()
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        request = urllib.request.Request(
            server.url + path,
            data=(head + now + tail).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.client_tls) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop_server(self, server: Server) -> None:
        self.procs.stop(server.proc, grace=30)

    # -- runs ------------------------------------------------------------------------

    def script(self, scenario: Scenario, connections: int, interval_ms: int) -> tuple[Path, Path]:
        self.runs += 1
        sends = self.work / f"sends-{self.runs}.log"
        script = self.work / f"load-{self.runs}.lua"
        script.write_text(lua_script(self.targets(scenario), sends, connections, interval_ms))
        return script, sends

    def warm(self, server: Server, scenario: Scenario) -> None:
        """Every pod posts at least once (at 700 posts/s or more): its token is verified
        and cached, its TrainJob has an update pending."""
        script, _ = self.script(scenario, self.args.connections, 0)
        seconds = 2 + scenario.total_pods / 700
        run_wrk(server.url, script, seconds, self.args.connections)
        self.settle(server, self.args.settle / 3)

    def settle(self, server: Server, limit: float) -> float:
        """Wait until every accepted post's write is done (``limit`` at most); seconds
        waited."""
        started = time.monotonic()
        quiet_since, last, pending, scraped = started, -1, 1.0, 0.0
        while (waited := time.monotonic() - started) < limit:
            writes, _ = self.writes_and_reads()
            if time.monotonic() - scraped >= 1:
                # Once a second: the page holds every TrainJob's series, and rendering
                # it costs the server under test.
                pending = total(server.metrics(), "trainjob_status_pending_writes")
                scraped = time.monotonic()
            if writes != last:
                quiet_since, last = time.monotonic(), writes
            # The direct writer has no pending count: its writes are in flight.
            if pending == 0 and time.monotonic() - quiet_since >= (0.5 if server.coalescing else 2):
                break
            time.sleep(0.25)
        time.sleep(0.3)  # the watcher flushes every 50 ms
        return waited

    def run(self, server: Server, scenario: Scenario, paced: bool) -> Row:
        args = self.args
        if paced and not server.coalescing:
            # One write per post at 5/s: every connection waits its turn in the budget, so
            # the first answers take connections / 5 s; the window covers that queue.
            rate = scenario.total_pods / POST_INTERVAL
            connections = args.paced_connections
            interval_ms = max(1, round(connections / rate * 1000))
            seconds = args.paced_seconds + connections / float(PEER_BUDGET[0])
        elif paced:
            rate = scenario.total_pods / POST_INTERVAL
            # At least 100 ms between two posts of a connection, so latency hardly slows
            # the pace.
            connections = max(args.paced_connections, math.ceil(rate * 0.1))
            interval_ms = max(1, round(connections / rate * 1000))
            seconds = args.paced_seconds
        else:
            connections = args.connections
            rate, interval_ms, seconds = 0.0, 0, args.seconds
        script, sends = self.script(scenario, connections, interval_ms)
        before = server.metrics()
        writes0, gets0 = self.writes_and_reads()
        log0 = server.log.stat().st_size
        cpu0 = cpu_seconds(server.proc.pid)
        result = run_wrk(server.url, script, seconds, connections)
        cpu = (cpu_seconds(server.proc.pid) - cpu0) / result.seconds
        writes1, gets1 = self.writes_and_reads()
        log_bytes = server.log.stat().st_size - log0
        waited = self.settle(server, args.settle)
        after = server.metrics()
        row = Row(
            config=server.label,
            scenario=scenario,
            load="paced" if paced else "saturate",
            offered=rate if paced else None,
            wrk=result,
            cpu=cpu,
            writes=writes1 - writes0,
            other_api=gets1 - gets0,
            fresh=freshness(sends, read_visible(self.work / "visible.log")),
            settle=waited,
            log_bytes=log_bytes,
        )
        if server.coalescing:
            name = "trainjob_status_write_freshness_seconds"
            row.hist_p50 = histogram_quantile(before, after, name, 0.5)
            row.hist_p99 = histogram_quantile(before, after, name, 0.99)
        self.rows.append(row)
        print(row_text(row), flush=True)
        return row

    def ceiling(self) -> tuple[float, float]:
        """The bare aiohttp handler (ingest_accept.py's): posts/s and CPU us per post."""
        port = free_port()
        proc = self.procs.start(
            [sys.executable, __file__, "--ceiling", str(port), str(self.work / "tls.crt"),
             str(self.work / "tls.key")],
            cpu=SERVER_CPU, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_port(port)
        script = self.work / "ceiling.lua"
        script.write_text(CEILING_LUA % CEILING_BODY)
        url = f"https://127.0.0.1:{port}{CEILING_PATH}"
        run_wrk(url, script, 2, self.args.connections)
        cpu0 = cpu_seconds(proc.pid)
        result = run_wrk(url, script, self.args.seconds, self.args.connections)
        cpu = cpu_seconds(proc.pid) - cpu0
        self.procs.stop(proc)
        us = cpu / max(1, result.accepted) * 1e6
        print(
            f"# ceiling (bare aiohttp HTTPS handler: read, parse, echo): "
            f"{result.accepted_per_s:,.0f} posts/s, server CPU {cpu / result.seconds:.2f}, "
            f"{us:.0f} us CPU per post, p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms"
        )
        return result.accepted_per_s, us

    def connections_probe(self, server: Server, scenario: Scenario, connections: int) -> float:
        """KiB of server RSS per open keep-alive TLS connection: ``connections`` pods each
        posting every 5 s on their own connection."""
        script, _ = self.script(scenario, connections, int(POST_INTERVAL * 1000))
        before = rss_kib(server.proc.pid)
        seconds = 12
        wrk = self.procs.start(
            wrk_command(server.url, script, seconds, connections),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(seconds - 3)
        during = rss_kib(server.proc.pid)
        out, _ = wrk.communicate(timeout=60)
        self.procs.children.remove(wrk)
        result = parse_wrk(out.decode())
        per = (during - before) / connections
        print(
            f"# {connections:,} open connections, each posting every {POST_INTERVAL:.0f} s: "
            f"RSS {before / 1024:.1f} -> {during / 1024:.1f} MiB, {per:.1f} KiB per connection "
            f"({result.accepted:,} posts accepted, "
            f"{result.non2xx + sum(result.errors.values())} bad)"
        )
        self.settle(server, self.args.settle / 3)
        return per


def heap_kib(obj: dict[str, Any], copies: int = 200) -> float:
    """KiB of Python heap one decoded copy of ``obj`` takes, as a watch cache holds it."""
    text = json.dumps(obj)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    kept = [json.loads(text) for _ in range(copies)]
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del kept
    return used / copies / 1024


def object_sizes(bench: Bench) -> str:
    """What one cached TrainJob (its status written) and one cached pod cost."""
    parts = []
    for label, command in (
        (
            "TrainJob with a written status",
            "object trainjobs trainer.kubeflow.org bench-1 job-00000",
        ),
        ("pod", "object pods - bench-10k job-00000-node-0-0"),
    ):
        obj = bench.ask(command)
        bare = {
            **obj,
            "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"},
        }
        parts.append(
            f"{label} {len(json.dumps(obj)):,} B of JSON, {heap_kib(obj):.1f} KiB "
            f"({heap_kib(bare):.1f} KiB without managedFields)"
        )
    return "; ".join(parts)


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def main(args: argparse.Namespace) -> None:
    if shutil.which("wrk") is None or shutil.which("taskset") is None:
        raise SystemExit("needs wrk and taskset: apt-get install wrk util-linux")
    load_before = loadavg()
    started = time.monotonic()
    print(
        f"# bench/ingest.py: {os.cpu_count()} CPUs; server on CPU {SERVER_CPU}; wrk, devcluster "
        f"and watcher on CPU {LOAD_CPU}; load average {load_before}"
    )
    with tempfile.TemporaryDirectory() as tmp, processes() as procs:
        work = Path(tmp)
        ca = CertificateAuthority()
        cert, key = ca.issue_server_cert(["localhost"], ["127.0.0.1"])
        (work / "tls.crt").write_bytes(cert)
        (work / "tls.key").write_bytes(key)
        (work / "ca.crt").write_bytes(ca.cert_pem)
        bench = Bench(args, work, procs)
        small, many = [SCENARIOS["1"], SCENARIOS["100"]], SCENARIOS["10k"]
        ceiling_rate, ceiling_us = bench.ceiling()
        print()
        print(HEADER)

        # Ours at the peer's budget; memory from 0 TrainJobs tracked to 10,101.
        ours = bench.start_server("ours", [*NO_SA_LIMIT])
        time.sleep(2)
        rss_empty = rss_kib(ours.proc.pid)
        for scenario in small:
            bench.populate(scenario)
        for scenario in small:
            bench.warm(ours, scenario)
            bench.run(ours, scenario, paced=False)
            bench.run(ours, scenario, paced=True)
        rss_small = rss_kib(ours.proc.pid)
        bench.populate(many)
        bench.warm(ours, many)
        bench.run(ours, many, paced=False)
        rss_many = rss_kib(ours.proc.pid)
        bench.run(ours, many, paced=True)
        per_connection = bench.connections_probe(ours, many, args.probe_connections)
        sizes = object_sizes(bench)
        bench.stop_server(ours)

        # Ours with an API budget that fits 100 TrainJobs written once a second.
        qps = args.sized_qps
        sized = bench.start_server(
            f"ours, {qps:g} QPS",
            ["--kube-api-qps", f"{qps:g}", "--kube-api-burst", f"{2 * qps:g}", *NO_SA_LIMIT],
        )
        bench.warm(sized, small[1])
        bench.run(sized, small[1], paced=False)
        bench.run(sized, small[1], paced=True)
        bench.warm(sized, many)
        bench.run(sized, many, paced=True)
        bench.stop_server(sized)

        # The baseline: one write per post at the peer's budget.
        baseline = bench.start_server(
            "baseline (direct)", ["--write-mode", "direct", *NO_SA_LIMIT], coalescing=False
        )
        bench.settle(baseline, args.settle)  # its lists and the probe's write are done
        for scenario in [*small, many]:
            bench.run(baseline, scenario, paced=True)
        bench.stop_server(baseline)

        report(
            bench.rows,
            sized.label,
            (ceiling_rate, ceiling_us),
            (rss_empty, rss_small, rss_many),
            per_connection,
            sizes,
        )
    print(
        f"# load average {load_before} before, {loadavg()} after; "
        f"{time.monotonic() - started:.0f} s in all"
    )


def find(rows: list[Row], config: str, scenario: str, load: str) -> Row | None:
    for row in rows:
        if row.config == config and row.scenario.name == scenario and row.load == load:
            return row
    return None


def ratio(a: float, b: float) -> str:
    if b == 0 or math.isnan(a) or math.isnan(b):
        return "-"
    if math.isinf(a) or math.isinf(b):
        return "-" if math.isinf(a) and math.isinf(b) else ("inf" if math.isinf(a) else "0")
    return f"{a / b:,.3g}"


def report(
    rows: list[Row],
    sized: str,
    ceiling: tuple[float, float],
    rss: tuple[int, int, int],
    per_connection: float,
    sizes: str,
) -> None:
    ceiling_rate, ceiling_us = ceiling
    rss_empty, rss_small, rss_many = rss
    marginal = (rss_many - rss_small) / 10_000
    overall = (rss_many - rss_empty) / 10_101
    print()
    print("columns: posts/s accepted (2xx); p50/p99 latency from wrk; bad = non-2xx + socket")
    print("errors; CPU = server cores busy; us/post = server CPU per accepted post; writes/s and")
    print("wr/post = PATCHes of trainjobs/status the devcluster served in the window; other =")
    print("GETs+LISTs/s to the API; fresh = post sent -> a status at least as new visible through")
    print("a watch (>Ns: not visible N s after the window); srv hist = the server's own histogram")
    print()
    print(
        f"memory (ours, VmRSS): 0 TrainJobs tracked {mib(rss_empty)}; 101 TrainJobs / 2,000 pods "
        f"{mib(rss_small)}; 10,101 TrainJobs / 12,000 pods {mib(rss_many)}"
    )
    print(
        f"  per TrainJob (1 pod, 1 token, 1 service account each): {marginal:.2f} KiB marginal "
        f"(10,000 added), {overall:.2f} KiB all-in from 0 tracked; per open TLS connection "
        f"{per_connection:.1f} KiB"
    )
    print(f"  Python heap per cached object: {sizes}")
    print()
    print("capacity (ours, saturate):")
    for row in rows:
        if row.config == "ours" and row.load == "saturate":
            print(
                f"  {row.scenario.label:<19} {row.posts:>7,.0f} posts/s "
                f"({row.posts / ceiling_rate:.2f} of the ceiling's {ceiling_rate:,.0f}); "
                f"{row.cpu_us:.0f} us CPU/post ({ceiling_us / row.cpu_us:.2f} of the ceiling's "
                f"speed) = {1e6 / row.cpu_us:,.0f} posts/s per fully busy core; "
                f"server log {row.log_bytes / max(1, row.wrk.accepted):.0f} B/post"
            )
    print()
    print("ours / baseline at the same offered load (each pod posts every 5 s), same budget:")
    for name in SCENARIOS:
        ours, base = (
            find(rows, "ours", name, "paced"),
            find(rows, "baseline (direct)", name, "paced"),
        )
        if ours is None or base is None:
            continue
        fresh = [seconds_text(r.fresh_at(q), r.settle) for q in (0.5, 0.99) for r in (ours, base)]
        print(
            f"  {ours.scenario.label:<19} posts/s x{ratio(ours.posts, base.posts)}; "
            f"writes/post x{ratio(ours.writes_per_post, base.writes_per_post)}; "
            f"writes/s x{ratio(ours.writes_per_s, base.writes_per_s)}; "
            f"latency p50 x{ratio(ours.wrk.p50_ms, base.wrk.p50_ms)}, "
            f"p99 x{ratio(ours.wrk.p99_ms, base.wrk.p99_ms)}; "
            f"freshness p50 {fresh[0]} vs {fresh[1]}, p99 {fresh[2]} vs {fresh[3]}"
        )
    print(
        "  (wrk's connections cap the baseline's queue, so its latency and freshness; "
        "real pods would each hold a post in it)"
    )
    print()
    print("targets:")
    saturated = [r for r in rows if r.config == "ours" and r.load == "saturate"]
    worst = min(saturated, key=lambda r: r.posts)
    best_core = min(1e6 / r.cpu_us for r in saturated)
    print(
        f"  [{'x' if worst.posts >= 3000 else ' '}] >= 3,000 accepted posts/s per core, HTTPS, "
        f"real tokens: {worst.posts:,.0f} at worst ({worst.scenario.label}); by CPU per post "
        f"{best_core:,.0f}/s per fully busy core at worst"
    )
    one = find(rows, "ours", "1", "paced")
    if one is not None:
        print(
            f"  [{'x' if one.writes_per_s <= 1.0 else ' '}] {one.posts:,.0f} posts/s for one "
            f"TrainJob -> {one.writes_per_s:.2f} writes/s (<= 1)"
        )
    within = [r for r in (one, find(rows, sized, "100", "paced")) if r]
    for row in within:
        p99 = row.fresh_at(0.99)
        print(
            f"  [{'x' if p99 <= 2.0 else ' '}] freshness p99 within budget ({row.config}, "
            f"{row.scenario.label}, {row.writes_per_s:.1f} writes/s): "
            f"{seconds_text(p99, row.settle)} (<= 2 s)"
        )
    print(
        f"  [{'x' if marginal <= 4.0 else ' '}] RSS per tracked TrainJob at 10,000: "
        f"{marginal:.2f} KiB marginal, {overall:.2f} KiB all-in (<= 4 KiB)"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("--cluster", "--watcher", "--ceiling"):
        mode, rest = sys.argv[1], sys.argv[2:]
        if mode == "--cluster":
            asyncio.run(cluster_process(Path(rest[0])))
        elif mode == "--watcher":
            asyncio.run(watcher_process(Path(rest[0])))
        else:
            asyncio.run(ceiling_server(int(rest[0]), Path(rest[1]), Path(rest[2])))
    else:
        parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--seconds", type=float, default=10.0, help="saturated windows")
        parser.add_argument("--paced-seconds", type=float, default=15.0, help="paced windows")
        parser.add_argument("--connections", type=int, default=32, help="saturating load")
        parser.add_argument("--paced-connections", type=int, default=64, help="paced load")
        parser.add_argument(
            "--settle", type=float, default=30.0, help="seconds to wait for writes after a window"
        )
        parser.add_argument(
            "--sized-qps", type=float, default=200.0, help="the sized budget's QPS (burst 2x)"
        )
        parser.add_argument("--probe-connections", type=int, default=1000)
        main(parser.parse_args())
