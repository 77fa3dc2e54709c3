"""Cluster membership without restarts: the metadata quorum follows the members.

The cluster's members are `MetadataImage.nodes` (the settings' `peers`, changed by the
`add_node` / `remove_node` commands: `metadata`). Two things follow them on every node:

- **Peer links** (`RosterKeeper.sync`, after each applied batch): a member added is
  reached at once (its replication link starts, its certificate is accepted as a peer's,
  new topics may place replicas on it); a member removed stops being a peer once it is out
  of the `__cluster` membership too.
- **The `__cluster` quorum** (`QuorumKeeper`, on the metadata leader only): its voters are
  the first `METADATA_VOTERS_MAX` members by id, the other members are observers
  (`replica_config_members`, as for a cluster started with that `peers` list). The keeper
  moves the partition's membership (the latest of its log: `ReplicaDriver.membership`)
  towards that target one step at a time with `ReplicaDriver.change_membership`, which
  allows one voter added or removed per committed record (Raft's single-server change,
  KIP-853). A new member first joins as an observer, catches up, and only then becomes a
  voter, so a node that is slow to copy the log never weakens the quorum.

`decide` is the pure part: from the current membership, the target and which replicas are
caught up, the next step is one of

0. `Change(voters, observers)`, the same: the log holds no membership record yet (a new
   cluster's first election, or a cluster of an earlier release): the starting quorum, which
   each node derived from its own peer list, is written to the log, so that from then on
   every node, and every node that starts on an empty directory (`identity`), reads the
   quorum from the log and never from a peer list that may differ;
1. `Change(voters, observers')`: add every new member as an observer, drop observers that
   are no longer members;
2. `Change(voters - [v], ...)`: a voter that is not a target voter (a member removed, or
   one beyond the first five) stops voting, other nodes before the leader itself, lagging
   ones first, while more voters than the target's are left (so the quorum never shrinks
   below its target while new voters catch up) and the voters left keep a majority of
   caught-up replicas (the leader counts);
3. `Change(voters + [o], ...)`: a caught-up observer that is a target voter is promoted;
4. `Transfer(t)`: the leader is the last voter to remove: it hands leadership to a caught-up
   target voter, whose keeper goes on;
5. `Wait`: target voters are still catching up (or no heir is caught up, or a voter to
   remove waits for the condition of 2);
6. `None`: the membership is the target.

The conditions of 2 keep the quorum able to commit and elect: voters (1, 2, 3) with node 3
dead and nodes 2 and 3 removed must not become (1, 3); voters (2, 3) left while node 4
catches up to replace node 1 lose the quorum for good if one of them loses its disk (a
replica repairing or replacing a disk votes only once a leader let it catch up: its vote
floor). Both were found by the simulator (`tests/simulation/test_controller_schedules.py`).

Every step is read from the log (membership) and the metadata (members), never from the
keeper's memory, so a leader change or a crash half way resumes where the log is. Refusals
the core calls retriable (its epoch or the last change not committed yet, a replica not
caught up) are retried with backoff; anything else that is typed is logged and retried at
the longest backoff; anything untyped is a bug and ends the node (`supervisor`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from replog.errors import MembershipChangeRefusedError, ReplogError
from replog.replication import Role
from replog.server.cluster.reassignment import Change, Transfer, Wait, caught_up
from replog.server.logs import log
from replog.server.meta.metadata import Command, MetadataImage
from replog.server.meta.metadata_log import MetadataLog, replica_config_members
from replog.server.peering.peers import FORWARD_METADATA, Peers, remote
from replog.v1 import admin_pb2

_log = logging.getLogger("replog.server.membership")

IDLE_POLL_S = 1.0  # a leader that has nothing to change looks again this often
BUSY_POLL_S = 0.2  # while a member catches up
BACKOFF_S_MAX = 5.0


Step = Change | Transfer | Wait


def decide(
    me: int,
    voters: tuple[int, ...],
    observers: tuple[int, ...],
    members: Iterable[int],
    ready: frozenset[int],
    *,
    recorded: bool = True,
) -> Step | None:
    """The next step from the `__cluster` membership (`voters`, `observers`) towards the one
    `members` call for; `ready`: the replicas that hold every committed record and fetched
    lately (`reassignment.caught_up`); `recorded`: whether the log holds a membership
    record (if not, recording the starting one comes first). None: nothing to do."""
    if not recorded:
        return Change(voters, observers, "record the starting quorum in the log")
    target_voters, target_observers = replica_config_members(list(members))
    wanted = set(target_voters) | set(target_observers)
    keep = [o for o in observers if o in wanted]
    new = [n for n in sorted(wanted) if n not in voters and n not in observers]
    if set(keep + new) != set(observers):
        return Change(voters, tuple(keep + new), f"observers {list(observers)} -> {keep + new}")
    leaving = [v for v in voters if v not in target_voters]
    others = [v for v in leaving if v != me]
    shrinks = len(voters) > len(target_voters)  # (else replacements are promoted first)
    for gone in sorted(others, key=lambda v: v in ready) if shrinks else ():
        rest = tuple(v for v in voters if v != gone)  # lagging (or dead) ones go first
        if sum(1 for v in rest if v == me or v in ready) > len(rest) // 2:
            stays = (*observers, gone) if gone in wanted else observers
            return Change(rest, stays, f"voter {gone} stops voting")
    joining = [o for o in observers if o in target_voters]
    promotable = [o for o in joining if o in ready]
    if promotable:
        new_voter = promotable[0]
        rest = tuple(o for o in observers if o != new_voter)
        return Change((*voters, new_voter), rest, f"promote {new_voter} to voter")
    if others:
        return Wait(f"voters {others} leave once replacements vote and the rest caught up")
    if leaving:  # only this node, the leader, is left to remove: hand over first
        heirs = [v for v in target_voters if v in voters and v in ready and v != me]
        if not heirs:
            return Wait(f"no caught-up voter of {list(target_voters)} to hand leadership to")
        return Transfer(heirs[0])
    if joining:
        return Wait(f"observers {joining} catching up before they vote")
    return None


class QuorumKeeper:
    """Runs `decide` on this node while it leads the metadata partition (one task)."""

    def __init__(
        self,
        metadata: MetadataLog,
        members: Callable[[], Iterable[int]],
        *,
        timeout_s: float,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        """`members()`: the cluster's members now; `on_change()` is called after each change
        of the membership this keeper made (the node re-syncs its peers)."""
        self.metadata = metadata
        self.members = members
        self.timeout_s = timeout_s
        self.on_change = on_change
        self.step = ""  # what the keeper last did or waits for (logs, tests)
        self._wake = asyncio.Event()
        self._attempts = 0

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            delay_s = await self.run_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay_s)
            self._wake.clear()

    async def run_once(self) -> float:
        """One pass; returns how long to wait before the next one."""
        driver = self.metadata.driver
        if driver.role is not Role.LEADER or not driver.serving:
            self.step, self._attempts = "", 0
            return IDLE_POLL_S
        membership = driver.membership
        me = driver.config.replica_id
        ready = caught_up(self.metadata.log.high_watermark, driver.replica_status(), me)
        recorded = bool(driver.replica.membership_history)
        step = decide(
            me, membership.voters, membership.observers, self.members(), ready, recorded=recorded
        )
        if step is None:
            self.step, self._attempts = "", 0
            return IDLE_POLL_S
        if isinstance(step, Wait):
            self.step = step.why
            return BUSY_POLL_S
        try:
            if isinstance(step, Change):
                self.step = step.why
                await driver.change_membership(step.voters, step.observers, self.timeout_s)
            else:
                self.step = f"hand metadata leadership to {step.target}"
                await driver.transfer_leadership(step.target)
        except ReplogError as exc:
            self._attempts += 1
            delay_s: float = min(BACKOFF_S_MAX, BUSY_POLL_S * 2.0 ** (self._attempts - 1))
            if not exc.retriable:
                delay_s = BACKOFF_S_MAX
            log(
                _log,
                "metadata_quorum.refused",
                logging.INFO if exc.retriable else logging.WARNING,
                step=self.step,
                error=f"{exc.reason}: {exc.message}",
                retry_in_ms=int(delay_s * 1000),
            )
            return delay_s
        self._attempts = 0
        log(_log, "metadata_quorum.step", step=self.step)
        self.on_change()
        return 0.0 if isinstance(step, Change) else BUSY_POLL_S


class Roll(Protocol):
    """The member set as this node knows it (`roster_keeper.RosterKeeper`, its one owner)."""

    single: bool  # started without `peers`: a cluster of one that does not grow

    def removed(self) -> bool: ...

    def nodes(self) -> list[admin_pb2.Node]: ...


class Members:
    """AddNode and RemoveNode: validated and proposed on the metadata leader (forwarded
    there from another node)."""

    def __init__(
        self,
        metadata: MetadataLog,
        peers: Peers,
        roll: Roll,
        *,
        timeout_s: float,
        peer_port: str = "",
    ) -> None:
        """`roll`: the members as this node knows them (a cluster of one, `roll.single`, does
        not grow: its address may be a port it picked, which others cannot be told).
        `peer_port`: the port of this node's peer listener ("": none): a node added without
        a peer address is dialed on the same port of its host, as in StatefulSet mode."""
        self.metadata = metadata
        self.peers = peers
        self.roll = roll
        self.timeout_s = timeout_s
        self.peer_port = peer_port

    async def add(self, node_id: int, address: str, peer_address: str) -> list[admin_pb2.Node]:
        """Returns the members as the metadata leader knows them once the node is one."""
        host, sep, _port = address.rpartition(":")
        if not peer_address and self.peer_port and sep and host:
            peer_address = f"{host}:{self.peer_port}"  # nodes have a peer listener here
        if self.roll.single:
            raise MembershipChangeRefusedError(
                "this node was started without --peers: a cluster of one does not grow. "
                "Restart it with --peers naming itself (1=host:port), then add nodes",
                refusal="single_node",
            )
        leader = self.metadata.leader()
        if leader != self.peers.node_id:
            request = admin_pb2.AddNodeRequest(
                node_id=node_id, address=address, peer_address=peer_address
            )
            call = self.peers.admin(leader).AddNode
            reply = await remote(call(request, timeout=self.timeout_s, metadata=FORWARD_METADATA))
            return list(reply.nodes)

        def make(image: MetadataImage) -> Command:
            return image.add_node(node_id, address, peer_address)

        await self.metadata.propose(make, self.timeout_s)
        return self.nodes()

    def removed(self) -> bool:
        """Whether the metadata this node applied removed it from the members."""
        return self.roll.removed()

    def nodes(self) -> list[admin_pb2.Node]:
        """The members as this node knows them, by id (`RosterKeeper.nodes`)."""
        return self.roll.nodes()

    async def remove(self, node_id: int) -> list[admin_pb2.Node]:
        """Returns the members as the metadata leader knows them once the node is not one."""
        leader = self.metadata.leader()
        if leader != self.peers.node_id:
            request = admin_pb2.RemoveNodeRequest(node_id=node_id)
            call = self.peers.admin(leader).RemoveNode
            reply = await remote(call(request, timeout=self.timeout_s, metadata=FORWARD_METADATA))
            return list(reply.nodes)
        await self.metadata.propose(lambda image: image.remove_node(node_id), self.timeout_s)
        return self.nodes()
