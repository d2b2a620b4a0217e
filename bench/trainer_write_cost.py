"""What a status write costs Kubeflow Trainer's controller: its reconciles, its CPU and
the time a new TrainJob waits for its JobSet, while ``trainerStatus`` is written at a
given rate.

The rig is the suite's (``tests/kubeflow/rig.py``): the real control plane, the
Trainer's CRDs, runtime, RBAC and webhooks, and its controller manager (v2.3.0, run as
its service account, logging at ``--zap-log-level=2`` so each reconcile says
``Reconciling TrainJob``), pinned to one core. For each size (``--trainjobs``, each
TrainJob with its JobSet built first) and each write rate (``--qps``), for
``--seconds``:

- status writes go out at that rate, spread over the TrainJobs round-robin, each the
  server-side apply of ``status.trainerStatus`` our writer makes (field manager
  ``trainer-status``, a new progress and ``lastUpdatedTime`` each), sent by our own
  Kubernetes client;
- a new TrainJob is created every ``--probe-every`` seconds, and the time until its
  JobSet exists (a watch on the JobSets) is its latency.

Each phase starts once the controller has not reconciled for 2 s: what the TrainJobs'
creation or the phase before left is not counted.

Printed per phase: the writes made, the controller's reconciles per second (and per
write), its CPU (ms per second, and ms per write beyond the phase without writes), and
the new TrainJobs' JobSet latency p50 / p99. Needs ``make kube-assets trainer-assets``,
taskset and unshare (root or user namespaces).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import SERVER_CPU, cpu_seconds, loadavg, parse_args, percentile
from trainjob_devcluster.harness.controlplane import AssetsMissing, ControlPlane, find_assets
from trainjob_devcluster.harness.kubeflow_trainer import (
    TrainerAssetsMissing,
    find_trainer_assets,
    private_mounts_usable,
)
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_status_server.kube.client import KubeClient
from trainjob_status_server.status.validation import format_time

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"
TRAINER_API = "/apis/trainer.kubeflow.org/v1alpha1"
JOBSETS = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NAMESPACE}/jobsets"
RECONCILE = b"Reconciling TrainJob"


def _load_rig() -> Any:
    """The suite's Kubeflow rig, loaded by path: it lives with the tests it serves."""
    spec = importlib.util.spec_from_file_location("trainer_rig", ROOT / "tests/kubeflow/rig.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


@dataclass
class Phase:
    trainjobs: int
    qps: float
    seconds: float
    writes: int = 0
    failed_writes: int = 0
    reconciles: int = 0
    cpu: float = 0.0  # controller CPU seconds
    latencies: list[float] | None = None

    def per_second(self) -> tuple[float, float]:
        """Reconciles and controller CPU seconds per second."""
        return self.reconciles / self.seconds, self.cpu / self.seconds

    def row(self, idle: Phase | None) -> str:
        """The phase's line; ``idle`` (the same size without writes) gives what each
        write adds."""
        lat = sorted(self.latencies or [])
        reconciles, cpu = self.per_second()
        per_write, extra = "-", "-"
        if idle is not None and self.writes:
            rate = self.writes / self.seconds
            idle_reconciles, idle_cpu = idle.per_second()
            per_write = f"{(reconciles - idle_reconciles) / rate:.2f}"
            extra = f"{1000 * (cpu - idle_cpu) / rate:.2f}"
        return (
            f"{self.trainjobs:>6} TJ {self.qps:>5g} QPS  writes {self.writes:>5}"
            f" ({self.writes / self.seconds:.1f}/s, {self.failed_writes} failed)"
            f"  reconciles/s {reconciles:6.2f} ({per_write}/write)"
            f"  CPU {1000 * cpu:6.1f} ms/s, {extra} ms/write"
            f"  JobSet latency p50 {percentile(lat, 0.5):.3f} s p99 {percentile(lat, 0.99):.3f} s"
            f" (n={len(lat)})"
        )


class ControllerLog:
    """Counts the controller's reconciles from its log, from a mark on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        self.offset = self.path.stat().st_size

    def count(self) -> int:
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            return handle.read().count(RECONCILE)

    async def settled(self, quiet: float = 2.0, within: float = 300.0) -> None:
        """Until the controller has not reconciled for ``quiet`` seconds: the work a
        phase or the TrainJobs' creation left is done before the next phase counts."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            self.mark()
            await asyncio.sleep(quiet)
            if self.count() == 0:
                return
        raise TimeoutError(f"the controller still reconciles after {within:.0f} s")


async def jobset_seen(
    cluster: RealCluster, names: set[str], seen: dict[str, float], all_seen: asyncio.Event
) -> None:
    """Watch the namespace's JobSets; the time each of ``names`` first appears."""
    context = cluster.client_ssl_context()
    headers = {"Authorization": f"Bearer {cluster.admin_token}"}
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
        session.get(
            cluster.url + JOBSETS,
            params={"watch": "1", "allowWatchBookmarks": "false"},
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None),
        ) as answer,
    ):
        async for line in answer.content:
            event = json.loads(line)
            name = event["object"]["metadata"]["name"]
            if name in names and name not in seen:
                seen[name] = time.monotonic()
                if len(seen) == len(names):
                    all_seen.set()


