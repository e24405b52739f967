"""A self-signed serving certificate, generated at start when no --tls-cert-file is given.

The API server must speak HTTPS; in a cluster the APIService then either carries this
pair's CA in `caBundle` (stable only with a fixed pair from a Secret) or sets
`insecureSkipTLSVerify: true` (see docs/adapter.md).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["write_self_signed", "DEFAULT_HOSTS"]

DEFAULT_HOSTS = (
    "localhost",
    "127.0.0.1",
    "kvspread-adapter",
    "kvspread-adapter.kvspread",
    "kvspread-adapter.kvspread.svc",
)


def write_self_signed(
    directory: str, hosts: Sequence[str] = DEFAULT_HOSTS, days: int = 365
) -> tuple[str, str]:
    """Write cert.pem and key.pem (EC P-256, SANs = hosts) into `directory`; return paths."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kvspread-adapter")])
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    os.makedirs(directory, exist_ok=True)
    cert_path = os.path.join(directory, "cert.pem")
    key_path = os.path.join(directory, "key.pem")
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path
