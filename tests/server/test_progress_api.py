"""The aggregated API on the real control plane: kube-apiserver proxies
``trainjob-status.kubeflow.org/v1alpha1`` to the server's progress port (an APIService,
its Service and endpoints at this machine's address: the API server refuses loopback
endpoints), with its front proxy's client certificate and the user in its headers.

A read returns the newest accepted update while its write is still pending, and only to
a user who may read the TrainJob itself; the port answers no one but the front proxy.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from trainjob_devcluster.harness.controlplane import FRONT_PROXY_NAME
from trainjob_devcluster.harness.pytest_plugin import (
    KubeAPI,
    MakeStatusServer,
    on_real_server,
    require_binary,
)
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_devcluster.harness.testing import eventually
from trainjob_status_server.app import StatusServer
from trainjob_status_server.certificates.certs import APISERVICE_RECHECK_SECONDS
from trainjob_status_server.peers.batch import NEWEST_PATH
from trainjob_status_server.peers.ring import Peer, ranked
from trainjob_status_server.progress import frontproxy, resource
from trainjob_status_server.status.writer import CoalescingWriter

from .aggregation import (
    APISERVICE,
    APISERVICES,
    PROGRESS,
    TABLE,
    add_apiservice,
    available,
    register,
    soon,
    through_api_server,
    unregister,
)
from .conftest import NS, ServingCerts, status_path
from .replicas import (
    SERVER_NS,
    checking_tokens,
    endpoint_slice,
    machine_address,
    server_account,
    token_file,
)


def update(progress: int, second: int, eta: int = 60) -> bytes:
    return json.dumps(
        {
            "trainerStatus": {
                "progressPercentage": progress,
                "estimatedRemainingSeconds": eta,
                "metrics": [{"name": "loss", "value": f"0.{progress}"}],
                "lastUpdatedTime": f"2026-12-01T10:00:{second:02d}Z",
            }
        }
    ).encode()


def grant(kube_api: RealCluster, user: str, role: str, rules: list[dict[str, Any]]) -> None:
    """A Role ``role`` in NS with ``rules``, bound to ``user``."""
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}"
    kube_api.call("POST", f"{rbac}/roles", {"metadata": {"name": role}, "rules": rules})
    kube_api.call(
        "POST",
        f"{rbac}/rolebindings",
        {
            "metadata": {"name": f"{user}-{role}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
        },
    )


@pytest_asyncio.fixture
async def progress_server(
    kube_api: RealCluster,
    certs: ServingCerts,
    make_status_server: MakeStatusServer,
    unused_tcp_port: int,
) -> AsyncIterator[StatusServer]:
    """A server whose writes wait a minute after the first, registered as the
    APIService's backend."""
    address = machine_address()
    async with make_status_server(
        host="0.0.0.0", progress_api_port=unused_tcp_port, min_write_interval=60.0
    ) as server:
        register(kube_api, certs, address, unused_tcp_port)
        try:
            await soon(lambda: available(kube_api), "the APIService is Available", 30)
            yield server
        finally:
            unregister(kube_api)


async def post(server: StatusServer, certs: ServingCerts, name: str, body: bytes) -> None:
    connector = aiohttp.TCPConnector(ssl=certs.client_context())
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(
            server.url + status_path(NS, name),
            data=body,
            headers={"Authorization": "Bearer test"},
        ) as answer,
    ):
        assert answer.status == 200


def stored_progress(kube_api: RealCluster, name: str) -> int | None:
    found = kube_api.get("trainjobs", NS, name, "trainer.kubeflow.org")
    assert found is not None
    value = (found.get("status") or {}).get("trainerStatus", {}).get("progressPercentage")
    return value if isinstance(value, int) else None


