"""What a flood of pod admissions naming unknown TrainJobs costs: Kubernetes API requests,
the admissions' own answer times, the delay of one valid status write posted in the
middle of it (against the same write with no flood, in one run), and whether a pod of
the real TrainJob admitted meanwhile is injected.

In process on one event loop: the devcluster, the server (accept-all authenticator,
``--write-mode direct`` so the post is answered when its write is done, every API budget
at its default) and the clients. Prints figures; asserts nothing.

    .venv/bin/python bench/admission_flood.py [--reviews 150] [--rounds 3] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import aiohttp

from _harness import parse_args
from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.acceptall import AcceptAll
from trainjob_status.contract import ANCESTOR_STEP_LABEL as ANCESTOR
from trainjob_status.contract import JOBSET_NAME_LABEL, status_path
from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config

NS = "bench"
STATUS = status_path(NS, "job")


def review(i: int, round_: int, trainjob: str | None = None) -> dict[str, Any]:
    name = trainjob or f"ghost-{round_}-{i}"
    labels = {JOBSET_NAME_LABEL: name, ANCESTOR: "trainer"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-0", "namespace": NS, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    request = {
        "uid": f"u-{round_}-{i}",
        "namespace": NS,
        "operation": "CREATE",
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "object": pod,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


async def post(session: aiohttp.ClientSession, url: str, progress: int) -> tuple[int, float]:
    body = {"trainerStatus": {"progressPercentage": progress}}
    started = time.perf_counter()
    async with session.post(
        url + STATUS, data=json.dumps(body), headers={"Authorization": "Bearer bench"}
    ) as response:
        await response.read()
        return response.status, time.perf_counter() - started


async def admit(session: aiohttp.ClientSession, url: str, body: Any) -> tuple[bool, float]:
    started = time.perf_counter()
    async with session.post(url + "/mutate-pods", json=body) as response:
        answer = await response.json()
    return "patch" in answer["response"], time.perf_counter() - started


async def main(reviews: int, rounds: int) -> None:
    async with DevCluster() as cluster:
        cluster.ensure_namespace(NS)
        cluster.create_trainjob(NS, "job")
        config = Config(
            host="127.0.0.1",
            port=0,
            metrics_port=0,
            insecure_http=True,
            kubeconfig=cluster.kubeconfig_path,
            write_mode="direct",
        )
        async with StatusServer(config, AcceptAll()) as server:
            await server.trainjobs.synced.wait()
            await asyncio.sleep(1.0)  # start-up's lists and watches out of the count
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as session:
                progress = 0
                for round_ in range(rounds):
                    progress += 1
                    code, alone = await post(session, server.url, progress)
                    await asyncio.sleep(2.0)  # the write budget refills between runs
                    before = cluster.faults.count("get")
                    flood = asyncio.gather(
                        *(admit(session, server.url, review(i, round_)) for i in range(reviews))
                    )
                    await asyncio.sleep(0.05)  # the flood is in flight
                    progress += 1
                    real = asyncio.create_task(
                        admit(session, server.url, review(-1, round_, "job"))
                    )
                    flooded_code, flooded = await post(session, server.url, progress)
                    injected, real_time = await real
                    answers = await flood
                    gets = cluster.faults.count("get") - before
                    times = sorted(t for _, t in answers)
                    print(
                        f"round {round_ + 1}: {reviews} reviews naming unknown TrainJobs: "
                        f"{gets} API GETs, admission answer median "
                        f"{statistics.median(times) * 1000:.0f} ms, max {times[-1] * 1000:.0f} ms; "
                        f"status write alone {alone * 1000:.1f} ms ({code}), "
                        f"during the flood {flooded * 1000:.1f} ms ({flooded_code}), "
                        f"ratio {flooded / alone:.2f}; a pod of the real TrainJob "
                        f"{'injected' if injected else 'NOT injected'} in {real_time * 1000:.0f} ms"
                    )
                    if round_ + 1 < rounds:
                        await asyncio.sleep(2.0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reviews", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    args = parse_args(parser, {"reviews": 10, "rounds": 1})
    asyncio.run(main(args.reviews, args.rounds))
