"""A cached token's later posts. Its cache entry remembers the TrainJob its claims last
passed for and the pod object that last passed; neither may let through a post that a
check from scratch would refuse, and every refusal keeps its reason and code."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from trainjob_devcluster import DevCluster
from trainjob_devcluster.storage.objects import rfc3339
from trainjob_status.contract import JOBSET_NAME_LABEL, audience
from trainjob_status_server.auth.tokencache import Admission, Verified
from trainjob_status_server.config import Config

from .conftest import ServingCerts
from .test_auth_support import (
    NS,
    POD,
    SA,
    TJ,
    Rig,
    add_pod,
    api_requests,
    claims_of,
    mint,
    relabel,
    running,
    until,
)


@pytest.fixture
def cluster(devcluster: DevCluster) -> DevCluster:
    devcluster.create_trainjob(NS, TJ)
    add_pod(devcluster)
    return devcluster


@pytest_asyncio.fixture
async def rig(cluster: DevCluster, config: Config, certs: ServingCerts) -> AsyncIterator[Rig]:
    async with running(cluster, config, certs) as r:
        yield r


def digest_of(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def cached(rig: Rig, token: str) -> Verified:
    entry = rig.auth.tokens.get(digest_of(token), rig.clock.now)
    assert entry is not None
    return entry


def admitted_to(rig: Rig, token: str) -> tuple[str, str] | None:
    """The TrainJob the cached token's claims last passed for."""
    admitted = cached(rig, token).admitted
    return None if admitted is None else (admitted.namespace, admitted.trainjob)


def admission(rig: Rig, token: str) -> Admission:
    admitted = cached(rig, token).admitted
    assert admitted is not None
    return admitted


def held_meta(rig: Rig) -> dict[str, Any]:
    """The metadata of the pod the auth pod cache holds as POD ({} when none)."""
    assert rig.auth.binding is not None
    pod = rig.auth.binding.pods.get(NS, POD)
    return {} if pod is None else dict(pod["metadata"])


def terminate(cluster: DevCluster, name: str, deadline: float) -> None:
    """Mark pod ``name`` as terminating, with its deletion deadline at ``deadline``."""
    qualified = cluster.resource("pods").qualified
    old = cluster.store.get(qualified, NS, name)
    assert old is not None
    meta = {**old["metadata"], "deletionTimestamp": rfc3339(deadline)}
    cluster.store.update(qualified, {**old, "metadata": meta}, old)


# -- the claims ---------------------------------------------------------------------------------


async def test_a_cached_token_is_judged_afresh_for_another_trainjob(rig: Rig) -> None:
    # Two audiences: the claims pass for tj2 too, but the pod is not one of tj2's.
    token = rig.cluster.request_token(NS, SA, [audience(NS, TJ), audience(NS, "tj2")], pod=POD)
    assert (await rig.post(token))[0] == 200
    assert admitted_to(rig, token) == (NS, TJ)
    assert (await rig.post(token))[0] == 200
    assert await rig.refused(token, name="tj2") == (403, "Forbidden", "not_member")
    assert admitted_to(rig, token) == (NS, "tj2")
    assert (await rig.post(token))[0] == 200
    assert await rig.refused(token, name="tj3") == (403, "Forbidden", "audience")
    assert (await rig.post(token))[0] == 200
    assert await rig.refused(token, name="tj3") == (403, "Forbidden", "audience")
    assert admitted_to(rig, token) == (NS, TJ)


async def test_a_cached_token_is_judged_afresh_in_another_namespace(rig: Rig) -> None:
    token = rig.cluster.request_token(NS, SA, [audience(NS, TJ), audience("team-b", TJ)], pod=POD)
    assert (await rig.post(token))[0] == 200
    assert (await rig.post(token))[0] == 200
    assert await rig.refused(token, namespace="team-b") == (403, "Forbidden", "namespace")
    assert (await rig.post(token))[0] == 200
    assert admitted_to(rig, token) == (NS, TJ)


