"""A flood of distinct made-up tokens on the metrics port (``--metrics-secure``) from
several source addresses, while a scraper with a real token scrapes it and new pods make
their first post in ``--token-review`` mode: the share of scrapes answered 200, and the
first posts' answers and latency.

In process: the development cluster and the server (TokenReview mode, real tokens, the
default API budgets, ``--metrics-auth-cache-ttl`` short so the scraper's approval runs
out during the window); the flood in a child process, one keep-alive connection per
source address (127.0.7.x), every request a new token. Bounded by ``--seconds``.
Asserts nothing.

    .venv/bin/python bench/review_flood.py [--addresses 12] [--seconds 20] [--ttl 5] [--smoke]

A checkout from before the review budget runs the same way with its packages first on
PYTHONPATH (its pods then carry the label only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

from _harness import parse_args, processes
from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.testing import ServingCerts, server_config
from trainjob_status.contract import JOBSET_NAME_LABEL, audience, status_path
from trainjob_status_server.app import StatusServer
from trainjob_status_server.auth import AuthSettings, TokenAuthenticator
from trainjob_status_server.config import Config

NS = "bench"
MON = "mon"
RBAC = "rbac.authorization.k8s.io"


# -- the flood (a child process) ----------------------------------------------------------


async def flood_from(url: str, tls: ssl.SSLContext, source: str, until: float) -> Counter[int]:
    codes: Counter[int] = Counter()
    connector = aiohttp.TCPConnector(ssl=tls, local_addr=(source, 0), limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        while time.monotonic() < until:
            headers = {"Authorization": f"Bearer {secrets.token_urlsafe(32)}"}
            try:
                async with session.get(url + "/metrics", headers=headers) as answer:
                    await answer.read()
                    codes[answer.status] += 1
            except aiohttp.ClientError:
                codes[0] += 1
    return codes


async def flood(url: str, cafile: str, seconds: float, sources: list[str]) -> None:
    tls = ssl.create_default_context(cafile=cafile)
    until = time.monotonic() + seconds
    counted = await asyncio.gather(*(flood_from(url, tls, s, until) for s in sources))
    total: Counter[int] = sum(counted, Counter())
    print(json.dumps({str(code): n for code, n in sorted(total.items())}), flush=True)


# -- the measurement ----------------------------------------------------------------------


def grant_scraper(cluster: DevCluster) -> str:
    """A scraper account allowed to get /metrics, and its token (the API's audience)."""
    cluster.ensure_namespace(MON)
    cluster.create("serviceaccounts", {"metadata": {"name": "prometheus"}}, MON)
    role = {
        "metadata": {"name": "reader"},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }
    cluster.create("clusterroles", role, group=RBAC)
    binding = {
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": MON}],
    }
    cluster.create("clusterrolebindings", binding, group=RBAC)
    return cluster.request_token(MON, "prometheus", [cluster.issuer])


async def first_post(
    session: aiohttp.ClientSession, cluster: DevCluster, server: StatusServer, i: int
) -> tuple[int, float]:
    """A new pod of the TrainJob, and its first post: (code, seconds)."""
    pod = f"job-node-{i}-0"
    if hasattr(cluster, "create_trainjob_pod"):
        cluster.create_trainjob_pod(NS, "job", pod, service_account="trainer", index=i)
    else:  # a checkout from before owner chains (run through PYTHONPATH, to compare)
        cluster.create_pod(NS, pod, service_account="trainer", labels={JOBSET_NAME_LABEL: "job"})
    token = cluster.request_token(NS, "trainer", [audience(NS, "job")], pod=pod)
    body = {"trainerStatus": {"progressPercentage": i % 101}}
    started = time.perf_counter()
    async with session.post(
        server.url + status_path(NS, "job"),
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}"},
    ) as answer:
        await answer.read()
        return answer.status, time.perf_counter() - started


