"""The node's listeners and the channels it dials its peers with.

    client listener (`listen`)       Log, Admin, Groups, Acls, Health, reflection; TLS when
                                     configured; never Replication or Nodes (a single
                                     node without a peer listener serves them nowhere:
                                     exposure.py `PeerOnly`)
    peer listener (`peer_listen`)    Replication and forwarded Admin, Acls and InitProducer calls;
                                     with TLS, mutual: a client certificate signed by the CA
                                     is required and must name a member (security.py)

Why a separate peer listener (as Kafka separates its listeners): the peer port can be
admitted by a NetworkPolicy for the StatefulSet's pods only, it can require client
certificates while the client port does not (gRPC Python cannot ask for a certificate
without requiring one), and a client-facing change (limits, authentication of users)
cannot open the replication path by accident.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc

from replog.server.edge import audit
from replog.server.edge.security import ReloadingCredentials, describe_peer, proves_node
from replog.tls import TlsFiles

Dial = Callable[[str], grpc.aio.Channel]
Authenticate = Callable[[Any], int | None]


def server_options(message_bytes_max: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", message_bytes_max),
        ("grpc.max_send_message_length", message_bytes_max),
        ("grpc.so_reuseport", 0),
        # Clients and peers send keepalive pings (every 10 s while a call is open) to
        # notice a hung node; accept them even on a quiet long poll or stream.
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
        ("grpc.http2.max_ping_strikes", 0),
    ]


def generic_handlers_only(server: grpc.aio.Server) -> grpc.aio.Server:
    """`server`, on which the generated `add_*Servicer_to_server` functions register their
    generic handlers only (they register each service twice: generic handlers, then
    "registered methods"); every method is served the same, through the generic handlers.

    Why: grpc.aio keeps one pending request per registered method, and its serving loop
    waits, for every call, on all of them together (`asyncio.wait`: a callback added and
    removed on each), so each call's cost grew with the API surface (30 methods on the
    client listener against 14 before issue 10). Measured with bench/compare_commits.py,
    same run: server CPU per record of 1-node produce 0.87..0.90x, per single-record append
    0.95..0.96x (docs/benchmarks.md, issue 10 section)."""
    server.add_registered_method_handlers = _no_registered_methods  # type: ignore[attr-defined]
    return server


def _no_registered_methods(*_args: Any, **_kwargs: Any) -> None:
    """The generic handler the generated code added first serves these methods."""


def add_port(
    server: grpc.aio.Server, address: str, tls: TlsFiles | None, *, require_client_auth: bool
) -> tuple[int, ReloadingCredentials | None]:
    """Bind `address` (plaintext without `tls`); the port and the reloading credentials."""
    if tls is None:
        return server.add_insecure_port(address), None
    creds = ReloadingCredentials(tls, require_client_auth=require_client_auth)
    return server.add_secure_port(address, creds.credentials), creds


def dialer(tls: TlsFiles | None, options: Sequence[tuple[str, Any]] | None = None) -> Dial:
    """How this node opens a channel to a peer address: mutual TLS with this node's own
    certificate when TLS is on (files read per channel, so new channels follow a rotation)."""

    def dial(address: str) -> grpc.aio.Channel:
        if tls is None:
            return grpc.aio.insecure_channel(address, options=options)
        return grpc.aio.secure_channel(address, tls.client().credentials(), options=options)

    return dial


class MembersOnly:
    """A servicer whose every method first checks that the caller is a member: a forwarded
    call on the peer listener from a certificate that names no node is PERMISSION_DENIED."""

    def __init__(self, servicer: object, authenticate: Authenticate) -> None:
        self._servicer = servicer
        self._authenticate = authenticate

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._servicer, name)

        async def guarded(request: Any, context: Any) -> Any:
            if self._authenticate(context) is None:
                audit.refused(
                    "audit.denied",
                    principal=describe_peer(context),
                    operation="peer_call",
                    resource=name,
                    outcome="PERMISSION_DENIED",
                    context=context,
                    method=name,
                )
                await context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    "peer calls need the certificate of a cluster member",
                )
            return await method(request, context)

        return guarded


class IdentifyGuard:
    """The Nodes servicer on the peer listener: `Identify` answers a member, or a node whose
    certificate proves the id its request names (a node that joins is no member yet: its
    URI SAN `replog://node/<id>`); any other certificate of the CA (a client's, a node
    certificate naming another id) is PERMISSION_DENIED. `Join` checks its caller itself;
    each one is in the audit log (`audit.change`, operation join)."""

    def __init__(self, servicer: object, authenticate: Authenticate | None) -> None:
        self._servicer = servicer
        self._authenticate = authenticate
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._servicer, name)
        authenticate = self._authenticate
        if name == "Join":
            return _audited_join(method)
        if name != "Identify" or authenticate is None:
            return method  # (plaintext: nobody proves anything; --insecure said so)

        async def guarded(request: Any, context: Any) -> Any:
            claimed = int(request.node_id)
            if authenticate(context) is None and not (claimed and proves_node(context, claimed)):
                self.refused += 1
                audit.refused(
                    "audit.denied",
                    principal=describe_peer(context),
                    operation="identify",
                    resource=f"node:{claimed}",
                    outcome="PERMISSION_DENIED",
                    context=context,
                    method="Identify",
                )
                await context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    "Identify answers members, and nodes whose certificate proves their id",
                )
            return await method(request, context)

        return guarded


def _audited_join(join: Callable[..., Any]) -> Callable[..., Any]:
    """`Nodes.Join`, logged once it has run (a membership change, or its refusal)."""
    return audit.audited(
        join,
        "/replog.v1.Nodes/Join",
        "join",
        describe_peer,
        lambda request: f"node:{int(request.node_id)}",
    )
