"""Stalled scrapers: ``--stalled`` connections ask ``/metrics`` for a large page (about
13 MiB: ``--trainjobs`` x 256 metrics with long names) and never read it, while a
scraper that reads asks for the page ``--scrapes`` times. Prints the page's size, the
server's resident memory before, at its peak and after (the chart's limit is 512 MiB),
the scrapes answered whole within ``--deadline`` seconds, and how many stalled
connections the server closed after ``--write-timeout``; for the plain metrics port and
the TLS one (``--metrics-secure``).

The server and the development cluster run on an event loop in a thread of this
process (accept-all authentication for posts; a scraper's token is a real one, bound to
the metrics reader role, on the TLS port); the scrapers run in a child process, so what
they receive is not counted in this process's memory. Asserts nothing. To compare with
another checkout, run this file with that checkout's packages first on PYTHONPATH.

    .venv/bin/python bench/scrapers.py [--trainjobs 350] [--stalled 64] [--scrapes 14]
        [--write-timeout 10] [--ports plain,tls] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from _harness import loadavg, parse_args, processes, rss_kib
from trainjob_devcluster.harness.testing import BackgroundStack, ServingCerts
from trainjob_status.contract import status_path

NS = "bench"
MON = "monitoring"
PREFIX = "llama-3-70b-instruct-finetune-with-long-context"
RBAC = "rbac.authorization.k8s.io"


def full_status(index: int) -> bytes:
    metrics = [
        {"name": f"validation_loss_per_token_for_the_held_out_component_{k:03d}", "value": "0.5"}
        for k in range(256)
    ]
    body = {
        "trainerStatus": {
            "progressPercentage": index % 100,
            "lastUpdatedTime": "2026-12-01T08:00:00Z",
            "metrics": metrics,
        }
    }
    return json.dumps(body).encode()


def fill(stack: BackgroundStack, certs: ServingCerts, trainjobs: int) -> None:
    """TrainJobs with full statuses, posted to the server and written through."""
    stack.call(stack.cluster.ensure_namespace, NS)
    tls = certs.client_context()
    for index in range(trainjobs):
        name = f"{PREFIX}-{index:03d}"
        stack.call(stack.cluster.create_trainjob, NS, name)
        request = urllib.request.Request(
            stack.server.url + status_path(NS, name),
            data=full_status(index),
            headers={"Authorization": "Bearer bench"},
            method="POST",
        )
        with urllib.request.urlopen(request, context=tls) as answer:
            assert answer.status == 200, answer.status
    stack.run(stack.server.writer.wait_idle())
    deadline = time.monotonic() + 60
    while stack.server.exporter.series_count < trainjobs * 256 and time.monotonic() < deadline:
        time.sleep(0.1)


def scraper_token(stack: BackgroundStack) -> str:
    """A real token of an account bound to the metrics reader role."""
    cluster = stack.cluster
    stack.call(cluster.ensure_namespace, MON)
    stack.call(cluster.create, "serviceaccounts", {"metadata": {"name": "prometheus"}}, MON)
    role = {
        "metadata": {"name": "metrics-reader"},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }
    stack.call(cluster.create, "clusterroles", role, "", RBAC)
    binding = {
        "metadata": {"name": "metrics-reader"},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": MON}],
    }
    stack.call(cluster.create, "clusterrolebindings", binding, "", RBAC)
    token: str = stack.call(cluster.request_token, MON, "prometheus", [cluster.issuer])
    return token


# -- the scrapers (a child process) -------------------------------------------------------


def request_bytes(token: str | None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n{auth}\r\n".encode()


def stalled_connection(
    port: int, tls: ssl.SSLContext | None, token: str | None, source: str
) -> socket.socket | None:
    """A connection from ``source`` that has asked for the page; None if refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", port))
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname="localhost")
        sock.sendall(request_bytes(token))
    except OSError:
        sock.close()
        return None
    return sock


