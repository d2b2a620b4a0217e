"""The ingest bench's two child processes: the devcluster, answering commands on stdin,
and the watcher that logs when each status becomes visible through the API."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import shutil
import sys
import time
from pathlib import Path

from trainjob_devcluster import DevCluster
from trainjob_status.contract import GROUP, audience, status_path
from trainjob_status_server.kube.cache import WatchCache
from trainjob_status_server.kube.client import KubeClient
from trainjob_status_server.kube.resources import PODS, TRAINJOBS
from trainjob_status_server.kube.store import CacheEvent

from .objects import MEMBERSHIP_LABEL, Scenario, pod_body, trainjob_body


async def cluster_process(work: Path) -> None:
    async with DevCluster() as cluster:
        (work / "issuer").write_text(cluster.issuer)
        shutil.copy(cluster.kubeconfig_path, work / "kubeconfig.tmp")
        (work / "kubeconfig.tmp").rename(work / "kubeconfig")
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            command, *rest = line.split()
            answer: object
            if command == "populate":  # name trainjobs pods
                name, trainjobs, pods = rest
                answer = await populate(cluster, work, Scenario(name, int(trainjobs), int(pods)))
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
        # The JobSet and Job the pods are owned by, as the controllers make them.
        owner = cluster.create_trainjob_job(namespace, job)["metadata"]["uid"]
        for p in range(scenario.pods):
            pod = f"{job}-node-0-{p}"
            cluster.create("pods", pod_body(namespace, job, pod, account, p, owner), namespace)
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
