"""Serving TLS: certificate files rotated on disk are served without a restart, and a
keep-alive connection opened before the rotation still completes its requests."""

from __future__ import annotations

import asyncio
import ssl

import pytest
from cryptography import x509

from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config
from trainjob_status_server.tls import ReloadingTLS

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
    server: StatusServer, certs: ServingCerts
) -> None:
    assert server.tls is not None
    context = certs.client_context()
    _, before = await _open(server, context)
    serial = _peer_serial(before)
    before.close()
    certs.cert_file.write_bytes(b"-----BEGIN CERTIFICATE-----\nnot a certificate\n")
    # Give the watcher several polls to see (and refuse) the broken file.
    await asyncio.sleep(0.3)
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
