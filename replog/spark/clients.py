"""One `Client` per Spark process and bootstrap address, shared by the source and the sink.

Executors unpickle plain option values and open their gRPC channels lazily, here, once per
process and address. Its own module so that `source.py` (which hands out the sink's writers)
and `sink.py` share it without importing each other.

TLS options (source and sink, strings): `tls.ca` (PEM CA bundle: TLS on), `tls.cert` and
`tls.key` (a client certificate, for mutual TLS), `tls.serverName` (the name verified in the
servers' certificates instead of the address's host). The files must exist at these paths
on the driver and on every executor. `attemptTimeout` (source and sink, a duration,
default 2s): the client's per-attempt deadline (`Client(attempt_timeout_s=...)`). An
address that cannot be reached (nothing listens, a TLS mismatch, no answer) fails the
read, the query or the write at once with `CONNECT_FAILED` and the likely cause, instead
of riding out the retry budget.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from replog.client import Client, ClientTls, RetryPolicy
from replog.errors import InvalidArgumentError

# (tls.ca, tls.cert, tls.key, tls.serverName) as plain strings ("" when not given): picklable
TlsOptions = tuple[str, str, str, str]
NO_TLS: TlsOptions = ("", "", "", "")

# Spark's calls get a longer time budget than the client's default (30 s): a failed task
# costs a whole retry of the task, so a call rides out a slow failover instead.
SPARK_RETRY = RetryPolicy(deadline_ms=120_000)
ATTEMPT_TIMEOUT_MS = 2_000  # = replog.client.channels.ATTEMPT_TIMEOUT_S

_clients: dict[tuple[str, TlsOptions, int], Client] = {}
_clients_lock = threading.Lock()


def tls_options(options: Mapping[str, str]) -> TlsOptions:
    """The TLS options of a source or sink (keys case-insensitive), checked."""
    opts = {k.lower(): v for k, v in options.items()}
    found = tuple(opts.get(k, "") for k in ("tls.ca", "tls.cert", "tls.key", "tls.servername"))
    ca, cert, key, name = found
    _client_tls((ca, cert, key, name))  # raises on an incomplete set
    return (ca, cert, key, name)


def _client_tls(tls: TlsOptions) -> ClientTls | None:
    try:
        return ClientTls.from_options(*tls)
    except ValueError as exc:
        raise InvalidArgumentError(f"replog TLS options: {exc}") from None


def client_for(
    bootstrap: str, tls: TlsOptions = NO_TLS, attempt_timeout_ms: int = ATTEMPT_TIMEOUT_MS
) -> Client:
    """The process's client for `bootstrap` (with `tls`), opened on first use."""
    key = (bootstrap, tls, attempt_timeout_ms)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = Client(
                bootstrap,
                tls=_client_tls(tls),
                retry=SPARK_RETRY,
                attempt_timeout_s=attempt_timeout_ms / 1000,
            )
        return client


def close_client(
    bootstrap: str, tls: TlsOptions = NO_TLS, attempt_timeout_ms: int = ATTEMPT_TIMEOUT_MS
) -> None:
    """Close and forget the process's client for `bootstrap`, if it has one."""
    with _clients_lock:
        client = _clients.pop((bootstrap, tls, attempt_timeout_ms), None)
    if client is not None:
        client.close()


def resumed_producer_client(
    bootstrap: str,
    tls: TlsOptions,
    producer_name: str,
    attempt_timeout_ms: int = ATTEMPT_TIMEOUT_MS,
) -> Client:
    """A new client (the caller closes it) producing as the named producer's current id and
    epoch: a retried Spark task resends its batches with the same sequence numbers."""
    return Client(
        bootstrap,
        tls=_client_tls(tls),
        producer_name=producer_name,
        producer_resume=True,
        attempt_timeout_s=attempt_timeout_ms / 1000,
    )
