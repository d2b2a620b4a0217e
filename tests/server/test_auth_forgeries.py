"""The forgery table, end to end: the real server with the token authenticator against the
devcluster, tokens minted by its TokenRequest (real key, real claims) or made by hand.

Every case gets its exact code and reason, nothing is written, and the devcluster's
request counters show no API request (in TokenReview mode: no request for a token whose
claims fail, one TokenReview for one whose signature only the API server can judge).
Both modes must pass the same table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
import pytest_asyncio

from trainjob_devcluster import DevCluster
from trainjob_status.contract import GROUP, JOBSET_NAME_LABEL
from trainjob_status_server.config import Config

from .conftest import ServingCerts
from .test_auth_support import (
    NS,
    POD,
    TJ,
    UPDATE,
    Rig,
    add_pod,
    api_requests,
    audience,
    claims_of,
    hmac_signed,
    mint,
    new_rsa_key,
    public_pem,
    relabel,
    rsa_signed,
    running,
    tampered,
    trainjob_rv,
    unsigned,
    until,
)


def populate(cluster: DevCluster) -> None:
    """team-a: TrainJobs tj and tj2, tj's pod. team-b: a TrainJob and pod also named tj."""
    for namespace in (NS, "team-b"):
        cluster.create_trainjob(namespace, TJ)
        add_pod(cluster, namespace=namespace)
    cluster.create_trainjob(NS, "tj2")


@pytest_asyncio.fixture(params=["jwks", "review"])
async def rig(
    request: pytest.FixtureRequest, devcluster: DevCluster, config: Config, certs: ServingCerts
) -> AsyncIterator[Rig]:
    populate(devcluster)
    async with running(devcluster, config, certs, token_review=request.param == "review") as r:
        yield r


# -- the cases: each returns the token to post, changing the cluster first if it must -----


async def wrong_audience(rig: Rig) -> str:
    return mint(rig.cluster, aud="something-else")


async def another_trainjobs_audience(rig: Rig) -> str:
    return mint(rig.cluster, aud=audience(NS, "tj2"))


async def same_name_in_another_namespace(rig: Rig) -> str:
    return mint(rig.cluster, namespace="team-b")


async def another_namespace_asking_for_our_audience(rig: Rig) -> str:
    # A pod may request any audience: team-b's pod asks for team-a/tj's.
    return mint(rig.cluster, namespace="team-b", aud=audience(NS, TJ))


async def expired(rig: Rig) -> str:
    token = mint(rig.cluster)
    rig.clock.advance(3600 + 120)  # past exp and the 60 s leeway
    return token


async def not_yet_valid(rig: Rig) -> str:
    token = mint(rig.cluster)
    rig.clock.advance(-120)  # nbf/iat more than the leeway ahead of us
    return token


async def alg_none(rig: Rig) -> str:
    claims = claims_of(mint(rig.cluster))
    return unsigned({"alg": "none", "kid": rig.cluster.keys.active_kid}, claims)


async def hs256_with_the_public_key(rig: Rig) -> str:
    claims = claims_of(mint(rig.cluster))
    header = {"alg": "HS256", "kid": rig.cluster.keys.active_kid}
    return hmac_signed(header, claims, public_pem(rig.cluster))


async def unknown_kid(rig: Rig) -> str:
    return rsa_signed(new_rsa_key(), "no-such-kid", claims_of(mint(rig.cluster)))


async def tampered_payload(rig: Rig) -> str:
    # A day more of life: every claim still passes, only the signature tells.
    return tampered(mint(rig.cluster), lambda c: c.update(exp=c["exp"] + 86_400))


async def another_key_with_the_same_kid(rig: Rig) -> str:
    return rsa_signed(new_rsa_key(), rig.cluster.keys.active_kid, claims_of(mint(rig.cluster)))


async def no_kubernetes_claims(rig: Rig) -> str:
    claims = claims_of(mint(rig.cluster))
    del claims["kubernetes.io"]
    return rig.cluster.keys.sign(claims)


async def another_issuer(rig: Rig) -> str:
    claims = claims_of(mint(rig.cluster))
    claims["iss"] = "https://issuer.example"
    return rig.cluster.keys.sign(claims)


async def unbound(rig: Rig) -> str:
    return mint(rig.cluster, pod=None)


async def deleted_pod(rig: Rig) -> str:
    token = mint(rig.cluster)
    rig.cluster.delete("pods", NS, POD)
    await until(rig.pod_seen(POD, None))
    return token


async def pod_recreated_with_a_new_uid(rig: Rig) -> str:
    token = mint(rig.cluster)
    rig.cluster.delete("pods", NS, POD)
    uid = add_pod(rig.cluster)
    await until(rig.pod_seen(POD, uid))
    return token


