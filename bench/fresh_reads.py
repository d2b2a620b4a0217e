"""Fresh reads without writes: how soon a post shows through the aggregated API
(``trainjobprogresses`` through kube-apiserver) and on the metrics page, against the
TrainJob's stored status, with 1 and with 3 replicas of our server.

The rig is ``trainer_side_by_side``'s: the real control plane with its own URL as the
token issuer, TrainJobs each with a pod (owned as the Trainer's controllers own it) and
that pod's token for the TrainJob's audience. Our server runs as deployed:
``trainjob-status-server serve`` processes with their defaults (token checks against
the issuer's keys with pod binding, the coalescing writer at ``--kube-api-qps`` 5),
``--progress-api-port``, each replica with its own ports at this machine's address
(``--pod-ip``), an EndpointSlice of its own (``status-server`` and ``progress-api``
ports) and a peer token of the ServiceAccount ``trainjob-status``. The APIService's
Service lists every replica's progress port: kube-apiserver spreads reads over them.
All replicas run pinned to one core; this script and the control plane share the other.

For each replica count (``--replicas``) and each size (``--trainjobs``): every TrainJob's
pod posts every ``--interval`` seconds for ``--window`` seconds, the posts spread over
the replicas round-robin, as a Service spreads them. Of the posts answered 200, up to
``--samples`` (spread evenly) are followed from their answer:

- fresh read: a GET of the TrainJob's ``trainjobprogresses`` through kube-apiserver, as
  the admin, every ``--poll`` seconds until it shows that post's update or a newer one
  (at most ``--cap`` seconds; the time counts to the answer that shows it);
- gauge: every replica's metrics page, scraped every ``--poll`` seconds while a sample
  waits, until ``trainjob_last_update_timestamp_seconds`` of the TrainJob shows it on
  any of them; every scrape also counts the TrainJobs more than one replica exports
  (each should be exported by its owner alone).

For every post answered 200, the stored status: the time until a watch on the TrainJobs
shows it (or a newer update), waiting after the window as ``trainer_side_by_side`` does
(until every TrainJob shows its last post, no status write for ``--quiet`` s, or
``--settle`` s); and the status writes kube-apiserver received during the window
(``apiserver_request_total``), per TrainJob and minute.

A GET by name is authorized by a SubjectAccessReview of the whole namespace that each
replica keeps 10 s per user, paid from its ``--kube-reads-qps`` budget; were it spent,
reads would wait for it, or be answered 503 when the wait would pass
``--kube-api-timeout``. A follow keeps polling through those; the answers other than 200
are counted. ``--server-flag`` gives every replica a flag (a larger budget, say, to
measure freshness alone).

One line per phase, with the machine's load average. 100 TrainJobs with 1 and 3
replicas take about 3 minutes on a 2-core machine; the 1,000-TrainJob phases take the
most (the stored status of 1,000 TrainJobs at 5 writes/s takes 200 s a cycle). Needs
``make kube-assets``, taskset, and an address besides loopback (kube-apiserver refuses
loopback endpoints).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import math
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import LOAD_CPU, SERVER_CPU, loadavg, parse_args, percentile, pin
from trainer_side_by_side import (
    NS,
    START,
    Cluster,
    Job,
    Server,
    Watch,
    body,
    client_context,
    post,
    settled,
    stamp,
)
from trainjob_devcluster.harness.controlplane import AssetsMissing, ControlPlane, find_assets
from trainjob_devcluster.harness.kubeflow_trainer import ChildProcess, http_ready
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_devcluster.harness.testing import ServingCerts, free_port, machine_address
from trainjob_status_server.auth.claims import PEER_AUDIENCE
from trainjob_status_server.config import Config
from trainjob_status_server.metrics.series import LAST_UPDATE
from trainjob_status_server.peers.ring import PORT_NAME
from trainjob_status_server.progress import resource

SERVER_NS = Config.service_namespace
SERVICE = Config.service_name
ACCOUNT = Config.service_account
PROGRESS_PORT_NAME = "progress-api"
SERVICE_PROGRESS_PORT = 8445  # the manifests' Service port
APISERVICES = "/apis/apiregistration.k8s.io/v1/apiservices"
ENDPOINTSLICES = f"/apis/discovery.k8s.io/v1/namespaces/{SERVER_NS}/endpointslices"
PROGRESS = f"/apis/{resource.GROUP_VERSION}/namespaces/{NS}/{resource.RESOURCE}"
GAUGE = re.compile(rf"^{LAST_UPDATE}\{{([^}}]*)\}} (\S+)$", re.MULTILINE)
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


# -- the replicas -------------------------------------------------------------------------


@dataclass
class Replica:
    server: Server  # its serving port: posts
    progress_port: int
    metrics_port: int

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"


@dataclass(frozen=True)
class Ports:
    serving: int
    progress: int
    metrics: int
    probe: int

    @classmethod
    def free(cls) -> Ports:
        return cls(free_port(), free_port(), free_port(), free_port())


def serve_argv(
    cluster: RealCluster,
    certs: ServingCerts,
    address: str,
    ports: Ports,
    token: Path,
    extra: Sequence[str],
) -> list[str]:
    """``serve`` as the Deployment runs it, on this machine's address and its own ports."""
    return [
        "taskset",
        "-c",
        str(SERVER_CPU),
        str(Path(sys.executable).parent / "trainjob-status-server"),
        "serve",
        f"--kubeconfig={cluster.kubeconfig_path}",
        f"--tls-cert-file={certs.cert_file}",
        f"--tls-key-file={certs.key_file}",
        "--host=0.0.0.0",
        f"--port={ports.serving}",
        f"--progress-api-port={ports.progress}",
        f"--metrics-port={ports.metrics}",
        f"--probe-port={ports.probe}",
        f"--pod-ip={address}",
        f"--service-namespace={SERVER_NS}",
        f"--peer-token-file={token}",
        # No admission webhook is registered here; the pods are made as the Trainer's.
        "--no-inject-pods",
        "--log-level=warning",
        *extra,
    ]


