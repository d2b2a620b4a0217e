"""Shared pieces of the token authentication tests (no tests here): a running server with
the real authenticator against the devcluster, fake clocks, and token forgeries.

Forgeries are made by hand (JOSE compact serialisation and stdlib HMAC): they are what
an attacker would send, so they must not go through the code under test.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from prometheus_client import REGISTRY

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.pytest_plugin import KubeAPI
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_status.contract import JOBSET_NAME_LABEL as LABEL
from trainjob_status.contract import RESOURCE, audience
from trainjob_status_server.app import StatusServer
from trainjob_status_server.auth import AuthSettings, TokenAuthenticator
from trainjob_status_server.config import Config
from trainjob_status_server.kube.client import KubeClient

from .conftest import GROUP, ServingCerts, settled, status_path

NS = "team-a"
TJ = "tj"
POD = "tj-node-0-0"
SA = "trainer"
LUT = "2026-12-02T18:33:25Z"
UPDATE = {"trainerStatus": {"progressPercentage": 7, "lastUpdatedTime": LUT}}


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# -- tokens -----------------------------------------------------------------------------------


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64json(value: Any) -> str:
    return b64url(json.dumps(value, separators=(",", ":")).encode())


def claims_of(token: str) -> dict[str, Any]:
    """The payload of a compact JWS, unverified."""
    segment = token.split(".")[1]
    claims: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    )
    return claims


def unsigned(header: dict[str, Any], claims: dict[str, Any]) -> str:
    """``alg: none``: header and payload, empty signature."""
    return f"{b64json(header)}.{b64json(claims)}."


def hmac_signed(header: dict[str, Any], claims: dict[str, Any], secret: bytes) -> str:
    signing_input = f"{b64json(header)}.{b64json(claims)}"
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(mac)}"


def rsa_signed(key: rsa.RSAPrivateKey, kid: str, claims: dict[str, Any]) -> str:
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid, "typ": None})


def new_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_pem(cluster: DevCluster) -> bytes:
    """The active signing key's public half, PEM: the "secret" of the HS256 confusion."""
    private = cluster.keys._private[cluster.keys.active_kid]
    return private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def tampered(token: str, change: Callable[[dict[str, Any]], None]) -> str:
    header, _, signature = token.split(".")
    payload = claims_of(token)
    change(payload)
    return f"{header}.{b64json(payload)}.{signature}"


# -- the cluster's objects -----------------------------------------------------------------------


def add_pod(
    cluster: DevCluster, name: str = POD, *, namespace: str = NS, sa: str = SA, job: str | None = TJ
) -> str:
    """A pod of ``job`` (no label when None); returns its uid. When TrainJob ``job``
    exists, the pod is made as its controllers make one (JobSet, Job, owner references),
    so it is bound to it by ownership as well as by its label."""
    if job is not None and cluster.get(RESOURCE, namespace, job, GROUP) is not None:
        pod = cluster.create_trainjob_pod(namespace, job, name, service_account=sa)
    else:
        labels = {LABEL: job} if job is not None else {}
        pod = cluster.create_pod(namespace, name, service_account=sa, labels=labels)
    return str(pod["metadata"]["uid"])


def relabel(cluster: KubeAPI, name: str, labels: dict[str, str], namespace: str = NS) -> None:
    """Replaces pod ``name``'s labels: through the API on the real server (a JSON patch),
    in the store on the development cluster (its watchers see it the same way)."""
    if isinstance(cluster, RealCluster):
        replace = [{"op": "replace", "path": "/metadata/labels", "value": labels}]
        path = cluster.path("pods", namespace, name)
        cluster.call("PATCH", path, replace, content_type="application/json-patch+json")
        return
    qualified = cluster.resource("pods").qualified
    old = cluster.store.get(qualified, namespace, name)
    assert old is not None
    new = {**old, "metadata": {**old["metadata"], "labels": labels}}
    cluster.store.update(qualified, new, old)


def mint(
    cluster: DevCluster,
    *,
    namespace: str = NS,
    sa: str = SA,
    pod: str | None = POD,
    aud: str | None = None,
) -> str:
    return cluster.request_token(
        namespace, sa, [aud or audience(namespace, TJ)], pod=pod, expiration_seconds=3600
    )


def trainjob_rv(cluster: DevCluster, name: str = TJ, namespace: str = NS) -> str:
    obj = cluster.get("trainjobs", namespace, name, GROUP)
    assert obj is not None
    return str(obj["metadata"]["resourceVersion"])


