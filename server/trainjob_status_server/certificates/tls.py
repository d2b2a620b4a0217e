"""The serving TLS context, reloaded when the certificate files change on disk.

cert-manager and Secret volume updates replace the files in place (a symlink swap for
volumes); the server keeps serving. Open connections keep the certificate they shook
hands with; every new handshake gets the newest valid pair: the listening context's SNI
callback (called for every ClientHello, with or without a server name) hands the
connection to the current context. A pair that does not load (half-written, key and
certificate that do not match) is logged and ignored until the files change again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

TLS_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}

TLS12_CIPHERS = ":".join(
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "ECDHE-RSA-CHACHA20-POLY1305",
    )
)
"""The TLS 1.2 suites served: forward-secret key exchange (ECDHE) and AEAD ciphers only,
for ECDSA and RSA certificates alike. OpenSSL's defaults also take CBC suites (padding
oracles, Lucky 13) and finite-field DHE; RSA key exchange has no forward secrecy. TLS
1.3 suites are all AEAD with ECDHE and are left at OpenSSL's set."""


@dataclass(frozen=True)
class FileStamp:
    """What tells a changed file from an unchanged one (follows symlinks)."""

    inode: int
    size: int
    mtime_ns: int


def stamp(path: Path) -> FileStamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return FileStamp(st.st_ino, st.st_size, st.st_mtime_ns)


def build_context(
    cert_file: Path, key_file: Path, min_version: str, client_ca: str | None = None
) -> ssl.SSLContext:
    """A server context for the pair; ssl.SSLError or OSError if the pair does not load.
    With ``client_ca`` (PEM), every client must present a certificate it signed."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = TLS_VERSIONS[min_version]
    context.set_ciphers(TLS12_CIPHERS)
    context.load_cert_chain(cert_file, key_file)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        if client_ca:
            context.load_verify_locations(cadata=client_ca)
    return context


class ReloadingTLS:
    """Owns the listening SSL context; ``start`` watches the files, ``stop`` ends that.

    With ``client_ca`` (PEM; "" trusts no one yet), clients must present a certificate
    that CA signed; ``trust`` replaces the CA for new handshakes. The listening context
    requires a certificate whatever the CA: OpenSSL keeps a connection's verify mode from
    the context it was made with, and takes the CA from the context it is handed to."""

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        min_version: str = "1.2",
        poll_interval: float = 10.0,
        client_ca: str | None = None,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.min_version = min_version
        self.poll_interval = poll_interval
        self.reloads = 0
        self.client_ca = client_ca
        self._stamps = self._read_stamps()
        # The first load must succeed: a server without a certificate must not start.
        self._current = self._build()
        self.context = self._build()
        self.context.sni_callback = self._pick
        self._task: asyncio.Task[None] | None = None

    def _pick(self, connection: ssl.SSLObject, _name: str | None, _ctx: ssl.SSLContext) -> None:
        connection.context = self._current

    def _build(self) -> ssl.SSLContext:
        return build_context(self.cert_file, self.key_file, self.min_version, self.client_ca)

    def trust(self, client_ca: str) -> None:
        """New handshakes need a client certificate ``client_ca`` (PEM) signed;
        ssl.SSLError if it holds no certificate that loads."""
        if self.client_ca is None:
            raise ValueError("this context asks no client for a certificate")
        fresh = build_context(self.cert_file, self.key_file, self.min_version, client_ca)
        self.client_ca = client_ca
        self._current = fresh

    def _read_stamps(self) -> tuple[FileStamp | None, FileStamp | None]:
        return stamp(self.cert_file), stamp(self.key_file)

    async def check(self) -> bool:
        """Reload if either file changed; True when a new pair is now served."""
        stamps = await asyncio.to_thread(self._read_stamps)
        if stamps == self._stamps:
            return False
        self._stamps = stamps
        try:
            fresh = await asyncio.to_thread(self._build)
        except (OSError, ssl.SSLError) as exc:
            log.warning(
                "tls reload failed, still serving the previous certificate",
                extra={"cert_file": str(self.cert_file), "error": str(exc)},
            )
            return False
        self._current = fresh
        self.reloads += 1
        log.info("tls certificate reloaded", extra={"cert_file": str(self.cert_file)})
        return True

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            await self.check()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name="tls-reload")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