def trainjob(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }


async def create_all(kube: KubeClient, cluster: RealCluster, names: list[str]) -> None:
    """The TrainJobs, and their JobSets built by the controller (waited for)."""
    limit = asyncio.Semaphore(16)

    async def create(name: str) -> None:
        async with limit:
            await kube.request_json(
                "POST", f"{TRAINER_API}/namespaces/{NAMESPACE}/trainjobs", body=trainjob(name)
            )

    await asyncio.gather(*(create(name) for name in names))
    deadline = time.monotonic() + 60 + len(names) * 0.5
    while time.monotonic() < deadline:
        listed = await kube.request_json("GET", JOBSETS + "?limit=1")
        total = len(listed.get("items", [])) + int(
            (listed.get("metadata") or {}).get("remainingItemCount") or 0
        )
        if total >= len(names):
            return
        await asyncio.sleep(1)
    raise TimeoutError(f"the controller did not build {len(names)} JobSets in time")


async def write_at(
    kube: KubeClient, names: list[str], qps: float, seconds: float, phase: Phase
) -> None:
    """Status writes at ``qps`` for ``seconds`` (paced from the start, each sent without
    waiting for the one before)."""
    if qps <= 0:
        await asyncio.sleep(seconds)
        return
    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = []

    async def one(index: int) -> None:
        status = {
            "progressPercentage": index % 101,
            "lastUpdatedTime": format_time(datetime.now(UTC)),
        }
        try:
            await kube.apply_trainjob_status(NAMESPACE, names[index % len(names)], status)
            phase.writes += 1
        except Exception:
            phase.failed_writes += 1

    for index in range(int(qps * seconds)):
        await asyncio.sleep(max(0.0, start + index / qps - loop.time()))
        tasks.append(asyncio.create_task(one(index)))
    await asyncio.gather(*tasks)


async def probe_jobsets(
    kube: KubeClient, cluster: RealCluster, every: float, seconds: float, tag: str
) -> list[float]:
    """A new TrainJob every ``every`` seconds; each one's time to its JobSet."""
    names: set[str] = set()
    seen: dict[str, float] = {}
    created: dict[str, float] = {}
    all_seen = asyncio.Event()
    watcher = asyncio.create_task(jobset_seen(cluster, names, seen, all_seen))
    await asyncio.sleep(0.5)  # the watch is open
    loop = asyncio.get_running_loop()
    start = loop.time()
    for index in range(max(1, int(seconds / every))):
        await asyncio.sleep(max(0.0, start + index * every - loop.time()))
        name = f"probe-{tag}-{index}"
        names.add(name)
        created[name] = time.monotonic()
        await kube.request_json(
            "POST", f"{TRAINER_API}/namespaces/{NAMESPACE}/trainjobs", body=trainjob(name)
        )
    if len(seen) < len(names):
        all_seen.clear()  # set early, by the JobSets of the first ones
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_seen.wait(), 30)
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
        await watcher
    return [seen[name] - created[name] for name in names if name in seen]


