"""Serving TLS: certificate files rotated on disk are served without a restart, and a
keep-alive connection opened before the rotation still completes its requests; TLS 1.2
with ECDHE and AEAD suites only, and TLS 1.3, shown by real handshakes."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from trainjob_devcluster.harness.testing import eventually
from trainjob_status_server.app import StatusServer
from trainjob_status_server.certificates.tls import TLS12_CIPHERS, ReloadingTLS
from trainjob_status_server.config import Config

from .conftest import ServingCerts


async def _open(
    server: StatusServer, context: ssl.SSLContext
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = server.url.removeprefix("https://").rsplit(":", 1)
    return await asyncio.open_connection(host, int(port), ssl=context)


def _peer_serial(writer: asyncio.StreamWriter) -> int:
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


async def _healthz(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: keep-alive\r\n\r\n")
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    return head.split(b"\r\n")[0] + b" " + await reader.readexactly(length)


async def _wait_reloads(tls: ReloadingTLS, count: int) -> None:
    async with asyncio.timeout(5):
        while tls.reloads < count:
            await asyncio.sleep(0.02)


async def test_rotated_certificate_is_served_and_old_connection_completes(
    server: StatusServer, certs: ServingCerts
) -> None:
    context = certs.client_context()
    old_reader, old_writer = await _open(server, context)
    assert await _healthz(old_reader, old_writer) == b"HTTP/1.1 200 OK ok"
    old_serial = _peer_serial(old_writer)

    new_pem = certs.rotate()
    assert server.tls is not None
    await _wait_reloads(server.tls, 1)

    reader, writer = await _open(server, context)
    assert _peer_serial(writer) == x509.load_pem_x509_certificate(new_pem).serial_number
    assert await _healthz(reader, writer) == b"HTTP/1.1 200 OK ok"
    writer.close()
    # The connection from before the rotation keeps its certificate and still works.
    assert _peer_serial(old_writer) == old_serial != _peer_serial(writer)
    assert await _healthz(old_reader, old_writer) == b"HTTP/1.1 200 OK ok"
    old_writer.close()


async def test_a_broken_pair_keeps_the_previous_certificate(
    server: StatusServer, certs: ServingCerts, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trainjob_status_server.certificates.tls")
    assert server.tls is not None
    context = certs.client_context()
    _, before = await _open(server, context)
    serial = _peer_serial(before)
    before.close()
    certs.cert_file.write_bytes(b"-----BEGIN CERTIFICATE-----\nnot a certificate\n")

    async def refused() -> bool:
        return "tls reload failed, still serving the previous certificate" in caplog.messages

    await eventually(refused, "the watcher refusing the broken file", within=10, every=0.02)
    assert server.tls.reloads == 0
    _, after = await _open(server, context)
    assert _peer_serial(after) == serial
    after.close()
    certs.rotate()
    await _wait_reloads(server.tls, 1)


def test_minimum_version_is_enforced(certs: ServingCerts) -> None:
    tls = ReloadingTLS(certs.cert_file, certs.key_file, min_version="1.3")
    assert tls.context.minimum_version == ssl.TLSVersion.TLSv1_3
    assert ReloadingTLS(certs.cert_file, certs.key_file).context.minimum_version == (
        ssl.TLSVersion.TLSv1_2
    )


def test_a_missing_certificate_fails_at_start(certs: ServingCerts, config: Config) -> None:
    certs.key_file.unlink()
    with pytest.raises(FileNotFoundError):
        ReloadingTLS(certs.cert_file, certs.key_file)


# The server refuses with a handshake_failure alert, or resets the connection when
# asyncio aborts it before the alert is flushed: either way there is no session.
HANDSHAKE_FAILED = (ssl.SSLError, ConnectionResetError)


def _client(certs: ServingCerts, ciphers: str | None, version: ssl.TLSVersion) -> ssl.SSLContext:
    """A client that trusts the test CA and offers exactly ``ciphers`` on ``version``."""
    context = certs.client_context()
    context.minimum_version = context.maximum_version = version
    if ciphers is not None:
        # Level 0: the client must be willing to offer what the server is to refuse.
        context.set_ciphers(f"{ciphers}:@SECLEVEL=0")
    return context


@pytest.mark.parametrize(
    "cipher",
    [
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
    ],
)
async def test_tls12_with_an_aead_suite_shakes_hands(
    server: StatusServer, certs: ServingCerts, cipher: str
) -> None:
    reader, writer = await _open(server, _client(certs, cipher, ssl.TLSVersion.TLSv1_2))
    assert writer.get_extra_info("ssl_object").version() == "TLSv1.2"
    assert writer.get_extra_info("cipher")[0] == cipher
    assert await _healthz(reader, writer) == b"HTTP/1.1 200 OK ok"
    writer.close()


@pytest.mark.parametrize(
    "cipher",
    [
        "ECDHE-ECDSA-AES128-SHA256",  # CBC
        "ECDHE-ECDSA-AES256-SHA384",  # CBC
        "ECDHE-ECDSA-AES128-SHA",  # CBC, SHA-1
    ],
)
async def test_tls12_with_only_cbc_suites_is_refused(
    server: StatusServer, certs: ServingCerts, cipher: str
) -> None:
    with pytest.raises(HANDSHAKE_FAILED):
        await _open(server, _client(certs, cipher, ssl.TLSVersion.TLSv1_2))


async def test_tls13_shakes_hands(server: StatusServer, certs: ServingCerts) -> None:
    reader, writer = await _open(server, _client(certs, None, ssl.TLSVersion.TLSv1_3))
    assert writer.get_extra_info("ssl_object").version() == "TLSv1.3"
    assert await _healthz(reader, writer) == b"HTTP/1.1 200 OK ok"
    writer.close()


def _rsa_pair(directory: Path) -> tuple[Path, Path]:
    """A self-signed RSA certificate for localhost (cert-manager may issue RSA ones)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "rsa.crt", directory / "rsa.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


async def _handshake(port: int, ciphers: str) -> str:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(f"{ciphers}:@SECLEVEL=0")
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    cipher: str = writer.get_extra_info("cipher")[0]
    writer.close()
    return cipher


async def test_with_an_rsa_certificate_only_ecdhe_aead_suites_are_served(
    tmp_path: Path,
) -> None:
    cert_file, key_file = _rsa_pair(tmp_path)
    tls = ReloadingTLS(cert_file, key_file)
    listening = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=tls.context)
    port = listening.sockets[0].getsockname()[1]
    try:
        for good in ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-CHACHA20-POLY1305"):
            assert await _handshake(port, good) == good
        # RSA key exchange (no forward secrecy), finite-field DHE, CBC: refused.
        for bad in ("AES128-GCM-SHA256", "DHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-SHA256"):
            with pytest.raises(HANDSHAKE_FAILED):
                await _handshake(port, bad)
    finally:
        listening.close()
        await listening.wait_closed()


def test_every_tls12_suite_is_ecdhe_with_aead(certs: ServingCerts) -> None:
    context = ReloadingTLS(certs.cert_file, certs.key_file).context
    tls12 = [c for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert {c["name"] for c in tls12} == set(TLS12_CIPHERS.split(":"))
    assert all(c["aead"] and c["kea"] == "kx-ecdhe" for c in tls12)
