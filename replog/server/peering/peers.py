"""Calls to other nodes of the cluster: forwarded admin calls, on one channel per peer.

A forwarded call carries the metadata `x-replog-forwarded: 1` so that the receiving node
answers for itself instead of forwarding it again. Calls go to a node's peer address (its
peer listener, when nodes have one) over the channel `dial` makes (mutual TLS with TLS on),
both read from the address book (`AddressBook`); client addresses stay the ones clients are
told about. A peer's failure comes back as the typed `ReplogError` it sent (decoded by
`replog.rpc_errors`, keyed by reason); a node whose address is not known here yet is
LEADER_UNKNOWN (retriable), never a KeyError.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import grpc

from replog.errors import LeaderUnknownError, ReplogError
from replog.rpc_errors import from_rpc_error
from replog.v1 import acl_pb2_grpc, admin_pb2_grpc, log_pb2_grpc

FORWARDED = "x-replog-forwarded"
FORWARD_METADATA = ((FORWARDED, "1"),)


class AddressBook(Protocol):
    """Where the cluster's nodes are (`cluster.roster.Roster`, the one owner: Peers keeps
    no copy, so a member added or removed is reached or dropped at once)."""

    def address(self, node_id: int | None) -> str | None:
        """A member's client address (None: not a member)."""
        ...

    def dial_address(self, node_id: int) -> str:
        """Where node `node_id` is dialed (KeyError: nowhere known)."""
        ...

    def nodes(self) -> list[tuple[int, str]]:
        """The members (id, client address), by id."""
        ...


class Peers:
    """Admin, Acls and Log stubs to the cluster's nodes, found in the address book."""

    def __init__(
        self,
        node_id: int,
        book: AddressBook,
        dial: Callable[[str], grpc.aio.Channel] = grpc.aio.insecure_channel,
    ) -> None:
        self.node_id = node_id
        self.book = book
        self._dial = dial
        self._channels: dict[str, grpc.aio.Channel] = {}

    def address(self, node_id: int | None) -> str | None:
        return self.book.address(node_id)

    def nodes(self) -> list[tuple[int, str]]:
        return self.book.nodes()

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
        try:
            address = self.book.dial_address(node_id)
        except KeyError:
            # A node that restarted hears of a leader (a metadata leader, a partition's)
            # before it hears where that node is: retriable, like no leader at all. Every
            # caller already handles a typed error; a KeyError ended background tasks.
            raise LeaderUnknownError(
                f"node {self.node_id} does not know where node {node_id} is yet",
                node=node_id,
            ) from None
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
