"""Calls of the `replog.v1.Groups` service with coordinator routing (sync), and their results.

A group's calls go to its coordinator (`FindCoordinator` on any node, cached per group);
a NOT_COORDINATOR answer moves the group to the node it names (or asks again), and
COORDINATOR_LOADING, LEADER_UNKNOWN and unreachable nodes are retried with the client's
`RetryPolicy` (a heartbeat passes a shorter one: it must not outlive its session).
`ListGroups` goes to any node. The calls are built once, as data, for this module and its
asyncio twin (`group_rpcs`); results are plain frozen values (`group_wire`, re-exported
here: `CommittedOffset`, `GroupSummary`, `GroupDescription`, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeVar

import grpc

from replog.client.group_rpcs import GroupCalls as GroupCallsBase
from replog.client.group_rpcs import GroupRpc
from replog.client.group_wire import (
    CommittedOffset as CommittedOffset,
)
from replog.client.group_wire import (
    GroupDescription as GroupDescription,
)
from replog.client.group_wire import (
    GroupSummary as GroupSummary,
)
from replog.client.group_wire import (
    MemberInfo as MemberInfo,
)
from replog.client.group_wire import (
    PartitionLag as PartitionLag,
)
from replog.client.group_wire import (
    TopicPartition as TopicPartition,
)
from replog.client.member_rules import Answer as Answer  # re-exported: the calls return it
from replog.client.retry import RetryPolicy, call_with_retry
from replog.rpc_errors import from_rpc_error
from replog.v1 import groups_pb2_grpc

T = TypeVar("T")


# -- the sync calls ----------------------------------------------------------------------


class GroupsClient(Protocol):
    """What `GroupCalls` needs from its client; `replog.client.Client` is one."""

    timeout_s: float
    attempt_timeout_s: float
    retry: RetryPolicy

    def _node(self, address: str) -> Any: ...

    def _call(
        self, fn: Callable[[Any], T], topic: str | None = None, partition: int = 0, *,
        idempotent: bool = False,
    ) -> T: ...  # fmt: skip


class Coordinators(GroupCallsBase):
    """What `GroupCalls` and its asyncio twin share: each group's coordinator address as
    last found, and one Groups stub per node address (over the client's channels)."""

    client: Any  # a `Client` or an `AsyncClient`

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self._stubs: dict[str, Any] = {}

    def _stub(self, address: str) -> Any:
        stub = self._stubs.get(address)
        if stub is None:
            channel = self.client._node(address).channel
            stub = self._stubs[address] = groups_pb2_grpc.GroupsStub(channel)  # type: ignore[no-untyped-call]
        return stub

    def _sender(self, rpc: GroupRpc[Any]) -> Callable[[str], Any]:
        """A function that sends `rpc` to a node address (its answer: awaitable on an
        asyncio channel)."""
        timeout = self.timeout_of(rpc)
        return lambda address: getattr(self._stub(address), rpc.method)(
            rpc.request, timeout=timeout
        )


class GroupCalls(Coordinators):
    """The Groups calls of a `Client` (threads), each sent to the group's coordinator and
    following it as it moves (the calls themselves: `group_rpcs`)."""

    client: GroupsClient
    blocking: Literal[True] = True

    def run(self, rpc: GroupRpc[T]) -> T:
        """Send `rpc` (to its group's coordinator, following it as it moves) and read it."""
        send, group = self._sender(rpc), rpc.group
        if group is None:
            return rpc.read(self.client._call(lambda node: send(node.address), idempotent=True))

        def attempt() -> T:
            address = self.coordinators.get(group) or self.find_coordinator(group)
            try:
                return rpc.read(send(address))
            except grpc.RpcError as exc:
                raise self.failed(rpc, from_rpc_error(exc), address) from None

        return call_with_retry(attempt, self.policy_of(rpc), self.follow(rpc))
