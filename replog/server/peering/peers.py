"""Calls to other nodes of the cluster: forwarded admin calls, on one channel per peer.

A forwarded call carries the metadata `x-replog-forwarded: 1` so that the receiving node
answers for itself instead of forwarding it again. Calls go to a node's peer address (its
peer listener, when nodes have one) over the channel `dial` makes (mutual TLS with TLS on);
`addresses` stay the ones clients are told about. A peer's failure comes back as the typed
`ReplogError` it sent (decoded by `replog.rpc_errors`, keyed by reason).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from replog.errors import ReplogError
from replog.rpc_errors import from_rpc_error
from replog.v1 import acl_pb2_grpc, admin_pb2_grpc, log_pb2_grpc

FORWARDED = "x-replog-forwarded"
FORWARD_METADATA = ((FORWARDED, "1"),)


class Peers:
    """The cluster's nodes (id -> address, this node included) and admin stubs to them."""

    def __init__(
        self,
        node_id: int,
        addresses: dict[int, str],
        dial_addresses: dict[int, str] | None = None,
        dial: Callable[[str], grpc.aio.Channel] = grpc.aio.insecure_channel,
    ) -> None:
        self.node_id = node_id
        self.addresses = dict(addresses)
        self.dial_addresses = dict(dial_addresses or {})
        self._dial = dial
        self._channels: dict[str, grpc.aio.Channel] = {}

    def address(self, node_id: int | None) -> str | None:
        return None if node_id is None else self.addresses.get(node_id)

    def nodes(self) -> list[tuple[int, str]]:
        return sorted(self.addresses.items())

    def set_own_address(self, address: str) -> None:
        """A single node learns its address once bound (port 0)."""
        self.addresses[self.node_id] = address

    def admin(self, node_id: int) -> Any:
        """An Admin stub of node `node_id`."""
        return admin_pb2_grpc.AdminStub(self._channel(node_id))  # type: ignore[no-untyped-call]

    def acls(self, node_id: int) -> Any:
        """An Acls stub of node `node_id` (forwarded ACL changes)."""
        return acl_pb2_grpc.AclsStub(self._channel(node_id))  # type: ignore[no-untyped-call]

    def log(self, node_id: int) -> Any:
        """A Log stub of node `node_id` (forwarded InitProducer calls)."""
        return log_pb2_grpc.LogStub(self._channel(node_id))  # type: ignore[no-untyped-call]

    def channel(self, node_id: int) -> grpc.aio.Channel:
        """The channel to node `node_id` (for stubs of other services: `identity.racks_of`)."""
        return self._channel(node_id)

    def _channel(self, node_id: int) -> grpc.aio.Channel:
        address = self.dial_addresses.get(node_id) or self.addresses[node_id]
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self._dial(address)
        return channel

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close(None)
        self._channels.clear()


async def remote(call: Awaitable[Any]) -> Any:
    """Await a forwarded call, turning its failure back into the typed error."""
    try:
        return await call
    except grpc.RpcError as exc:
        err: ReplogError = from_rpc_error(exc)
        raise err from None
