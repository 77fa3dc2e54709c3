"""Certificates for replog's TLS: a CA, node certificates and client certificates (PEM).

`replog certs` and `replog dev-cluster` use this; so do the tests. Files it writes::

    ca.pem, ca-key.pem            the CA (self-signed; keep ca-key.pem off the nodes)
    node<id>.pem, node<id>-key.pem  a node: URI SAN replog://node/<id> (its identity to
                                  its peers), DNS/IP SANs of the names it is reached by
    <name>.pem, <name>-key.pem    a client: URI SAN replog://client/<name> (principal)

Keys are ECDSA P-256; the key files are written with mode 0600. A node certificate is
both a server and a client certificate (peers dial each other with it).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NODE_URI_PREFIX = "replog://node/"
CLIENT_URI_PREFIX = "replog://client/"
VALID_DAYS = 365
CA_VALID_DAYS = 3650


@dataclass(frozen=True)
class Issued:
    cert_file: Path
    key_file: Path


def node_uri(node_id: int) -> str:
    return f"{NODE_URI_PREFIX}{node_id}"


def client_uri(name: str) -> str:
    return f"{CLIENT_URI_PREFIX}{name}"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, data: bytes, private: bool = False) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    tmp.replace(path)  # atomic: a node reloading it never sees half a file


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def create_ca(directory: Path, name: str = "replog CA", days: int = CA_VALID_DAYS) -> Issued:
    directory.mkdir(parents=True, exist_ok=True)
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    issued = Issued(directory / "ca.pem", directory / "ca-key.pem")
    _write(issued.key_file, _key_pem(key), private=True)
    _write(issued.cert_file, cert.public_bytes(serialization.Encoding.PEM))
    return issued


def _load_ca(ca: Issued) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(ca.cert_file.read_bytes())
    key = serialization.load_pem_private_key(ca.key_file.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey), "replog CAs use EC keys"
    return cert, key


def issue(
    ca: Issued,
    directory: Path,
    stem: str,
    common_name: str,
    uri: str,
    hosts: Sequence[str] = (),
    *,
    server: bool = True,
    days: int = VALID_DAYS,
) -> Issued:
    """A certificate signed by `ca` with URI SAN `uri` and a DNS or IP SAN per host."""
    ca_cert, ca_key = _load_ca(ca)
    key = _key()
    names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(uri)]
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    issued = Issued(directory / f"{stem}.pem", directory / f"{stem}-key.pem")
    # Key first: a reader that sees the new certificate finds its key already there.
    _write(issued.key_file, _key_pem(key), private=True)
    _write(issued.cert_file, cert.public_bytes(serialization.Encoding.PEM))
    return issued


def issue_node(
    ca: Issued, directory: Path, node_id: int, hosts: Sequence[str] = ("127.0.0.1", "localhost")
) -> Issued:
    return issue(
        ca, directory, f"node{node_id}", f"replog node {node_id}", node_uri(node_id), hosts
    )


def issue_client(ca: Issued, directory: Path, name: str) -> Issued:
    return issue(ca, directory, name, name, client_uri(name), server=False)