async def test_the_time_checks_run_on_every_post_of_a_cached_token(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trainjob_status_server")
    token = mint(rig.cluster)
    issued = float(claims_of(token)["iat"])
    assert (await rig.post(token))[0] == 200
    assert admitted_to(rig, token) == (NS, TJ)
    posted = rig.clock.now
    rig.clock.now = issued - 61  # our clock went back: still cached, no longer valid
    assert await rig.refused(token) == (401, "Unauthorized", "not_yet_valid")
    assert admitted_to(rig, token) == (NS, TJ)
    rig.clock.now = posted
    assert (await rig.post(token))[0] == 200
    rig.clock.advance(3600 + 61)  # past exp and the leeway
    assert await rig.refused(token) == (401, "Unauthorized", "expired")
    refusals = [r.__dict__ for r in caplog.records if r.getMessage() == "post refused"]
    assert [(r["reason"], r["code"], r["trainjob"], r["pod"]) for r in refusals] == [
        ("not_yet_valid", 401, f"{NS}/{TJ}", POD),
        ("expired", 401, f"{NS}/{TJ}", POD),
    ]
    assert {r["subject"] for r in refusals} == {f"system:serviceaccount:{NS}:{SA}"}


async def test_an_entry_whose_key_left_is_verified_again(rig: Rig) -> None:
    assert rig.auth.keys is not None
    token = mint(rig.cluster)
    assert (await rig.post(token))[0] == 200
    entry = cached(rig, token)
    assert entry.admitted is not None
    old = rig.cluster.keys.active_kid
    rig.cluster.keys.rotate()
    rig.cluster.keys.retire(old)
    assert await rig.auth.keys.refresh()
    assert len(rig.auth.tokens) == 0
    # Back in the cache, as if the refresh had missed it: the key is checked on every
    # hit, whatever the entry remembers.
    rig.auth.tokens.put(digest_of(token), entry, rig.clock.now)
    assert await rig.refused(token) == (401, "Unauthorized", "unknown_kid")


# -- the pod ------------------------------------------------------------------------------------


async def test_a_cached_token_follows_its_pods_labels(rig: Rig) -> None:
    token = mint(rig.cluster)
    assert [(await rig.post(token))[0] for _ in range(2)] == [200, 200]
    assert admission(rig, token).pod is not None
    before = api_requests(rig.cluster)
    relabel(rig.cluster, POD, {JOBSET_NAME_LABEL: "other"})
    await until(lambda: held_meta(rig)["labels"] == {JOBSET_NAME_LABEL: "other"})
    assert await rig.refused(token) == (403, "Forbidden", "not_member")
    relabel(rig.cluster, POD, {JOBSET_NAME_LABEL: TJ})
    await until(lambda: held_meta(rig)["labels"] == {JOBSET_NAME_LABEL: TJ})
    assert (await rig.post(token))[0] == 200
    assert api_requests(rig.cluster) == before + 1  # the accepted post's write, no more


async def test_a_cached_token_of_a_recreated_pod_is_refused(rig: Rig) -> None:
    token = mint(rig.cluster)
    assert [(await rig.post(token))[0] for _ in range(2)] == [200, 200]
    rig.cluster.delete("pods", NS, POD)
    uid = add_pod(rig.cluster)
    await until(rig.pod_seen(POD, uid))
    assert await rig.refused(token) == (401, "Unauthorized", "pod_uid")
    assert (await rig.post(mint(rig.cluster)))[0] == 200


async def test_a_cached_token_of_a_deleted_pod_is_refused_on_its_next_post(rig: Rig) -> None:
    token = mint(rig.cluster)
    assert [(await rig.post(token))[0] for _ in range(2)] == [200, 200]
    rig.cluster.delete("pods", NS, POD)
    await until(rig.pod_seen(POD, None))
    assert await rig.refused(token) == (401, "Unauthorized", "pod_gone")
    assert await rig.refused(token) == (401, "Unauthorized", "pod_gone")


async def test_a_terminating_pod_is_judged_on_every_post(rig: Rig) -> None:
    token = mint(rig.cluster)
    assert (await rig.post(token))[0] == 200
    terminate(rig.cluster, POD, rig.clock.now + 30)
    await until(lambda: "deletionTimestamp" in held_meta(rig))
    assert [(await rig.post(token))[0] for _ in range(2)] == [200, 200]
    assert admission(rig, token).pod is None
    rig.clock.advance(30 + 60 + 2)  # past its deadline and the leeway
    assert await rig.refused(token) == (401, "Unauthorized", "pod_gone")