async def run_phase(
    kube: KubeClient,
    cluster: RealCluster,
    log: ControllerLog,
    pid: int,
    names: list[str],
    qps: float,
    args: argparse.Namespace,
) -> Phase:
    phase = Phase(len(names), qps, args.seconds)
    await log.settled()
    log.mark()
    cpu_before = cpu_seconds(pid)
    writing = asyncio.create_task(write_at(kube, names, qps, args.seconds, phase))
    phase.latencies = await probe_jobsets(
        kube, cluster, args.probe_every, args.seconds, f"{len(names)}-{qps:g}"
    )
    await writing
    phase.cpu = cpu_seconds(pid) - cpu_before
    phase.reconciles = log.count()
    return phase


async def measure(
    cluster: RealCluster, controller_pid: int, log_path: Path, args: argparse.Namespace
) -> None:
    log = ControllerLog(log_path)
    async with KubeClient(cluster.kubeconfig_path, qps=1000, burst=1000, timeout=30) as kube:
        made = 0
        for size in args.trainjobs:
            names = [f"tj-{i:05d}" for i in range(size)]
            await create_all(kube, cluster, names[made:])
            made = max(made, size)
            idle: Phase | None = None
            for qps in args.qps:
                phase = await run_phase(kube, cluster, log, controller_pid, names, qps, args)
                if qps == 0:
                    idle = phase
                print(phase.row(idle if qps else None), flush=True)
    print(f"load average after: {loadavg()}")


def controller_pid(process: Any) -> int:
    """The controller manager's own pid (its runner execs into it)."""
    pid = int(process.pid)
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    if "manager" not in comm and "trainer" not in comm:
        raise RuntimeError(f"pid {pid} is {comm!r}, not the controller manager")
    return pid


@contextlib.contextmanager
def kubeflow(assets_dir: Path) -> Iterator[tuple[RealCluster, Any]]:
    rig = _load_rig()
    trainer_assets = find_trainer_assets(ROOT / "tools/trainer/go.mod")
    # Its own URL as the token issuer: the controller's token is for that audience.
    with ControlPlane(assets_dir, issuer=None) as plane, tempfile.TemporaryDirectory() as work:
        cluster = RealCluster(plane)
        flow = rig.Kubeflow(cluster, trainer_assets, Path(work))
        flow.install()
        cluster.ensure_namespace(NAMESPACE)
        with flow.controller(gate=False, extra_args=("--zap-log-level=2",)) as running:
            yield cluster, running.process


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trainjobs", type=lambda s: [int(x) for x in s.split(",")], default=[100, 1000]
    )
    parser.add_argument(
        "--qps", type=lambda s: [float(x) for x in s.split(",")], default=[0.0, 5.0, 20.0, 50.0]
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="each phase's length")
    parser.add_argument(
        "--probe-every", type=float, default=1.0, help="seconds between new TrainJobs"
    )
    args = parse_args(parser, {"trainjobs": [3], "qps": [0.0, 5.0], "seconds": 3.0})
    try:
        assets = find_assets()
        find_trainer_assets(ROOT / "tools/trainer/go.mod")
    except (AssetsMissing, TrainerAssetsMissing) as exc:
        print(f"needs the Go assets: {exc}", file=sys.stderr)
        return 2
    problem = private_mounts_usable()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    print(f"load average before: {loadavg()}")
    with kubeflow(assets) as (cluster, process):
        pid = controller_pid(process)
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, {SERVER_CPU})
        asyncio.run(measure(cluster, pid, process.log_path, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