def peer_token(cluster: RealCluster, folder: Path) -> Path:
    """The projected token the replicas prove themselves with to each other."""
    cluster.ensure_namespace(SERVER_NS)
    if cluster.get("serviceaccounts", SERVER_NS, ACCOUNT) is None:
        cluster.create("serviceaccounts", {"metadata": {"name": ACCOUNT}}, SERVER_NS)
    path = folder / "peer.token"
    path.write_text(cluster.request_token(SERVER_NS, ACCOUNT, [PEER_AUDIENCE]))
    return path


def start_replicas(
    cluster: RealCluster, certs: ServingCerts, address: str, count: int, args: argparse.Namespace
) -> list[Replica]:
    """``count`` replicas, their Service and EndpointSlices listed before they start (so
    they agree on the TrainJobs' owners from the first post), then the APIService."""
    folder = Path(tempfile.mkdtemp(prefix="fresh-reads-"))
    token = peer_token(cluster, folder)
    ports = [Ports.free() for _ in range(count)]
    register_service(cluster, address, ports)
    replicas: list[Replica] = []
    try:
        for i, own in enumerate(ports):
            argv = serve_argv(cluster, certs, address, own, token, args.server_flag)
            process = ChildProcess(argv, ready=http_ready(own.probe), name=f"replica-{i}")
            process.start()
            server = Server(f"replica-{i}", process, own.serving)
            replicas.append(Replica(server, own.progress, own.metrics))
        register_apiservice(cluster, certs)
    except BaseException:
        stop_replicas(cluster, replicas)
        raise
    return replicas


