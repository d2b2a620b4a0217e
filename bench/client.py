"""What a training loop pays for reporting status: the caller-thread cost of one
``update_trainjob_status`` call, and the caller-thread time of 10,000 calls against a
blocking ``requests``-based client doing the same job, as a ratio in one run.

A local HTTPS status server (stdlib, answers 200 with the echoed body after
``--latency-ms``, or holds every request while told to stall) runs in its own process,
pinned to CPU 1 when there is one; this process (the caller and its sending thread) on
CPU 0. Prints figures; asserts nothing.

The blocking client posts each update on the caller's thread as the Kubeflow SDK does,
but over a kept-alive ``requests.Session`` (its best case; the SDK opens a connection per
post). Without ``requests`` installed it falls back to ``http.client`` and says so.

    .venv/bin/python bench/client.py [--calls 100000] [--blocking-calls 10000] [--latency-ms 0]
        [--smoke]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.synchronize
import os
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from _harness import parse_args, pin
from trainjob_devcluster.harness.testing import ServingCerts
from trainjob_status.contract import CA_CERT_ENV, TOKEN_ENV, URL_ENV, status_path

PATH = status_path("bench", "job")
METRICS = {"loss": 0.3141, "learning_rate": 5e-05, "grad_norm": 1.25, "accuracy": 0.9}


# -- the status server (its own process) -----------------------------------------------------


def serve(
    cert: str, key: str, latency: float, stall: multiprocessing.synchronize.Event, port: Any
) -> None:
    pin(1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = -1  # one write per answer (headers and body apart would meet delayed ACKs)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            while stall.is_set():
                time.sleep(0.01)
            if latency:
                time.sleep(latency)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    port.value = server.server_address[1]
    server.serve_forever()


# -- measurements ------------------------------------------------------------------------------


def paired_ns(
    call: Callable[[int], object], baseline: Callable[[int], object], calls: int
) -> tuple[list[int], list[int]]:
    """Each call timed right after a baseline call, so the machine's scheduling noise
    (preemption, interrupts) falls on both alike: (call samples, baseline samples)."""
    clock = time.perf_counter_ns
    ours, base = [0] * calls, [0] * calls
    for i in range(calls):
        start = clock()
        baseline(i)
        middle = clock()
        call(i)
        ours[i] = clock() - middle
        base[i] = middle - start
    return ours, base


def show(label: str, pair: tuple[list[int], list[int]], note: str = "") -> None:
    ours, base = pair
    print(f"  {label:<44} {summary(ours)}  over 1 ms: {over_1ms(ours)}{note}")
    print(f"  {'  baseline beside it':<44} {summary(base)}  over 1 ms: {over_1ms(base)}")


def summary(samples: list[int]) -> str:
    ordered = sorted(samples)

    def at(q: float) -> int:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return (
        f"median {statistics.median(ordered):>7,.0f}  p99 {at(0.99):>7,}  "
        f"p99.9 {at(0.999):>8,}  max {ordered[-1]:>10,}"
    )


def over_1ms(samples: list[int]) -> int:
    return sum(s > 1_000_000 for s in samples)


def blocking_client(
    url: str, token: str, ca_file: str
) -> tuple[str, Callable[[dict[str, Any]], int]]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    try:
        import requests
    except ImportError:
        import http.client
        import urllib.parse

        parts = urllib.parse.urlsplit(url)
        connection = http.client.HTTPSConnection(
            parts.hostname or "",
            parts.port,
            timeout=5,
            context=ssl.create_default_context(cafile=ca_file),
        )

        def post_stdlib(body: dict[str, Any]) -> int:
            connection.request("POST", parts.path, json.dumps(body).encode(), headers)
            answer = connection.getresponse()
            answer.read()
            return answer.status

        return "http.client keep-alive (requests is not installed)", post_stdlib

    session = requests.Session()

    def post_requests(body: dict[str, Any]) -> int:
        return session.post(url, json=body, headers=headers, verify=ca_file, timeout=5).status_code

    return f"requests {requests.__version__} keep-alive Session", post_requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--blocking-calls", type=int, default=10_000)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parse_args(parser, {"calls": 2_000, "blocking_calls": 200})

    workdir = Path(tempfile.mkdtemp(prefix="bench-client-"))
    ServingCerts.create(workdir)
    token = "bench-token"
    (workdir / "token").write_text(token)

    spawn = multiprocessing.get_context("spawn")
    stall = spawn.Event()
    port = spawn.Value("i", 0)
    server = spawn.Process(
        target=serve,
        args=(
            str(workdir / "tls.crt"),
            str(workdir / "tls.key"),
            args.latency_ms / 1000,
            stall,
            port,
        ),
        daemon=True,
    )
    server.start()
    while not port.value:
        time.sleep(0.01)
    # The caller is left unpinned: on a shared machine a pinned caller queues behind
    # whatever else runs on its CPU, and the tails measure that.
    url = f"https://localhost:{port.value}{PATH}"
    os.environ.update(
        {
            URL_ENV: url,
            TOKEN_ENV: str(workdir / "token"),
            CA_CERT_ENV: str(workdir / "ca.crt"),
        }
    )
    os.environ.pop("RANK", None)
    os.environ.pop("WORLD_SIZE", None)

    from trainjob_status import StatusReporter, default_reporter, update_trainjob_status

    def ours(i: int) -> object:
        return update_trainjob_status(i % 100, 1_000_000 - i, METRICS)

    def baseline(i: int) -> object:
        # What any in-process recorder must do: copy the metrics, stamp the time.
        return (i % 100, 1_000_000 - i, dict(METRICS), None, None, time.time())

    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, server latency {args.latency_ms:g} ms"
    )
    print(
        f"caller-thread cost of one call, ns ({args.calls:,} calls, progress + ETA + 4 metrics;"
        " baseline: the same arguments copied and time-stamped, no client):"
    )
    ours(0)  # builds the shared reporter and starts its thread
    shared = default_reporter()
    assert shared is not None
    assert shared.flush(5)
    show("update_trainjob_status, server answering", paired_ns(ours, baseline, args.calls))

    stall.set()
    ours(0)
    shared.flush(0.2)  # the post is now held by the server
    pair = paired_ns(ours, baseline, args.calls)
    show("update_trainjob_status, server stalled", pair, f"  (post held: {not shared.flush(0)})")
    stall.clear()
    assert shared.flush(10)

    busy = StatusReporter(min_interval=0)
    pair = paired_ns(lambda i: busy.report(i % 100, 1_000_000 - i, METRICS), baseline, args.calls)
    posts = busy.stats.posts
    busy.close(10)
    show("StatusReporter.report, sender posting nonstop", pair, f"  ({posts:,} posts meanwhile)")

    n = args.blocking_calls
    print(f"caller-thread time per {n:,} calls:")
    before = shared.stats.posts
    start = time.perf_counter()
    for i in range(n):
        ours(i)
    ours_s = time.perf_counter() - start
    delivered = shared.flush(10)
    print(
        f"  update_trainjob_status                 {ours_s * 1000:>9.1f} ms"
        f"  ({shared.stats.posts - before} posts, last update delivered after flush: {delivered})"
    )
    label, post = blocking_client(url, token, str(workdir / "ca.crt"))
    start = time.perf_counter()
    for i in range(n):
        status = {
            "progressPercentage": i % 100,
            "estimatedRemainingSeconds": 1_000_000 - i,
            "metrics": [{"name": k, "value": str(v)} for k, v in METRICS.items()],
            "lastUpdatedTime": "2026-12-03T00:00:00Z",
        }
        assert post({"trainerStatus": status}) == 200
    blocking_s = time.perf_counter() - start
    print(f"  blocking client, every call posted     {blocking_s * 1000:>9.1f} ms  ({label})")
    print(f"  ratio blocking / ours: {blocking_s / ours_s:,.0f}x")
    server.terminate()


if __name__ == "__main__":
    main()
