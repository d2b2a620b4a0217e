"""A throwaway certificate authority and serving certificate for the development cluster.

Both Python's ``ssl`` and Go's ``crypto/x509`` (kubectl) must accept the chain, so the
certificates carry what the stricter of the two checks: SANs for every name (Go ignores
the CN), a critical basicConstraints, key usages, and subject/authority key identifiers
(Python 3.13's ``VERIFY_X509_STRICT`` default wants them).

Keys live in memory; :func:`server_ssl_context` writes them to disk only for as long as
``ssl`` needs to read them, because ``SSLContext.load_cert_chain`` accepts only paths.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from trainjob_status_server.certificates import pki

DEFAULT_CA_NAME = "trainjob-status devcluster CA"
DEFAULT_VALIDITY = datetime.timedelta(days=1)


def _now(clock: Callable[[], float]) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(clock(), tz=datetime.UTC)


def _check_dns_names(dns_names: Sequence[str]) -> None:
    for name in dns_names:
        if not name or name != name.strip():
            raise ValueError(f"invalid DNS name for a certificate: {name!r}")


class CertificateAuthority:
    """A self-signed CA minted at start; it signs the serving certificate. The
    certificates are the server's own (``trainjob_status_server.certificates.pki``: extensions,
    backdating, P-256 keys); this keeps the CA's key and clock.

    ``clock`` returns epoch seconds; it is injectable so tests can mint certificates
    that are already expired or not yet valid.
    """

    def __init__(
        self,
        common_name: str = DEFAULT_CA_NAME,
        validity: datetime.timedelta = DEFAULT_VALIDITY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._validity = validity
        self.cert_pem, self._key_pem = pki.new_ca(_now(clock), validity, common_name)
        self._cert = x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def certificate(self) -> x509.Certificate:
        return self._cert

    def issue_server_cert(
        self,
        dns_names: list[str],
        ip_addresses: list[str],
        validity: datetime.timedelta | None = None,
    ) -> tuple[bytes, bytes]:
        """A serving certificate (serverAuth) for the given names: (cert PEM, key PEM).

        Its lifetime defaults to the CA's and never outlasts it, since a leaf that
        outlives its issuer fails verification anyway.
        """
        _check_dns_names(dns_names)
        now = _now(self._clock)
        lifetime = validity or self._validity
        return pki.issue(self.cert_pem, self._key_pem, dns_names, now, lifetime, ip_addresses)

    def issue_client_cert(self, common_name: str) -> tuple[bytes, bytes]:
        """A client certificate (clientAuth) for ``common_name``: (cert PEM, key PEM),
        as the API server's front proxy presents to an aggregated API."""
        now = _now(self._clock)
        key = ec.generate_private_key(ec.SECP256R1())
        ca_key = serialization.load_pem_private_key(self._key_pem, None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - pki.BACKDATE)
            .not_valid_after(min(now + self._validity, self._cert.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._cert.public_key()),  # type: ignore[arg-type]
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return cert.public_bytes(serialization.Encoding.PEM), key_pem


@contextlib.contextmanager
def _private_file(directory: Path, suffix: str, content: bytes) -> Iterator[Path]:
    """A file only its owner can read, removed again on exit."""
    fd, name = tempfile.mkstemp(suffix=suffix, dir=directory)
    path = Path(name)
    try:
        # mkstemp already uses 0600; say so explicitly rather than rely on it.
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        yield path
    finally:
        path.unlink(missing_ok=True)


def server_ssl_context(cert_pem: bytes, key_pem: bytes, directory: Path | str) -> ssl.SSLContext:
    """A TLS server context serving ``cert_pem``.

    The PEMs are written to 0600 files in ``directory`` (which the caller owns) just
    long enough for ``load_cert_chain`` to read them, then deleted: the loaded context
    keeps the key in memory and nothing secret is left on disk.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # The server speaks HTTP/1.1 only: offering h2 would make kubectl (Go) try HTTP/2.
    context.set_alpn_protocols(["http/1.1"])
    folder = Path(directory)
    with (
        _private_file(folder, ".crt", cert_pem) as cert_path,
        _private_file(folder, ".key", key_pem) as key_path,
    ):
        context.load_cert_chain(certfile=cert_path, keyfile=key_path)
    return context


def client_ssl_context(ca_pem: bytes) -> ssl.SSLContext:
    """A client context that trusts only ``ca_pem`` and checks the host name."""
    return ssl.create_default_context(cadata=ca_pem.decode("ascii"))
