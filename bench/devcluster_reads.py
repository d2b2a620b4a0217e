"""What a read costs the development cluster when a resource holds many objects: the CPU
per request of a GET, of a LIST that pins one name with a field selector (what
``kubectl get trainjob X -w`` and per-object informers send first, and what a watch
with that selector replays as its initial events), and of a LIST that selects one
object by label (which has to look at every object), over ``--objects`` TrainJobs in
one namespace.

The cluster runs in a child process pinned to CPU 0 (as in bench/devcluster_bench.py);
the requests come one at a time over one HTTPS keep-alive connection from this process
on CPU 1, and the cluster's CPU time (/proc) is divided by the requests made. Every
answer is checked: 200 and exactly the one object asked for. Prints figures; asserts
nothing beyond that. Usage:

    .venv/bin/python bench/devcluster_reads.py [--objects 10000] [--requests 300] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import devcluster_bench as bench
from _harness import parse_args

TJ = bench.TJ
NS = bench.NS


async def populate(client: bench.Client, objects: int) -> None:
    await client.call("POST", "/api/v1/namespaces", {"metadata": {"name": NS}}, "application/json")
    semaphore = asyncio.Semaphore(16)

    async def create(i: int) -> None:
        body = {
            "metadata": {"name": f"job-{i}", "labels": {"index": str(i)}},
            "spec": {"runtimeRef": {"name": "rt"}},
        }
        async with semaphore:
            code = await client.call(
                "POST", f"{TJ}/namespaces/{NS}/trainjobs", body, "application/json"
            )
        if code != 201:
            raise SystemExit(f"creating job-{i} was answered {code}")

    await asyncio.gather(*(create(i) for i in range(objects)))


async def get_json(client: bench.Client, path: str) -> tuple[int, Any]:
    assert client.session is not None
    async with client.session.get(client.url + path) as response:
        return response.status, json.loads(await response.read())


def the_one(name: str, code: int, body: Any, listed: bool) -> None:
    """The answer is a 200 with exactly the object ``name``."""
    objs = body.get("items", []) if listed else [body]
    found = [obj.get("metadata", {}).get("name") for obj in objs]
    if code != 200 or found != [name]:
        raise SystemExit(f"asked for {name}, got {code} with {found[:3]}")


async def measure(
    client: bench.Client,
    pid: int,
    label: str,
    requests: int,
    objects: int,
    path_for: Callable[[int], tuple[str, bool]],
) -> None:
    before = bench.cpu_seconds(pid)
    started = time.monotonic()
    for k in range(requests):
        i = (k * 7919) % objects
        path, listed = path_for(i)
        code, body = await get_json(client, path)
        the_one(f"job-{i}", code, body, listed)
    elapsed = time.monotonic() - started
    cpu = bench.cpu_seconds(pid) - before
    print(
        f"{label}: {cpu / requests * 1e6:,.0f} us of devcluster CPU per request "
        f"({requests} requests, {requests / elapsed:,.0f}/s one at a time)"
    )


async def run(args: argparse.Namespace) -> None:
    bench.pin(bench.LOAD_CPU)
    with tempfile.TemporaryDirectory() as tmp:
        proc, config = bench.start_cluster(Path(tmp))
        try:
            async with bench.Client(config, 16) as client:
                started = time.monotonic()
                await populate(client, args.objects)
                print(f"{args.objects} TrainJobs created in {time.monotonic() - started:.1f} s")
                base = f"{TJ}/namespaces/{NS}/trainjobs"
                n = args.requests
                await measure(
                    client, proc.pid, "GET one TrainJob", n, args.objects,
                    lambda i: (f"{base}/job-{i}", False),
                )  # fmt: skip
                await measure(
                    client, proc.pid, "LIST pinning one name (fieldSelector=metadata.name=X)",
                    n, args.objects,
                    lambda i: (f"{base}?fieldSelector=metadata.name%3Djob-{i}", True),
                )  # fmt: skip
                await measure(
                    client, proc.pid, "LIST selecting one object by label (index=N)",
                    max(1, n // 10), args.objects,
                    lambda i: (f"{base}?labelSelector=index%3D{i}", True),
                )  # fmt: skip
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=10_000, help="TrainJobs in the namespace")
    parser.add_argument("--requests", type=int, default=300, help="reads of each kind")
    args = parse_args(parser, {"objects": 200, "requests": 20})
    if args.objects < 1 or args.requests < 1:
        parser.error("--objects and --requests must be at least 1")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
