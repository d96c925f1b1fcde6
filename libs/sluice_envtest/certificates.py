"""The PKI a loopback control plane needs: serving cert, admin client cert, SA keys.

Made fresh for every control plane so nothing secret outlives it; written as
PEM files the kube-apiserver reads, and embedded in the kubeconfig.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class Pem:
    cert: bytes
    key: bytes


@dataclass(frozen=True)
class ControlPlanePki:
    ca: Pem
    serving: Pem
    admin: Pem
    service_account_key: bytes
    service_account_pub: bytes

    def write(self, directory: Path) -> dict[str, Path]:
        files = {
            "ca.crt": self.ca.cert,
            "ca.key": self.ca.key,
            "serving.crt": self.serving.cert,
            "serving.key": self.serving.key,
            "admin.crt": self.admin.cert,
            "admin.key": self.admin.key,
            "sa.key": self.service_account_key,
            "sa.pub": self.service_account_pub,
        }
        paths = {}
        for name, data in files.items():
            path = directory / name
            path.write_bytes(data)
            path.chmod(0o600)
            paths[name] = path
        return paths


def make_pki() -> ControlPlanePki:
    ca = _Authority.create("sluice-envtest-ca")
    serving = ca.issue(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        ExtendedKeyUsageOID.SERVER_AUTH,
        [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ],
    )
    # O=system:masters is what makes this identity cluster-admin without any
    # RBAC objects, which a fresh etcd does not have yet.
    admin = ca.issue(
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "sluice-admin"),
            ]
        ),
        ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ControlPlanePki(
        ca=ca.pem,
        serving=serving,
        admin=admin,
        service_account_key=_key_pem(sa_key),
        service_account_pub=sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )


ExtendedKeyUsage = x509.ObjectIdentifier


@dataclass(frozen=True)
class ServingPki:
    """A test CA and a serving certificate it signed, for a test server's TLS."""

    ca: Pem
    serving: Pem
    client: Pem | None = None
    """A client certificate from the same CA, for servers that require mTLS."""

    def write(self, directory: Path) -> dict[str, Path]:
        paths = {}
        for name, data in (
            ("ca.crt", self.ca.cert),
            ("tls.crt", self.serving.cert),
            ("tls.key", self.serving.key),
        ):
            path = directory / name
            path.write_bytes(data)
            path.chmod(0o600)
            paths[name] = path
        return paths


def make_serving_pki(
    *,
    hosts: Sequence[str] = ("127.0.0.1", "localhost"),
    common_name: str = "sluice-test-server",
    client_common_name: str | None = None,
) -> ServingPki:
    """A fresh CA and a certificate for `hosts` (IP addresses or DNS names); with
    `client_common_name`, a client certificate too."""
    ca = _Authority.create("sluice-test-ca")
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    serving = ca.issue(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]),
        ExtendedKeyUsageOID.SERVER_AUTH,
        sans,
    )
    client = None
    if client_common_name is not None:
        client = ca.issue(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, client_common_name)]),
            ExtendedKeyUsageOID.CLIENT_AUTH,
        )
    return ServingPki(ca=ca.pem, serving=serving, client=client)


@dataclass(frozen=True)
class _Authority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    not_before: datetime.datetime

    @classmethod
    def create(cls, common_name: str) -> _Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert, now)

    @property
    def pem(self) -> Pem:
        return Pem(_cert_pem(self.cert), _key_pem(self.key))

    def issue(
        self,
        subject: x509.Name,
        usage: ExtendedKeyUsage,
        sans: list[x509.GeneralName] | None = None,
    ) -> Pem:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.not_before)
            .not_valid_after(self.not_before + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return Pem(_cert_pem(builder.sign(self.key, hashes.SHA256())), _key_pem(key))


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
