"""The member set and the address book of one node: pure state, no I/O (`roster_keeper` is
its I/O side and its one writer).

Every address this node uses to reach or name another node is read here:

- **members** (`members`): id -> `NodeAddress` (client address, peer address), the
  metadata image's `nodes` once it was followed (`follow`); the settings' `peers` before.
  This node's own client address is the one it serves at (`own_address`: the settings',
  or the port it bound: `set_own_address`), not the image's;
- **client addresses** (`addresses`): id -> the address clients are told (leader hints,
  `GetMetadata`), one per member;
- **dial targets** (`dial`): id -> the address other nodes are dialed at (their peer
  listener when they have one): the members, nodes removed but still in the `__cluster`
  quorum (they may still vote there: `follow`'s `quorum`), and nodes a peer told of while
  this node's metadata lags (`discover`). Peer links, forwarded calls and the TLS peer
  check (`security.peer_node_id`) all read this one map; this node's own entry (from the
  settings) stays, it is the peer address it asks to join with;
- **racks** (`racks`): id -> rack, once the node told (`Nodes.Identify`).

A change returns a `Change`: the peers to reach (new, or at a new dial address) and those
no longer reached; `roster_keeper` hands it to its subscribers (the peer links).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from replog.server.meta.metadata import NodeAddress


@dataclass(frozen=True)
class Change:
    """What a roster change means for the links to peers."""

    reach: Mapping[int, str] = field(default_factory=dict)  # peer -> its (new) dial address
    drop: tuple[int, ...] = ()  # peers no longer reached

    def __bool__(self) -> bool:
        return bool(self.reach or self.drop)


@dataclass(frozen=True)
class Entry:
    """One member as listed (`GetMetadata`, `AddNode`, `Nodes.Identify`)."""

    node_id: int
    address: str
    peer_address: str
    rack: str


class Roster:
    """One node's member set and address book (module docstring)."""

    def __init__(self, me: int, addresses: Mapping[int, str], dial: Mapping[int, str]) -> None:
        """`addresses`: the settings' members (id -> client address; this node's included),
        `dial`: their dial addresses (the same where a node has no peer listener)."""
        assert me in addresses, f"node {me} is not among its own members {sorted(addresses)}"
        self.me = me
        self._members = {
            i: NodeAddress(a, "" if dial.get(i, a) == a else dial[i]) for i, a in addresses.items()
        }
        self._own = addresses[me]
        self._addresses = dict(addresses)
        self._dial = {i: dial.get(i, a) for i, a in addresses.items()}
        self._discovered: set[int] = set()
        self._racks: dict[int, str] = {}
        self.addresses: Mapping[int, str] = MappingProxyType(self._addresses)
        self.dial: Mapping[int, str] = MappingProxyType(self._dial)
        self.racks: Mapping[int, str] = MappingProxyType(self._racks)
        self.members: Mapping[int, NodeAddress] = MappingProxyType(self._members)

    # -- reads ------------------------------------------------------------------------------

    @property
    def own_address(self) -> str:
        return self._own

    def address(self, node_id: int | None) -> str | None:
        """The client address of member `node_id` (None: not a member, or None)."""
        return None if node_id is None else self._addresses.get(node_id)

    def dial_address(self, node_id: int) -> str:
        """Where node `node_id` is dialed (KeyError: nowhere known)."""
        return self._dial.get(node_id) or self._addresses[node_id]

    def nodes(self) -> list[tuple[int, str]]:
        """The members (id, client address), by id: placement, forwarding, listings."""
        return sorted(self._addresses.items())

    def entries(self) -> list[Entry]:
        """The members as listed, by id, with their racks as known here."""
        return [
            Entry(i, a, self._members[i].peer_address, self._racks.get(i, ""))
            for i, a in sorted(self._addresses.items())
        ]

    def peers(self) -> list[int]:
        """Every other node this node dials, in the order they became known."""
        return [i for i in self._dial if i != self.me]

    def racks_unknown(self) -> list[int]:
        """The other members whose rack this node has not heard yet."""
        return [i for i, _ in self.nodes() if i != self.me and i not in self._racks]

    # -- changes ----------------------------------------------------------------------------

    def set_own_address(self, address: str) -> None:
        """This node learns the address it serves at once bound (port 0)."""
        self._own = address
        if self.me in self._addresses:
            self._addresses[self.me] = address

    def learn_racks(self, found: Mapping[int, str]) -> None:
        """Racks peers told (an empty one is not known: asked again next time)."""
        self._racks.update((node, rack) for node, rack in found.items() if rack)

    def follow(self, nodes: Mapping[int, NodeAddress], quorum: Collection[int]) -> Change:
        """Follow the metadata's members `nodes`: a member added is listed and dialed, a
        member removed is no longer listed (nor placed on) at once, and no longer dialed
        once it is out of the `__cluster` membership `quorum` too (until then it may still
        vote there). A node a peer told of stays dialed until the metadata names it."""
        before = dict(self._dial)
        me = self.me
        self._members.clear()
        self._members.update(nodes)
        self._addresses.clear()
        self._addresses.update(
            (i, self._own if i == me else where.address) for i, where in sorted(nodes.items())
        )
        for ident, where in nodes.items():
            if ident != me:  # (its own entry stays the settings': see the module docstring)
                self._dial[ident] = where.dial
        self._discovered -= set(nodes)  # the metadata has them now: it decides from here
        keep = set(nodes) | set(quorum) | self._discovered
        for ident in [i for i in self._dial if i not in keep and i != me]:
            del self._dial[ident]
        return self._since(before)

    def discover(
        self, found: Iterable[tuple[int, str, str]], nodes: Collection[int]
    ) -> tuple[Change, list[int]]:
        """A peer told of the members `found` (id, address, peer address) while this node's
        metadata (`nodes`) lags: those the metadata lacks are dialed until it has them.
        Returns the change and the nodes dialed for the first time."""
        before = dict(self._dial)
        new = {i: p or a for i, a, p in found if i not in nodes and i != self.me}
        added = sorted(i for i in new if i not in self._dial)
        self._discovered = set(new)
        self._dial.update(new)
        return self._since(before), added

    def _since(self, before: Mapping[int, str]) -> Change:
        me = self.me
        reach = {i: a for i, a in self._dial.items() if i != me and before.get(i) != a}
        drop = tuple(i for i in before if i not in self._dial and i != me)
        return Change(reach, drop)