@on_real_server
async def test_a_read_through_the_api_server_returns_the_update_its_write_waits_for(
    kube_api: RealCluster, certs: ServingCerts, progress_server: StatusServer
) -> None:
    kube_api.create_trainjob(NS, "llama")
    kube_api.create_trainjob(NS, "quiet")
    await post(progress_server, certs, "llama", update(10, 1))
    await soon(lambda: stored_progress(kube_api, "llama") == 10, "the first write")
    await post(progress_server, certs, "llama", update(42, 2, eta=3600))

    code, body = await through_api_server(kube_api, f"{PROGRESS}/llama")
    assert code == 200
    assert body["kind"] == "TrainJobProgress"
    assert body["apiVersion"] == resource.GROUP_VERSION
    assert body["metadata"]["name"] == "llama"
    assert body["metadata"]["namespace"] == NS
    assert body["trainerStatus"] == {
        "progressPercentage": 42,
        "estimatedRemainingSeconds": 3600,
        "metrics": [{"name": "loss", "value": "0.42"}],
        "lastUpdatedTime": "2026-12-01T10:00:02Z",
    }
    assert body["stored"] is False
    # The write still waits: what the API server's TrainJob holds is the first update.
    assert stored_progress(kube_api, "llama") == 10

    code, listed = await through_api_server(kube_api, PROGRESS)
    assert code == 200
    assert listed["kind"] == "TrainJobProgressList"
    # A TrainJob with no update yet has no progress.
    assert [item["metadata"]["name"] for item in listed["items"]] == ["llama"]

    code, table = await through_api_server(kube_api, PROGRESS, accept=TABLE)
    assert code == 200
    assert table["kind"] == "Table"
    assert [column["name"] for column in table["columnDefinitions"]] == [
        "Name",
        "Progress",
        "ETA",
        "Updated",
        "Stored",
    ]
    assert table["rows"][0]["cells"][:3] == ["llama", "42%", "60m"]
    assert table["rows"][0]["cells"][4] is False

    code, missing = await through_api_server(kube_api, f"{PROGRESS}/quiet")
    assert code == 404
    assert missing["reason"] == "NotFound"
    assert missing["message"] == f'{resource.QUALIFIED} "quiet" not found'


@on_real_server
async def test_kubectl_gets_and_discovers_the_resource(
    kube_api: RealCluster, certs: ServingCerts, progress_server: StatusServer
) -> None:
    kube_api.create_trainjob(NS, "llama")
    await post(progress_server, certs, "llama", update(42, 2))
    kubectl = require_binary("kubectl")

    async def run(*args: str) -> str:
        process = await asyncio.create_subprocess_exec(
            kubectl,
            f"--kubeconfig={kube_api.kubeconfig_path}",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate()
        assert process.returncode == 0, err.decode()
        assert err == b""
        return out.decode()

    resources = await run("api-resources", f"--api-group={resource.GROUP}", "--no-headers")
    assert resources.split() == [
        resource.RESOURCE,
        "tjp",
        resource.GROUP_VERSION,
        "true",
        resource.KIND,
    ]
    printed = await run("get", "tjp", "-n", NS)
    lines = printed.splitlines()
    assert lines[0].split() == ["NAME", "PROGRESS", "ETA", "UPDATED", "STORED"]
    assert lines[1].split()[:3] == ["llama", "42%", "60s"]
    raw = json.loads(await run("get", "--raw", f"{PROGRESS}/llama"))
    assert raw["trainerStatus"]["progressPercentage"] == 42


@on_real_server
async def test_a_user_who_may_not_read_the_trainjob_is_refused(
    kube_api: RealCluster, certs: ServingCerts, progress_server: StatusServer
) -> None:
    kube_api.create_trainjob(NS, "llama")
    await post(progress_server, certs, "llama", update(42, 2))
    # Alice may read progress, which the API server checks, but no TrainJob.
    grant(
        kube_api,
        "alice",
        "progress-reader",
        [
            {
                "apiGroups": [resource.GROUP],
                "resources": [resource.RESOURCE],
                "verbs": ["get", "list"],
            }
        ],
    )
    code, refused = await through_api_server(kube_api, f"{PROGRESS}/llama", user="alice")
    assert code == 403
    assert refused["reason"] == "Forbidden"
    assert refused["message"] == (
        f'{resource.QUALIFIED} "llama" is forbidden: User "alice" cannot get resource'
        f' "trainjobs" in API group "trainer.kubeflow.org" in the namespace "{NS}"'
    )
    code, refused = await through_api_server(kube_api, PROGRESS, user="alice")
    assert code == 403
    assert refused["message"].startswith(
        f'{resource.QUALIFIED} is forbidden: User "alice" cannot list resource "trainjobs"'
    )
    # Bob may read TrainJobs but not progress: the API server refuses him itself.
    code, refused = await through_api_server(kube_api, f"{PROGRESS}/llama", user="bob")
    assert code == 403
    assert 'cannot get resource "trainjobprogresses"' in refused["message"]


@on_real_server
async def test_the_port_answers_only_the_front_proxy(
    kube_api: RealCluster, certs: ServingCerts, progress_server: StatusServer, tmp_path: Path
) -> None:
    url = progress_server.progress_api_url
    assert url is not None
    path = f"{PROGRESS}/llama"

    async def get(context: ssl.SSLContext, headers: dict[str, str]) -> int:
        connector = aiohttp.TCPConnector(ssl=context)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.get(url + path, headers=headers) as answer,
        ):
            return answer.status

    def client(ca: Any, name: str) -> ssl.SSLContext:
        cert, key = ca.issue_client_cert(name)
        (tmp_path / f"{name}.crt").write_bytes(cert)
        (tmp_path / f"{name}.key").write_bytes(key)
        context = certs.client_context()
        context.load_cert_chain(tmp_path / f"{name}.crt", tmp_path / f"{name}.key")
        return context

    as_admin = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}
    # No certificate, or one of another CA: no handshake.
    for context in (certs.client_context(), client(certs.ca, FRONT_PROXY_NAME)):
        with pytest.raises(aiohttp.ClientConnectionError):
            await get(context, as_admin)
    # The proxy's CA, but a name the API server does not allow: no one.
    assert await get(client(kube_api.plane.front_proxy, "someone-else"), as_admin) == 401
    proxy = client(kube_api.plane.front_proxy, FRONT_PROXY_NAME)
    # The proxy's certificate without a user: no one either.
    assert await get(proxy, {}) == 401
    assert await get(proxy, as_admin) == 404  # no TrainJob llama


