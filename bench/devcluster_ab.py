"""Two builds of the development cluster compared in alternating rounds on one core: the
way to tell a change of a few percent from the machine's drift, which on these virtual
machines moves every figure by a fifth from one minute to the next.

Each build is a checkout of the repository (a ``git worktree`` of another commit, say);
it runs as ``trainjob-devcluster serve`` with that checkout's ``client``, ``server`` and
``devcluster`` folders first on PYTHONPATH. Both run pinned to CPU 0 at once, each with the writes'
200 TrainJobs and the watches of bench/devcluster_bench.py open. wrk (on CPU 1) then loads
one build at a time for ``--seconds``, A then B, then B then A, for ``--rounds`` rounds:
an idle build costs next to nothing, and the drift lands on both alike. Per round: each
build's writes/s, CPU per write and the host's steal time, and the ratio of B's CPU per
write to A's; then the medians. Prints figures; asserts nothing. Usage:

    git worktree add /tmp/base HEAD~1
    .venv/bin/python bench/devcluster_ab.py /tmp/base . [--rounds 10]
        [--seconds 4] [--watches 1000] [--smoke]

``--smoke`` (one round of a second, 20 watches) checks that it runs; it can take the
same checkout twice (``. .``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import devcluster_bench as bench
from _harness import parse_args


@dataclass
class Build:
    label: str
    source: Path
    proc: subprocess.Popen[bytes]
    config: dict[str, Any]
    workdir: Path
    rounds: list[bench.Measured] = field(default_factory=list)


def cli_module(source: Path) -> str:
    """The command line's module in a checkout: grouped into subpackages, or flat as it
    was before, so either side of an A/B may be an older checkout."""
    package = source / "devcluster" / "trainjob_devcluster"
    if (package / "harness" / "cli.py").is_file():
        return "trainjob_devcluster.harness.cli"
    return "trainjob_devcluster.cli"


def start(label: str, source: Path, workdir: Path) -> Build:
    folders = [source / "client", source / "server", source / "devcluster"]
    if not (source / "devcluster" / "trainjob_devcluster").is_dir():
        raise SystemExit(f"{source} is not a checkout with devcluster/trainjob_devcluster")
    kubeconfig = workdir / "kubeconfig"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(f.resolve()) for f in folders)}
    command = [
        "taskset", "-c", str(bench.SERVER_CPU),
        sys.executable, "-m", cli_module(source), "serve",
        "--port", "0", "--kubeconfig-out", str(kubeconfig),
    ]  # fmt: skip
    proc = subprocess.Popen(command, stderr=subprocess.DEVNULL, env=env)
    for _ in range(300):
        if kubeconfig.exists():
            return Build(label, source, proc, yaml.safe_load(kubeconfig.read_text()), workdir)
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"build {label} ({source}) did not start")


async def populate(build: Build) -> None:
    async with bench.Client(build.config, 8) as client:
        await client.call(
            "POST", "/api/v1/namespaces", {"metadata": {"name": bench.NS}}, "application/json"
        )
        for i in range(bench.JOBS):
            body = {"metadata": {"name": f"job-{i}"}, "spec": {"runtimeRef": {"name": "rt"}}}
            path = f"{bench.TJ}/namespaces/{bench.NS}/trainjobs"
            await client.call("POST", path, body, "application/json")


async def compare(builds: list[Build], args: argparse.Namespace) -> None:
    loads = []
    for build in builds:
        await populate(build)
        writes = bench.WrkWrites(build.config, build.workdir, args.connections)
        await writes.run(min(2.0, args.seconds))  # warm-up
        probe = bench.Client(build.config, 4)
        watchers = bench.Client(build.config, args.watches + 10)
        await probe.__aenter__()
        await watchers.__aenter__()
        opened = asyncio.Event()
        tasks = await bench.open_watches(watchers, args.watches, [0], opened)
        await asyncio.wait_for(opened.wait(), 60)
        loads.append((build, writes, probe, watchers, tasks))
    await asyncio.sleep(1)
    try:
        for r in range(args.rounds):
            for build, writes, probe, _, _ in loads if r % 2 == 0 else loads[::-1]:
                m = await bench.measure(writes, probe, build.proc.pid, args.seconds)
                build.rounds.append(m)
                print(
                    f"round {r + 1}, {build.label}: {m.load.writes_per_s:.0f} writes/s, "
                    f"{bench.cpu_per_write_us(m):.0f} us per write, "
                    f"{m.load.non2xx} non-2xx, host steal {100 * m.steal:.0f}%",
                    flush=True,
                )
    finally:
        for _, _, probe, watchers, tasks in loads:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await watchers.__aexit__(None, None, None)
            await probe.__aexit__(None, None, None)


def summary(a: Build, b: Build) -> None:
    for build in (a, b):
        rates = [m.load.writes_per_s for m in build.rounds]
        costs = [bench.cpu_per_write_us(m) for m in build.rounds]
        print(
            f"{build.label} ({build.source}): median {statistics.median(rates):.0f} writes/s, "
            f"{statistics.median(costs):.0f} us per write"
        )
    ratios = [
        bench.cpu_per_write_us(mb) / bench.cpu_per_write_us(ma)
        for ma, mb in zip(a.rounds, b.rounds, strict=True)
    ]
    print(
        f"CPU per write, B/A by round: {', '.join(f'{x:.3f}' for x in ratios)}; "
        f"median {statistics.median(ratios):.3f} (below 1: B is cheaper)"
    )


async def main(args: argparse.Namespace) -> None:
    bench.pin(bench.LOAD_CPU)
    with tempfile.TemporaryDirectory() as tmp:
        builds = []
        try:
            for label, source in (("A", args.a), ("B", args.b)):
                workdir = Path(tmp) / label
                workdir.mkdir()
                builds.append(start(label, source, workdir))
            await compare(builds, args)
        finally:
            for build in builds:
                build.proc.send_signal(signal.SIGTERM)
                build.proc.wait(10)
    summary(*builds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="build A: a checkout of the repository")
    parser.add_argument("b", type=Path, help="build B: a checkout of the repository")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each load")
    parser.add_argument("--watches", type=int, default=1000, help="open on each build")
    parser.add_argument("--connections", type=int, default=32, help="wrk's connections")
    arguments = parse_args(parser, {"rounds": 1, "seconds": 1.0, "watches": 20, "connections": 4})
    if arguments.rounds < 1:
        parser.error("--rounds must be at least 1")
    asyncio.run(main(arguments))
