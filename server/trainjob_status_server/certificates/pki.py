"""The server's own CA and serving certificate: minting, reading back, and when to renew
(no I/O; time is an argument).

What the certificate Secret holds (``kubernetes.io/tls``, the layout cert-manager uses
too): ``tls.crt``/``tls.key`` the serving pair, ``ca.crt`` every CA certificate clients
should trust (newest first), ``ca.key`` the key of the newest CA, which signs.

Renewal keeps clients working across it:

- the serving certificate is renewed when less than ``renew_fraction`` of its lifetime
  is left (or its names or key no longer fit); signed by the same CA, so clients see no
  change;
- the CA is rotated in two steps: a new CA joins ``ca.crt`` first and signs nothing
  served until ``ca_overlap`` has passed (time for the bundle to reach every TrainJob
  namespace and kubelet to refresh the pods' projected files), then a new serving
  certificate from it is served. Expired CAs leave the bundle.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_COMMON_NAME = "trainjob-status CA"
# Minted a little in the past: a client whose clock lags ours must not see "not yet valid".
BACKDATE = dt.timedelta(minutes=5)

TLS_CRT, TLS_KEY, CA_CRT, CA_KEY = "tls.crt", "tls.key", "ca.crt", "ca.key"


class BundleError(ValueError):
    """The Secret's data is not a usable bundle (missing, unparsable, inconsistent)."""


@dataclass(frozen=True)
class Policy:
    ca_validity: dt.timedelta = dt.timedelta(days=3650)
    cert_validity: dt.timedelta = dt.timedelta(days=365)
    renew_fraction: float = 1 / 3
    """Renew when less than this fraction of a certificate's lifetime is left."""
    ca_overlap: dt.timedelta = dt.timedelta(days=1)
    """How long a new CA is trusted before a certificate it signed is served."""


@dataclass(frozen=True)
class Bundle:
    """A CA bundle, the signing CA's key and the serving pair, all PEM."""

    ca_certs: tuple[bytes, ...]
    ca_key: bytes
    tls_cert: bytes
    tls_key: bytes

    @property
    def ca_pem(self) -> bytes:
        return b"".join(self.ca_certs)

    def secret_data(self) -> dict[str, str]:
        raw = {
            TLS_CRT: self.tls_cert,
            TLS_KEY: self.tls_key,
            CA_CRT: self.ca_pem,
            CA_KEY: self.ca_key,
        }
        return {k: base64.b64encode(v).decode() for k, v in raw.items()}

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str] | None) -> Bundle:
        """The bundle a Secret's ``data`` holds; BundleError if it is not a whole one."""
        data = data or {}
        try:
            raw = {k: base64.b64decode(data[k], validate=True) for k in (TLS_CRT, TLS_KEY, CA_CRT)}
            ca_key = base64.b64decode(data[CA_KEY], validate=True)
        except (KeyError, TypeError, binascii.Error) as exc:
            raise BundleError(f"secret data incomplete or not base64: {exc}") from exc
        ca_certs = split_pem(raw[CA_CRT])
        if not ca_certs:
            raise BundleError("no CA certificate in ca.crt")
        bundle = cls(tuple(ca_certs), ca_key, raw[TLS_CRT], raw[TLS_KEY])
        bundle.parsed()  # raises BundleError when something does not load
        return bundle

    def parsed(self) -> Parsed:
        try:
            cas = [x509.load_pem_x509_certificate(pem) for pem in self.ca_certs]
            leaf = x509.load_pem_x509_certificate(self.tls_cert)
            ca_key = serialization.load_pem_private_key(self.ca_key, None)
            tls_key = serialization.load_pem_private_key(self.tls_key, None)
        except (ValueError, TypeError) as exc:
            raise BundleError(f"certificate or key does not load: {exc}") from exc
        return Parsed(cas, leaf, ca_key, tls_key)


@dataclass(frozen=True)
class Parsed:
    cas: list[x509.Certificate]
    leaf: x509.Certificate
    ca_key: object
    tls_key: object


def split_pem(data: bytes) -> list[bytes]:
    """The certificates of a PEM bundle, each as its own PEM block."""
    marker = b"-----END CERTIFICATE-----"
    out = []
    for part in data.split(marker):
        start = part.find(b"-----BEGIN CERTIFICATE-----")
        if start >= 0:
            out.append(part[start:] + marker + b"\n")
    return out


def service_dns_names(
    service: str, namespace: str, cluster_domain: str = "cluster.local"
) -> list[str]:
    """Every name a client (a pod, the API server calling the webhook) may use."""
    base = f"{service}.{namespace}.svc"
    return [service, f"{service}.{namespace}", base, f"{base}.{cluster_domain}"]


# -- minting ------------------------------------------------------------------------------


def _key() -> ec.EllipticCurvePrivateKey:
    # P-256: what every TLS stack accepts (Go's included), and far quicker to mint than RSA.
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _usage(*, sign_certs: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=sign_certs,
        crl_sign=sign_certs,
        encipher_only=False,
        decipher_only=False,
    )