async def test_without_a_front_proxy_the_port_shakes_hands_with_no_one(
    certs: ServingCerts,
    make_status_server: MakeStatusServer,
    unused_tcp_port: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An API server without the aggregation layer publishes no front proxy: the port
    trusts no client certificate, and says why at start."""
    async with make_status_server(progress_api_port=unused_tcp_port) as server:
        url = server.progress_api_url
        assert url is not None
        connector = aiohttp.TCPConnector(ssl=certs.client_context())
        async with aiohttp.ClientSession(connector=connector) as session:
            with pytest.raises(aiohttp.ClientConnectionError):
                async with session.get(url + PROGRESS):
                    pass
    warned = [r for r in caplog.records if r.getMessage().startswith("front proxy settings")]
    assert [r.getMessage() for r in warned] == [
        "front proxy settings not read: the aggregated API keeps the last ones"
    ]
    assert getattr(warned[0], "configmap") == frontproxy.CONFIGMAP_PATH  # noqa: B009


@on_real_server
async def test_a_read_the_api_server_cannot_authorize_is_unavailable(
    kube_api: RealCluster,
    certs: ServingCerts,
    make_status_server: MakeStatusServer,
    unused_tcp_port: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Reviews spend the reads budget: one spent, a read with no verdict kept is a
    503, never an answer without the check."""
    address = machine_address()
    async with make_status_server(
        host="0.0.0.0",
        progress_api_port=unused_tcp_port,
        kube_reads_qps=0.001,
        kube_reads_burst=1,
    ):
        register(kube_api, certs, address, unused_tcp_port)
        try:
            await soon(lambda: available(kube_api), "the APIService is Available", 30)
            assert (await through_api_server(kube_api, PROGRESS))[0] == 200
            code, body = await through_api_server(kube_api, f"{PROGRESS}/llama")
            assert code == 503
            assert body["reason"] == "ServiceUnavailable"
            assert body["message"] == "the authorization check could not be made"
        finally:
            unregister(kube_api)
    assert "progress access review failed" in [r.getMessage() for r in caplog.records]


@on_real_server
async def test_the_certificate_bootstrap_keeps_the_apiservices_ca_bundle(
    kube_api: RealCluster,
    certs: ServingCerts,
    make_status_server: MakeStatusServer,
    unused_tcp_port: int,
    tmp_path: Path,
) -> None:
    """With ``--cert-bootstrap`` the server mints its own CA: the APIService, registered
    with another CA's bundle, is given the server's, and reads go through."""
    kube_api.create_trainjob(NS, "llama")
    register(kube_api, certs, machine_address(), unused_tcp_port)
    minted = tmp_path / "minted"
    try:
        async with make_status_server(
            host="0.0.0.0",
            progress_api_port=unused_tcp_port,
            cert_bootstrap=True,
            tls_cert_file=minted / "tls.crt",
            tls_key_file=minted / "tls.key",
        ):
            await soon(lambda: available(kube_api), "the APIService is Available", 30)
            found = kube_api.call("GET", f"{APISERVICES}/{APISERVICE}")
            assert base64.b64decode(found["spec"]["caBundle"]) == (minted / "ca.crt").read_bytes()
            code, listed = await through_api_server(kube_api, PROGRESS)
            assert (code, listed["items"]) == (200, [])
    finally:
        unregister(kube_api)


async def test_a_bootstrap_without_the_apiservice_says_so_once(
    kube_api: KubeAPI,
    make_status_server: MakeStatusServer,
    unused_tcp_port: int,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube_api.ensure_namespace(SERVER_NS)
    minted = tmp_path / "minted"
    async with make_status_server(
        progress_api_port=unused_tcp_port,
        cert_bootstrap=True,
        tls_cert_file=minted / "tls.crt",
        tls_key_file=minted / "tls.key",
    ) as server:
        assert server.certs is not None
        await server.certs.ensure()  # a second round: not said again
    said = [r for r in caplog.records if r.getMessage() == "apiservice not found"]
    assert [getattr(r, "apiservice") for r in said] == [APISERVICE]  # noqa: B009


@on_real_server
async def test_a_read_on_any_replica_returns_the_newest_update_whichever_received_it(
    kube_api: RealCluster,
    certs: ServingCerts,
    make_status_server: MakeStatusServer,
    unused_tcp_port_factory: Any,
    tmp_path: Path,
) -> None:
    """Two replicas: the reader, which the API server sends reads to, receives the
    posts and forwards them to the TrainJob's owner, whose write waits. The reader asks
    the owner for what it holds and answers that, not the stored status."""
    server_account(kube_api)
    address = machine_address()
    ports = [unused_tcp_port_factory() for _ in range(3)]
    owner_peer, reader_peer = Peer(address, ports[0]), Peer(address, ports[1])
    name = next(
        f"tj{i}"
        for i in range(100)
        if ranked((NS, f"tj{i}"), [owner_peer, reader_peer])[0] == owner_peer
    )
    kube_api.create_trainjob(NS, name)
    token = token_file(kube_api, tmp_path)
    endpoint_slice(kube_api, "owner", address, ports[0])
    endpoint_slice(kube_api, "reader", address, ports[1])
    replica: dict[str, Any] = {
        "host": "0.0.0.0",
        "pod_ip": address,
        "peer_token_file": token,
        "min_write_interval": 60.0,
    }
    async with (
        make_status_server(
            port=ports[0], authenticator=checking_tokens(kube_api), **replica
        ) as owner,
        make_status_server(port=ports[1], progress_api_port=ports[2], **replica) as reader,
    ):
        register(kube_api, certs, address, ports[2])
        try:
            await soon(lambda: available(kube_api), "the APIService is Available", 30)
            replicas, writer = reader.replicas, owner.writer
            assert replicas is not None
            assert isinstance(writer, CoalescingWriter)
            await soon(
                lambda: replicas.owner((NS, name)) == owner_peer, "the reader sees the owner"
            )
            await post(reader, certs, name, update(10, 1))
            await soon(lambda: stored_progress(kube_api, name) == 10, "the owner's first write")
            await post(reader, certs, name, update(42, 2))

            def held() -> int | None:
                update = writer.newest((NS, name))
                return None if update is None else update.progress

            await soon(lambda: held() == 42, "the owner holds 42")

            code, body = await through_api_server(kube_api, f"{PROGRESS}/{name}")
            assert code == 200
            assert body["trainerStatus"]["progressPercentage"] == 42
            assert body["stored"] is False
            code, listed = await through_api_server(kube_api, PROGRESS)
            assert [item["trainerStatus"]["progressPercentage"] for item in listed["items"]] == [42]
            assert stored_progress(kube_api, name) == 10
        finally:
            unregister(kube_api)
        # What the owner holds is for another replica only.
        connector = aiohttp.TCPConnector(ssl=certs.client_context())
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.get(
                f"https://127.0.0.1:{ports[0]}{NEWEST_PATH}",
                params={"namespace": NS},
                headers={"Authorization": "Bearer test"},
            ) as answer,
        ):
            assert answer.status == 401
            assert "progressPercentage" not in await answer.text()


@on_real_server
async def test_a_replica_that_cannot_say_what_it_holds_adds_nothing(
    kube_api: RealCluster,
    make_status_server: MakeStatusServer,
    unused_tcp_port_factory: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One without the replicas' endpoints (no token authentication: 404), one gone
    (nothing listens): each is logged, and the read goes on without them."""
    server_account(kube_api)
    address = machine_address()
    gone = unused_tcp_port_factory()
    async with (
        make_status_server(host="0.0.0.0") as other,
        make_status_server(
            host="0.0.0.0", pod_ip=address, peer_token_file=token_file(kube_api, tmp_path)
        ) as reader,
    ):
        assert reader.replicas is not None
        peers = [Peer(address, int(other.url.rsplit(":", 1)[1])), Peer(address, gone)]
        assert await reader.replicas.newest(peers, NS, None, 1.0) == []
    said = {(r.getMessage(), getattr(r, "replica", None)) for r in caplog.records}
    assert ("newest updates refused by a replica", peers[0].url) in said
    assert ("newest updates of a replica unavailable", peers[1].url) in said


@on_real_server
async def test_kubectl_explains_the_resource(
    kube_api: RealCluster, progress_server: StatusServer
) -> None:
    """The API server merges the aggregated API's OpenAPI v3 document into its own."""
    kubectl = require_binary("kubectl")

    async def explained() -> str | None:
        process = await asyncio.create_subprocess_exec(
            kubectl,
            f"--kubeconfig={kube_api.kubeconfig_path}",
            "explain",
            f"{resource.RESOURCE}.trainerStatus.progressPercentage",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, _ = await process.communicate()
        return out.decode() if process.returncode == 0 else None

    text = await eventually(explained, "kubectl explain finds the resource", 30)
    assert text is not None
    assert f"KIND:       {resource.KIND}" in text
    assert f"VERSION:    {resource.VERSION}" in text
    assert "How complete training is, 0 to 100." in text


@on_real_server
async def test_an_apiservice_registered_after_the_start_gets_the_bundle_within_seconds(
    kube_api: RealCluster,
    certs: ServingCerts,
    make_status_server: MakeStatusServer,
    unused_tcp_port: int,
    tmp_path: Path,
) -> None:
    """Applied after the server started (its bootstrap found none), the APIService is
    looked for again every APISERVICE_RECHECK_SECONDS, not at the 5-minute check."""
    kube_api.ensure_namespace(SERVER_NS)
    minted = tmp_path / "minted"
    async with make_status_server(
        host="0.0.0.0",
        progress_api_port=unused_tcp_port,
        cert_bootstrap=True,
        tls_cert_file=minted / "tls.crt",
        tls_key_file=minted / "tls.key",
    ):
        register(kube_api, certs, machine_address(), unused_tcp_port)
        try:
            await soon(
                lambda: available(kube_api),
                "the APIService is Available",
                APISERVICE_RECHECK_SECONDS * 3,
            )
        finally:
            unregister(kube_api)


@on_real_server
async def test_one_review_covers_a_namespace_and_a_user_limited_to_names_gets_those(
    kube_api: RealCluster,
    certs: ServingCerts,
    make_status_server: MakeStatusServer,
    unused_tcp_port: int,
) -> None:
    """A get is first asked for the whole namespace: with a budget of one review, the
    admin reads any TrainJob there (a missing one is a 404, after the check). Carol may
    get one TrainJob by name (RBAC resourceNames): she reads it, and no other."""
    kube_api.create_trainjob(NS, "llama")
    kube_api.create_trainjob(NS, "mistral")
    address = machine_address()
    async with make_status_server(
        host="0.0.0.0",
        progress_api_port=unused_tcp_port,
        kube_reads_qps=0.001,
        kube_reads_burst=1,
    ) as server:
        register(kube_api, certs, address, unused_tcp_port)
        try:
            await soon(lambda: available(kube_api), "the APIService is Available", 30)
            for name in ("llama", "mistral"):
                await post(server, certs, name, update(42, 2))
            for name in ("llama", "mistral"):
                assert (await through_api_server(kube_api, f"{PROGRESS}/{name}"))[0] == 200
            assert (await through_api_server(kube_api, f"{PROGRESS}/gone"))[0] == 404
        finally:
            unregister(kube_api)

    grant(
        kube_api,
        "carol",
        "llama-only",
        [
            {
                "apiGroups": [resource.GROUP],
                "resources": [resource.RESOURCE],
                "verbs": ["get"],
            },
            {
                "apiGroups": ["trainer.kubeflow.org"],
                "resources": ["trainjobs"],
                "resourceNames": ["llama"],
                "verbs": ["get"],
            },
        ],
    )
    async with make_status_server(host="0.0.0.0", progress_api_port=unused_tcp_port) as server:
        add_apiservice(kube_api, certs)
        try:
            await soon(lambda: available(kube_api), "the APIService is Available", 30)
            for name in ("llama", "mistral"):
                await post(server, certs, name, update(43, 3))
            code, body = await through_api_server(kube_api, f"{PROGRESS}/llama", user="carol")
            assert (code, body["trainerStatus"]["progressPercentage"]) == (200, 43)
            code, body = await through_api_server(kube_api, f"{PROGRESS}/mistral", user="carol")
            assert code == 403
            assert body["message"].startswith(
                f'{resource.QUALIFIED} "mistral" is forbidden: User "carol" cannot get'
            )
        finally:
            unregister(kube_api)
