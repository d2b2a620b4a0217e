"""Token authentication end to end, beyond the forgery table: the bearer header, the rate
limit, the verified-token cache and what invalidates it, JWKS loading and refresh,
issuer discovery, the pod binding's fetches, the switches, and the logs."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_both_servers, on_real_server
from trainjob_status.contract import JOBSET_NAME_LABEL
from trainjob_status_server.auth.jwks import JWKS_ACCEPT
from trainjob_status_server.config import Config
from trainjob_status_server.kube.client import KubeClient
from trainjob_status_server.kube.errors import KubeError

from .conftest import ServingCerts
from .test_auth_support import (
    NS,
    POD,
    TJ,
    Rig,
    add_pod,
    api_requests,
    claims_of,
    mint,
    new_rsa_key,
    relabel,
    rsa_signed,
    running,
    tampered,
    trainjob_rv,
    until,
)

JWKS = "/openid/v1/jwks"


@pytest.fixture
def cluster(kube_api: KubeAPI) -> KubeAPI:
    kube_api.create_trainjob(NS, TJ)
    add_pod(kube_api)
    return kube_api


@pytest_asyncio.fixture
async def rig(cluster: DevCluster, config: Config, certs: ServingCerts) -> AsyncIterator[Rig]:
    async with running(cluster, config, certs) as r:
        yield r


# -- the bearer header ------------------------------------------------------------------------


@on_both_servers
@pytest.mark.parametrize(
    "template",
    ["Bearer {}", "bearer {}", "BEARER {}", "Bearer\t{}", "Bearer     {}", "\tBearer \t {}\t"],
)
async def test_bearer_headers_the_peer_accepts(rig: Rig, template: str) -> None:
    token = mint(rig.cluster)
    code, _, _ = await rig.post(None, authorization=template.format(token))
    assert code == 200


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        (None, "no_token"),
        ("", "bad_header"),
        ("   ", "bad_header"),
        ("Bearer", "bad_header"),
        ("{}", "bad_header"),
        ("Basic {}", "bad_header"),
        ("Bearerx {}", "bad_header"),
        ("Bearer {} {}", "bad_header"),
        ("Bearer not-a-jwt", "malformed"),
    ],
)
async def test_bearer_headers_the_peer_refuses(rig: Rig, template: str | None, reason: str) -> None:
    token = mint(rig.cluster)
    before = trainjob_rv(rig.cluster)
    if template is None:
        result = await rig.refused(None)
    else:
        result = await rig.refused(None, authorization=template.format(token, token))
    assert result == (401, "Unauthorized", reason)
    assert trainjob_rv(rig.cluster) == before


# -- rate limit per service account -------------------------------------------------------------


async def test_a_burst_beyond_the_bucket_gets_429_while_another_account_posts(
    cluster: KubeAPI, config: Config, certs: ServingCerts
) -> None:
    add_pod(cluster, "tj-node-1-0", sa="other")
    async with running(cluster, config, certs, sa_rate_limit=0.5, sa_rate_burst=2) as rig:
        mine, theirs = mint(cluster), mint(cluster, sa="other", pod="tj-node-1-0")
        assert [(await rig.post(mine))[0] for _ in range(2)] == [200, 200]
        before = trainjob_rv(cluster)

        code, body, response = await rig.post(mine)
        assert code == 429
        assert response.headers["Retry-After"] == "2"  # one token at 0.5/s
        assert body == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Too many requests",
            "reason": "TooManyRequests",
            "details": {"retryAfterSeconds": 2},
            "code": 429,
        }
        assert trainjob_rv(cluster) == before

        assert (await rig.post(theirs))[0] == 200
        rig.monotonic.advance(2)
        assert (await rig.post(mine))[0] == 200


# -- the verified-token cache ------------------------------------------------------------------


@on_both_servers
async def test_a_cached_token_stops_working_when_its_pod_is_deleted(rig: Rig) -> None:
    token = mint(rig.cluster)
    assert (await rig.post(token))[0] == 200
    assert len(rig.auth.tokens) == 1
    rig.cluster.delete("pods", NS, POD)
    await until(rig.pod_seen(POD, None))
    counted = isinstance(rig.cluster, DevCluster)  # requests are counted there only
    before = api_requests(rig.cluster) if counted else 0
    assert await rig.refused(token) == (401, "Unauthorized", "pod_gone")
    if counted:
        assert api_requests(rig.cluster) == before


async def test_a_cached_token_stops_working_when_its_key_leaves_the_jwks(rig: Rig) -> None:
    assert rig.auth.keys is not None
    token = mint(rig.cluster)
    assert (await rig.post(token))[0] == 200
    old = rig.cluster.keys.active_kid
    rig.cluster.keys.rotate()
    assert await rig.auth.keys.refresh()
    # Rotation alone keeps the old key published: its tokens still verify.
    assert (await rig.post(token))[0] == 200
    rig.cluster.keys.retire(old)
    assert await rig.auth.keys.refresh()
    assert len(rig.auth.tokens) == 0
    assert await rig.refused(token) == (401, "Unauthorized", "unknown_kid")


async def test_without_the_cache_every_post_verifies_and_still_passes(
    cluster: KubeAPI, config: Config, certs: ServingCerts
) -> None:
    async with running(cluster, config, certs, token_cache_size=0) as rig:
        token = mint(cluster)
        assert [(await rig.post(token))[0] for _ in range(3)] == [200, 200, 200]
        assert len(rig.auth.tokens) == 0


# -- JWKS: loading, refresh, forged kids ---------------------------------------------------------


async def test_not_ready_and_503_until_the_keys_are_loaded(
    cluster: KubeAPI, config: Config, certs: ServingCerts
) -> None:
    fault = cluster.faults.fail(500, times=None, path=JWKS)
    async with running(cluster, config, certs, wait_ready=False) as rig:
        await until(lambda: fault.hits >= 2)  # it keeps trying
        assert not rig.auth.ready
        code, body, response = await rig.post(mint(cluster))
        assert (code, body["reason"]) == (503, "ServiceUnavailable")
        assert response.headers["Retry-After"] == "1"
        cluster.faults.clear()
        await until(lambda: rig.auth.ready)
        assert (await rig.post(mint(cluster)))[0] == 200


async def test_the_jwks_is_asked_for_as_jwk_set_json(devcluster: DevCluster) -> None:
    # A real API server answers 406 to Accept: application/json on this route.
    kube = await KubeClient(devcluster.kubeconfig_path).start()
    try:
        with pytest.raises(KubeError) as refused:
            await kube.request_json("GET", JWKS)
        assert (refused.value.status, refused.value.reason) == (406, "NotAcceptable")
        document = await kube.request_json("GET", JWKS, accept=JWKS_ACCEPT)
        assert [k["kid"] for k in document["keys"]] == [devcluster.keys.active_kid]
    finally:
        await kube.close()


async def test_a_flood_of_forged_kids_costs_one_jwks_fetch_per_interval(rig: Rig) -> None:
    probe = rig.cluster.faults.stall(0, times=None, path=JWKS)
    claims = claims_of(mint(rig.cluster))
    key = new_rsa_key()
    results = await asyncio.gather(
        *(rig.refused(rsa_signed(key, f"forged-{i}", claims)) for i in range(20))
    )
    assert set(results) == {(401, "Unauthorized", "unknown_kid")}
    assert probe.hits == 1
    assert (await rig.refused(rsa_signed(key, "forged-x", claims)))[2] == "unknown_kid"
    assert probe.hits == 1
    rig.monotonic.advance(30)
    assert (await rig.refused(rsa_signed(key, "forged-y", claims)))[2] == "unknown_kid"
    assert probe.hits == 2


async def test_a_token_from_a_new_key_triggers_a_refresh_and_passes(rig: Rig) -> None:
    rig.cluster.keys.rotate()
    assert (await rig.post(mint(rig.cluster)))[0] == 200


async def test_the_periodic_refresh_follows_rotation_without_traffic(
    cluster: KubeAPI, config: Config, certs: ServingCerts
) -> None:
    async with running(cluster, config, certs, jwks_refresh_interval=0.05) as rig:
        keys = rig.auth.keys
        assert keys is not None
        old = cluster.keys.active_kid
        new = cluster.keys.rotate()
        await until(lambda: keys.get(new) is not None)
        cluster.keys.retire(old)
        await until(lambda: keys.get(old) is None)


# -- issuer discovery ---------------------------------------------------------------------------


@on_real_server
async def test_issuer_from_the_servers_own_token(
    cluster: KubeAPI, config: Config, certs: ServingCerts, tmp_path: Path
) -> None:
    cluster.create("serviceaccounts", {"metadata": {"name": "status-server"}}, "kube-system")
    own = tmp_path / "token"
    own.write_text(cluster.request_token("kube-system", "status-server", [cluster.issuer]))
    async with running(cluster, config, certs, issuer=None, own_token_path=own) as rig:
        assert rig.auth.issuer == cluster.issuer
        assert (await rig.post(mint(cluster)))[0] == 200


@on_real_server
async def test_issuer_from_oidc_discovery_without_a_token_file(
    cluster: KubeAPI, config: Config, certs: ServingCerts, tmp_path: Path
) -> None:
    async with running(
        cluster, config, certs, issuer=None, own_token_path=tmp_path / "missing"
    ) as rig:
        assert rig.auth.issuer == cluster.issuer
        assert (await rig.post(mint(cluster)))[0] == 200


@on_real_server
async def test_a_configured_issuer_other_than_the_tokens_refuses_them(
    cluster: KubeAPI, config: Config, certs: ServingCerts
) -> None:
    async with running(cluster, config, certs, issuer="https://other.example") as rig:
        assert await rig.refused(mint(cluster)) == (401, "Unauthorized", "issuer")


# -- the pod binding's fetches -----------------------------------------------------------------


async def test_a_pod_the_watch_has_not_delivered_yet_is_fetched_once(rig: Rig) -> None:
    rig.cluster.faults.stall(3, times=None, verb="watch", resource="pods")
    rig.cluster.drop_watches("pods")
    uid = add_pod(rig.cluster, "tj-node-2-0")
    assert not rig.pod_seen("tj-node-2-0", uid)()
    token = mint(rig.cluster, pod="tj-node-2-0")
    lists = rig.cluster.faults.count("list", "pods")
    assert (await rig.post(token))[0] == 200
    assert rig.cluster.faults.count("list", "pods") == lists + 1
    # The fetched pod is cached: the next post asks nobody.
    assert (await rig.post(token))[0] == 200
    assert rig.cluster.faults.count("list", "pods") == lists + 1
    rig.cluster.faults.clear()


async def test_a_pod_gone_before_we_started_costs_one_request_per_interval(
    cluster: KubeAPI, config: Config, certs: ServingCerts
) -> None:
    token = mint(cluster)
    cluster.delete("pods", NS, POD)
    async with running(cluster, config, certs) as rig:
        before = api_requests(cluster)
        assert await rig.refused(token) == (401, "Unauthorized", "pod_gone")
        assert api_requests(cluster) == before + 1
        assert await rig.refused(token) == (401, "Unauthorized", "pod_gone")
        assert api_requests(cluster) == before + 1
        rig.monotonic.advance(10)
        assert await rig.refused(token) == (401, "Unauthorized", "pod_gone")
        assert api_requests(cluster) == before + 2


async def test_a_token_for_an_incarnation_we_never_saw_costs_one_shared_get(
    cluster: KubeAPI, config: Config, certs: ServingCerts
) -> None:
    stale = mint(cluster)
    cluster.delete("pods", NS, POD)
    add_pod(cluster)  # recreated before we started: its old uid never left our cache
    async with running(cluster, config, certs) as rig:
        gets = cluster.faults.count("get", "pods")
        results = await asyncio.gather(*(rig.refused(stale) for _ in range(10)))
        assert set(results) == {(401, "Unauthorized", "pod_uid")}
        assert cluster.faults.count("get", "pods") == gets + 1


async def test_a_token_newer_than_the_watch_is_checked_with_a_get(rig: Rig) -> None:
    rig.cluster.faults.stall(3, times=None, verb="watch", resource="pods")
    rig.cluster.drop_watches("pods")
    old = rig.auth.binding.pods.get(NS, POD)  # type: ignore[union-attr]
    rig.cluster.delete("pods", NS, POD)
    uid = add_pod(rig.cluster)
    assert rig.pod_seen(POD, old["metadata"]["uid"])()  # type: ignore[index]
    gets = rig.cluster.faults.count("get", "pods")
    assert (await rig.post(mint(rig.cluster)))[0] == 200
    assert rig.cluster.faults.count("get", "pods") == gets + 1
    assert uid != old["metadata"]["uid"]  # type: ignore[index]
    rig.cluster.faults.clear()


# -- switches ---------------------------------------------------------------------------------


async def test_membership_check_off_admits_pods_of_other_trainjobs(
    cluster: KubeAPI, config: Config, certs: ServingCerts
) -> None:
    add_pod(cluster, "loose", job=None)
    async with running(cluster, config, certs, require_pod_membership=False) as rig:
        relabel(cluster, POD, {JOBSET_NAME_LABEL: "other"})
        assert (await rig.post(mint(cluster)))[0] == 200
        assert (await rig.post(mint(cluster, pod="loose")))[0] == 200


@on_real_server
async def test_unbound_tokens_pass_only_when_allowed(
    cluster: KubeAPI, config: Config, certs: ServingCerts
) -> None:
    async with running(cluster, config, certs, allow_unbound_tokens=True) as rig:
        assert (await rig.post(mint(cluster, pod=None)))[0] == 200


# -- TokenReview mode: the API server's troubles ------------------------------------------------


async def test_token_review_unavailable_is_503_and_not_remembered(
    cluster: KubeAPI, config: Config, certs: ServingCerts
) -> None:
    async with running(cluster, config, certs, token_review=True) as rig:
        cluster.faults.fail(503, times=1, verb="create", resource="tokenreviews")
        token = mint(cluster)
        code, body, _ = await rig.post(token)
        assert (code, body["reason"]) == (503, "ServiceUnavailable")
        assert (await rig.post(token))[0] == 200


@on_real_server
async def test_token_review_mode_accepts_what_the_api_server_reviews(
    cluster: KubeAPI, config: Config, certs: ServingCerts
) -> None:
    async with running(cluster, config, certs, token_review=True, issuer=None) as rig:
        assert (await rig.post(mint(cluster)))[0] == 200
        forged = tampered(mint(cluster), lambda claims: claims.update(exp=claims["exp"] + 60))
        assert await rig.refused(forged) == (401, "Unauthorized", "signature")


async def test_token_review_mode_needs_no_issuer_and_no_keys(
    cluster: KubeAPI, config: Config, certs: ServingCerts
) -> None:
    jwks = cluster.faults.fail(500, times=None, path=JWKS)
    async with running(cluster, config, certs, token_review=True, issuer=None) as rig:
        assert rig.auth.ready
        assert rig.auth.issuer is None
        assert (await rig.post(mint(cluster)))[0] == 200
    assert jwks.hits == 0


# -- logs --------------------------------------------------------------------------------------


async def test_refusals_are_logged_with_their_reason_and_never_the_token(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trainjob_status_server")
    good = mint(rig.cluster)
    bad = tampered(good, lambda c: c.update(exp=c["exp"] + 60))
    assert (await rig.post(good))[0] == 200
    assert (await rig.post(bad))[0] == 401
    assert (await rig.post(good, name="nope"))[0] == 403
    refusals = [r.__dict__ for r in caplog.records if r.getMessage() == "post refused"]
    assert [(r["reason"], r["code"], r["trainjob"]) for r in refusals] == [
        ("signature", 401, f"{NS}/{TJ}"),
        ("audience", 403, f"{NS}/nope"),
    ]
    assert refusals[1]["subject"] == f"system:serviceaccount:{NS}:trainer"
    for record in caplog.records:
        text = json.dumps(record.__dict__, default=str)
        for token in (good, bad):
            for part in token.split("."):
                assert part not in text
