"""Server-side TLS: credentials that follow the files on disk, and who a peer is.

Credentials (`server_credentials`): gRPC asks the fetcher below at every TLS handshake; it
compares the files' modification times and sizes with the last load and, when they
changed, reads and returns the new certificate, key and CA bundle. Connections already
open keep their session; new ones use the new files, so a rotation needs no restart. A
rotation caught half-written (a key that does not match its certificate yet) is not
loaded: the previous files stay in use and the next handshake tries again.

Node identity (`peer_node_id`): a node's certificate names it with the URI SAN
`replog://node/<id>` (`replog.certs`). Failing that, a DNS or IP SAN equal to the host of
exactly one member's peer address identifies that member (what cert-manager can issue per
pod: `replog-0.replog-headless.<ns>.svc.cluster.local`). The peer listener requires a
client certificate signed by the CA bundle; a verified certificate that names no member
(a client's, a node of another cluster) is refused with PERMISSION_DENIED.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from replog.certs import NODE_URI_PREFIX
from replog.server.logs import log
from replog.tls import TlsFiles

_log = logging.getLogger("replog.server.tls")
SAN_KEY = "x509_subject_alternative_name"
RELOAD_CHECK_INTERVAL_S = 1.0  # at most one stat of the files per second


class ReloadingCredentials:
    """Server credentials for `files`, reloaded at the next handshake after they change."""

    def __init__(self, files: TlsFiles, *, require_client_auth: bool) -> None:
        self.files = files
        self.reloads = 0
        self._signature = files.signature()
        self._checked_at = time.monotonic()
        initial = self._config()
        self.credentials = grpc.dynamic_ssl_server_credentials(
            initial, self._fetch, require_client_authentication=require_client_auth
        )

    def _config(self) -> Any:
        f = self.files
        return grpc.ssl_server_certificate_configuration(
            [(f.key_file.read_bytes(), f.cert_file.read_bytes())], f.ca_file.read_bytes()
        )

    def _fetch(self) -> Any:
        """Called by gRPC (any thread) before a handshake: a new configuration or None."""
        now = time.monotonic()
        if now - self._checked_at < RELOAD_CHECK_INTERVAL_S:
            return None
        self._checked_at = now
        signature = self.files.signature()
        if signature == self._signature:
            return None
        try:
            check_pair(self.files)
            config = self._config()
        except (OSError, ValueError) as exc:
            log(_log, "tls.reload_failed", logging.WARNING, error=str(exc)[:200])
            return None
        self._signature = signature
        self.reloads += 1
        log(_log, "tls.reloaded", cert=self.files.cert_file, reloads=self.reloads)
        return config


def check_pair(files: TlsFiles) -> None:
    """Raise ValueError unless the key matches the certificate (a rotation in progress)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_pem_x509_certificate(files.cert_file.read_bytes())
    key = serialization.load_pem_private_key(files.key_file.read_bytes(), None)
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    pem = serialization.Encoding.PEM
    if cert.public_key().public_bytes(pem, spki) != key.public_key().public_bytes(pem, spki):
        raise ValueError("the key does not match the certificate (yet)")


def peer_sans(context: Any) -> list[str]:
    """The subject alternative names of the verified client certificate ([] without one)."""
    auth = context.auth_context()
    return [v.decode(errors="replace") for v in auth.get(SAN_KEY, [])]


def peer_node_id(context: Any, dial: Mapping[int, str]) -> int | None:
    """The member (`dial`: node id -> peer address) the caller's certificate names, if any."""
    sans = peer_sans(context)
    for san in sans:
        if san.startswith(NODE_URI_PREFIX):
            named = san[len(NODE_URI_PREFIX) :]
            if named.isdigit() and int(named) in dial:
                return int(named)
            return None  # a node certificate, but not of a member
    hosts: dict[str, list[int]] = {}
    for ident, address in dial.items():
        hosts.setdefault(address.rpartition(":")[0].strip("[]").lower(), []).append(ident)
    for san in sans:
        owners = hosts.get(san.lower(), [])
        if len(owners) == 1:
            return owners[0]
    return None


def proves_node(context: Any, node_id: int, addresses: Sequence[str] = ()) -> bool:
    """Whether the caller's verified certificate proves it is node `node_id`, reached at
    `addresses` (host:port): its node URI SAN names that id (the first node URI decides,
    as in `peer_node_id`), or, without a node URI, a DNS or IP SAN equals the host of one
    of `addresses`. A node that joins is no member yet, so `peer_node_id` cannot tell."""
    sans = peer_sans(context)
    for san in sans:
        if san.startswith(NODE_URI_PREFIX):
            return san[len(NODE_URI_PREFIX) :] == str(node_id)
    hosts = {a.rpartition(":")[0].strip("[]").lower() for a in addresses if a}
    return any(san.lower() in hosts for san in sans if san)


def describe_peer(context: Any) -> str:
    """Who called, for logs and errors (truncated)."""
    sans = peer_sans(context)
    return (",".join(sans) or context.peer() or "?")[:120]
