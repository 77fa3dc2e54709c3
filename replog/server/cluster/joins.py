"""A node that joins on its own (`--join auto`): a StatefulSet scaled up needs no admin call.

Two halves, both only with `join=auto` (which needs TLS):

- **Asking** (`ask_to_join`, on the new node): a node that started on an empty data
  directory as "joining" (`identity`: the cluster exists and its metadata quorum does not
  name it) asks its peers, one after the other, `Nodes.Join(node_id, address,
  peer_address)` with its own addresses, until its metadata replica's log lists it (the
  quorum keeper made it an observer: from there it catches up and is promoted). A refusal
  is logged (`join.refused`) and asked again with backoff; a node that has caught up once
  never asks again, so a removed node that restarts with its data does not add itself back.
- **Answering** (`Joins.join`, on every node): the caller's verified certificate must prove
  the id it asks for (`security.proves_node`: its node URI names it, or a DNS/IP SAN is the
  host it asks to be reached at); then it is `Members.add`, the `Admin.AddNode` path
  (forwarded to the metadata leader, validated there: NODE_ALREADY_EXISTS for an id
  another address holds, an address another member uses, 256 members at most). Adding a
  member that is one already at that address changes nothing, so asking again is safe.

What it does not do: spread replicas of existing topics onto the new node (`replog node
add N ADDRESS` run afterwards does, since adding a member again changes nothing else), or
remove nodes (a pod that stops may come back: `replog node decommission` / `remove`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import grpc

from replog.errors import (
    InvalidArgumentError,
    MembershipChangeRefusedError,
    PermissionDeniedError,
)
from replog.rpc_errors import from_rpc_error
from replog.server.cluster.membership import Members
from replog.server.edge import security
from replog.server.edge.rpc import unary
from replog.server.logs import log
from replog.server.meta.metadata import NODE_ID_MAX
from replog.server.metrics import Metrics
from replog.v1 import nodes_pb2, nodes_pb2_grpc

_log = logging.getLogger("replog.server.joins")

ASK_TIMEOUT_S = 10.0  # a Join is an AddNode on the metadata leader: it waits for the commit
RETRY_S_MIN = 1.0
RETRY_S_MAX = 10.0
POLL_S = 0.25
ADDRESS_CHARS_MAX = 300


class Joins:
    """`Nodes.Join` (served by `identity.NodesService`)."""

    def __init__(self, members: Members, metrics: Metrics, *, accept: bool) -> None:
        """`accept`: this node was started with `join=auto` (and TLS: settings check it)."""
        self.members = members
        self.metrics = metrics
        self.accept = accept

    @unary("Join")
    async def join(self, request: nodes_pb2.JoinRequest, context: Any) -> nodes_pb2.JoinResponse:
        if not self.accept:
            raise MembershipChangeRefusedError(
                "this node takes no joins (started with join=manual): add the node with "
                "`replog node add`",
                refusal="joins_disabled",
            )
        node_id, address, peer_address = request.node_id, request.address, request.peer_address
        if not 1 <= node_id <= NODE_ID_MAX:
            raise InvalidArgumentError(f"node_id must be in [1, {NODE_ID_MAX}], got {node_id}")
        if len(address) > ADDRESS_CHARS_MAX or len(peer_address) > ADDRESS_CHARS_MAX:
            raise InvalidArgumentError(f"addresses are at most {ADDRESS_CHARS_MAX} characters")
        if not security.proves_node(context, node_id, (address, peer_address)):
            raise PermissionDeniedError(
                f"the caller's certificate ({security.describe_peer(context)}) does not "
                f"name node {node_id} nor the host it asks to be reached at"
            )
        nodes = await self.members.add(node_id, address, peer_address)
        log(_log, "join.accepted", node_id=node_id, address=address)
        members = [nodes_pb2.Member(id=n.id, address=n.address) for n in nodes]
        return nodes_pb2.JoinResponse(members=members)


async def ask_to_join(
    node_id: int,
    address: Callable[[], str],
    peer_address: str,
    peers: Callable[[], list[int]],
    channel_for: Callable[[int], grpc.aio.Channel],
    listed: Callable[[], bool],
) -> None:
    """Ask `peers()` to add this node until `listed()` (its metadata log's membership names
    it). `address()`: the address clients reach it at (known once bound). After a peer
    accepted, the quorum keeper makes the node an observer within moments; it asks again
    only if that has not happened after RETRY_S_MAX (a removal raced it, a leader change)."""
    delay_s = RETRY_S_MIN
    while not listed():
        accepted = await _ask_once(node_id, address(), peer_address, peers(), channel_for)
        delay_s = RETRY_S_MAX if accepted else min(RETRY_S_MAX, delay_s * 2)
        waited = 0.0
        while waited < delay_s and not listed():
            await asyncio.sleep(POLL_S)
            waited += POLL_S
    log(_log, "join.done", node_id=node_id)


async def _ask_once(
    node_id: int,
    address: str,
    peer_address: str,
    peers: list[int],
    channel_for: Callable[[int], grpc.aio.Channel],
) -> bool:
    """One round over the peers; True once one accepted."""
    request = nodes_pb2.JoinRequest(node_id=node_id, address=address, peer_address=peer_address)
    for peer in peers:
        stub: Any = nodes_pb2_grpc.NodesStub(channel_for(peer))  # type: ignore[no-untyped-call]
        try:
            await stub.Join(request, timeout=ASK_TIMEOUT_S)
        except grpc.RpcError as exc:
            err = from_rpc_error(exc)
            log(
                _log,
                "join.refused",
                logging.WARNING,
                peer=peer,
                error=f"{err.reason}: {err.message[:200]}",
            )
            continue
        log(_log, "join.asked", peer=peer, address=address)
        return True
    return False