def stop_replicas(cluster: RealCluster, replicas: list[Replica]) -> None:
    """The APIService goes first (kube-apiserver stops proxying), then the replicas
    (SIGTERM: each drains), then the Service and its endpoints."""
    cluster.plane.request("DELETE", f"{APISERVICES}/{resource.APISERVICE}")
    with ThreadPoolExecutor(max(1, len(replicas))) as stopping:
        list(stopping.map(lambda replica: replica.server.process.close(), replicas))
    cluster.plane.request("DELETE", f"/api/v1/namespaces/{SERVER_NS}/services/{SERVICE}")
    cluster.plane.request("DELETE", f"/api/v1/namespaces/{SERVER_NS}/endpoints/{SERVICE}")
    cluster.plane.request("DELETE", ENDPOINTSLICES)


# -- registration ---------------------------------------------------------------------


def register_service(cluster: RealCluster, address: str, ports: list[Ports]) -> None:
    """The Service and its endpoints as the EndpointSlice controller would list pods of
    one Deployment: here the replicas share the address, so each has a slice of its own
    (a slice's ports are every endpoint's). The legacy Endpoints list the progress ports
    too, one subset each, for an API server that routes by them."""
    cluster.call(
        "POST",
        f"/api/v1/namespaces/{SERVER_NS}/services",
        {
            "metadata": {"name": SERVICE},
            "spec": {
                "ports": [
                    {"name": PORT_NAME, "port": Config.service_port, "targetPort": PORT_NAME},
                    {
                        "name": PROGRESS_PORT_NAME,
                        "port": SERVICE_PROGRESS_PORT,
                        "targetPort": PROGRESS_PORT_NAME,
                    },
                ]
            },
        },
    )
    subsets = [
        {
            "addresses": [{"ip": address}],
            "ports": [{"name": PROGRESS_PORT_NAME, "port": own.progress}],
        }
        for own in ports
    ]
    cluster.call(
        "POST",
        f"/api/v1/namespaces/{SERVER_NS}/endpoints",
        {"metadata": {"name": SERVICE}, "subsets": subsets},
    )
    for i, own in enumerate(ports):
        cluster.call("POST", ENDPOINTSLICES, endpoint_slice(f"{SERVICE}-{i}", address, own))


def endpoint_slice(name: str, address: str, ports: Ports) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/service-name": SERVICE,
                "endpointslice.kubernetes.io/managed-by": "bench.trainjob-status",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [
            {"name": PORT_NAME, "port": ports.serving, "protocol": "TCP"},
            {"name": PROGRESS_PORT_NAME, "port": ports.progress, "protocol": "TCP"},
        ],
    }


def register_apiservice(cluster: RealCluster, certs: ServingCerts) -> None:
    cluster.call(
        "POST",
        APISERVICES,
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": resource.APISERVICE},
            "spec": {
                "group": resource.GROUP,
                "version": resource.VERSION,
                "service": {
                    "namespace": SERVER_NS,
                    "name": SERVICE,
                    "port": SERVICE_PROGRESS_PORT,
                },
                "caBundle": base64.b64encode(certs.ca.cert_pem).decode(),
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        },
    )


def apiservice_available(cluster: RealCluster) -> bool:
    found = cluster.call("GET", f"{APISERVICES}/{resource.APISERVICE}")
    return any(
        condition["type"] == "Available" and condition["status"] == "True"
        for condition in found.get("status", {}).get("conditions", [])
    )


# -- what the replicas show -------------------------------------------------------------


async def page(session: aiohttp.ClientSession, replica: Replica) -> str | None:
    """A replica's metrics page, None when it does not answer 200."""
    try:
        async with session.get(replica.metrics_url) as answer:
            return await answer.text() if answer.status == 200 else None
    except (TimeoutError, aiohttp.ClientError):
        return None


def sample_value(text: str, line_start: str) -> float | None:
    """The value of the first sample line that starts with ``line_start``."""
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return None


def last_updates(text: str) -> dict[str, float]:
    """``trainjob_last_update_timestamp_seconds`` of this namespace's TrainJobs."""
    found: dict[str, float] = {}
    for match in GAUGE.finditer(text):
        labels = dict(LABEL.findall(match.group(1)))
        if labels.get("namespace") == NS and "trainjob" in labels:
            found[labels["trainjob"]] = float(match.group(2))
    return found


