"""The CPU one TrainJob status write costs below the devcluster's HTTP layer: the server-side
apply to ``/status`` that bench/devcluster_bench.py sends, made in this process straight
through ``ResourceApi.patch`` (no sockets, no HTTP, no TLS), plus the JSON rendering of
its answer, which the HTTP layer does for every write.

The cluster's parts are built as devcluster/trainjob_devcluster/harness/cluster.py builds them (a Store, the default
resources' Registry, a ResourceApi over the store with the wall clock); a namespace
``bench`` and 200 TrainJobs are created through ResourceApi.create. Each write is the
Call server.py builds for ``PATCH .../namespaces/bench/trainjobs/job-K/status
?fieldManager=bench&force=true`` (Content-Type ``application/apply-patch+yaml``), its
body the JSON the bench's Lua script sends: round robin over the jobs, a counter in
every status so that each write changes its object. Every answer is checked to be a 200
and the store's resourceVersion to have moved once per write.

Prints CPU microseconds per write (time.process_time), the median of the repetitions and
their spread; asserts nothing beyond that sanity. ``--profile`` runs one repetition under
cProfile instead and prints the top 30 functions by cumulative and by own time. Usage:

    .venv/bin/python bench/devcluster_writes.py [--writes 20000] [--repeats 5] [--profile]
        [--smoke]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import statistics
import time

from multidict import MultiDict, MultiDictProxy

from _harness import parse_args
from trainjob_devcluster.common.resources import default_resources
from trainjob_devcluster.harness.standalone import GC_THRESHOLDS
from trainjob_devcluster.http.rest import Call, ResourceApi
from trainjob_devcluster.http.routing import Registry, route
from trainjob_devcluster.storage.store import Store, dumps_object

TJ = "/apis/trainer.kubeflow.org/v1alpha1"
NS = "bench"
JOBS = 200
APPLY = "application/apply-patch+yaml"


class Cluster:
    """The parts of a DevCluster a write goes through, without its HTTP server."""

    def __init__(self) -> None:
        self.store = Store()
        self.registry = Registry(default_resources())
        self.api = ResourceApi(self.store, time.time)
        self.counter = 0

    def call(self, method: str, path: str, query: dict[str, str], body: bytes, ctype: str) -> Call:
        """The Call server.py builds for this request (its query an aiohttp-like proxy)."""
        proxy = MultiDictProxy(MultiDict(query))
        found = route(self.registry, method, path, proxy)
        assert found.resource is not None, path
        return Call(found.info, found.resource, proxy, body, ctype, None)

    def setup(self) -> None:
        ns = {"metadata": {"name": NS}}
        self.api.create(self.call("POST", "/api/v1/namespaces", {}, json.dumps(ns).encode(), ""))
        for i in range(JOBS):
            body = {"metadata": {"name": f"job-{i}"}, "spec": {"runtimeRef": {"name": "rt"}}}
            path = f"{TJ}/namespaces/{NS}/trainjobs"
            answer = self.api.create(self.call("POST", path, {}, json.dumps(body).encode(), ""))
            assert answer.code == 201, answer

    def next_write(self) -> Call:
        """The next request of the Lua script in bench/devcluster_bench.py."""
        self.counter += 1
        n = self.counter
        name = f"job-{n % JOBS}"
        metrics = [{"name": f"m{i}", "value": f"{i + n // 1000}.{n % 1000:03d}"} for i in range(5)]
        body = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": name, "namespace": NS},
            "status": {
                "trainerStatus": {
                    "progressPercentage": n % 101,
                    "estimatedRemainingSeconds": n,
                    "metrics": metrics,
                    "lastUpdatedTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            },
        }
        path = f"{TJ}/namespaces/{NS}/trainjobs/{name}/status"
        query = {"fieldManager": "bench", "force": "true"}
        return self.call(
            "PATCH", path, query, json.dumps(body, separators=(",", ":")).encode(), APPLY
        )


def writes_for(cluster: Cluster, writes: int) -> list[Call]:
    return [cluster.next_write() for _ in range(writes)]


def run(cluster: Cluster, calls: list[Call]) -> float:
    """CPU seconds for making ``calls`` (building them is not counted)."""
    writes = len(calls)
    rv_before = cluster.store.rv
    api = cluster.api
    started = time.process_time()
    for call in calls:
        answer = api.patch(call)
        dumps_object(answer.body)
        if answer.code != 200:
            raise SystemExit(f"a write was answered {answer.code}: {answer.body}")
    cpu = time.process_time() - started
    stored = cluster.store.rv - rv_before
    if stored != writes:
        raise SystemExit(f"{writes} writes stored {stored} changes, not one each")
    return cpu


def profile(cluster: Cluster, writes: int) -> None:
    calls = writes_for(cluster, writes)
    profiler = cProfile.Profile()
    profiler.enable()
    run(cluster, calls)
    profiler.disable()
    for order in ("cumulative", "tottime"):
        print(f"-- top 30 by {order} --")
        pstats.Stats(profiler).sort_stats(order).print_stats(30)


def main(args: argparse.Namespace) -> None:
    # The collector as the standalone devcluster (the HTTP bench's server) runs it.
    gc.set_threshold(*GC_THRESHOLDS)
    cluster = Cluster()
    cluster.setup()
    gc.freeze()
    run(
        cluster, writes_for(cluster, min(args.writes, 2 * JOBS))
    )  # warm-up: every job written once or twice
    if args.profile:
        profile(cluster, args.writes)
        return
    per_write = []
    for i in range(args.repeats):
        us = run(cluster, writes_for(cluster, args.writes)) / args.writes * 1e6
        per_write.append(us)
        print(f"repetition {i + 1}: {us:.1f} us CPU per write")
    print(
        f"status apply + answer JSON: median {statistics.median(per_write):.1f} us CPU per "
        f"write (min {min(per_write):.1f}, max {max(per_write):.1f}; {args.repeats} x "
        f"{args.writes} writes over {JOBS} TrainJobs, each write stored one change)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile one repetition")
    main(parse_args(parser, {"writes": 500, "repeats": 2}))
