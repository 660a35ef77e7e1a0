"""The TLS of /metrics: the certificate and key given (`--metrics-cert-file`,
`--metrics-key-file`, e.g. from cert-manager), or one made at start and signed by
itself, as controller-runtime does when none is given (Prometheus then scrapes with
insecureSkipVerify: the bearer token still guards the data, TLS keeps it private).
"""
from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import tempfile
from pathlib import Path

# A self-signed certificate's life; the operator makes a new one at each start.
SELF_SIGNED_DAYS = 365


def self_signed(hosts: list[str]) -> tuple[bytes, bytes]:
    """A certificate (PEM) for `hosts` (names or IPs) signed by its own P-256 key, and
    that key (PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    alt: list[x509.GeneralName] = []
    for host in hosts:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM,
                              serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def server_context(cert_file: str | None, key_file: str | None) -> ssl.SSLContext:
    """A server's TLS context (1.2 at least) from the files, else self-signed for this
    host's name, localhost and 127.0.0.1."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file and key_file:
        context.load_cert_chain(cert_file, key_file)
        return context
    if cert_file or key_file:
        raise ValueError("--metrics-cert-file and --metrics-key-file go together: give "
                         "both, or neither for a self-signed certificate")
    cert, key = self_signed([socket.gethostname(), "localhost", "127.0.0.1"])
    # ssl loads a chain from files only: written to a private directory (the chart's
    # /tmp emptyDir: the root filesystem is read-only) and removed once loaded.
    with tempfile.TemporaryDirectory(prefix="etj-metrics-tls-") as tmp:
        Path(tmp, "tls.crt").write_bytes(cert)
        key_path = Path(tmp, "tls.key")
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        context.load_cert_chain(Path(tmp, "tls.crt"), key_path)
    return context
