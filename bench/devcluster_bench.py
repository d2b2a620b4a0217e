"""How much the development cluster takes on one core: TrainJob status writes per second
(server-side apply to /status over HTTPS keep-alive), alone and with 1,000 open watches.

The cluster runs in a child process pinned to CPU 0; this process (the load) is pinned to
CPU 1. Prints figures; asserts nothing. Usage:

    .venv/bin/python bench/devcluster_bench.py [--seconds 10] [--writers 32] [--watches 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

TJ = "/apis/trainer.kubeflow.org/v1alpha1"
NS = "bench"


def pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and os.cpu_count() and os.cpu_count() > cpu:  # type: ignore[operator]
        os.sched_setaffinity(0, {cpu})


def start_cluster(workdir: Path) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    kubeconfig = workdir / "kubeconfig"
    command = [
        "taskset", "-c", "0",
        sys.executable, "-m", "trainjob_status_server.cli", "devcluster",
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


def status_body(name: str, pp: int) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": NS},
        "status": {
            "trainerStatus": {
                "progressPercentage": pp % 101,
                "estimatedRemainingSeconds": 1000 - pp % 1000,
                "metrics": [{"name": f"m{i}", "value": str(pp * 0.001 + i)} for i in range(5)],
                "lastUpdatedTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        },
    }


async def write_load(client: Client, jobs: int, writers: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    codes: dict[int, int] = {}
    deadline = time.monotonic() + seconds
    counter = 0

    async def writer(index: int) -> None:
        nonlocal counter
        while time.monotonic() < deadline:
            counter += 1
            name = f"job-{(index * 7919 + counter) % jobs}"
            path = f"{TJ}/namespaces/{NS}/trainjobs/{name}/status?fieldManager=bench&force=true"
            start = time.perf_counter()
            code = await client.call(
                "PATCH", path, status_body(name, counter), "application/apply-patch+yaml"
            )
            latencies.append(time.perf_counter() - start)
            codes[code] = codes.get(code, 0) + 1

    started = time.monotonic()
    await asyncio.gather(*(writer(i) for i in range(writers)))
    elapsed = time.monotonic() - started
    latencies.sort()
    return {
        "writes_per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)],
        "codes": codes,
    }


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
            path = f"{TJ}/namespaces/{NS}/trainjobs?watch=true&fieldSelector=metadata.name%3Djob-{i // 2 % 200}&resourceVersion=0"
        else:
            path = f"/api/v1/namespaces/{NS}/pods?watch=true&labelSelector=app%3Dw{i}&resourceVersion=0"
        tasks.append(asyncio.create_task(watch(path)))
    return tasks


async def main(args: argparse.Namespace) -> None:
    pin(1)
    with tempfile.TemporaryDirectory() as tmp:
        proc, config = start_cluster(Path(tmp))
        try:
            await run(args, config, proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident set (VmHWM), read while it still runs."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


async def run(args: argparse.Namespace, config: dict[str, Any], pid: int) -> None:
    jobs = 200
    async with Client(config, args.writers) as client:
        await client.call(
            "POST", "/api/v1/namespaces", {"metadata": {"name": NS}}, "application/json"
        )
        for i in range(jobs):
            body = {"metadata": {"name": f"job-{i}"}, "spec": {"runtimeRef": {"name": "rt"}}}
            await client.call("POST", f"{TJ}/namespaces/{NS}/trainjobs", body, "application/json")
        await write_load(client, jobs, args.writers, 1.0)  # warm-up

        before, load_before = cpu_seconds(pid), time.process_time()
        alone = await write_load(client, jobs, args.writers, args.seconds)
        used = cpu_seconds(pid) - before
        load_used = time.process_time() - load_before
        print(
            f"status writes, no watches: {alone['writes_per_s']:.0f}/s "
            f"(p50 {alone['p50_ms']:.1f} ms, p99 {alone['p99_ms']:.1f} ms), "
            f"server CPU {used / args.seconds:.2f} cores, load CPU "
            f"{load_used / args.seconds:.2f} cores, answers {alone['codes']}"
        )

    received = [0]
    all_open = asyncio.Event()
    async with (
        Client(config, args.writers) as writers,
        Client(config, args.watches + 10) as watchers,
    ):
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
        received[0] = 0
        before, load_before = cpu_seconds(pid), time.process_time()
        loaded = await write_load(writers, jobs, args.writers, args.seconds)
        used = cpu_seconds(pid) - before
        load_used = time.process_time() - load_before
        open_after = sum(not t.done() for t in tasks)
        print(
            f"status writes, {args.watches} watches open: {loaded['writes_per_s']:.0f}/s "
            f"(p50 {loaded['p50_ms']:.1f} ms, p99 {loaded['p99_ms']:.1f} ms), "
            f"server CPU {used / args.seconds:.2f} cores, load CPU "
            f"{load_used / args.seconds:.2f} cores, answers {loaded['codes']}"
        )
        print(
            f"watches open before/after the load: {open_before}/{open_after}; "
            f"watch events delivered during the load: {received[0]}"
        )
        print(f"ratio with/without watches: {loaded['writes_per_s'] / alone['writes_per_s']:.2f}")
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    peak = peak_rss_kib(pid)
    print(f"load generator on CPU 1; devcluster on CPU 0 (its peak RSS {peak / 1024:.0f} MiB)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--writers", type=int, default=32)
    parser.add_argument("--watches", type=int, default=1000)
    asyncio.run(main(parser.parse_args()))