async def until(check: Callable[[], Awaitable[bool]], what: str, within: float) -> None:
    """Until ``await check()`` is true; SystemExit after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"fresh_reads: {what} not within {within:.0f} s")
        await asyncio.sleep(0.2)


async def ready(
    session: aiohttp.ClientSession, cluster: RealCluster, replicas: list[Replica], trainjobs: int
) -> None:
    """Every replica lists every replica's EndpointSlice and caches ``trainjobs``
    TrainJobs, and kube-apiserver finds the APIService available."""
    cached = 'trainjob_status_cache_objects{resource="%s"} '

    async def listed() -> bool:
        pages = await asyncio.gather(*(page(session, r) for r in replicas))
        return all(
            text is not None
            and sample_value(text, cached % "endpointslices") == len(replicas)
            and (sample_value(text, cached % "trainjobs") or 0) >= trainjobs
            for text in pages
        )

    async def available() -> bool:
        return await asyncio.to_thread(apiservice_available, cluster)

    await until(listed, "every replica lists the replicas and caches the TrainJobs", 120)
    await until(available, "the APIService is Available", 60)


# -- a phase ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """A post answered 200: when it was sent and answered, and its update."""

    job: str
    second: int  # its lastUpdatedTime, in seconds after START
    sent: float
    answered: float

    @property
    def stamp(self) -> str:
        return stamp(self.second)

    @property
    def epoch(self) -> float:
        """Its lastUpdatedTime in Unix seconds, as the gauge exports it."""
        return START.timestamp() + self.second


@dataclass
class Phase:
    replicas: int
    trainjobs: int
    posts: int = 0
    failed: Counter[str] = field(default_factory=Counter)  # posts' answers other than 200
    reads: list[float] = field(default_factory=list)
    reads_unseen: int = 0
    other_reads: Counter[str] = field(default_factory=Counter)  # reads' other answers
    gauges: list[float] = field(default_factory=list)
    gauges_unseen: int = 0
    scrapes: int = 0  # scrape rounds (every replica's page once)
    failed_scrapes: int = 0
    doubled_rounds: int = 0  # rounds where some TrainJob was exported by several replicas
    most_doubled: int = 0  # the most TrainJobs exported by several replicas in one round
    writes: float = 0.0
    window: float = 0.0  # seconds the posts actually took
    stored: list[float] = field(default_factory=list)
    stored_unseen: int = 0

    def line(self) -> str:
        minutes = self.window / 60
        per_tj = self.writes / self.trainjobs / minutes if minutes else math.nan
        reads = _answers(self.other_reads, "; other answers ")
        exported = (
            f"; scrapes {self.scrapes} ({self.failed_scrapes} failed), exported by 2+"
            f" replicas: {self.most_doubled} TJ at most, in {self.doubled_rounds}"
        )
        return (
            f"{self.replicas} replica{'s' if self.replicas > 1 else ''} {self.trainjobs:>5} TJ"
            f"  posts {self.posts} ({self.failed.total()} failed{_answers(self.failed, ': ')})"
            f"  fresh read {_quantiles(self.reads, self.reads_unseen, reads)}"
            f"  gauge {_quantiles(self.gauges, self.gauges_unseen, exported)}"
            f"  status writes/TJ/min {per_tj:.3g}"
            f"  stored {_quantiles(self.stored, self.stored_unseen)}"
            f"  load {loadavg()}"
        )


def _quantiles(values: list[float], unseen: int, more: str = "") -> str:
    """p50 and p99, a sample never seen counted as infinitely late ("> cap")."""
    ordered = sorted(values) + [math.inf] * unseen
    p50, p99 = (_seconds(percentile(ordered, q)) for q in (0.5, 0.99))
    return f"p50 {p50} p99 {p99} (n={len(values)}, unseen {unseen}{more})"


def _seconds(value: float) -> str:
    return "> cap" if math.isinf(value) else f"{value:.3f} s"


def _answers(answers: Counter[str], lead: str) -> str:
    """``lead`` and the count of each answer, or nothing when there are none."""
    if not answers:
        return ""
    return lead + ", ".join(f"{answer}: {n}" for answer, n in sorted(answers.items()))


def _answer(code: int, message: str = "") -> str:
    """An answer as counted: its code (or none), and why where it says."""
    said = f"{code}" if code else "no answer"
    return f"{said} ({message})" if message else said


class Reads:
    """``trainjobprogresses`` GETs through kube-apiserver as the admin."""

    def __init__(self, cluster: RealCluster, session: aiohttp.ClientSession) -> None:
        self.cluster = cluster
        self.session = session
        self.headers = {"Authorization": f"Bearer {cluster.admin_token}"}

    async def newest(self, job: str) -> tuple[str | None, str]:
        """The lastUpdatedTime a read shows, or None and the answer (``_answer``)."""
        try:
            async with self.session.get(
                f"{self.cluster.url}{PROGRESS}/{job}", headers=self.headers
            ) as answer:
                content = await answer.read()
                code = answer.status
        except (TimeoutError, aiohttp.ClientError):
            return None, _answer(0)
        try:
            decoded = json.loads(content)
        except ValueError:
            decoded = None
        if not isinstance(decoded, dict):
            decoded = {}
        if code != 200:
            return None, _answer(code, str(decoded.get("message", "")))
        when = (decoded.get("trainerStatus") or {}).get("lastUpdatedTime")
        return (when, "") if isinstance(when, str) else (None, _answer(code, "no update"))

    async def follow(self, sample: Sample, phase: Phase, args: argparse.Namespace) -> None:
        """GETs every ``--poll`` s until one shows ``sample`` or newer, ``--cap`` s at most."""
        while True:
            began = time.monotonic()
            when, other = await self.newest(sample.job)
            now = time.monotonic()
            if when is not None and when >= sample.stamp:
                phase.reads.append(now - sample.answered)
                return
            if other:
                phase.other_reads[other] += 1
            if now - sample.answered >= args.cap:
                phase.reads_unseen += 1
                return
            await asyncio.sleep(max(0.0, args.poll - (now - began)))


class Gauges:
    """Scrapes every replica's metrics page every ``--poll`` s while a sample waits."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        replicas: list[Replica],
        phase: Phase,
        args: argparse.Namespace,
    ) -> None:
        self.session = session
        self.replicas = replicas
        self.phase = phase
        self.args = args
        self.pending: list[Sample] = []
        self.waiting = asyncio.Event()
        self.empty = asyncio.Event()
        self.empty.set()

    def expect(self, sample: Sample) -> None:
        self.pending.append(sample)
        self.waiting.set()
        self.empty.clear()

    async def run(self) -> None:
        while True:
            if not self.pending:
                self.waiting.clear()
                self.empty.set()
                await self.waiting.wait()
            began = time.monotonic()
            await self.round()
            await asyncio.sleep(max(0.0, self.args.poll - (time.monotonic() - began)))

    async def round(self) -> None:
        pages = await asyncio.gather(*(page(self.session, r) for r in self.replicas))
        now = time.monotonic()
        phase = self.phase
        phase.scrapes += 1
        newest: dict[str, float] = {}
        exporters: Counter[str] = Counter()
        for text in pages:
            if text is None:
                phase.failed_scrapes += 1
                continue
            for job, value in last_updates(text).items():
                exporters[job] += 1
                newest[job] = max(value, newest.get(job, -math.inf))
        doubled = sum(1 for n in exporters.values() if n > 1)
        if doubled:
            phase.doubled_rounds += 1
            phase.most_doubled = max(phase.most_doubled, doubled)
        still: list[Sample] = []
        for sample in self.pending:
            if newest.get(sample.job, -math.inf) >= sample.epoch:
                phase.gauges.append(now - sample.answered)
            elif now - sample.answered >= self.args.cap:
                phase.gauges_unseen += 1
            else:
                still.append(sample)
        self.pending = still


