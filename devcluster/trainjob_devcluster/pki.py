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
import ipaddress
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

DEFAULT_CA_NAME = "trainjob-status devcluster CA"
DEFAULT_VALIDITY = datetime.timedelta(days=1)
# Certificates start a little in the past so a client whose clock lags ours by a few
# seconds does not reject a certificate minted a moment ago as "not yet valid".
BACKDATE = datetime.timedelta(minutes=5)


def _now(clock: Callable[[], float]) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(clock(), tz=datetime.UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256: accepted by every TLS stack we care about and far faster to mint than RSA.
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _subject_alt_names(
    dns_names: Sequence[str], ip_addresses: Sequence[str]
) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in dns_names:
        if not name or name != name.strip():
            raise ValueError(f"invalid DNS name for a certificate: {name!r}")
        entries.append(x509.DNSName(name))
    for address in ip_addresses:
        # ip_address raises ValueError for anything that is not a literal address.
        entries.append(x509.IPAddress(ipaddress.ip_address(address)))
    if not entries:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    return x509.SubjectAlternativeName(entries)


class CertificateAuthority:
    """A self-signed CA minted at start; it signs the serving certificate.

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
        self._key = _new_key()
        now = _now(clock)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        public_key = self._key.public_key()
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + validity)
            # path_length=0: this CA signs leaf certificates only, never another CA.
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.cert_pem: bytes = self._cert.public_bytes(serialization.Encoding.PEM)

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
        san = _subject_alt_names(dns_names, ip_addresses)
        key = _new_key()
        now = _now(self._clock)
        not_after = min(now + (validity or self._validity), self._cert.not_valid_after_utc)
        # Go ignores the CN for host checks; it only helps humans reading the cert.
        common_name = dns_names[0] if dns_names else ip_addresses[0]
        ca_ski = self._cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(san, critical=False)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


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
