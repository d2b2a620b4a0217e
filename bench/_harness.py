"""Helpers shared by the benchmarks that drive child processes and wrk: CPU pinning,
process bookkeeping (everything started is killed, also on errors), wrk runs and their
parsing, /proc figures, Prometheus scrapes and percentiles. Not a benchmark itself.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

SERVER_CPU = 0  # the server under test, alone
LOAD_CPU = 1  # wrk, the devcluster and the bench's own watcher share this one

CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- processes ----------------------------------------------------------------------------


class Processes:
    """Every child a benchmark starts, so all of them are stopped however it ends."""

    def __init__(self) -> None:
        self.children: list[subprocess.Popen[bytes] | subprocess.Popen[str]] = []

    def start(
        self, args: Sequence[str], *, cpu: int | None = None, **popen: object
    ) -> subprocess.Popen[bytes]:
        command = [*(("taskset", "-c", str(cpu)) if cpu is not None else ()), *args]
        proc: subprocess.Popen[bytes] = subprocess.Popen(command, **popen)  # type: ignore[call-overload]
        self.children.append(proc)
        return proc

    def stop(
        self, proc: subprocess.Popen[bytes] | subprocess.Popen[str], grace: float = 15
    ) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        with contextlib.suppress(ValueError):
            self.children.remove(proc)

    def close(self) -> None:
        for proc in reversed(self.children):
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        self.children.clear()


@contextlib.contextmanager
def processes() -> Iterator[Processes]:
    """A Processes that is emptied on exit, SIGTERM and Ctrl-C included."""

    def terminated(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminated)
    procs = Processes()
    try:
        yield procs
    finally:
        procs.close()
        signal.signal(signal.SIGTERM, previous)


def pin(cpu: int) -> None:
    """Pin this process (all its threads started later) to ``cpu``, where there is one."""
    if (os.cpu_count() or 1) > cpu:
        os.sched_setaffinity(0, {cpu})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"nothing listens on {port}")


def wait_file(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} did not appear within {timeout:.0f} s")
        time.sleep(0.05)


# -- what the load posts ------------------------------------------------------------------

POST_SCRIPT = """
wrk.method = "POST"
wrk.body = [[%s]]
wrk.headers["Authorization"] = "Bearer %s"
wrk.headers["Content-Type"] = "application/json"
"""


def typical_status(last_updated: str = "2026-12-02T18:33:25Z") -> dict[str, Any]:
    """A typical post's trainerStatus: progress, ETA and 8 metrics."""
    return {
        "progressPercentage": 42,
        "estimatedRemainingSeconds": 3600,
        "metrics": [{"name": f"metric_{i}", "value": f"{i * 0.125:.4f}"} for i in range(8)],
        "lastUpdatedTime": last_updated,
    }


def post_script(body: str, token: str = "bench") -> str:
    """A wrk script that posts ``body`` (JSON) with ``token``, the same post every time."""
    return POST_SCRIPT % (body, token)


# -- /proc --------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def loadavg() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


# -- wrk ----------------------------------------------------------------------------------

_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


@dataclass
class WrkResult:
    completed: int  # responses received
    seconds: float
    non2xx: int
    errors: dict[str, int] = field(default_factory=dict)  # connect, read, write, timeout
    p50_ms: float = math.nan
    p99_ms: float = math.nan

    @property
    def accepted(self) -> int:
        return self.completed - self.non2xx

    @property
    def accepted_per_s(self) -> float:
        return self.accepted / self.seconds


def parse_wrk(out: str) -> WrkResult:
    done = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", out)
    if done is None:
        raise RuntimeError(f"unexpected wrk output:\n{out}")
    seconds = float(done.group(2)) * _UNITS[done.group(3)] / 1000
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    result = WrkResult(int(done.group(1)), seconds, int(non2xx.group(1)) if non2xx else 0)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if errors:
        result.errors = dict(
            zip(("connect", "read", "write", "timeout"), map(int, errors.groups()), strict=True)
        )
    for label, attr in (("50%", "p50_ms"), ("99%", "p99_ms")):
        found = re.search(rf"^\s+{re.escape(label)}\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M)
        if found:
            setattr(result, attr, float(found.group(1)) * _UNITS[found.group(2)])
    return result


def wrk_command(
    url: str, script: Path, seconds: float, connections: int, timeout: float = 30
) -> list[str]:
    return [
        "taskset", "-c", str(LOAD_CPU), "wrk", "--latency", "-t", "1", "-c", str(connections),
        "-d", f"{seconds:.0f}s", "--timeout", f"{timeout:.0f}s", "-s", str(script), url,
    ]  # fmt: skip


def run_wrk(
    url: str, script: Path, seconds: float, connections: int, timeout: float = 30
) -> WrkResult:
    out = subprocess.run(
        wrk_command(url, script, seconds, connections, timeout),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return parse_wrk(out)


# -- Prometheus ---------------------------------------------------------------------------

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str, prefix: str = "") -> Samples:
    """Every sample of a /metrics page whose name starts with ``prefix``, by (name, sorted
    labels)."""
    with urllib.request.urlopen(url, timeout=30) as answer:
        text = answer.read().decode()
    if prefix:
        # Parsing a page of 100,000 series takes seconds; most are not wanted.
        text = "\n".join(
            line
            for line in text.splitlines()
            if line.startswith(prefix) or (line.startswith("#") and f" {prefix}" in line)
        )
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(
        value
        for (sample, have), value in samples.items()
        if sample == name and all((k, v) in have for k, v in labels.items())
    )


def histogram_quantile(before: Samples, after: Samples, name: str, q: float) -> float:
    """Prometheus-style quantile of a histogram's increase between two scrapes (linear
    within a bucket); nan without observations, inf in the +Inf bucket."""
    buckets = []
    for (sample, labels), value in after.items():
        if sample == f"{name}_bucket":
            bound = float(dict(labels)["le"])
            buckets.append((bound, value - before.get((sample, labels), 0.0)))
    buckets.sort()
    if not buckets or buckets[-1][1] <= 0:
        return math.nan
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return math.inf
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, count
    return math.inf


# -- figures ------------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (nan when empty)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


# -- the command line ---------------------------------------------------------------------


def parse_args(parser: argparse.ArgumentParser, smoke: dict[str, Any]) -> argparse.Namespace:
    """The parsed command line, with ``--smoke`` added: it swaps the defaults for
    ``smoke``'s (tiny inputs, windows of a second or so), to check that the bench runs to
    the end; its figures mean nothing. Flags given explicitly still win."""
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny inputs and short windows: checks the bench runs; figures mean nothing",
    )
    if parser.parse_known_args()[0].smoke:
        parser.set_defaults(**smoke)
    return parser.parse_args()
