"""When the certificate bundle is renewed, and what renewal produces (``pki.py``, pure:
time is an argument). Keys are minted at run time; none is stored in the repository."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from trainjob_status_server.certificates import pki
from trainjob_status_server.certificates.pki import Bundle, Decision, Policy, assess, carry_out

NAMES = tuple(pki.service_dns_names("trainjob-status", "trainjob-status"))
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
POLICY = Policy()
DAY = dt.timedelta(days=1)


def certs(bundle: Bundle) -> tuple[list[x509.Certificate], x509.Certificate]:
    parsed = bundle.parsed()
    return parsed.cas, parsed.leaf


def test_service_names() -> None:
    assert NAMES == (
        "trainjob-status",
        "trainjob-status.trainjob-status",
        "trainjob-status.trainjob-status.svc",
        "trainjob-status.trainjob-status.svc.cluster.local",
    )


def test_a_new_bundle_needs_nothing_and_chains() -> None:
    bundle = pki.new_bundle(NAMES, T0, POLICY)
    assert assess(bundle, NAMES, T0, POLICY) == Decision(reason="")
    (ca,), leaf = certs(bundle)
    leaf.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert tuple(san.get_values_for_type(x509.DNSName)) == NAMES
    assert leaf.not_valid_after_utc == T0 + POLICY.cert_validity
    assert ca.not_valid_after_utc == T0 + POLICY.ca_validity


def test_no_bundle_or_garbage_means_start_over() -> None:
    assert assess(None, NAMES, T0, POLICY).replace
    bundle = pki.new_bundle(NAMES, T0, POLICY)
    garbage = Bundle(bundle.ca_certs, bundle.ca_key, b"not a cert", bundle.tls_key)
    assert assess(garbage, NAMES, T0, POLICY).replace
    other = pki.new_bundle(NAMES, T0, POLICY)
    wrong_ca_key = Bundle(bundle.ca_certs, other.ca_key, bundle.tls_cert, bundle.tls_key)
    decision = assess(wrong_ca_key, NAMES, T0, POLICY)
    assert decision.replace
    assert "ca.key" in decision.reason


def test_secret_data_round_trip_and_incomplete_data() -> None:
    bundle = pki.new_bundle(NAMES, T0, POLICY)
    data = bundle.secret_data()
    assert set(data) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    assert Bundle.from_secret_data(data) == bundle
    with pytest.raises(pki.BundleError):
        Bundle.from_secret_data({k: v for k, v in data.items() if k != "ca.key"})
    with pytest.raises(pki.BundleError):
        Bundle.from_secret_data(data | {"tls.crt": "%%%"})
    with pytest.raises(pki.BundleError):
        Bundle.from_secret_data(data | {"tls.key": base64.b64encode(b"junk").decode()})


def test_the_certificate_is_renewed_before_it_expires() -> None:
    bundle = pki.new_bundle(NAMES, T0, POLICY)
    # Renewal starts when a third of the year is left: not at 240 days, at 245.
    assert not assess(bundle, NAMES, T0 + 240 * DAY, POLICY).needed
    later = T0 + 245 * DAY
    decision = assess(bundle, NAMES, later, POLICY)
    assert decision == Decision(renew_cert=True, reason="certificate due for renewal")
    renewed = carry_out(decision, bundle, NAMES, later, POLICY)
    assert renewed.ca_certs == bundle.ca_certs  # clients need nothing new
    assert renewed.ca_key == bundle.ca_key
    (ca,), leaf = certs(renewed)
    leaf.verify_directly_issued_by(ca)
    assert leaf.not_valid_after_utc == later + POLICY.cert_validity
    assert renewed.tls_key != bundle.tls_key
    assert not assess(renewed, NAMES, later, POLICY).needed


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("names", "certificate lacks a service name"),
        ("key", "tls.key does not belong to tls.crt"),
        ("foreign", "certificate not signed by a trusted CA"),
    ],
)
def test_a_certificate_that_no_longer_fits_is_renewed(change: str, reason: str) -> None:
    bundle = pki.new_bundle(NAMES, T0, POLICY)
    other = pki.new_bundle(NAMES, T0, POLICY)
    names = NAMES
    if change == "names":
        names = (*NAMES, "trainjob-status.example.com")
    elif change == "key":
        bundle = Bundle(bundle.ca_certs, bundle.ca_key, bundle.tls_cert, other.tls_key)
    else:
        bundle = Bundle(bundle.ca_certs, bundle.ca_key, other.tls_cert, other.tls_key)
    decision = assess(bundle, names, T0, POLICY)
    assert decision == Decision(renew_cert=True, reason=reason)
    assert not assess(carry_out(decision, bundle, names, T0, POLICY), names, T0, POLICY).needed


def test_ca_rotation_trusts_first_then_serves() -> None:
    bundle = pki.new_bundle(NAMES, T0, POLICY)
    old_ca = bundle.ca_certs[0]
    t_rotate = T0 + 2500 * DAY  # under a third of ten years left
    decision = assess(bundle, NAMES, t_rotate, POLICY)
    assert decision.rotate_ca
    assert decision.renew_cert  # the certificate is due too: renewed from the OLD CA
    rotated = carry_out(decision, bundle, NAMES, t_rotate, POLICY)
    cas, leaf = certs(rotated)
    assert len(cas) == 2
    assert rotated.ca_certs[1] == old_ca
    leaf.verify_directly_issued_by(cas[1])  # still served from the CA clients trust
    key = serialization.load_pem_private_key(rotated.ca_key, None)
    assert key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) == cas[0].public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )

    # Within the overlap nothing changes; after it, a certificate from the new CA.
    assert not assess(rotated, NAMES, t_rotate + 12 * dt.timedelta(hours=1), POLICY).needed
    t_switch = t_rotate + POLICY.ca_overlap
    switch = assess(rotated, NAMES, t_switch, POLICY)
    assert switch.renew_cert
    assert not switch.rotate_ca
    switched = carry_out(switch, rotated, NAMES, t_switch, POLICY)
    cas2, leaf2 = certs(switched)
    leaf2.verify_directly_issued_by(cas2[0])
    assert switched.ca_certs == rotated.ca_certs  # the old CA stays trusted until it expires

    # Once the old CA has expired it leaves the bundle; the served chain is untouched.
    t_expired = T0 + POLICY.ca_validity + DAY
    prune = assess(switched, NAMES, t_expired, POLICY)
    assert prune.prune
    assert not prune.replace
    pruned = carry_out(prune, switched, NAMES, t_expired, POLICY)
    assert pruned.ca_certs == switched.ca_certs[:1]


def test_an_expired_ca_means_start_over() -> None:
    bundle = pki.new_bundle(NAMES, T0, POLICY)
    assert assess(bundle, NAMES, T0 + POLICY.ca_validity, POLICY).replace


def test_split_pem_and_describe_show_no_key() -> None:
    bundle = pki.new_bundle(NAMES, T0, POLICY)
    two = bundle.ca_pem + pki.new_bundle(NAMES, T0, POLICY).ca_pem
    assert len(pki.split_pem(two)) == 2
    described = pki.describe(bundle)
    assert set(described) == {"ca_serial", "ca_not_after", "cas", "cert_serial", "cert_not_after"}
    assert "PRIVATE" not in " ".join(described.values())


def test_the_bootstrap_ca_is_named_with_its_serial_and_a_given_name_is_kept() -> None:
    default = x509.load_pem_x509_certificate(pki.new_ca(T0, DAY)[0])
    assert default.subject.rfc4514_string() == f"CN=trainjob-status CA {default.serial_number:x}"
    named = x509.load_pem_x509_certificate(pki.new_ca(T0, DAY, "demo CA")[0])
    assert named.subject.rfc4514_string() == "CN=demo CA"


def test_a_serving_certificate_for_addresses_only() -> None:
    ca_cert, ca_key = pki.new_ca(T0, DAY)
    cert = x509.load_pem_x509_certificate(pki.issue(ca_cert, ca_key, (), T0, DAY, ["::1"])[0])
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == ["::1"]
    assert san.get_values_for_type(x509.DNSName) == []
    assert cert.subject.rfc4514_string() == "CN=::1"
    with pytest.raises(
        ValueError, match=r"^a serving certificate needs at least one DNS name or IP address$"
    ):
        pki.issue(ca_cert, ca_key, (), T0, DAY)