class Load:
    """Every TrainJob's pod posting every ``--interval`` s for ``--window`` s, the posts
    round-robin over the replicas; the sampled ones are followed."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        replicas: list[Replica],
        reads: Reads,
        gauges: Gauges,
        phase: Phase,
        args: argparse.Namespace,
    ) -> None:
        self.session = session
        self.replicas = replicas
        self.reads = reads
        self.gauges = gauges
        self.phase = phase
        self.args = args
        self.turn = itertools.count()
        self.every = 1
        self.answered: list[Sample] = []
        self.last: dict[str, tuple[str, float]] = {}
        self.following: list[asyncio.Task[None]] = []

    async def run(self, jobs: list[Job]) -> None:
        args = self.args
        expected = len(jobs) * max(1, math.ceil(args.window / args.interval))
        self.every = max(1, expected // args.samples)
        end = time.monotonic() + args.window
        await asyncio.gather(
            *(self.pod(job, args.interval * i / len(jobs), end) for i, job in enumerate(jobs))
        )

    async def pod(self, job: Job, offset: float, end: float) -> None:
        await asyncio.sleep(offset)
        while time.monotonic() < end:
            began = time.monotonic()
            await self.post(job)
            await asyncio.sleep(max(0.0, self.args.interval - (time.monotonic() - began)))

    async def post(self, job: Job) -> None:
        turn = next(self.turn)
        replica = self.replicas[turn % len(self.replicas)]
        second = job.next()
        sent = time.monotonic()
        self.last[job.name] = (stamp(second), sent)
        code, _, _ = await post(self.session, replica.server, job, body(second))
        self.phase.posts += 1
        if code != 200:
            self.phase.failed[_answer(code)] += 1
            return
        sample = Sample(job.name, second, sent, time.monotonic())
        self.answered.append(sample)
        if turn % self.every == 0:
            self.following.append(
                asyncio.create_task(self.reads.follow(sample, self.phase, self.args))
            )
            self.gauges.expect(sample)


async def run_phase(
    rig: Rig, replicas: list[Replica], count: int, args: argparse.Namespace
) -> Phase:
    phase = Phase(len(replicas), count)
    gauges = Gauges(rig.metrics, replicas, phase, args)
    load = Load(rig.posts, replicas, rig.reads, gauges, phase, args)
    scraping = asyncio.create_task(gauges.run())
    writes = await asyncio.to_thread(rig.state.status_writes)
    began = time.monotonic()
    await load.run(rig.state.jobs[:count])
    phase.window = time.monotonic() - began
    phase.writes = await asyncio.to_thread(rig.state.status_writes) - writes
    await asyncio.gather(*load.following)
    await gauges.empty.wait()
    scraping.cancel()
    last = load.last
    await settled(rig.state, lambda: all(rig.watch.shown(j, *last[j]) for j in last), args)
    for sample in load.answered:
        shown = rig.watch.shown(sample.job, sample.stamp, sample.sent)
        if shown is None:
            phase.stored_unseen += 1
        else:
            phase.stored.append(max(0.0, shown - sample.answered))
    # What this phase left to write is not counted in the next one.
    await rig.state.settle()
    return phase


# -- the run ----------------------------------------------------------------------------


@dataclass
class Rig:
    cluster: RealCluster
    state: Cluster  # TrainJobs, pods and tokens; kube-apiserver's status writes
    certs: ServingCerts
    address: str
    watch: Watch
    posts: aiohttp.ClientSession  # to the replicas' serving ports
    metrics: aiohttp.ClientSession  # to their metrics ports
    reads: Reads


async def with_replicas(rig: Rig, count: int, args: argparse.Namespace) -> None:
    replicas = await asyncio.to_thread(
        start_replicas, rig.cluster, rig.certs, rig.address, count, args
    )
    try:
        for size in args.trainjobs:
            rig.state.grow(size)
            await ready(rig.metrics, rig.cluster, replicas, size)
            phase = await run_phase(rig, replicas, size, args)
            print(phase.line(), flush=True)
    finally:
        await asyncio.to_thread(stop_replicas, rig.cluster, replicas)


async def run(args: argparse.Namespace, cluster: RealCluster) -> None:
    certs = ServingCerts.create(Path(tempfile.mkdtemp(prefix="fresh-reads-certs-")))
    address = machine_address()
    if address is None:
        raise SystemExit("fresh_reads: this machine has no address but loopback")
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    async with (
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ssl=client_context(certs)), timeout=timeout
        ) as posts,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as metrics,
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ssl=cluster.client_ssl_context()),
            timeout=timeout,
        ) as kube,
    ):
        watch = Watch(cluster)
        watching = asyncio.create_task(watch.run(kube))
        rig = Rig(
            cluster, Cluster(cluster), certs, address, watch, posts, metrics, Reads(cluster, kube)
        )
        try:
            for count in args.replicas:
                await with_replicas(rig, count, args)
        finally:
            watching.cancel()


def header(args: argparse.Namespace, kube: Path) -> None:
    print(
        f"# fresh_reads: our server (serve, --progress-api-port) with {_listed(args.replicas)}"
        f" replicas on kube-apiserver ({kube.name}); {_listed(args.trainjobs)} TrainJobs,"
        f" a post each {args.interval:g} s per TrainJob for {args.window:g} s, round-robin over the"
        f" replicas; up to {args.samples} posts per phase followed: a GET through"
        f" kube-apiserver and a scrape of every replica every {args.poll:g} s, up to"
        f" {args.cap:g} s; stored status through a watch, up to {args.settle:g} s after the"
        f" window; server flags added: {' '.join(args.server_flag) or 'none'}",
        flush=True,
    )
    print(f"# load average at the start: {loadavg()}", flush=True)


def _listed(counts: list[int]) -> str:
    return ", ".join(f"{n:,}" for n in counts)


def _counts(text: str) -> list[int]:
    return [int(n) for n in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=_counts, default=[1, 3], help="replica counts")
    parser.add_argument(
        "--trainjobs", type=_counts, default=[1, 100, 1000], help="sizes, ascending"
    )
    parser.add_argument("--interval", type=float, default=5, help="seconds between a pod's posts")
    parser.add_argument("--window", type=float, default=60, help="how long each phase posts, s")
    parser.add_argument("--samples", type=int, default=200, help="posts followed per phase")
    parser.add_argument("--poll", type=float, default=0.05, help="seconds between reads/scrapes")
    parser.add_argument("--cap", type=float, default=30, help="longest a sample is followed, s")
    parser.add_argument("--timeout", type=float, default=10, help="a request's client timeout, s")
    parser.add_argument(
        "--settle",
        type=float,
        default=300,
        help="after a window, the longest wait for the stored status to show every TrainJob's"
        " last post (1,000 TrainJobs at 5 writes/s take 200 s a cycle)",
    )
    parser.add_argument(
        "--quiet",
        type=float,
        default=15,
        help="the wait also ends once no status write has reached the API server this long",
    )
    parser.add_argument(
        "--server-flag",
        action="append",
        default=[],
        help="a flag added to every replica's serve command, e.g."
        " --server-flag=--kube-metrics-qps=20 (repeat for more)",
    )
    args = parse_args(
        parser,
        {
            "trainjobs": [3],
            "window": 2,
            "interval": 1,
            "cap": 10,
            "settle": 10,
            "quiet": 3,
        },
    )
    try:
        kube = find_assets()
    except AssetsMissing as missing:
        sys.exit(f"fresh_reads: {missing}")
    pin(LOAD_CPU)
    header(args, kube)
    with ControlPlane(kube, issuer=None) as plane:
        asyncio.run(run(args, RealCluster(plane)))
    print(f"# load average at the end: {loadavg()}")


if __name__ == "__main__":
    main()