async def pod_relabelled_to_another_trainjob(rig: Rig) -> str:
    token = mint(rig.cluster)
    relabel(rig.cluster, POD, {JOBSET_NAME_LABEL: "tj2"})
    await until(
        lambda: (
            (rig.auth.binding.pods.get(NS, POD) or {})  # type: ignore[union-attr]
            .get("metadata", {})
            .get("labels", {})
            .get("jobset.sigs.k8s.io/jobset-name")
            == "tj2"
        )
    )
    return token


async def pod_relabelled_out_of_any_trainjob(rig: Rig) -> str:
    token = mint(rig.cluster)
    relabel(rig.cluster, POD, {"app": "something-else"})
    await until(rig.pod_seen(POD, None))
    return token


async def key_rotated_out_of_the_jwks(rig: Rig) -> str:
    token = mint(rig.cluster)
    old = rig.cluster.keys.active_kid
    rig.cluster.keys.rotate()
    rig.cluster.keys.retire(old)
    if rig.auth.keys is not None:
        assert await rig.auth.keys.refresh()
        assert rig.auth.keys.get(old) is None
    return token


@dataclass(frozen=True)
class Case:
    make: Callable[[Rig], Awaitable[str]]
    code: int
    reason: str
    reviews: int = 0  # TokenReviews allowed in TokenReview mode (JWKS mode: never any)

    def __repr__(self) -> str:
        return self.make.__name__


CASES = [
    Case(wrong_audience, 403, "audience"),
    Case(another_trainjobs_audience, 403, "audience"),
    Case(same_name_in_another_namespace, 403, "audience"),
    Case(another_namespace_asking_for_our_audience, 403, "namespace"),
    Case(expired, 401, "expired"),
    Case(not_yet_valid, 401, "not_yet_valid"),
    Case(alg_none, 401, "algorithm"),
    Case(hs256_with_the_public_key, 401, "algorithm"),
    Case(unknown_kid, 401, "unknown_kid", reviews=1),
    Case(tampered_payload, 401, "signature", reviews=1),
    Case(another_key_with_the_same_kid, 401, "signature", reviews=1),
    Case(no_kubernetes_claims, 401, "claims"),
    Case(another_issuer, 401, "issuer"),
    Case(unbound, 403, "no_pod"),
    Case(deleted_pod, 401, "pod_gone"),
    Case(pod_recreated_with_a_new_uid, 401, "pod_uid"),
    Case(pod_relabelled_to_another_trainjob, 403, "not_member"),
    Case(pod_relabelled_out_of_any_trainjob, 401, "pod_gone"),
    Case(key_rotated_out_of_the_jwks, 401, "unknown_kid", reviews=1),
]

REASONS = {401: "Unauthorized", 403: "Forbidden"}


@pytest.mark.parametrize("case", CASES, ids=repr)
async def test_forgery_is_refused_with_its_reason_and_costs_no_api_request(
    rig: Rig, case: Case
) -> None:
    token = await case.make(rig)
    before_rv, before_requests = trainjob_rv(rig.cluster), api_requests(rig.cluster)
    reviews_before = rig.cluster.faults.count("create", "tokenreviews")

    code, body, _ = await rig.post(token)
    assert (code, body) == (
        case.code,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": REASONS[case.code],
            "reason": REASONS[case.code],
            "code": case.code,
        },
    )
    assert await rig.refused(token) == (case.code, REASONS[case.code], case.reason)

    assert trainjob_rv(rig.cluster) == before_rv
    reviews = rig.cluster.faults.count("create", "tokenreviews") - reviews_before
    if rig.auth.reviewer is None:
        assert api_requests(rig.cluster) == before_requests
    else:
        # The refusal is remembered: the second post asked nobody.
        assert reviews == case.reviews
        assert api_requests(rig.cluster) - before_requests == reviews


async def test_a_valid_token_is_accepted_and_its_update_written(rig: Rig) -> None:
    token = mint(rig.cluster)
    code, body, _ = await rig.post(token)
    assert (code, body) == (200, UPDATE)
    stored = rig.cluster.get("trainjobs", NS, TJ, GROUP)
    assert stored is not None
    assert stored["status"]["trainerStatus"] == UPDATE["trainerStatus"]

    # The second post is served from the verified-token cache: no TokenReview, no pod GET.
    before = rig.cluster.faults.count("create", "tokenreviews"), rig.cluster.faults.count("get")
    assert (await rig.post(token))[0] == 200
    after = rig.cluster.faults.count("create", "tokenreviews"), rig.cluster.faults.count("get")
    assert after == before
    assert len(rig.auth.tokens) == 1


async def test_one_token_may_not_post_for_the_other_trainjob(rig: Rig) -> None:
    token = mint(rig.cluster)
    assert (await rig.post(token))[0] == 200
    # Cached for tj, the same token is still judged against tj2's audience.
    assert await rig.refused(token, name="tj2") == (403, "Forbidden", "audience")
