from __future__ import annotations

import datetime as dt
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from elastic_devtools.localcluster import pki

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_issued_certs_chain_to_the_ca_and_carry_identity() -> None:
    ca = pki.new_ca("test-ca", NOW)
    leaf = pki.issue(ca, "system:kube-scheduler", NOW, orgs=("g1",), client=True)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    cert = x509.load_pem_x509_certificate(leaf.cert_pem)
    cert.verify_directly_issued_by(ca_cert)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        "system:kube-scheduler")
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "g1"
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert cert.not_valid_before_utc < NOW < cert.not_valid_after_utc


def test_serving_cert_sans() -> None:
    ca = pki.new_ca("test-ca", NOW)
    leaf = pki.issue(ca, "srv", NOW, server=True, dns_names=("localhost",), ips=("127.0.0.1",))
    cert = x509.load_pem_x509_certificate(leaf.cert_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]


def test_signing_key_pair_matches() -> None:
    from cryptography.hazmat.primitives import serialization

    pair = pki.new_signing_key()
    key = serialization.load_pem_private_key(pair.key_pem, password=None)
    pub = serialization.load_pem_public_key(pair.cert_pem)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.public_key().public_numbers() == pub.public_numbers()  # type: ignore[union-attr]
