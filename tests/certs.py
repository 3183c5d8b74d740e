"""Test certificates made on the spot: a CA and certificates it signs (TLS servers on
loopback, pass-signing identities)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Issued:
    cert: x509.Certificate
    key: rsa.RSAPrivateKey

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self, password: bytes | None = None) -> bytes:
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(password)
            if password
            else serialization.NoEncryption()
        )
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        )

    def write(self, directory: Path, stem: str, password: bytes | None = None) -> tuple[Path, Path]:
        cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
        cert_path.write_bytes(self.cert_pem())
        key_path.write_bytes(self.key_pem(password))
        return cert_path, key_path


def _name(attrs: list[x509.NameAttribute[Any]]) -> x509.Name:
    return x509.Name(attrs)


def issue(
    subject: list[x509.NameAttribute[Any]],
    issuer: Issued | None = None,
    *,
    ca: bool = False,
    hosts: tuple[str, ...] = (),
) -> Issued:
    """A certificate for ``subject``, signed by ``issuer`` (self-signed without one)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer.cert.subject if issuer else _name(subject))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    signer = issuer.key if issuer else key
    return Issued(builder.sign(signer, hashes.SHA256()), key)


def common_name(cn: str) -> list[x509.NameAttribute[Any]]:
    return [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
