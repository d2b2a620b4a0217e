"""Every benchmark in bench/ runs to the end at its smoke size (``--smoke``: tiny inputs,
windows of a second or so) and prints the figures it is documented to print. Nothing
here looks at the figures' values: speed is the benchmarks' own business.

The runs spend most of their time waiting (process start-up, fixed windows, settling),
and at smoke size their figures mean nothing, so the selected ones run a few at a time
from the start of the module; each test then checks its own run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from trainjob_devcluster.harness.controlplane import AssetsMissing, find_assets
from trainjob_devcluster.harness.kubeflow_trainer import (
    TrainerAssetsMissing,
    find_trainer_assets,
    private_mounts_usable,
)
from trainjob_devcluster.harness.pytest_plugin import require_binary

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"[\d,]+(?:\.\d+)?"
SECONDS = rf"(?:{NUMBER} s|> cap)"  # a quantile that reaches a sample never seen: > cap
AT_ONCE = 3


@dataclass(frozen=True)
class Bench:
    script: str
    figures: tuple[str, ...]  # regular expressions, each to match a line of the output
    args: tuple[str, ...] = ()
    binaries: tuple[str, ...] = ()
    # Needs Kubeflow Trainer's programs (make trainer-assets).
    trainer: bool = False
    # Needs the real control plane (make kube-assets).
    real: bool = False

    def __str__(self) -> str:
        return self.script


# Longest first, so that the short ones run beside it.
BENCHES = [
    Bench(
        "ingest",
        (
            rf"^# ceiling \(bare aiohttp HTTPS handler: read, parse, echo\): {NUMBER} posts/s",
            rf"^ours\s+1 TJ x 20 pods\s+saturate\s+{NUMBER}",
            r"^baseline \(direct\)\s+10 TJ x 1 pods\s+paced",
            rf"^memory \(ours, VmRSS\): 0 TrainJobs tracked {NUMBER} MiB",
            rf"^  1 TJ x 20 pods\s+posts/s x{NUMBER}; writes/post x{NUMBER}",
            rf"RSS per tracked TrainJob at 10: {NUMBER} KiB marginal",
        ),
        binaries=("wrk", "taskset"),
    ),
    Bench(
        "admission_flood",
        (
            rf"^round 1: {NUMBER} reviews naming unknown TrainJobs: {NUMBER} API GETs, "
            rf"admission answer median {NUMBER} ms",
            rf"status write alone {NUMBER} ms \(200\), during the flood {NUMBER} ms \(200\)",
        ),
    ),
    Bench(
        "crowds",
        (
            r"^# server: --max-connections 1024, --max-connections-per-ip 256, "
            r"--first-request-timeout 5 s",
            *(
                rf"^{kind}: 2 addresses x 10 connections \({NUMBER} slots held at the start\); "
                rf"posts answered 200 within 2 s: {NUMBER}/3 \({NUMBER}%\)"
                for kind in (
                    "connect-only",
                    "tls-only",
                    "slow-headers",
                    "idle-keepalive",
                    "drip-body",
                )
            ),
            rf"admission reviews answered: {NUMBER}/1; crowd connections closed for newcomers",
        ),
    ),
    Bench(
        "scrapers",
        tuple(
            rf"^{port} metrics port, page {NUMBER} MiB, 2 stalled scrapers: RSS {NUMBER} -> "
            rf"peak {NUMBER} -> after {NUMBER} MiB .*reading scrapes answered whole within "
            rf"5 s: {NUMBER}/1; of {NUMBER} stalled connections opened, closed by "
            rf"--write-timeout 0.5 s: {NUMBER}, closed for a reader: {NUMBER}"
            for port in ("plain", "TLS")
        ),
    ),
    Bench(
        "review_flood",
        (
            rf"^flood: 2 addresses, {NUMBER} requests \(by code: .*\); TokenReviews made: {NUMBER}",
            rf"^scrapes answered 200: {NUMBER}/{NUMBER} \(--metrics-auth-cache-ttl 1 s\)",
            rf"^first posts of new pods \(--token-review\) answered 200: {NUMBER}/{NUMBER}, ",
        ),
    ),
    Bench(
        "tenants",
        (
            *(
                rf"^forged\s+{server}\s+attacker {NUMBER} posts/s \(.*\); TokenReviews made: "
                rf"{NUMBER}; victim's genuine posts answered 200: {NUMBER}/{NUMBER}, "
                rf"429: {NUMBER}/{NUMBER}, other: {NUMBER}"
                for server in ("ours", r"at \S+")
            ),
            *(
                rf"^share\s+{server}\s+B visible after p50 (?:{NUMBER}|unseen) s, "
                rf"max (?:{NUMBER}|unseen) s \(.*\); A's writes meanwhile: [\d, ]+; "
                rf"status writes/s {NUMBER}"
                for server in ("ours", r"at \S+")
            ),
        ),
        # The same checkout on both sides: a smoke run checks the bench, not a change.
        args=("--against", "."),
    ),
    Bench(
        "auth_verify",
        (
            rf"^server, verified-cached\s+{NUMBER} posts/s",
            rf"^verified-uncached\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}",
            rf"^authenticate\(\), cached\s+{NUMBER} us CPU per call",
        ),
        binaries=("wrk", "taskset"),
    ),
    Bench(
        "client",
        (
            rf"^  update_trainjob_status, server answering\s+median\s+{NUMBER}",
            rf"^  ratio blocking / ours: {NUMBER}x",
        ),
    ),
    Bench(
        "client_import",
        (
            rf"^this checkout\s+import trainjob_status\s+trainjob_status\s+{NUMBER} us cumulative"
            rf"\s+importlib\.metadata\s+0 us \(loaded in 0/3\)",
            rf"^this checkout\s+\.\.\. and read __version__\s+trainjob_status\s+{NUMBER} us",
        ),
    ),
    Bench(
        "connection_memory",
        (
            rf"^round 1: idle {NUMBER} MiB, {NUMBER} stalled open {NUMBER} MiB "
            rf"\({NUMBER} KiB per connection\), after close {NUMBER} MiB",
        ),
        binaries=("taskset",),
    ),
    Bench(
        "exporter",
        (
            rf"^  render whole page, Prometheus text\s+{NUMBER} ms\s+{NUMBER} us/series",
            rf"^  same series via prometheus_client's renderer\s+{NUMBER} ms",
            rf"^  whole page, capped at {NUMBER}\s+{NUMBER} ms",
        ),
    ),
    Bench(
        "client_waits",
        (
            rf"^flush\({NUMBER}\) #1, server answering after {NUMBER} s: True after {NUMBER} s",
            rf"^close\(\) during a dripping TLS handshake \(socket timeout {NUMBER} s\): "
            rf"{NUMBER}-{NUMBER} s, sender alive after close in 0 of 1",
        ),
    ),
    Bench(
        "frameworks",
        # The reporter-alone rows: no torch, transformers or Lightning needed.
        (
            rf"^client\s+ours\s+healthy\s+steps\s+{NUMBER}\s+steps/s\s+{NUMBER}.*stored progress 100",
        ),
        args=("--only", "client"),
    ),
    Bench(
        "over_budget",
        (
            rf"^# {NUMBER} TrainJobs posting every {NUMBER} s \({NUMBER} writes/s of demand\)",
            rf"^ours\s+{NUMBER}\s+{NUMBER}x\s+{NUMBER} s\s+{NUMBER}\s+{NUMBER}%",
        ),
    ),
    Bench(
        "ingest_accept",
        (
            rf"^round 1: bare aiohttp handler on asyncio\s+{NUMBER} posts/s",
            rf"^round 1: bare aiohttp handler on uvloop\s+{NUMBER} posts/s",
            rf"^round 1: ingest server \(token checks, coalescing writer\)\s+{NUMBER} posts/s",
            rf"^  ingest server \(token checks, coalescing writer\)\s+{NUMBER} posts/s\s+"
            rf"{NUMBER} us CPU per post",
            rf"^ours / the faster bare handler, by round: 1: {NUMBER} \((asyncio|uvloop)\)",
            rf"^ratio to the ceiling \((asyncio|uvloop), the faster\): {NUMBER} of the medians; "
            rf"per round min {NUMBER}, max {NUMBER}",
            rf"^round 1: no framework: httptools on asyncio's TLS\s+{NUMBER} posts/s",
            rf"^no framework: {NUMBER} us CPU per post; aiohttp's own request and answer "
            rf"machinery costs the bare handler on asyncio -?{NUMBER} us per post",
        ),
        args=("--floor",),
        binaries=("wrk", "taskset"),
    ),
    Bench(
        "trainer_side_by_side",
        (
            rf"^posts/s\s+{NUMBER}\s+{NUMBER}\s+x{NUMBER}",
            rf"^writes/post\s+{NUMBER}\s+{NUMBER}",
            r"^answer: forged token\s+401 Unauthorized\s+403 Forbidden",
            r"^answer: another TrainJob's pod\s+403 Forbidden\s+200",
            r"^answer: malformed body\s+422 Invalid\s+422 Invalid",
            rf"^freshness p99 s, 3 TJ\s+{NUMBER}\s+{NUMBER}",
            rf"^freshness p99 s, unseen = inf, 3 TJ\s+(?:{NUMBER}|> cap)\s+(?:{NUMBER}|> cap)",
            rf"^% of posts never shown, 3 TJ\s+{NUMBER}\s+{NUMBER}",
            rf"^memory KiB per TrainJob\s+-?{NUMBER}\s+-?{NUMBER}",
        ),
        # The development cluster: a smoke run need not build kube-apiserver.
        args=("--api", "devcluster"),
        binaries=("taskset", "unshare"),
        trainer=True,
    ),
    Bench(
        "trainer_write_cost",
        (
            rf"^\s+3 TJ\s+0 QPS\s+writes\s+0 .*reconciles/s\s+{NUMBER} \(-/write\)"
            rf".*JobSet latency p50 {NUMBER} s p99 {NUMBER} s \(n=3\)",
            rf"^\s+3 TJ\s+5 QPS\s+writes\s+15 \(5\.0/s, 0 failed\)\s+reconciles/s\s+{NUMBER}"
            rf" \(-?{NUMBER}/write\)\s+CPU\s+{NUMBER} ms/s, -?{NUMBER} ms/write",
        ),
        binaries=("taskset", "unshare"),
        trainer=True,
        real=True,
    ),
    Bench(
        "fresh_reads",
        tuple(
            rf"^{replicas}\s+3 TJ  posts {NUMBER} \({NUMBER} failed.*\)"
            rf"  fresh read p50 {SECONDS} p99 {SECONDS} \(n={NUMBER}, unseen {NUMBER}.*\)"
            rf"  gauge p50 {SECONDS} p99 {SECONDS} \(n={NUMBER}, unseen {NUMBER}; "
            rf"scrapes {NUMBER} \({NUMBER} failed\), exported by 2\+ replicas: {NUMBER} TJ at "
            rf"most, in {NUMBER}\)  status writes/TJ/min {NUMBER}"
            rf"  stored p50 {SECONDS} p99 {SECONDS} \(n={NUMBER}, unseen {NUMBER}\)"
            for replicas in ("1 replica", "3 replicas")
        ),
        binaries=("taskset",),
        real=True,
    ),
    Bench(
        "answer_delay",
        (
            rf"^  loopback c=1   ours\s+{NUMBER} posts/s\s+{NUMBER} us/post\s+p50\s+{NUMBER} ms",
            rf"^  loopback c=4   cpu_us {NUMBER} \({NUMBER}\); p50_ms {NUMBER}",
        ),
        # The same checkout on both sides: a smoke run checks the bench, not a change.
        args=("--against", "."),
        binaries=("wrk", "taskset"),
    ),
]


def test_every_bench_has_a_smoke_run() -> None:
    assert sorted(b.script for b in BENCHES) == sorted(
        p.stem for p in (ROOT / "bench").glob("*.py") if not p.stem.startswith("_")
    )


def require_trainer_assets() -> None:
    """Skips where ``make trainer-assets`` has not run or mount namespaces are not
    allowed, except under CI, where that fails."""
    try:
        find_trainer_assets(ROOT / "tools" / "trainer" / "go.mod")
        why = private_mounts_usable()
    except TrainerAssetsMissing as missing:
        why = str(missing)
    if why and os.environ.get("TRAINJOB_STATUS_CI") == "1":
        pytest.fail(why)
    if why:
        pytest.skip(why)


def require_kube_assets() -> None:
    """Skips where ``make kube-assets`` has not run, except under CI, where that fails."""
    try:
        find_assets()
    except AssetsMissing as missing:
        if os.environ.get("TRAINJOB_STATUS_CI") == "1":
            pytest.fail(str(missing))
        pytest.skip(str(missing))


def run(bench: Bench) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINJOB_STATUS_")}
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{bench.script}.py"), *bench.args, "--smoke"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.fixture(scope="module")
def runs(
    request: pytest.FixtureRequest,
) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """The selected benches' smoke runs, started in BENCHES' order, AT_ONCE at a time."""
    selected = {
        item.callspec.params["bench"].script
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and hasattr(item, "callspec")
        and isinstance(item.callspec.params.get("bench"), Bench)
    }
    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        yield {b.script: pool.submit(run, b) for b in BENCHES if b.script in selected}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("bench", BENCHES, ids=str)
def test_bench_runs_at_smoke_size(
    bench: Bench, runs: dict[str, Future[subprocess.CompletedProcess[str]]]
) -> None:
    for binary in bench.binaries:
        require_binary(binary, "util-linux" if binary in ("taskset", "unshare") else None)
    if bench.trainer:
        require_trainer_assets()
    if bench.real:
        require_kube_assets()
    done = runs[bench.script].result()
    output = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    assert done.returncode == 0, output
    for figure in bench.figures:
        assert re.search(figure, done.stdout, re.MULTILINE), f"no line matches {figure!r}\n{output}"