def new_ca(
    now: dt.datetime, validity: dt.timedelta, common_name: str | None = None
) -> tuple[bytes, bytes]:
    """A self-signed CA that signs serving certificates only: (cert PEM, key PEM).
    ``common_name`` defaults to ``CA_COMMON_NAME`` and the serial."""
    key = _key()
    serial = x509.random_serial_number()
    if common_name is None:
        # The serial in the name tells generations apart in `openssl x509 -text` and logs.
        common_name = f"{CA_COMMON_NAME} {serial:x}"[:64]
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(sign_certs=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def issue(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    dns_names: Sequence[str],
    now: dt.datetime,
    validity: dt.timedelta,
    ip_addresses: Sequence[str] = (),
) -> tuple[bytes, bytes]:
    """A serving certificate (serverAuth) for ``dns_names`` and ``ip_addresses`` (literal
    addresses; ValueError for anything else), never outliving its CA."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise BundleError("the CA key is not an EC key")
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    # Go ignores the CN for host checks; it only helps humans reading the certificate.
    common_name = (dns_names[0] if dns_names else ip_addresses[0])[:64]
    key = _key()
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + validity, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(sign_certs=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def new_bundle(dns_names: Sequence[str], now: dt.datetime, policy: Policy) -> Bundle:
    ca_cert, ca_key = new_ca(now, policy.ca_validity)
    cert, key = issue(ca_cert, ca_key, dns_names, now, policy.cert_validity)
    return Bundle((ca_cert,), ca_key, cert, key)


# -- when to renew ------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What a bundle needs now; nothing at all when every flag is false."""

    replace: bool = False  # unusable: start over with a new CA
    rotate_ca: bool = False  # a new CA joins the bundle and becomes the signer
    renew_cert: bool = False  # a new serving certificate from the signer
    prune: bool = False  # expired CAs leave the bundle
    reason: str = ""

    @property
    def needed(self) -> bool:
        return self.replace or self.rotate_ca or self.renew_cert or self.prune


def _due(cert: x509.Certificate, now: dt.datetime, fraction: float) -> bool:
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    return cert.not_valid_after_utc - now < lifetime * fraction


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    if cert.issuer != ca.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _public(key: object) -> bytes:
    public = key.public_key()  # type: ignore[attr-defined]  # any private key class
    out: bytes = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return out


def _names(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return set(san.get_values_for_type(x509.DNSName))


def assess(
    bundle: Bundle | None, dns_names: Sequence[str], now: dt.datetime, policy: Policy
) -> Decision:
    """What ``bundle`` (None: there is none) needs at ``now`` to keep serving
    ``dns_names`` with clients that trust its ``ca.crt``."""
    if bundle is None:
        return Decision(replace=True, reason="no certificate yet")
    try:
        p = bundle.parsed()
    except BundleError as exc:
        return Decision(replace=True, reason=str(exc))
    signer = p.cas[0]
    if _public(p.ca_key) != signer.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ):
        return Decision(replace=True, reason="ca.key does not belong to the newest CA")
    if signer.not_valid_after_utc <= now:
        return Decision(replace=True, reason="the CA has expired")
    rotate = _due(signer, now, policy.renew_fraction)
    issuer = next((ca for ca in p.cas if _signed_by(p.leaf, ca)), None)
    reasons = []
    if rotate:
        reasons.append("CA due for rotation")
    renew = True
    if issuer is None:
        reasons.append("certificate not signed by a trusted CA")
    elif _public(p.tls_key) != p.leaf.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ):
        reasons.append("tls.key does not belong to tls.crt")
    elif not set(dns_names) <= _names(p.leaf):
        reasons.append("certificate lacks a service name")
    elif p.leaf.not_valid_after_utc <= now or _due(p.leaf, now, policy.renew_fraction):
        reasons.append("certificate due for renewal")
    elif (
        issuer is not signer and now - (signer.not_valid_before_utc + BACKDATE) >= policy.ca_overlap
    ):
        reasons.append("the new CA is trusted long enough: serving a certificate it signed")
    else:
        renew = False
    prune = any(ca.not_valid_after_utc <= now for ca in p.cas[1:])
    if prune:
        reasons.append("expired CA in the bundle")
    return Decision(rotate_ca=rotate, renew_cert=renew, prune=prune, reason="; ".join(reasons))


def carry_out(
    decision: Decision,
    bundle: Bundle | None,
    dns_names: Sequence[str],
    now: dt.datetime,
    policy: Policy,
) -> Bundle:
    """The bundle ``decision`` asks for (mints keys: not deterministic)."""
    if decision.replace or bundle is None:
        return new_bundle(dns_names, now, policy)
    ca_certs, ca_key = list(bundle.ca_certs), bundle.ca_key
    tls_cert, tls_key = bundle.tls_cert, bundle.tls_key
    if decision.prune:
        # The signer (first) stays whatever happens; only older, expired CAs go.
        ca_certs = ca_certs[:1] + [
            pem
            for pem in ca_certs[1:]
            if x509.load_pem_x509_certificate(pem).not_valid_after_utc > now
        ]
    if decision.renew_cert:
        # Before a rotation: from the CA clients already trust.
        tls_cert, tls_key = issue(ca_certs[0], ca_key, dns_names, now, policy.cert_validity)
    if decision.rotate_ca:
        fresh_cert, ca_key = new_ca(now, policy.ca_validity)
        ca_certs.insert(0, fresh_cert)
    return Bundle(tuple(ca_certs), ca_key, tls_cert, tls_key)


def describe(bundle: Bundle) -> dict[str, str]:
    """What may be logged about a bundle: serials and expiry dates, never a key."""
    p = bundle.parsed()
    return {
        "ca_serial": f"{p.cas[0].serial_number:x}",
        "ca_not_after": p.cas[0].not_valid_after_utc.isoformat(),
        "cas": str(len(p.cas)),
        "cert_serial": f"{p.leaf.serial_number:x}",
        "cert_not_after": p.leaf.not_valid_after_utc.isoformat(),
    }
