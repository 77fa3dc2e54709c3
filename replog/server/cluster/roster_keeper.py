"""The one owner of a node's member set and address book: `roster.Roster` (the pure state)
and everything that changes it or asks other nodes for it.

- **From the metadata** (`sync`, after each applied batch and each quorum step): the roster
  follows the image's members and the `__cluster` quorum (`Roster.follow`);
- **from peers** (`discover`, a loop on a node of several): while the metadata leader is
  unknown here, or known but not dialed, the peers are asked for the members
  (`Nodes.Identify`) and those this node's metadata lacks are dialed until it has caught up;
- **racks** (`racks`): asked of the members in the background once one is not known.

Each change goes out through one notification: `subscribe(fn)`, `fn(Change)` (the peer
links start or stop). Forwarded calls (`Peers`) and the TLS peer check (`authenticate`)
read the roster itself, the one map, so that they never see an address the links do not.
Members are listed one way, `nodes()` (`GetMetadata`, `AddNode`, `RemoveNode`), and
`entries()` (`Nodes.Identify`, with peer addresses).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc

from replog.server.cluster import identity as identities
from replog.server.cluster.joins import ask_to_join
from replog.server.cluster.roster import Change, Roster
from replog.server.edge.security import peer_node_id
from replog.server.logs import log
from replog.server.meta.metadata_log import MetadataLog
from replog.server.peering.replication_transport import PeerLinks, Spawn
from replog.v1 import admin_pb2

_log = logging.getLogger("replog.server.roster")

# Racks not heard yet are asked again after this, doubling up to the max.
RACKS_RETRY_S_MIN, RACKS_RETRY_S_MAX = 0.5, 30.0
DISCOVER_S = 1.0  # how often a node that cannot reach the metadata leader asks for members

Subscriber = Callable[[Change], None]


class RosterKeeper:
    """Keeps `roster` following the metadata and the peers; tells the subscribers."""

    def __init__(
        self,
        roster: Roster,
        metadata: MetadataLog,
        channel_for: Callable[[int], grpc.aio.Channel],
        *,
        rack: str,
        single: bool,
        spawn: Spawn,
    ) -> None:
        """`rack`: this node's ("": racks are not used, nobody is asked); `single`: started
        without `peers` (a cluster of one: never "removed", nothing to discover)."""
        self.roster = roster
        self.metadata = metadata
        self.channel_for = channel_for
        self.rack = rack
        self.single = single
        self.spawn = spawn
        self._subscribers: list[Subscriber] = []
        self._racks_asking = False
        self._removed = False  # what `sync` last logged

    @property
    def node_id(self) -> int:
        return self.roster.me

    def subscribe(self, subscriber: Subscriber) -> None:
        """`subscriber(change)` after every change of the dial targets."""
        self._subscribers.append(subscriber)

    def _publish(self, change: Change) -> None:
        if change:
            for subscriber in self._subscribers:
                subscriber(change)

    # -- following the metadata -------------------------------------------------------------

    def sync(self) -> None:
        """Follow the metadata's members (`Roster.follow`): a member added is reached (its
        link, its address for forwarded calls and placement, its certificate a peer's); a
        member removed is no longer listed or placed on, and stops being a peer once it is
        out of the metadata quorum too (until then it may still vote there)."""
        removed = self.removed()
        if removed != self._removed:
            self._removed = removed
            level = logging.ERROR if removed else logging.INFO
            event = "node.removed" if removed else "node.member_again"
            log(_log, event, level, node_id=self.node_id)
        quorum = self.metadata.driver.membership.replicas
        self._publish(self.roster.follow(self.metadata.image.nodes, quorum))
        if self.rack and self.roster.racks_unknown() and not self._racks_asking:
            self._racks_asking = True  # (GetMetadata shows racks: `replog node add`'s spread)
            self.spawn(self._ask_racks(), "racks")

    def removed(self) -> bool:
        """Whether the metadata this node applied removed it from the members (it is no
        longer sent the metadata: what it knows ages from then on)."""
        return not self.single and self.node_id not in self.metadata.image.nodes

    # -- listing ----------------------------------------------------------------------------

    def nodes(self) -> list[admin_pb2.Node]:
        """The members, by id, with their racks as known here: the one listing."""
        racks = self.known_racks()
        return [
            admin_pb2.Node(id=e.node_id, address=e.address, rack=racks.get(e.node_id, ""))
            for e in self.roster.entries()
        ]

    def member_addresses(self) -> list[tuple[int, str, str]]:
        """(id, address, peer_address) of the members (what `Nodes.Identify` answers)."""
        return [(e.node_id, e.address, e.peer_address) for e in self.roster.entries()]

    def authenticate(self, context: object) -> int | None:
        """The node a peer call's certificate names, if this node dials it (None: none)."""
        return peer_node_id(context, self.roster.dial)

    # -- racks ------------------------------------------------------------------------------

    async def racks(self) -> dict[int, str]:
        """Every member's rack: this node's setting, the others' `Identify` answers (kept
        once known; a node not heard from is asked again next time). Nobody is asked when
        this node has no rack: racks are set on every node or on none."""
        if not self.rack:
            return {}
        unknown = self.roster.racks_unknown()
        found = await identities.racks_of(self.channel_for, self.node_id, unknown)
        self.roster.learn_racks(found)
        return {**self.roster.racks, self.node_id: self.rack}

    def known_racks(self) -> dict[int, str]:
        """The racks known without asking: this node's and those peers told (GetMetadata).
        A member not known yet is asked in the background (`sync`)."""
        if not self.rack:
            return {}
        return {**self.roster.racks, self.node_id: self.rack}

    async def _ask_racks(self) -> None:
        """Ask until every member's rack is known: a member that did not answer (not up
        yet, busy) is asked again after a backoff, not only at the next membership change
        (nodes started together ask each other before all of them listen)."""
        try:
            wait_s = RACKS_RETRY_S_MIN
            while True:
                await self.racks()
                if not self.roster.racks_unknown():
                    return
                await asyncio.sleep(wait_s)
                wait_s = min(2 * wait_s, RACKS_RETRY_S_MAX)
        finally:
            self._racks_asking = False

    # -- asking peers -----------------------------------------------------------------------

    async def discover(self) -> None:
        """A node whose metadata lags may not know how to reach the node that leads it now
        (one added while this node was down, or since the peer list it started with): while
        the metadata leader is unknown, or known but not dialed from here, ask the peers this
        node knows (`Nodes.Identify`) for the members, and reach those its metadata lacks
        until it has caught up (`Roster.follow` keeps them meanwhile)."""
        me = self.node_id
        while True:
            await asyncio.sleep(DISCOVER_S)
            leader = self.metadata.driver.leader_id
            if leader == me or (leader is not None and leader in self.roster.dial):
                continue
            peers = self.roster.peers()
            found = await identities.members_of(self.channel_for, me, peers)
            change, added = self.roster.discover(found, self.metadata.image.nodes)
            self._publish(change)
            if added:
                log(_log, "members.discovered", nodes=added, leader=leader)

    async def ask_to_join(self, listed: Callable[[], bool]) -> None:
        """`join=auto` on a node started "joining": ask the peers to add it until `listed()`
        (`joins.ask_to_join`), with the addresses this node serves at."""
        roster, me = self.roster, self.node_id
        dial = roster.dial.get(me, "")
        await ask_to_join(
            me,
            lambda: roster.own_address,
            "" if dial == roster.own_address else dial,
            lambda: sorted(roster.peers()),
            self.channel_for,
            listed,
        )


def follow_links(links: PeerLinks) -> Subscriber:
    """A subscriber that starts and stops the peer links as the dial targets change."""

    def apply(change: Change) -> None:
        for peer, address in change.reach.items():
            links.add(peer, address)
        for peer in change.drop:
            links.remove(peer)

    return apply