async def measure(args: argparse.Namespace, work: Path) -> None:
    certs = ServingCerts.create(work)
    async with DevCluster() as cluster:
        cluster.create_trainjob(NS, "job")
        scraper_token = grant_scraper(cluster)
        # The defaults' metrics budget (server_config lifts it for tests), where there is one.
        defaults = Config()
        budget = {
            name: getattr(defaults, name)
            for name in ("kube_metrics_qps", "kube_metrics_burst")
            if hasattr(defaults, name)
        }
        config = server_config(
            cluster.kubeconfig_path,
            certs,
            metrics_secure=True,
            metrics_auth_cache_ttl=args.ttl,
            **budget,
        )
        settings = AuthSettings(issuer=cluster.issuer, own_token_path=None, token_review=True)
        auth = TokenAuthenticator(settings)
        async with StatusServer(config, auth) as server:
            async with asyncio.timeout(30):
                await auth.wait_ready()
            connector = aiohttp.TCPConnector(ssl=certs.client_context())
            async with aiohttp.ClientSession(connector=connector) as session:
                await run_window(args, cluster, server, session, certs, scraper_token)


async def run_window(
    args: argparse.Namespace,
    cluster: DevCluster,
    server: StatusServer,
    session: aiohttp.ClientSession,
    certs: ServingCerts,
    scraper_token: str,
) -> None:
    scrapes: list[int] = []
    posts: list[tuple[int, float]] = []
    sources = [f"127.0.7.{a + 1}" for a in range(args.addresses)]
    reviews = cluster.faults.count("create", "tokenreviews")
    with processes() as children:
        child = children.start(
            [
                sys.executable,
                __file__,
                "--flood",
                server.metrics_url,
                str(certs.ca_file),
                str(args.seconds),
                *sources,
            ],
            stdout=subprocess.PIPE,
        )
        await asyncio.sleep(1.0)  # the flood under way
        started = time.monotonic()
        i = 0
        while time.monotonic() - started < args.seconds - 1.0:
            headers = {"Authorization": f"Bearer {scraper_token}"}
            async with session.get(server.metrics_url + "/metrics", headers=headers) as got:
                await got.read()
                scrapes.append(got.status)
            if i % 2 == 0:
                posts.append(await first_post(session, cluster, server, i // 2))
            i += 1
            await asyncio.sleep(1.0)
        out, _ = await asyncio.to_thread(child.communicate)
    flooded = json.loads(out.decode().strip().splitlines()[-1]) if out else {}
    report(args, scrapes, posts, flooded, cluster.faults.count("create", "tokenreviews") - reviews)


def report(
    args: argparse.Namespace,
    scrapes: list[int],
    posts: list[tuple[int, float]],
    flooded: dict[str, int],
    reviews: int,
) -> None:
    ok = [t for code, t in posts if code == 200]
    latency = (
        f"median {statistics.median(ok) * 1000:.0f} ms, max {max(ok) * 1000:.0f} ms"
        if ok
        else "none answered 200"
    )
    print(
        f"flood: {args.addresses} addresses, {sum(flooded.values())} requests "
        f"(by code: {', '.join(f'{c}: {n}' for c, n in flooded.items())}); "
        f"TokenReviews made: {reviews}",
        flush=True,
    )
    print(
        f"scrapes answered 200: {scrapes.count(200)}/{len(scrapes)} "
        f"(--metrics-auth-cache-ttl {args.ttl:g} s)",
        flush=True,
    )
    print(
        f"first posts of new pods (--token-review) answered 200: {len(ok)}/{len(posts)}, "
        f"{latency}; within 1 s: {sum(t <= 1.0 for t in ok)}/{len(posts)}",
        flush=True,
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--flood"]:
        url, cafile, seconds, *addresses = sys.argv[2:]
        asyncio.run(flood(url, cafile, float(seconds), addresses))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addresses", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--ttl", type=float, default=5.0, help="--metrics-auth-cache-ttl")
    parsed = parse_args(parser, {"addresses": 2, "seconds": 4.0, "ttl": 1.0})
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(measure(parsed, Path(directory)))
