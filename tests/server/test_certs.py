"""Certificate bootstrap against the devcluster (Secrets) and the stand-in (the webhook
configuration): racing replicas agree on one Secret, renewal happens before expiry and
is served, the caBundle follows the CA. Keys are minted at run time."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
import ssl
import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web
from cryptography import x509

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_real_server
from trainjob_status_server.certificates import certs, pki
from trainjob_status_server.certificates.certs import CertBootstrap, CertSettings, WebhookCABundle
from trainjob_status_server.certificates.tls import ReloadingTLS
from trainjob_status_server.kube.client import KubeClient

from .test_webhook_support import SERVICE_HOST, StandIn, ca_bundles, webhook_configuration

HERE = "trainjob-status"
HOUR = 3600.0
# Short lifetimes so "due" is reachable with a clock that starts in the past and then
# catches up with real time (certificates minted "now" must verify in a real handshake).
SHORT = pki.Policy(
    ca_validity=dt.timedelta(days=30),
    cert_validity=dt.timedelta(hours=3),
    ca_overlap=dt.timedelta(hours=1),
)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def settings(directory: Path, policy: pki.Policy = SHORT, **kw: object) -> CertSettings:
    return CertSettings(
        namespace=HERE,
        dns_names=certs.dns_names("trainjob-status", HERE),
        cert_file=directory / "tls.crt",
        key_file=directory / "tls.key",
        ca_file=directory / "ca.crt",
        policy=policy,
        **kw,  # type: ignore[arg-type]
    )


@pytest_asyncio.fixture
async def kube(kube_api: KubeAPI) -> AsyncIterator[KubeClient]:
    kube_api.ensure_namespace(HERE)
    async with KubeClient(kube_api.kubeconfig_path, qps=1000, burst=1000, timeout=2.0) as k:
        yield k


@pytest_asyncio.fixture
async def standin(tmp_path: Path) -> AsyncIterator[StandIn]:
    server = await StandIn(tmp_path).start()
    server.put("mutatingwebhookconfigurations", webhook_configuration(hooks=2))
    yield server
    await server.stop()


def stored_bundle(cluster: KubeAPI) -> pki.Bundle:
    secret = cluster.get("secrets", HERE, "trainjob-status-tls")
    assert secret is not None
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "trainjob-status"
    return pki.Bundle.from_secret_data(secret["data"])


def files(s: CertSettings) -> tuple[bytes, bytes, bytes]:
    return s.cert_file.read_bytes(), s.key_file.read_bytes(), s.ca_file.read_bytes()


@on_real_server
async def test_bootstrap_creates_the_secret_and_writes_the_files(
    kube_api: KubeAPI, kube: KubeClient, tmp_path: Path
) -> None:
    s = settings(tmp_path)
    bootstrap = CertBootstrap(kube, s)
    await bootstrap.start()
    try:
        bundle = stored_bundle(kube_api)
        assert files(s) == (bundle.tls_cert, bundle.tls_key, bundle.ca_pem)
        assert stat.S_IMODE(s.key_file.stat().st_mode) == 0o600
        assert bootstrap.renewals == 1
        # A second round finds everything in order: no write, no file change.
        mtime = s.cert_file.stat().st_mtime_ns
        await bootstrap.ensure()
        assert bootstrap.renewals == 1
        assert s.cert_file.stat().st_mtime_ns == mtime
        # The pair loads as the server would load it.
        ReloadingTLS(s.cert_file, s.key_file)
    finally:
        await bootstrap.stop()


async def test_two_replicas_starting_at_once_end_with_one_secret(
    devcluster: DevCluster, kube: KubeClient, tmp_path: Path
) -> None:
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a = CertBootstrap(kube, settings(a_dir))
    b = CertBootstrap(kube, settings(b_dir))
    # Both creates are held until both replicas have read "no Secret": a real race.
    devcluster.faults.stall(0.3, verb="create", resource="secrets", times=2)
    await asyncio.gather(a.start(), b.start())
    try:
        assert devcluster.faults.count("create", "secrets") == 2
        assert len(devcluster.list("secrets", HERE)) == 1
        assert a.renewals + b.renewals == 1  # one won, the other read the winner's
        assert a.bundle == b.bundle == stored_bundle(devcluster)
        assert files(settings(a_dir)) == files(settings(b_dir))
    finally:
        await a.stop()
        await b.stop()


async def test_renewal_before_expiry_is_served(
    devcluster: DevCluster, kube: KubeClient, tmp_path: Path
) -> None:
    clock = Clock(time.time() - 2.5 * HOUR)  # the certificate has half an hour left at "now"
    s = settings(tmp_path)
    bootstrap = CertBootstrap(kube, s, clock=clock)
    await bootstrap.start()
    tls = ReloadingTLS(s.cert_file, s.key_file, poll_interval=3600)
    runner = web.AppRunner(web.Application(), handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        old = stored_bundle(devcluster)
        assert await served_serial(port, s.ca_file) == certificate(old.tls_cert).serial_number

        clock.now = time.time()  # a third of its life left: due
        await bootstrap.ensure()
        new = stored_bundle(devcluster)
        leaf = certificate(new.tls_cert)
        assert leaf.serial_number != certificate(old.tls_cert).serial_number
        assert certificate(old.tls_cert).not_valid_after_utc > dt.datetime.now(
            dt.UTC
        )  # before expiry
        assert new.ca_certs == old.ca_certs
        assert files(s) == (new.tls_cert, new.tls_key, new.ca_pem)
        assert bootstrap.renewals == 2

        assert await tls.check()  # what the reload loop does on its next tick
        assert await served_serial(port, s.ca_file) == leaf.serial_number
    finally:
        await runner.cleanup()
        await bootstrap.stop()


async def test_racing_renewals_agree(
    devcluster: DevCluster, kube: KubeClient, tmp_path: Path
) -> None:
    clock = Clock(time.time() - 2.5 * HOUR)
    a = CertBootstrap(kube, settings(tmp_path / "a"), clock=clock)
    b = CertBootstrap(kube, settings(tmp_path / "b"), clock=clock)
    await a.start()
    await b.start()
    try:
        clock.now = time.time()
        devcluster.faults.stall(0.3, verb="update", resource="secrets", times=2)
        await asyncio.gather(a.ensure(), b.ensure())
        assert devcluster.faults.count("update", "secrets") == 2
        assert a.renewals + b.renewals == 2  # the creation and one renewal
        assert a.bundle == b.bundle == stored_bundle(devcluster)
    finally:
        await a.stop()
        await b.stop()


async def test_ca_bundle_is_kept_in_sync(
    devcluster: DevCluster, kube: KubeClient, standin: StandIn, tmp_path: Path
) -> None:
    clock = Clock(time.time())
    async with standin.client() as standin_kube:
        webhook = WebhookCABundle(standin_kube, "trainjob-status")
        bootstrap = CertBootstrap(kube, settings(tmp_path), webhook, clock=clock)
        await bootstrap.start()
        try:
            ca = stored_bundle(devcluster).ca_pem
            # Our two webhooks get the CA; the one served elsewhere keeps its own.
            assert ca_bundles(standin) == [ca, ca, b"other"]

            patches = standin.requests[("PATCH", "mutatingwebhookconfigurations")]
            await bootstrap.ensure()
            assert standin.requests[("PATCH", "mutatingwebhookconfigurations")] == patches

            # Someone re-applies an old caBundle: the next round puts it back.
            config = standin.get("mutatingwebhookconfigurations", "trainjob-status")
            assert config is not None
            config["webhooks"][1]["clientConfig"]["caBundle"] = base64.b64encode(b"x").decode()
            await bootstrap.ensure()
            assert ca_bundles(standin) == [ca, ca, b"other"]

            # CA rotation: the bundle with both CAs goes out at once.
            clock.now += 21 * 24 * HOUR  # under a third of 30 days left
            await bootstrap.ensure()
            rotated = stored_bundle(devcluster)
            assert len(rotated.ca_certs) == 2
            assert rotated.ca_certs[1] == ca
            assert ca_bundles(standin) == [rotated.ca_pem, rotated.ca_pem, b"other"]
            assert settings(tmp_path).ca_file.read_bytes() == rotated.ca_pem
        finally:
            await bootstrap.stop()


@on_real_server
async def test_ca_bundle_is_patched_in_the_api_servers_own_configuration(
    kube_api: KubeAPI, kube: KubeClient, tmp_path: Path
) -> None:
    """The configuration the API server itself holds (no webhook in it has rules: nothing
    is ever called), patched by the bootstrap and again after a CA rotation."""
    admission = "admissionregistration.k8s.io"
    kube_api.create(
        "mutatingwebhookconfigurations", webhook_configuration(hooks=2), group=admission
    )

    def bundles() -> list[bytes | None]:
        found = kube_api.get("mutatingwebhookconfigurations", "", "trainjob-status", admission)
        assert found is not None
        hooks = [hook["clientConfig"].get("caBundle") for hook in found["webhooks"]]
        return [None if b is None else base64.b64decode(b) for b in hooks]

    clock = Clock(time.time())
    bootstrap = CertBootstrap(kube, settings(tmp_path), WebhookCABundle(kube), clock=clock)
    await bootstrap.start()
    try:
        ca = stored_bundle(kube_api).ca_pem
        assert bundles() == [ca, ca, b"other"]
        clock.now += 21 * 24 * HOUR
        await bootstrap.ensure()
        rotated = stored_bundle(kube_api)
        assert rotated.ca_certs[1] == ca
        assert bundles() == [rotated.ca_pem, rotated.ca_pem, b"other"]
    finally:
        await bootstrap.stop()


async def test_missing_webhook_configuration_is_not_an_error(
    devcluster: DevCluster, kube: KubeClient, standin: StandIn, tmp_path: Path
) -> None:
    standin.objects.clear()
    async with standin.client() as standin_kube:
        bootstrap = CertBootstrap(kube, settings(tmp_path), WebhookCABundle(standin_kube))
        await bootstrap.start()
        await bootstrap.stop()
    assert stored_bundle(devcluster)


@on_real_server
async def test_an_unusable_secret_is_replaced(
    kube_api: KubeAPI, kube: KubeClient, tmp_path: Path
) -> None:
    kube_api.create(
        "secrets",
        {"metadata": {"name": "trainjob-status-tls"}, "type": "Opaque", "data": {"x": "eQ=="}},
        HERE,
    )
    bootstrap = CertBootstrap(kube, settings(tmp_path))
    await bootstrap.start()
    await bootstrap.stop()
    secret = kube_api.get("secrets", HERE, "trainjob-status-tls")
    assert secret is not None
    assert secret["type"] == "Opaque"  # a type never changes
    assert pki.Bundle.from_secret_data(secret["data"]) == bootstrap.bundle


async def test_start_gives_up_when_the_api_never_answers(
    devcluster: DevCluster, kube: KubeClient, tmp_path: Path
) -> None:
    devcluster.faults.fail(500, verb="get", resource="secrets", times=None)
    bootstrap = CertBootstrap(kube, settings(tmp_path, start_timeout=1.0))
    with pytest.raises(RuntimeError, match="no certificate within 1s"):
        await bootstrap.start()
    assert not settings(tmp_path).key_file.exists()


async def test_no_key_material_is_logged(
    devcluster: DevCluster, kube: KubeClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock(time.time())
    bootstrap = CertBootstrap(kube, settings(tmp_path), clock=clock)
    await bootstrap.start()
    clock.now += 21 * 24 * HOUR
    await bootstrap.ensure()
    await bootstrap.stop()
    bundle = stored_bundle(devcluster)
    secrets = [bundle.tls_key.decode(), bundle.ca_key.decode(), *bundle.secret_data().values()]
    logged = " ".join(f"{r.getMessage()} {vars(r)}" for r in caplog.records)
    assert "certificate secret written" in logged
    assert "PRIVATE KEY" not in logged
    for secret in secrets:
        assert secret[40:80] not in logged


# -- helpers --------------------------------------------------------------------------------


def certificate(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


async def served_serial(port: int, ca_file: Path) -> int:
    """Handshake as a pod would (trusting ca.crt, the Service's name) and return the
    serial of the certificate served."""
    context = ssl.create_default_context(cafile=str(ca_file))
    _, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname=SERVICE_HOST
    )
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        writer.close()