def reading_scrape(url: str, tls: ssl.SSLContext | None, token: str | None, deadline: float) -> int:
    """Bytes of a whole page, or 0 (an error, or not within ``deadline``)."""
    headers = {"Accept-Encoding": "identity"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        request = urllib.request.Request(url + "/metrics", headers=headers)
        with urllib.request.urlopen(request, context=tls, timeout=deadline) as answer:
            return len(answer.read()) if answer.status == 200 else 0
    except OSError:
        return 0


def child(argv: list[str]) -> None:
    url, cafile, token, stalled, scrapes, deadline = argv
    tls = ssl.create_default_context(cafile=cafile) if url.startswith("https") else None
    port = int(url.rsplit(":", 1)[1])
    print(json.dumps({"page": reading_scrape(url, tls, token or None, 60)}), flush=True)
    # 16 from each address: the metrics port's cap per address (64 in all).
    sources = [f"127.0.4.{i // 16 + 1}" for i in range(int(stalled))]
    held = [stalled_connection(port, tls, token or None, source) for source in sources]
    print(json.dumps({"stalled": sum(s is not None for s in held)}), flush=True)
    sizes = [reading_scrape(url, tls, token or None, float(deadline)) for _ in range(int(scrapes))]
    print(json.dumps({"scrapes": sizes}), flush=True)
    time.sleep(3600)  # holds the stalled connections until stopped


# -- the measurement ----------------------------------------------------------------------


def closed(reason: str = "write_timeout") -> float:
    """Connections of the metrics port closed for ``reason`` so far (the server runs in
    this process: read from its registry, not from a page this process would read)."""
    labels = {"listener": "metrics", "reason": reason}
    return REGISTRY.get_sample_value("trainjob_status_connections_closed_total", labels) or 0.0


def gone() -> float:
    """Stalled connections closed: at the write timeout, or to make room for a reader."""
    return closed() + closed("stalled_evicted")


def run_port(args: argparse.Namespace, secure: bool) -> None:
    with tempfile.TemporaryDirectory() as work:
        certs = ServingCerts.create(Path(work))
        stack = BackgroundStack(
            certs, timeout=300, metrics_secure=secure, write_timeout=args.write_timeout
        )
        try:
            token = scraper_token(stack) if secure else None
            fill(stack, certs, args.trainjobs)
            measure(stack, certs, args, token)
        finally:
            stack.close()


def measure(
    stack: BackgroundStack, certs: ServingCerts, args: argparse.Namespace, token: str | None
) -> None:
    url = stack.server.metrics_url
    before_closed, before_evicted = closed(), closed("stalled_evicted")
    before = before_closed + before_evicted
    rss_before = peak = rss_kib(os.getpid())
    report: dict[str, Any] = {}
    all_closed = None
    with processes() as children:
        command = [sys.executable, __file__, "--scrapers", url, str(certs.ca_file), token or ""]
        command += [str(args.stalled), str(args.scrapes), str(args.deadline)]
        scraper = children.start(command, stdout=subprocess.PIPE, text=True)
        assert scraper.stdout is not None
        lines: list[str] = []
        stdout = scraper.stdout
        threading.Thread(target=lambda: lines.extend(stdout), daemon=True).start()
        # Until the page is read and the stalled connections opened (a minute at most),
        # then the scrapes and twice the write timeout.
        limit = time.monotonic() + 60 + args.scrapes * args.deadline
        while time.monotonic() < limit:
            peak = max(peak, rss_kib(os.getpid()))
            while lines:
                report.update(json.loads(lines.pop(0)))
                if "stalled" in report and "opened" not in report:
                    report["opened"] = time.monotonic()
                    limit = report["opened"] + args.scrapes * args.deadline
                    limit += 2 * args.write_timeout + 5
            opened = report.get("stalled", args.stalled)
            if all_closed is None and "opened" in report and gone() - before >= opened:
                all_closed = time.monotonic() - report["opened"]
            if all_closed is not None and "scrapes" in report:
                break
            time.sleep(0.1)
        children.stop(scraper)
    rss_after = rss_kib(os.getpid())
    page = int(report.get("page", 0))
    sizes = report.get("scrapes", [])
    whole = sum(1 for size in sizes if page and size >= page * 0.99)
    port = "TLS" if url.startswith("https") else "plain"
    closed_text = (
        f"all closed {all_closed:.1f} s after they opened"
        if all_closed is not None
        else "NOT all closed"
    )
    print(
        f"{port} metrics port, page {page / 2**20:.1f} MiB, {args.stalled} stalled scrapers: "
        f"RSS {rss_before / 1024:.0f} -> peak {peak / 1024:.0f} -> after "
        f"{rss_after / 1024:.0f} MiB (the chart's limit: 512); reading scrapes answered whole "
        f"within {args.deadline:g} s: {whole}/{args.scrapes}; of "
        f"{report.get('stalled', 0)} stalled connections opened, closed by --write-timeout "
        f"{args.write_timeout:g} s: {closed() - before_closed:.0f}, closed for a reader: "
        f"{closed('stalled_evicted') - before_evicted:.0f}, {closed_text}; load {loadavg()}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainjobs", type=int, default=350)
    parser.add_argument("--stalled", type=int, default=64)
    parser.add_argument("--scrapes", type=int, default=14)
    parser.add_argument("--deadline", type=float, default=10.0, help="seconds a scrape may take")
    parser.add_argument("--write-timeout", type=float, default=10.0)
    parser.add_argument("--ports", default="plain,tls")
    args = parse_args(
        parser, {"trainjobs": 3, "stalled": 2, "scrapes": 1, "write_timeout": 0.5, "deadline": 5}
    )
    for port in args.ports.split(","):
        run_port(args, secure=port == "tls")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--scrapers"]:
        child(sys.argv[2:])
        sys.exit(0)
    main()
