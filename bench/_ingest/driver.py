"""The ingest bench's driver: the devcluster and watcher children, servers under test
started as ``serve``, and runs of wrk against them."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import ssl
import subprocess
import sys
import time
import tracemalloc
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _harness import (
    LOAD_CPU,
    SERVER_CPU,
    Processes,
    Samples,
    cpu_seconds,
    free_port,
    histogram_quantile,
    parse_wrk,
    post_script,
    rss_kib,
    run_wrk,
    scrape,
    total,
    wait_file,
    wait_port,
    wrk_command,
)
from ingest_accept import BODY as CEILING_BODY  # type: ignore[import-not-found]
from ingest_accept import PATH as CEILING_PATH

from .freshness import freshness, read_visible
from .load import body_parts, lua_script
from .objects import PEER_BUDGET, POST_INTERVAL, Scenario
from .rows import Row, row_text

SCRIPT = Path(__file__).resolve().parents[1] / "ingest.py"  # also runs the children


@dataclass
class Server:
    label: str
    proc: subprocess.Popen[bytes]
    port: int
    metrics_port: int
    log: Path
    coalescing: bool

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def metrics(self) -> Samples:
        return scrape(f"http://127.0.0.1:{self.metrics_port}/metrics", "trainjob_status_")


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path, procs: Processes) -> None:
        self.args = args
        self.work = work
        self.procs = procs
        self.populated: list[Scenario] = []
        self.runs = 0
        self.rows: list[Row] = []
        self.cluster = procs.start(
            [sys.executable, str(SCRIPT), "--cluster", str(work)],
            cpu=LOAD_CPU,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        wait_file(work / "kubeconfig")
        self.issuer = (work / "issuer").read_text()
        procs.start(
            [sys.executable, str(SCRIPT), "--watcher", str(work)],
            cpu=LOAD_CPU,
            stderr=subprocess.DEVNULL,
        )
        self.client_tls = ssl.create_default_context(cafile=str(work / "ca.crt"))

    # -- the devcluster --------------------------------------------------------------

    def ask(self, command: str) -> dict[str, Any]:
        assert self.cluster.stdin is not None
        assert self.cluster.stdout is not None
        self.cluster.stdin.write(command.encode() + b"\n")
        self.cluster.stdin.flush()
        while True:
            line = self.cluster.stdout.readline()
            if not line:
                raise SystemExit("the devcluster exited")
            if line.startswith(b"@@"):
                answer: dict[str, Any] = json.loads(line[2:])
                return answer

    def writes_and_reads(self) -> tuple[int, int]:
        """PATCHes of trainjobs/status, and every GET and LIST (cache misses, relists; the
        watches themselves are not counted)."""
        counts = self.ask("counts")
        writes = int(counts.get("patch trainjobs/status", 0))
        reads = int(sum(n for key, n in counts.items() if key.startswith(("get ", "list "))))
        return writes, reads

    def populate(self, scenario: Scenario) -> None:
        took = self.ask(f"populate {scenario.name} {scenario.trainjobs} {scenario.pods}")["seconds"]
        self.populated.append(scenario)
        want_jobs = sum(s.trainjobs for s in self.populated)
        want_pods = sum(s.total_pods for s in self.populated)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                jobs, pods = map(int, (self.work / "counts").read_text().split())
                if jobs >= want_jobs and pods >= want_pods:
                    break
            time.sleep(0.1)
        else:
            raise SystemExit("the watcher never saw the populated objects")
        time.sleep(1)  # a margin for the server's own watches
        print(
            f"# populated {scenario.label}: {scenario.trainjobs:,} TrainJobs, "
            f"{scenario.total_pods:,} pods and tokens in {took:.1f} s"
        )

    def targets(self, scenario: Scenario) -> Path:
        return self.work / f"targets-{scenario.name}"

    # -- servers ---------------------------------------------------------------------

    def start_server(self, label: str, flags: list[str], *, coalescing: bool = True) -> Server:
        port, metrics_port = free_port(), free_port()
        log = self.work / f"server-{label.split()[0].strip(',')}-{port}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINJOB_STATUS_")}
        command = [
            sys.executable, "-m", "trainjob_status_server.cli", "serve",
            "--host", "127.0.0.1", "--port", str(port), "--metrics-port", str(metrics_port),
            "--probe-port", "0", "--webhook-port", "0",
            "--kubeconfig", str(self.work / "kubeconfig"), "--issuer", self.issuer,
            "--tls-cert-file", str(self.work / "tls.crt"),
            "--tls-key-file", str(self.work / "tls.key"), *flags,
        ]  # fmt: skip
        with log.open("wb") as sink:
            proc = self.procs.start(
                command, cpu=SERVER_CPU, env=env, stdout=subprocess.DEVNULL, stderr=sink
            )
        server = Server(label, proc, port, metrics_port, log, coalescing)
        wait_port(port)
        deadline = time.monotonic() + 120
        while not self._ready(server):
            if time.monotonic() > deadline or proc.poll() is not None:
                tail = log.read_text(errors="replace").splitlines()[-20:]
                raise SystemExit(f"{label}: not ready; its log ends:\n" + "\n".join(tail))
            time.sleep(0.2)
        print(f"# started {label}: serve {' '.join(flags)}")
        return server

    def _ready(self, server: Server) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{server.metrics_port}/readyz", timeout=5
            ) as answer:
                if answer.status != 200:
                    return False
        except (urllib.error.URLError, OSError):
            return False
        return not self.populated or self._probe(server, self.populated[0])

    def _probe(self, server: Server, scenario: Scenario) -> bool:
        """One real post: 200 once token checks are ready (keys, pod cache)."""
        _, path, token = self.targets(scenario).read_text().split("\n", 1)[0].split()
        head, tail = body_parts()
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        request = urllib.request.Request(
            server.url + path,
            data=(head + now + tail).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.client_tls) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop_server(self, server: Server) -> None:
        self.procs.stop(server.proc, grace=30)

    # -- runs ------------------------------------------------------------------------

    def script(self, scenario: Scenario, connections: int, interval_ms: int) -> tuple[Path, Path]:
        self.runs += 1
        sends = self.work / f"sends-{self.runs}.log"
        script = self.work / f"load-{self.runs}.lua"
        script.write_text(lua_script(self.targets(scenario), sends, connections, interval_ms))
        return script, sends

    def warm(self, server: Server, scenario: Scenario) -> None:
        """Every pod posts at least once (at 700 posts/s or more): its token is verified
        and cached, its TrainJob has an update pending."""
        if not self.args.warm_seconds:
            return
        script, _ = self.script(scenario, self.args.connections, 0)
        seconds = self.args.warm_seconds + scenario.total_pods / 700
        run_wrk(server.url, script, seconds, self.args.connections)
        self.settle(server, self.args.settle / 3)

    def settle(self, server: Server, limit: float) -> float:
        """Wait until every accepted post's write is done (``limit`` at most); seconds
        waited."""
        started = time.monotonic()
        quiet_since, last, pending, scraped = started, -1, 1.0, 0.0
        while (waited := time.monotonic() - started) < limit:
            writes, _ = self.writes_and_reads()
            if time.monotonic() - scraped >= 1:
                # Once a second: the page holds every TrainJob's series, and rendering
                # it costs the server under test.
                pending = total(server.metrics(), "trainjob_status_pending_writes")
                scraped = time.monotonic()
            if writes != last:
                quiet_since, last = time.monotonic(), writes
            # The direct writer has no pending count: its writes are in flight.
            if pending == 0 and time.monotonic() - quiet_since >= (0.5 if server.coalescing else 2):
                break
            time.sleep(0.25)
        time.sleep(0.3)  # the watcher flushes every 50 ms
        return waited

    def run(self, server: Server, scenario: Scenario, paced: bool) -> Row:
        args = self.args
        if paced and not server.coalescing:
            # One write per post at 5/s: every connection waits its turn in the budget, so
            # the first answers take connections / 5 s; the window covers that queue.
            rate = scenario.total_pods / POST_INTERVAL
            connections = args.paced_connections
            interval_ms = max(1, round(connections / rate * 1000))
            seconds = args.paced_seconds + connections / float(PEER_BUDGET[0])
        elif paced:
            rate = scenario.total_pods / POST_INTERVAL
            # At least 100 ms between two posts of a connection, so latency hardly slows
            # the pace.
            connections = max(args.paced_connections, math.ceil(rate * 0.1))
            interval_ms = max(1, round(connections / rate * 1000))
            seconds = args.paced_seconds
        else:
            connections = args.connections
            rate, interval_ms, seconds = 0.0, 0, args.seconds
        script, sends = self.script(scenario, connections, interval_ms)
        before = server.metrics()
        writes0, gets0 = self.writes_and_reads()
        log0 = server.log.stat().st_size
        cpu0 = cpu_seconds(server.proc.pid)
        result = run_wrk(server.url, script, seconds, connections)
        cpu = (cpu_seconds(server.proc.pid) - cpu0) / result.seconds
        writes1, gets1 = self.writes_and_reads()
        log_bytes = server.log.stat().st_size - log0
        waited = self.settle(server, args.settle)
        after = server.metrics()
        row = Row(
            config=server.label,
            scenario=scenario,
            load="paced" if paced else "saturate",
            offered=rate if paced else None,
            wrk=result,
            cpu=cpu,
            writes=writes1 - writes0,
            other_api=gets1 - gets0,
            fresh=freshness(sends, read_visible(self.work / "visible.log")),
            settle=waited,
            log_bytes=log_bytes,
        )
        if server.coalescing:
            name = "trainjob_status_write_freshness_seconds"
            row.hist_p50 = histogram_quantile(before, after, name, 0.5)
            row.hist_p99 = histogram_quantile(before, after, name, 0.99)
        self.rows.append(row)
        print(row_text(row), flush=True)
        return row

    def ceiling(self) -> tuple[float, float]:
        """The bare aiohttp handler (ingest_accept.py's): posts/s and CPU us per post."""
        port = free_port()
        proc = self.procs.start(
            [sys.executable, str(SCRIPT), "--ceiling", str(port), str(self.work / "tls.crt"),
             str(self.work / "tls.key")],
            cpu=SERVER_CPU, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_port(port)
        script = self.work / "ceiling.lua"
        script.write_text(post_script(CEILING_BODY))
        url = f"https://127.0.0.1:{port}{CEILING_PATH}"
        if self.args.warm_seconds:
            run_wrk(url, script, self.args.warm_seconds, self.args.connections)
        cpu0 = cpu_seconds(proc.pid)
        result = run_wrk(url, script, self.args.seconds, self.args.connections)
        cpu = cpu_seconds(proc.pid) - cpu0
        self.procs.stop(proc)
        us = cpu / max(1, result.accepted) * 1e6
        print(
            f"# ceiling (bare aiohttp HTTPS handler: read, parse, echo): "
            f"{result.accepted_per_s:,.0f} posts/s, server CPU {cpu / result.seconds:.2f}, "
            f"{us:.0f} us CPU per post, p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms"
        )
        return result.accepted_per_s, us

    def connections_probe(self, server: Server, scenario: Scenario, connections: int) -> float:
        """KiB of server RSS per open keep-alive TLS connection: ``connections`` pods each
        posting every 5 s on their own connection."""
        script, _ = self.script(scenario, connections, int(POST_INTERVAL * 1000))
        before = rss_kib(server.proc.pid)
        seconds = self.args.probe_seconds
        wrk = self.procs.start(
            wrk_command(server.url, script, seconds, connections),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(seconds * 3 / 4)
        during = rss_kib(server.proc.pid)
        out, _ = wrk.communicate(timeout=60)
        self.procs.children.remove(wrk)
        result = parse_wrk(out.decode())
        per = (during - before) / connections
        print(
            f"# {connections:,} open connections, each posting every {POST_INTERVAL:.0f} s: "
            f"RSS {before / 1024:.1f} -> {during / 1024:.1f} MiB, {per:.1f} KiB per connection "
            f"({result.accepted:,} posts accepted, "
            f"{result.non2xx + sum(result.errors.values())} bad)"
        )
        self.settle(server, self.args.settle / 3)
        return per


def heap_kib(obj: dict[str, Any], copies: int = 200) -> float:
    """KiB of Python heap one decoded copy of ``obj`` takes, as a watch cache holds it."""
    text = json.dumps(obj)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    kept = [json.loads(text) for _ in range(copies)]
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del kept
    return used / copies / 1024


def object_sizes(bench: Bench) -> str:
    """What one cached TrainJob (its status written) and one cached pod cost."""
    parts = []
    for label, command in (
        (
            "TrainJob with a written status",
            "object trainjobs trainer.kubeflow.org bench-1 job-00000",
        ),
        ("pod", "object pods - bench-10k job-00000-node-0-0"),
    ):
        obj = bench.ask(command)
        bare = {
            **obj,
            "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"},
        }
        parts.append(
            f"{label} {len(json.dumps(obj)):,} B of JSON, {heap_kib(obj):.1f} KiB "
            f"({heap_kib(bare):.1f} KiB without managedFields)"
        )
    return "; ".join(parts)
