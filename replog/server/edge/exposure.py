"""Secure by default: no plaintext cluster by accident, no peer call on the client port.

Start-up rule (`refusal`, called by `Settings.validate`): a node is *exposed* when its
client or peer listener is on an address other than loopback (127.0.0.0/8, ::1,
localhost) or it has peers. An exposed node needs TLS (`--tls-cert-file`, `--tls-key-file`,
`--tls-ca-file`); with peers, a peer listener of its own (`--peer-listen`), which with TLS
always requires mutual TLS. `--insecure` (env REPLOG_INSECURE) waives the TLS part on
purpose; the peer-listener part stays, so that peer messages are never accepted where
clients connect. A single node on loopback needs neither: `replog serve` stays a
one-command start.

An insecure node (`--insecure` and no TLS) says so: a warning at start and every
`INSECURE_WARNING_INTERVAL_S` (`warn_insecure`), and the gauge `replog_insecure 1`.

Client listener (`PeerOnly`, a `handler_chain` wrapper): the peer-only services
(`PEER_ONLY_SERVICES`: Replication, Nodes) are UNIMPLEMENTED there, whatever registered
them, so a forged vote, BeginEpoch, fetch request or response, or an Identify sent to the
client port reaches no handler.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc
from prometheus_client import Gauge

from replog.server.edge import audit
from replog.server.edge.handler_chain import Handler
from replog.server.logs import log

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

_log = logging.getLogger("replog.server.security")
INSECURE_WARNING_INTERVAL_S = 300.0
PEER_ONLY_SERVICES = ("/replog.v1.Replication/", "/replog.v1.Nodes/")
INSECURE_FLAG = "--insecure"


def is_loopback(address: str) -> bool:
    """Whether `address` (host:port) binds loopback only."""
    host = address.rpartition(":")[0].strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name, or 0.0.0.0 / :: (every interface)


def refusal(
    *,
    listen: str,
    peer_listen: str,
    peers: int,
    tls: bool,
    insecure: bool,
    kafka_listen: str = "",
) -> str | None:
    """Why a node with these settings must not start (None: it may). `peers`: the nodes of
    its peer list, itself included (0 or 1: a single node). The Kafka listener serves TLS
    with the node's files: without them, off loopback, it needs --insecure as gRPC's do."""
    if kafka_listen and not is_loopback(kafka_listen) and not (tls or insecure):
        return (
            f"refusing to serve Kafka clients in plaintext on {kafka_listen}: give "
            f"--tls-cert-file, --tls-key-file and --tls-ca-file, or {INSECURE_FLAG}"
        )
    several = peers > 1
    if several and not peer_listen:
        return (
            "a cluster of several nodes needs --peer-listen (peer messages are never served "
            "on the client listener)"
        )
    off_loopback = [a for a in (listen, peer_listen) if a and not is_loopback(a)]
    if tls or insecure or not (several or off_loopback):
        return None
    why = f"it listens on {off_loopback[0]}" if off_loopback else "it has peers"
    return (
        f"refusing to run without TLS: {why}; give --tls-cert-file, --tls-key-file and "
        f"--tls-ca-file, or {INSECURE_FLAG} to run in plaintext on purpose"
    )


def insecure_mode(*, tls: bool, insecure: bool) -> bool:
    """Whether the node runs in plaintext because `--insecure` was given."""
    return insecure and not tls


def export_insecure(registry: CollectorRegistry, insecure: bool) -> None:
    """The gauge `replog_insecure`: 1 while the node runs insecure on purpose."""
    gauge = Gauge(
        "replog_insecure",
        "1 when the node runs without TLS because --insecure was given",
        registry=registry,
    )
    gauge.set(1 if insecure else 0)


async def warn_insecure(address: str, interval_s: float = INSECURE_WARNING_INTERVAL_S) -> None:
    """Log the insecure warning now and every `interval_s` until cancelled."""
    while True:
        log(
            _log,
            "security.insecure",
            logging.WARNING,
            address=address,
            detail=(
                f"{INSECURE_FLAG}: no TLS; anyone who reaches the listeners can read, write "
                "and delete everything"
            ),
        )
        await asyncio.sleep(interval_s)


class PeerOnly:
    """On the client listener: the peer-only services answer UNIMPLEMENTED."""

    def __init__(self) -> None:
        self.refused = 0

    def wrap(self, method: str, handler: Handler) -> Handler:
        if not method.startswith(PEER_ONLY_SERVICES):
            return handler
        message = f"{method} is served on the peer listener only"

        async def refuse(_request: Any, context: Any) -> Any:
            self.refused += 1
            audit.refused(
                "audit.denied",
                principal="?",
                operation="peer_call",
                resource=method,
                outcome="UNIMPLEMENTED",
                context=context,
                method=method,
            )
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, message)

        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(refuse)
        if handler.stream_stream is not None:

            async def refuse_streamed(_requests: Any, context: Any) -> Any:
                await refuse(None, context)
                yield  # pragma: no cover - never reached: abort raises

            return grpc.stream_stream_rpc_method_handler(refuse_streamed)
        if handler.unary_stream is not None:

            async def refuse_stream(_request: Any, context: Any) -> Any:
                await refuse(None, context)
                yield  # pragma: no cover - never reached: abort raises

            return grpc.unary_stream_rpc_method_handler(refuse_stream)
        return grpc.unary_unary_rpc_method_handler(refuse)


def announce(
    insecure: bool, address: str, registry: CollectorRegistry, spawn: Callable[..., Any]
) -> None:
    """Export `replog_insecure`; when insecure, warn now and every few minutes (`spawn`:
    the node's supervised task starter)."""
    export_insecure(registry, insecure)
    if insecure:
        spawn(warn_insecure(address), "insecure-warning")
