"""Freshness over the API budget, by kind of update: how long a final update (one that
reaches 100%) and an ordinary one wait to be visible when more TrainJobs post than the
write budget can write, against the fair round (every dirty TrainJob written once).

Each scenario runs in a child process of its own: a devcluster in that process, the
status server (``StatusServer``, accept-all authentication) against it with
``--kube-api-qps Q`` and ``--kube-api-burst 2 x Q`` (docs/scaling.md's advice), and
``--trainjobs`` TrainJobs whose updates go straight to the server's writer
(``writer.submit``, what a post that passed its checks does: the HTTP path is measured by
bench/ingest.py and is not what this bench is about). Every TrainJob posts every
``--interval`` seconds, staggered: progress grows with its elapsed time over a length of
its own (so it changes every few posts), two metrics change every post. A fraction
``--finals`` of them finish during the window, spread over its middle half: each posts
its 100% update, then stops. A listener on the server's TrainJob watch cache records
when each stored ``lastUpdatedTime`` became visible; a post's freshness is from its
submission to the first visible status at least as new (inf if none by the end of the
settle time, ``--settle-rounds`` rounds and 2 s after the window).

Printed per scenario and server: the fair round R = trainjobs / Q; final updates' count,
share visible, p50, p99 and max; ordinary posts' p50, p99 and max, also in rounds;
status writes per second during the window. ``--against CHECKOUT`` runs the same scenarios with another
checkout's server (for example a worktree of the commit before the priority classes) in
the same run, one after the other (``--rounds N``: N times, the order reversed every other
round, so that neither always runs first). Asserts nothing. Usage:

    .venv/bin/python bench/over_budget.py [--trainjobs 1000] [--interval 5] [--qps 20,5]
        [--seconds 300] [--finals 0.1] [--settle-rounds 2.5] [--against CHECKOUT]
        [--rounds 1] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import datetime as dt
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import loadavg, parse_args, percentile

BENCH = Path(__file__).resolve()
NS = "bench"


# -- the child: one scenario against one server -----------------------------------------


def stamp_us(text: str) -> int:
    parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(parsed.timestamp() * 1_000_000)


async def scenario(
    trainjobs: int,
    interval: float,
    qps: float,
    seconds: float,
    finals: float,
    settle_rounds: float,
    seed: int,
) -> dict[str, Any]:
    # Imported here: the parent process may run another checkout's packages in children.
    from trainjob_devcluster import DevCluster

    try:
        from trainjob_devcluster.harness.testing import (
            ServingCerts,
            running_server,
            server_config,
        )
    except ImportError:  # a checkout from before the subpackages
        from trainjob_devcluster.testing import (
            ServingCerts,
            running_server,
            server_config,
        )
    from trainjob_status_server.status.validation import parse_trainer_status

    rng = random.Random(seed)
    names = [f"job-{i:05d}" for i in range(trainjobs)]
    ending = set(rng.sample(names, round(trainjobs * finals)))
    fair_round = trainjobs / qps
    settle = settle_rounds * fair_round + 2.0
    sends: list[tuple[str, int, float, bool]] = []  # name, stamp (us), sent (monotonic), final
    seen: dict[str, tuple[list[float], list[int]]] = {}

    def saw(event: Any) -> None:
        if event.new is None:
            return
        trainer = (event.new.get("status") or {}).get("trainerStatus") or {}
        text = trainer.get("lastUpdatedTime")
        if not isinstance(text, str):
            return
        times, newest = seen.setdefault(event.key[1], ([], []))
        value = stamp_us(text)
        times.append(time.monotonic())
        newest.append(max(value, newest[-1]) if newest else value)

    with tempfile.TemporaryDirectory() as tmp:
        certs = ServingCerts.create(Path(tmp))
        async with DevCluster() as cluster:
            cluster.ensure_namespace(NS)
            for name in names:
                cluster.create_trainjob(NS, name)
            config = server_config(
                cluster.kubeconfig_path,
                certs,
                kube_api_qps=qps,
                kube_api_burst=max(1, round(2 * qps)),
                min_write_interval=1.0,
                kube_api_timeout=5.0,
            )
            async with running_server(config) as server:
                server.trainjobs.add_listener(saw)
                writer = server.writer
                start = time.monotonic()
                length = {n: rng.uniform(10 * interval, 60 * interval) for n in names}
                phase = {n: rng.uniform(0, interval) for n in names}
                ends = {n: start + rng.uniform(0.25, 0.75) * seconds for n in ending}
                next_post = {n: start + phase[n] for n in names}
                step = dict.fromkeys(names, 0)
                writes_before = cluster.faults.count("patch", "trainjobs/status")
                while (now := time.monotonic()) < start + seconds:
                    for name in names:
                        if next_post[name] > now:
                            continue
                        done = name in ends and now >= ends[name]
                        elapsed = now - start + length[name] / 3
                        progress = 100 if done else min(99, int(100 * elapsed / length[name]))
                        step[name] += 1
                        wall = dt.datetime.now(dt.UTC)
                        body = {
                            "progressPercentage": progress,
                            "metrics": [
                                {"name": "loss", "value": f"{rng.random():.4f}"},
                                {"name": "step", "value": str(step[name])},
                            ],
                            "lastUpdatedTime": wall.isoformat(),
                        }
                        parsed = parse_trainer_status(
                            {"trainerStatus": body}, trainjob=name, received=wall
                        )
                        assert parsed is not None
                        writer.submit((NS, name), parsed.encoded(wall))
                        sends.append((name, int(wall.timestamp() * 1_000_000), now, done))
                        next_post[name] = math.inf if done else next_post[name] + interval
                    await asyncio.sleep(0.02)
                window_end = time.monotonic()
                writes = cluster.faults.count("patch", "trainjobs/status") - writes_before
                await asyncio.sleep(settle)
                server.trainjobs.remove_listener(saw)

    finals_fresh, ordinary = [], []
    for name, value, sent, done in sends:
        times, newest = seen.get(name, ([], []))
        i = bisect.bisect_left(newest, value)
        fresh = times[i] - sent if i < len(newest) else math.inf
        (finals_fresh if done else ordinary).append(fresh)
    return {
        "fair_round": fair_round,
        "finals": sorted(finals_fresh),
        "ordinary": sorted(ordinary),
        "writes_per_s": writes / (window_end - start),
    }


def child(args: argparse.Namespace) -> None:
    result = asyncio.run(
        scenario(
            args.trainjobs,
            args.interval,
            args.child_qps,
            args.seconds,
            args.finals,
            args.settle_rounds,
            1,
        )
    )
    summary = {
        "fair_round": result["fair_round"],
        "writes_per_s": result["writes_per_s"],
        **summarize("final", result["finals"]),
        **summarize("ordinary", result["ordinary"]),
    }
    print("RESULT " + json.dumps(summary))


def summarize(kind: str, values: list[float]) -> dict[str, float]:
    visible = [v for v in values if v != math.inf]
    return {
        f"{kind}_n": len(values),
        f"{kind}_visible": len(visible) / len(values) if values else math.nan,
        f"{kind}_p50": percentile(values, 0.5),
        f"{kind}_p99": percentile(values, 0.99),
        f"{kind}_max": values[-1] if values else math.nan,
    }


# -- the parent: scenarios, servers, the table ------------------------------------------


def run_child(args: argparse.Namespace, qps: float, checkout: Path | None) -> dict[str, Any]:
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            str(checkout / part) for part in ("client", "server", "devcluster")
        )
    command = [
        sys.executable,
        str(BENCH),
        "--child-qps",
        str(qps),
        "--trainjobs",
        str(args.trainjobs),
        "--interval",
        str(args.interval),
        "--seconds",
        str(args.seconds),
        "--finals",
        str(args.finals),
        "--settle-rounds",
        str(args.settle_rounds),
    ]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            parsed: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return parsed
    raise SystemExit(f"scenario at {qps} QPS failed:\n{out.stdout}\n{out.stderr}")


def seconds(value: float) -> str:
    return "inf" if value == math.inf else f"{value:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trainjobs", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between posts")
    parser.add_argument("--qps", default="20,5", help="write budgets to run, comma-separated")
    parser.add_argument("--seconds", type=float, default=300.0, help="posting window")
    parser.add_argument("--finals", type=float, default=0.1, help="share that finish")
    parser.add_argument(
        "--settle-rounds", type=float, default=2.5, help="rounds waited after the window"
    )
    parser.add_argument("--against", type=Path, help="another checkout, run the same way")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="runs of every scenario, the servers' order reversed every other round",
    )
    parser.add_argument("--child-qps", type=float, help=argparse.SUPPRESS)
    args = parse_args(
        parser,
        {
            "trainjobs": 20,
            "interval": 1.0,
            "qps": "4",
            "seconds": 3.0,
            "finals": 0.2,
            "settle_rounds": 0.2,
            "rounds": 1,
        },
    )
    if args.child_qps is not None:
        child(args)
        return
    print(f"# load average before: {loadavg()}")
    print(
        f"# {args.trainjobs} TrainJobs posting every {args.interval:g} s"
        f" ({args.trainjobs / args.interval:g} writes/s of demand), {args.seconds:g} s window,"
        f" {args.finals:.0%} finishing"
    )
    servers: list[tuple[str, Path | None]] = [("ours", None)]
    if args.against is not None:
        servers.append((f"at {args.against.resolve().name}", args.against.resolve()))
    header = (
        "server       QPS  over  round R   finals n  visible  final p50  final p99  final max"
        "   ordinary p50  ordinary p99  ordinary max  p99/R  max/R  writes/s"
    )
    print(header)
    runs = [
        (float(qps), server)
        for qps in args.qps.split(",")
        for turn in range(args.rounds)
        for server in (servers if turn % 2 == 0 else servers[::-1])
    ]
    for qps, (label, checkout) in runs:
        r = run_child(args, qps, checkout)
        over = args.trainjobs / args.interval / qps
        fair = r["fair_round"]
        print(
            f"{label:<12} {qps:>4g} {over:>4.0f}x {fair:>7.1f} s {r['final_n']:>9}"
            f" {r['final_visible']:>8.0%} {seconds(r['final_p50']):>10}"
            f" {seconds(r['final_p99']):>10} {seconds(r['final_max']):>10}"
            f" {seconds(r['ordinary_p50']):>14} {seconds(r['ordinary_p99']):>13}"
            f" {seconds(r['ordinary_max']):>13} {r['ordinary_p99'] / fair:>6.2f}"
            f" {r['ordinary_max'] / fair:>6.2f} {r['writes_per_s']:>9.2f}",
            flush=True,
        )
    print(f"# load average after: {loadavg()}")


if __name__ == "__main__":
    main()
