"""The development cluster's CA and serving certificate, checked with real TLS handshakes."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import shutil
import ssl
import stat
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from trainjob_devcluster.harness.pki import (
    CertificateAuthority,
    client_ssl_context,
    server_ssl_context,
)

NOW = 1796236425.0  # 2026-12-02T18:33:45Z


def _fixed(now: float) -> Callable[[], float]:
    return lambda: now


def _utc(epoch: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority()


@pytest.fixture(scope="module")
def serving(ca: CertificateAuthority) -> tuple[bytes, bytes]:
    return ca.issue_server_cert(["localhost", "devcluster.local"], ["127.0.0.1", "::1"])


def test_ca_certificate_is_a_one_day_signing_ca() -> None:
    authority = CertificateAuthority(clock=_fixed(NOW))
    cert = x509.load_pem_x509_certificate(authority.cert_pem)
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert cn == "trainjob-status devcluster CA"
    assert cert.issuer == cert.subject
    basic = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert basic.critical
    assert basic.value.ca
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical
    assert usage.value.key_cert_sign
    assert cert.not_valid_after_utc == _utc(NOW) + datetime.timedelta(days=1)
    # Backdated a little so a client with a slightly slow clock accepts it.
    assert cert.not_valid_before_utc == _utc(NOW) - datetime.timedelta(minutes=5)
    cert.verify_directly_issued_by(cert)


def test_ca_name_and_validity_are_options() -> None:
    authority = CertificateAuthority(
        "custom CA", validity=datetime.timedelta(hours=2), clock=_fixed(NOW)
    )
    cert = authority.certificate
    assert cert.subject.rfc4514_string() == "CN=custom CA"
    assert cert.not_valid_after_utc == _utc(NOW) + datetime.timedelta(hours=2)


def test_server_certificate_has_sans_server_auth_and_is_signed_by_the_ca(
    ca: CertificateAuthority, serving: tuple[bytes, bytes]
) -> None:
    cert_pem, key_pem = serving
    cert = x509.load_pem_x509_certificate(cert_pem)
    cert.verify_directly_issued_by(ca.certificate)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "devcluster.local"]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ca_ski = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ca_ski.digest
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert key.public_key() == cert.public_key()
    assert key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")


def test_server_certificate_never_outlives_the_ca() -> None:
    authority = CertificateAuthority(clock=_fixed(NOW))
    cert_pem, _ = authority.issue_server_cert(
        ["localhost"], [], validity=datetime.timedelta(days=30)
    )
    cert = x509.load_pem_x509_certificate(cert_pem)
    assert cert.not_valid_after_utc == authority.certificate.not_valid_after_utc


@pytest.mark.parametrize(
    ("dns", "ips", "message"),
    [
        ([], [], "a serving certificate needs at least one DNS name or IP address"),
        ([""], [], "invalid DNS name for a certificate: ''"),
        ([], ["not-an-ip"], "'not-an-ip' does not appear to be an IPv4 or IPv6 address"),
    ],
)
def test_bad_subject_alternative_names_are_refused(
    ca: CertificateAuthority, dns: list[str], ips: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(") + "$"):
        ca.issue_server_cert(dns, ips)


def test_ssl_context_loads_through_private_files_that_are_removed(
    tmp_path: Path, serving: tuple[bytes, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, bytes]] = []
    original = ssl.SSLContext.load_cert_chain

    def spy(self: ssl.SSLContext, certfile: Any, keyfile: Any = None, password: Any = None) -> None:
        for path in (certfile, keyfile):
            seen.append((stat.S_IMODE(os.stat(path).st_mode), Path(path).read_bytes()))
        original(self, certfile, keyfile, password)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    context = server_ssl_context(serving[0], serving[1], tmp_path)
    assert seen == [(0o600, serving[0]), (0o600, serving[1])]
    assert list(tmp_path.iterdir()) == []
    assert isinstance(context, ssl.SSLContext)


@asynccontextmanager
async def _tls_echo_server(context: ssl.SSLContext, host: str = "127.0.0.1") -> AsyncIterator[int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(await reader.readline())
            await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def _round_trip(port: int, client: ssl.SSLContext, server_hostname: str) -> bytes:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client, server_hostname=server_hostname
    )
    try:
        writer.write(b"ping\n")
        await writer.drain()
        return await reader.readline()
    finally:
        writer.close()


@pytest.mark.parametrize("hostname", ["127.0.0.1", "localhost", "devcluster.local"])
async def test_python_client_accepts_the_chain_with_hostname_check(
    ca: CertificateAuthority, serving: tuple[bytes, bytes], tmp_path: Path, hostname: str
) -> None:
    context = server_ssl_context(serving[0], serving[1], tmp_path)
    client = client_ssl_context(ca.cert_pem)
    assert client.check_hostname
    assert client.verify_mode == ssl.CERT_REQUIRED
    async with _tls_echo_server(context) as port:
        assert await _round_trip(port, client, hostname) == b"ping\n"


async def test_python_client_refuses_a_name_missing_from_the_sans(
    ca: CertificateAuthority, serving: tuple[bytes, bytes], tmp_path: Path
) -> None:
    context = server_ssl_context(serving[0], serving[1], tmp_path)
    async with _tls_echo_server(context) as port:
        with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
            await _round_trip(port, client_ssl_context(ca.cert_pem), "other.example")


async def test_python_client_refuses_a_certificate_from_another_ca(
    serving: tuple[bytes, bytes], tmp_path: Path
) -> None:
    context = server_ssl_context(serving[0], serving[1], tmp_path)
    stranger = CertificateAuthority()
    async with _tls_echo_server(context) as port:
        with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
            await _round_trip(port, client_ssl_context(stranger.cert_pem), "localhost")


async def test_python_client_refuses_an_expired_certificate(tmp_path: Path) -> None:
    two_days_ago = time.time() - 2 * 86400
    old = CertificateAuthority(clock=_fixed(two_days_ago))
    cert_pem, key_pem = old.issue_server_cert(["localhost"], ["127.0.0.1"])
    context = server_ssl_context(cert_pem, key_pem, tmp_path)
    async with _tls_echo_server(context) as port:
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate has expired"):
            await _round_trip(port, client_ssl_context(old.cert_pem), "localhost")


_VERSION_BODY = b'{"major":"1","minor":"36","gitVersion":"v1.36.2"}'


async def _version_responder(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Just enough HTTP/1.1 for ``kubectl get --raw /version``."""
    try:
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + f"Content-Length: {len(_VERSION_BODY)}\r\n\r\n".encode()
            + _VERSION_BODY
        )
        await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def _kubectl_get_version(
    tmp_path: Path, serving: tuple[bytes, bytes], trusted_ca: bytes, host: str
) -> tuple[int | None, bytes, bytes]:
    keydir = tmp_path / "keys"
    keydir.mkdir()
    context = server_ssl_context(serving[0], serving[1], keydir)
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(trusted_ca)
    server = await asyncio.start_server(_version_responder, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "KUBECONFIG": "/dev/null"}
    try:
        proc = await asyncio.create_subprocess_exec(
            "kubectl",
            f"--server=https://{host}:{port}",
            f"--certificate-authority={ca_file}",
            "--token=not-checked-here",
            "get",
            "--raw",
            "/version",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    finally:
        server.close()
        await server.wait_closed()
    return proc.returncode, out, err


needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl")


@pytest.mark.kubectl
@needs_kubectl
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_kubectl_accepts_the_chain(
    ca: CertificateAuthority, serving: tuple[bytes, bytes], tmp_path: Path, host: str
) -> None:
    code, out, err = await _kubectl_get_version(tmp_path, serving, ca.cert_pem, host)
    assert code == 0, err.decode()
    assert out.strip() == _VERSION_BODY


@pytest.mark.kubectl
@needs_kubectl
async def test_kubectl_refuses_a_certificate_from_another_ca(
    serving: tuple[bytes, bytes], tmp_path: Path
) -> None:
    stranger = CertificateAuthority()
    code, _, err = await _kubectl_get_version(tmp_path, serving, stranger.cert_pem, "localhost")
    assert code != 0
    assert b"certificate signed by unknown authority" in err
