"""A client's connection settings from the environment, as the `replog` CLI reads them.

    REPLOG_ADDRESS           host:port[,host:port...]  (default 127.0.0.1:7070)
    REPLOG_TLS_CA            PEM CA bundle: TLS on      (REPLOG_TLS_CERT, REPLOG_TLS_KEY:
                                                         a client certificate and its key;
                                                         REPLOG_TLS_SERVER_NAME: a name to
                                                         verify instead of the host)
    REPLOG_TOKEN             bearer token (TLS only)
    REPLOG_ATTEMPT_TIMEOUT   seconds, one attempt of a call (default 2)

`replog dev-cluster --env-file F` writes `F` with these exports, so that a shell that
sourced it reaches the cluster from `replog ...` and `Client.from_env()` alike.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from replog.client.channels import ATTEMPT_TIMEOUT_S
from replog.tls import ClientTls

# The CLI's default (replog/cli/common.py: not imported, the CLI starts without grpc).
DEFAULT_ADDRESS = "127.0.0.1:7070"


@dataclass(frozen=True, slots=True)
class Connection:
    """Where and how a client connects: `Client(c.address, tls=c.tls, token=c.token,
    attempt_timeout_s=c.attempt_timeout_s)`."""

    address: str
    tls: ClientTls | None
    token: str | None
    attempt_timeout_s: float


def from_env(env: Mapping[str, str] | None = None) -> Connection:
    """The connection `env` (default `os.environ`) describes; ValueError on a bad value."""
    env = os.environ if env is None else env
    address = env.get("REPLOG_ADDRESS", "").strip() or DEFAULT_ADDRESS
    text = env.get("REPLOG_ATTEMPT_TIMEOUT", "").strip()
    attempt_timeout_s = ATTEMPT_TIMEOUT_S
    if text:
        try:
            attempt_timeout_s = float(text)
        except ValueError:
            attempt_timeout_s = math.nan
        if not 0 < attempt_timeout_s < math.inf:
            raise ValueError(f"REPLOG_ATTEMPT_TIMEOUT must be seconds > 0, got {text[:40]!r}")
    return Connection(
        address=address,
        tls=ClientTls.from_env(env),
        token=env.get("REPLOG_TOKEN") or None,
        attempt_timeout_s=attempt_timeout_s,
    )