def api_requests(cluster: DevCluster) -> int:
    """Resource requests the cluster served (watches excluded: they are long-lived)."""
    return sum(cluster.faults.count(verb) for verb in ("get", "list", "create", "patch"))


def failures_counted(reason: str) -> float:
    value = REGISTRY.get_sample_value("trainjob_status_auth_failures_total", {"reason": reason})
    return value or 0.0


async def until(condition: Callable[[], bool], within: float = 10.0) -> None:
    """Wait for something another task does (a watch event, a refresh); never a timing."""
    async with asyncio.timeout(within):
        while not condition():
            await asyncio.sleep(0.01)


# -- a running server ---------------------------------------------------------------------------


@dataclass
class Rig:
    cluster: DevCluster
    auth: TokenAuthenticator
    server: StatusServer
    session: aiohttp.ClientSession
    clock: FakeClock
    monotonic: FakeClock

    async def post(
        self,
        token: str | None,
        *,
        name: str = TJ,
        namespace: str = NS,
        authorization: str | None = None,
        body: Any = UPDATE,
    ) -> tuple[int, Any, aiohttp.ClientResponse]:
        headers = {}
        if authorization is not None:
            headers["Authorization"] = authorization
        elif token is not None:
            headers["Authorization"] = f"Bearer {token}"
        async with self.session.post(
            self.server.url + status_path(namespace, name),
            data=json.dumps(body).encode(),
            headers=headers,
        ) as response:
            raw = await response.read()
        # An accepted post is answered once queued: look at the API after the write.
        await self.server.writer.wait_idle()
        return response.status, json.loads(raw), response

    async def refused(self, token: str | None, **kwargs: Any) -> tuple[int, str, str]:
        """Post; the answer's (code, reason) and the authentication failure reason
        counted for it ("" when none was)."""
        before = {r: failures_counted(r) for r in _REASONS}
        code, body, _ = await self.post(token, **kwargs)
        counted = [r for r in _REASONS if failures_counted(r) > before[r]]
        assert len(counted) <= 1, counted
        return code, body.get("reason", ""), counted[0] if counted else ""

    def pod_seen(self, name: str, uid: str | None, namespace: str = NS) -> Callable[[], bool]:
        """Condition: the auth pod cache shows ``name`` with ``uid`` (None: absent)."""

        def seen() -> bool:
            assert self.auth.binding is not None
            pod = self.auth.binding.pods.get(namespace, name)
            return (
                (pod is None) if uid is None else (pod or {}).get("metadata", {}).get("uid") == uid
            )

        return seen


_REASONS = [
    "no_token",
    "bad_header",
    "malformed",
    "algorithm",
    "unknown_kid",
    "signature",
    "issuer",
    "expired",
    "not_yet_valid",
    "claims",
    "pod_gone",
    "pod_uid",
    "audience",
    "namespace",
    "no_pod",
    "not_member",
    "not_owned",
]


@contextlib.asynccontextmanager
async def running(
    cluster: DevCluster,
    config: Config,
    certs: ServingCerts,
    *,
    wait_ready: bool = True,
    server_budgets: bool = False,
    **settings: Any,
) -> AsyncIterator[Rig]:
    """The server with a TokenAuthenticator, started (and ready, unless told not to
    wait), and a client session that trusts it. The authenticator has a KubeClient of its
    own with a budget no test spends, unless ``server_budgets``: then the server starts
    it on its own API budgets, as ``serve`` does."""
    clock = FakeClock(time.time())
    monotonic = FakeClock(1000.0)
    settings.setdefault("issuer", cluster.issuer)
    settings.setdefault("own_token_path", None)
    auth = TokenAuthenticator(AuthSettings(**settings), clock=clock, monotonic=monotonic)
    kube = KubeClient(config.kubeconfig, qps=1000.0, burst=1000, timeout=2.0)
    await kube.start()
    try:
        if not server_budgets:
            await auth.start(kube)
            if wait_ready:
                async with asyncio.timeout(10):
                    await auth.wait_ready()
        async with StatusServer(config, auth) as server:
            await settled(server)
            if server_budgets and wait_ready:
                async with asyncio.timeout(10):
                    await auth.wait_ready()
            connector = aiohttp.TCPConnector(ssl=certs.client_context())
            async with aiohttp.ClientSession(connector=connector) as session:
                yield Rig(cluster, auth, server, session, clock, monotonic)
    finally:
        await auth.stop()
        await kube.close()
