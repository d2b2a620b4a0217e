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

    .venv/bin/python bench/ingest.py [--seconds 10] [--paced-seconds 15] [--smoke]

``--smoke`` shrinks the scenarios to 1 x 20, 4 x 5 and 10 x 1, every window to a second
and the waits for writes to half of one, with no warm-up runs: it checks that the whole
run works, and its figures mean nothing.

The parts live in ``_ingest/``: the scenarios and objects, the two child processes (this
script runs them too), the wrk load, freshness, the driver and the report.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _harness import LOAD_CPU, SERVER_CPU, loadavg, parse_args, processes, rss_kib
from _ingest.children import cluster_process, watcher_process
from _ingest.driver import Bench, object_sizes
from _ingest.objects import NO_SA_LIMIT, SCENARIOS, SMOKE_SCENARIOS
from _ingest.rows import HEADER, report
from ingest_accept import ceiling_server  # type: ignore[import-not-found]
from trainjob_devcluster.harness.testing import ServingCerts


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
        ServingCerts.create(work)
        bench = Bench(args, work, procs)
        scenarios = SMOKE_SCENARIOS if args.smoke else SCENARIOS
        small, many = [scenarios["1"], scenarios["100"]], scenarios["10k"]
        ceiling_rate, ceiling_us = bench.ceiling()
        print()
        print(HEADER)

        # Ours at the peer's budget; memory from 0 TrainJobs tracked to all of them.
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
            (small, many),
            per_connection,
            sizes,
        )
    print(
        f"# load average {load_before} before, {loadavg()} after; "
        f"{time.monotonic() - started:.0f} s in all"
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
        parser.add_argument(
            "--probe-seconds", type=float, default=12.0, help="the open connections' window"
        )
        parser.add_argument(
            "--warm-seconds",
            type=float,
            default=2.0,
            help="warm-up windows (plus 1 s per 700 pods); 0: none",
        )
        smoke = {
            "seconds": 1.0,
            "paced_seconds": 1.0,
            "connections": 4,
            "paced_connections": 2,
            "settle": 0.5,
            "probe_connections": 20,
            "probe_seconds": 1.0,
            "warm_seconds": 0.0,
        }
        main(parse_args(parser, smoke))
