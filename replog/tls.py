"""TLS file sets and gRPC channel credentials, shared by the client and the server.

`TlsFiles` names three PEM files on disk: a certificate chain, its private key and a CA
bundle. `ClientTls` is what a client needs: the CA bundle that signs the servers'
certificates and, for mutual TLS, its own certificate and key. Files are read when
credentials are built, so a channel made after a rotation uses the new files;
`signature()` tells a caller whether they changed (modification time and size).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

# A channel whose target is not a name in the server's certificate (e.g. an IP address
# reached through a proxy) may verify against this name instead.
SERVER_NAME_OPTION = "grpc.ssl_target_name_override"


def _stat(path: Path | None) -> tuple[int, int]:
    if path is None:
        return (0, 0)
    try:
        st = os.stat(path)
    except OSError:
        return (-1, -1)
    return (st.st_mtime_ns, st.st_size)


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert_file: Path
    key_file: Path
    ca_file: Path

    def signature(self) -> tuple[tuple[int, int], ...]:
        return (_stat(self.cert_file), _stat(self.key_file), _stat(self.ca_file))

    def client(self) -> ClientTls:
        """The same files used to dial (a node's certificate is also a client certificate)."""
        return ClientTls(self.ca_file, self.cert_file, self.key_file)


StrPath = str | os.PathLike[str]


@dataclass(frozen=True, slots=True, init=False)
class ClientTls:
    """A client's TLS: `ca_file` verifies the server; `cert_file` + `key_file` (optional)
    authenticate the client; `server_name` (optional) overrides the name verified. Every path
    takes a `str` or any `os.PathLike` (kept as a `Path`)."""

    ca_file: Path
    cert_file: Path | None
    key_file: Path | None
    server_name: str | None

    def __init__(
        self,
        ca_file: StrPath,
        cert_file: StrPath | None = None,
        key_file: StrPath | None = None,
        server_name: str | None = None,
    ) -> None:
        if (cert_file is None) != (key_file is None):
            raise ValueError("a client certificate needs its key, and a key its certificate")
        object.__setattr__(self, "ca_file", Path(ca_file))
        object.__setattr__(self, "cert_file", None if cert_file is None else Path(cert_file))
        object.__setattr__(self, "key_file", None if key_file is None else Path(key_file))
        object.__setattr__(self, "server_name", server_name)

    def signature(self) -> tuple[tuple[int, int], ...]:
        return (_stat(self.ca_file), _stat(self.cert_file), _stat(self.key_file))

    def credentials(self) -> grpc.ChannelCredentials:
        key = self.key_file.read_bytes() if self.key_file is not None else None
        cert = self.cert_file.read_bytes() if self.cert_file is not None else None
        return grpc.ssl_channel_credentials(self.ca_file.read_bytes(), key, cert)

    def options(self) -> list[tuple[str, str]]:
        return [(SERVER_NAME_OPTION, self.server_name)] if self.server_name else []

    @classmethod
    def from_options(
        cls,
        ca_file: StrPath | None,
        cert_file: StrPath | None = None,
        key_file: StrPath | None = None,
        server_name: str | None = None,
    ) -> ClientTls | None:
        """From plain option values (CLI flags, env vars, Spark options); None without a CA."""
        if not ca_file:
            if cert_file or key_file:
                raise ValueError("a client certificate needs the CA bundle (tls ca) too")
            return None
        return cls(ca_file, cert_file or None, key_file or None, server_name or None)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClientTls | None:
        """`REPLOG_TLS_CA`, `REPLOG_TLS_CERT`, `REPLOG_TLS_KEY`, `REPLOG_TLS_SERVER_NAME`."""
        env = os.environ if env is None else env
        return cls.from_options(
            env.get("REPLOG_TLS_CA"),
            env.get("REPLOG_TLS_CERT"),
            env.get("REPLOG_TLS_KEY"),
            env.get("REPLOG_TLS_SERVER_NAME"),
        )


def _credentials(tls: ClientTls, token: str | None) -> grpc.ChannelCredentials:
    creds = tls.credentials()
    if token is None:
        return creds
    # Every call carries `authorization: Bearer <token>` (gRPC sends it over TLS only).
    return grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(token))


def _plaintext(token: str | None) -> None:
    if token is not None:
        raise ValueError("a bearer token needs TLS (tls=ClientTls(ca_file)): never in the clear")


def channel(
    address: str,
    tls: ClientTls | None,
    options: Sequence[tuple[str, Any]],
    token: str | None = None,
) -> grpc.Channel:
    """A sync channel to `address`: TLS with `tls` (and `token` on every call), else plaintext."""
    if tls is None:
        _plaintext(token)
        return grpc.insecure_channel(address, options=options)
    creds = _credentials(tls, token)
    return grpc.secure_channel(address, creds, options=[*options, *tls.options()])


def aio_channel(
    address: str,
    tls: ClientTls | None,
    options: Sequence[tuple[str, Any]],
    token: str | None = None,
) -> grpc.aio.Channel:
    """An asyncio channel to `address`: TLS with `tls` (and `token`), else plaintext."""
    if tls is None:
        _plaintext(token)
        return grpc.aio.insecure_channel(address, options=options)
    creds = _credentials(tls, token)
    return grpc.aio.secure_channel(address, creds, options=[*options, *tls.options()])
