"""The member set and address book (`cluster/roster.py`, pure) and its one writer's
notification (`cluster/roster_keeper.py`): table-driven, no network."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from replog.server.cluster.identity import JOINING, Identity
from replog.server.cluster.roster import Change, Roster
from replog.server.cluster.roster_keeper import RosterKeeper, follow_links
from replog.server.meta.metadata import NodeAddress

A = {1: "h1:7001", 2: "h2:7002", 3: "h3:7003"}  # client addresses
D = {1: "h1:8001", 2: "h2:8002", 3: "h3:8003"}  # peer listeners


def _nodes(*ids: int, **moved: str) -> dict[int, NodeAddress]:
    """Members as the metadata image has them (`moved`: n4="peer address" overrides)."""
    out = {i: NodeAddress(f"h{i}:700{i}", f"h{i}:800{i}") for i in ids}
    for name, dial in moved.items():
        i = int(name[1:])
        out[i] = NodeAddress(f"h{i}:700{i}", dial)
    return out


@dataclass
class Case:
    name: str
    steps: list[Callable[[Roster], Any]]
    listed: list[int]
    dialed: dict[int, str]
    last_change: Change = field(default_factory=Change)


def follow(nodes: dict[int, NodeAddress], quorum: tuple[int, ...] = ()) -> Callable[[Roster], Any]:
    return lambda r: r.follow(nodes, quorum)


def discover(found: list[tuple[int, str, str]], known: tuple[int, ...]) -> Callable[[Roster], Any]:
    return lambda r: r.discover(found, known)[0]


CASES = [
    Case("the settings' peers before any metadata", [], [1, 2, 3], D),
    Case(
        "a member added is listed and dialed at its peer address",
        [follow(_nodes(1, 2, 3, 4))],
        [1, 2, 3, 4],
        {**D, 4: "h4:8004"},
        Change({4: "h4:8004"}),
    ),
    Case(
        "a member removed but still in the metadata quorum is unlisted and still dialed",
        [follow(_nodes(1, 2), quorum=(1, 2, 3))],
        [1, 2],
        D,
    ),
    Case(
        "a member removed and out of the quorum is no longer dialed",
        [follow(_nodes(1, 2), quorum=(1, 2, 3)), follow(_nodes(1, 2), quorum=(1, 2))],
        [1, 2],
        {1: D[1], 2: D[2]},
        Change({}, (3,)),
    ),
    Case(
        "a member whose peer address changed is dialed at the new one",
        [follow(_nodes(1, 2, 3, n2="h9:9002"))],
        [1, 2, 3],
        {**D, 2: "h9:9002"},
        Change({2: "h9:9002"}),
    ),
    Case(
        "following the same members changes nothing",
        [follow(_nodes(1, 2, 3)), follow(_nodes(1, 2, 3))],
        [1, 2, 3],
        D,
    ),
    Case(
        "this node removed is unlisted, and keeps its own peer address",
        [follow(_nodes(2, 3))],
        [2, 3],
        D,
    ),
    Case(
        "this node's own entry is never taken from the metadata",
        [follow(_nodes(2, 3, n1="elsewhere:1"))],
        [1, 2, 3],
        D,
    ),
    Case(
        "a node a peer told of is dialed while the metadata lacks it",
        [discover([(4, "h4:7004", "h4:8004"), (1, "x:1", ""), (2, "h2:7002", "")], (1, 2, 3))],
        [1, 2, 3],
        {**D, 4: "h4:8004"},
        Change({4: "h4:8004"}),
    ),
    Case(
        "a node told of without a peer address is dialed at its client address",
        [discover([(5, "h5:7005", "")], (1, 2, 3))],
        [1, 2, 3],
        {**D, 5: "h5:7005"},
        Change({5: "h5:7005"}),
    ),
    Case(
        "a discovered node stays dialed until the metadata, not a peer, decides",
        [
            discover([(4, "h4:7004", "h4:8004")], (1, 2, 3)),
            follow(_nodes(1, 2, 3)),
            discover([], (1, 2, 3)),
            follow(_nodes(1, 2, 3)),
        ],
        [1, 2, 3],
        D,
        Change({}, (4,)),
    ),
    Case(
        "a discovered node the metadata then names is followed from the metadata",
        [discover([(4, "h4:7004", "old:1")], (1, 2, 3)), follow(_nodes(1, 2, 3, 4))],
        [1, 2, 3, 4],
        {**D, 4: "h4:8004"},
        Change({4: "h4:8004"}),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_roster_follows_the_metadata_and_the_peers(case: Case) -> None:
    roster = Roster(1, A, D)
    change = Change()
    for step in case.steps:
        change = step(roster)
    assert [i for i, _ in roster.nodes()] == case.listed
    assert dict(roster.dial) == case.dialed
    assert change == case.last_change
    for peer in roster.peers():  # every dialed node is reachable through one address
        assert roster.dial_address(peer) == case.dialed[peer]


def test_listing_shows_own_bound_address_peer_addresses_and_racks_once_told() -> None:
    roster = Roster(1, {1: "127.0.0.1:0"}, {})
    roster.set_own_address("127.0.0.1:41234")  # a single node learns its port once bound
    roster.follow({1: NodeAddress("127.0.0.1:0")}, ())
    assert roster.nodes() == [(1, "127.0.0.1:41234")]
    roster = Roster(1, A, D)
    assert roster.racks_unknown() == [2, 3]
    roster.learn_racks({2: "r2", 3: ""})  # an empty answer is not known: asked again
    assert roster.racks_unknown() == [3]
    assert [(e.node_id, e.address, e.peer_address, e.rack) for e in roster.entries()] == [
        (1, "h1:7001", "h1:8001", ""),
        (2, "h2:7002", "h2:8002", "r2"),
        (3, "h3:7003", "h3:8003", ""),
    ]
    assert roster.address(2) == "h2:7002" and roster.address(9) is None


def test_the_address_book_views_are_read_only_and_live() -> None:
    roster = Roster(1, A, {})
    addresses = roster.addresses
    with pytest.raises(TypeError):
        addresses[4] = "x:1"  # type: ignore[index]
    roster.follow(_nodes(1, 2, 3, 4), ())
    assert addresses[4] == "h4:7004"  # a holder of the view (a partition's leader hint) sees it


class Links:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []

    def add(self, peer: int, address: str) -> None:
        self.calls.append(("add", peer, address))

    def remove(self, peer: int) -> None:
        self.calls.append(("remove", peer, ""))


def test_every_change_reaches_the_subscribers_once_and_no_change_reaches_none() -> None:
    image = SimpleNamespace(nodes=_nodes(1, 2, 3))
    quorum = SimpleNamespace(replicas=(1, 2, 3))
    metadata = SimpleNamespace(image=image, driver=SimpleNamespace(membership=quorum))
    keeper = RosterKeeper(
        Roster(1, A, D),
        metadata,  # type: ignore[arg-type]
        lambda _peer: None,  # type: ignore[arg-type,return-value]
        rack="",
        single=False,
        spawn=None,  # type: ignore[arg-type]
    )
    links, seen = Links(), []
    keeper.subscribe(follow_links(links))  # type: ignore[arg-type]
    keeper.subscribe(seen.append)
    keeper.sync()
    assert seen == [] and links.calls == []
    image.nodes = _nodes(1, 2, 4)
    quorum.replicas = (1, 2)
    keeper.sync()
    assert links.calls == [("add", 4, "h4:8004"), ("remove", 3, "")]
    assert seen == [Change({4: "h4:8004"}, (3,))]
    assert [n.id for n in keeper.nodes()] == [1, 2, 4]
    assert keeper.member_addresses()[-1] == (4, "h4:7004", "h4:8004")
    assert not keeper.removed()
    image.nodes = _nodes(2, 4)
    keeper.sync()
    assert keeper.removed() and [n.id for n in keeper.nodes()] == [2, 4]


EXISTING_1 = Identity(1, "d", "existing")
QUORUMS = [
    ("the settings' members", EXISTING_1, [1, 2, 3], ((1, 2, 3), ())),
    ("beyond five voters, observers", EXISTING_1, list(range(1, 8)), ((1, 2, 3, 4, 5), (6, 7))),
    ("a joining node observes first", Identity(4, "d", JOINING), [1, 2, 3, 4], ((1, 2, 3), (4,))),
    (
        "a recorded quorum wins",
        Identity(4, "d", JOINING, voters=(1, 2), observers=(4,)),
        [1, 2, 3, 4],
        ((1, 2), (4,)),
    ),
]


@pytest.mark.parametrize(("name", "identity", "members", "quorum"), QUORUMS)
def test_the_metadata_quorum_a_node_starts_with_follows_its_identity(
    name: str, identity: Identity, members: list[int], quorum: tuple[tuple[int, ...], ...]
) -> None:
    assert identity.metadata_quorum(members) == quorum, name
