"""Cluster members in the metadata (add_node / remove_node) and the metadata quorum's steps
(`server/membership.decide`)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replog.errors import (
    InvalidArgumentError,
    LimitExceededError,
    NodeExistsError,
    NodeNotEmptyError,
    UnknownNodeError,
)
from replog.server.cluster.membership import Change, Transfer, Wait, decide
from replog.server.meta import command_codec, metadata
from replog.server.meta.metadata import (
    NODES_MAX,
    AddNode,
    MetadataImage,
    NodeAddress,
    RemoveNode,
    UnknownCommandError,
)
from replog.server.meta.metadata_log import replica_config_members

BOOT = {i: NodeAddress(f"127.0.0.1:{7000 + i}") for i in (1, 2, 3)}


def _image() -> MetadataImage:
    return MetadataImage(BOOT)


def _commit(image: MetadataImage, command: metadata.Command) -> None:
    """As the cluster does: encode, decode, apply."""
    image.apply(image.applied_offset, command_codec.decode(command_codec.encode(command)))


def test_members_start_from_the_bootstrap_and_follow_add_and_remove_in_log_order() -> None:
    image = _image()
    _commit(image, image.add_node(4, "127.0.0.1:7004", "127.0.0.1:8004"))
    assert image.nodes[4] == NodeAddress("127.0.0.1:7004", "127.0.0.1:8004")
    assert image.nodes[4].dial == "127.0.0.1:8004" and image.nodes[1].dial == "127.0.0.1:7001"
    _commit(image, image.remove_node(2))
    assert sorted(image.nodes) == [1, 3, 4]
    # a replay of the same log on a restarted node builds the same members
    again = _image()
    for command in (AddNode(4, "127.0.0.1:7004", "127.0.0.1:8004"), RemoveNode(2)):
        _commit(again, command)
    assert again.nodes == image.nodes


def test_adding_a_member_again_at_its_address_is_accepted_and_elsewhere_refused() -> None:
    image = _image()
    assert image.add_node(1, "127.0.0.1:7001") == AddNode(1, "127.0.0.1:7001")
    with pytest.raises(NodeExistsError) as err:
        image.add_node(1, "127.0.0.1:9999")
    assert err.value.reason == "NODE_ALREADY_EXISTS" and err.value.code == "ALREADY_EXISTS"


@pytest.mark.parametrize(
    ("node_id", "address", "peer_address"),
    [
        (0, "h:1", ""),
        (2**31, "h:1", ""),
        (4, "", ""),
        (4, "nohost", ""),
        (4, "h:65536", ""),
        (4, "h:-1", ""),
        (4, ":80", ""),
        (4, "h:1", "bad"),
        (4, "h" * 300 + ":1", ""),
        (4, "h:000000001", ""),
    ],
)
def test_an_add_out_of_range_is_refused_before_it_is_proposed(
    node_id: int, address: str, peer_address: str
) -> None:
    with pytest.raises(InvalidArgumentError):
        _image().add_node(node_id, address, peer_address)


def test_an_address_another_member_uses_is_refused() -> None:
    image = _image()
    for address, peer in (("127.0.0.1:7001", ""), ("h:1", "127.0.0.1:7002")):
        with pytest.raises(InvalidArgumentError, match="its own addresses"):
            image.add_node(4, address, peer)
    _commit(image, image.add_node(4, "h:1", "h:2"))
    with pytest.raises(InvalidArgumentError):
        image.add_node(5, "h:2")  # node 4's peer address


def test_the_number_of_members_is_bounded() -> None:
    image = MetadataImage({i: NodeAddress(f"h:{i}") for i in range(1, NODES_MAX + 1)})
    with pytest.raises(LimitExceededError):
        image.add_node(NODES_MAX + 1, "elsewhere:1")


def test_a_node_that_hosts_replicas_or_is_unknown_or_alone_cannot_be_removed() -> None:
    image = _image()
    _commit(image, image.create_topic("t", 1, 2, [1, 2]))
    hosts = image.topics["t"].assignment[0]
    with pytest.raises(NodeNotEmptyError) as err:
        image.remove_node(hosts[0])
    assert err.value.code == "FAILED_PRECONDITION" and err.value.metadata["replicas"] == "1"
    with pytest.raises(UnknownNodeError) as unknown:
        image.remove_node(9)
    assert unknown.value.code == "NOT_FOUND" and unknown.value.reason == "UNKNOWN_NODE"
    # a reassignment's target counts as hosting
    _commit(image, image.reassign_partition("t", 0, (hosts[0], 3), sorted(image.nodes)))
    with pytest.raises(NodeNotEmptyError):
        image.remove_node(3)
    alone = MetadataImage({1: NodeAddress("h:1")})
    with pytest.raises(InvalidArgumentError):
        alone.remove_node(1)


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "add_node", "version": 1, "node_id": 0, "address": "h:1", "peer_address": ""},
        {"kind": "add_node", "version": 1, "node_id": 4, "address": "x", "peer_address": ""},
        {"kind": "add_node", "version": 1, "node_id": "4", "address": "h:1", "peer_address": ""},
        {"kind": "add_node", "version": 1, "node_id": 4, "address": "h:1"},
        {"kind": "remove_node", "version": 1, "node_id": True},
        {"kind": "remove_node", "version": 1},
    ],
)
def test_a_malformed_member_command_stops_the_node_rather_than_being_skipped(
    body: dict[str, object],
) -> None:
    with pytest.raises(UnknownCommandError):
        command_codec.decode(json.dumps(body).encode())


# -- decide -----------------------------------------------------------------------------------


def test_a_new_member_joins_as_an_observer_then_votes_once_caught_up() -> None:
    members = [1, 2, 3, 4]
    step = decide(1, (1, 2, 3), (), members, frozenset({2, 3}))
    assert step == Change((1, 2, 3), (4,), "observers [] -> [4]")
    assert isinstance(decide(1, (1, 2, 3), (4,), members, frozenset({2, 3})), Wait)
    step = decide(1, (1, 2, 3), (4,), members, frozenset({2, 3, 4}))
    assert isinstance(step, Change) and step.voters == (1, 2, 3, 4) and step.observers == ()
    assert decide(1, (1, 2, 3, 4), (), members, frozenset()) is None


def test_the_starting_quorum_is_recorded_in_the_log_before_anything_else() -> None:
    """A log with no membership record (a new cluster's first election, or a cluster of an
    earlier release): the quorum each node took from its peer list is written first, even
    when the members call for nothing else, so that it is the log's from then on."""
    for members in ([1, 2, 3], [1, 2, 3, 4], [1, 2]):
        step = decide(1, (1, 2, 3), (), members, frozenset(), recorded=False)
        assert step == Change((1, 2, 3), (), "record the starting quorum in the log")
    assert decide(1, (1, 2, 3), (), [1, 2, 3], frozenset(), recorded=True) is None


def test_members_beyond_five_stay_observers_and_a_removed_voter_makes_room() -> None:
    six = [1, 2, 3, 4, 5, 6]
    assert decide(1, (1, 2, 3, 4, 5), (6,), six, frozenset({6})) is None
    # node 2 removed: 6 is promoted first (the quorum never has fewer voters than the
    # target's five), then node 2 stops voting (kept as nothing)
    members, ready = [1, 3, 4, 5, 6], frozenset({3, 4, 5, 6})
    step = decide(1, (1, 2, 3, 4, 5), (6,), members, ready)
    assert isinstance(step, Change) and step.voters == (1, 2, 3, 4, 5, 6) and step.observers == ()
    step = decide(1, (1, 2, 3, 4, 5, 6), (), members, ready)
    assert isinstance(step, Change) and step.voters == (1, 3, 4, 5, 6) and step.observers == ()


def test_a_voter_leaves_only_while_the_voters_left_keep_a_caught_up_majority() -> None:
    """Found by the simulator (tests/simulation/test_controller_schedules.py): node 3 dead,
    nodes 2 and 3 removed, the keeper took node 2 out first and left voters (1, 3), which
    can never commit or elect again; and voters (1, 2, 3) with node 1 replaced by node 4
    became (2, 3) while node 4 caught up, lost for good when one of them lost its disk."""
    # the dead (lagging) voter leaves first; then the other
    assert decide(1, (1, 2, 3), (), [1], frozenset({2})) == Change(
        (1, 2), (), "voter 3 stops voting"
    )
    assert decide(1, (1, 2), (), [1], frozenset({2})) == Change((1,), (), "voter 2 stops voting")
    # removing node 2 would leave (1, 3) with node 3 lagging: it waits
    assert isinstance(decide(1, (1, 2, 3), (), [1, 3], frozenset({2})), Wait)
    # node 2 replaced by node 4: node 2 leaves only once node 4 votes
    assert isinstance(decide(1, (1, 2, 3), (4,), [1, 3, 4], frozenset({2, 3})), Wait)
    step = decide(1, (1, 2, 3), (4,), [1, 3, 4], frozenset({2, 3, 4}))
    assert isinstance(step, Change) and step.voters == (1, 2, 3, 4) and step.observers == ()
    step = decide(1, (1, 2, 3, 4), (), [1, 3, 4], frozenset({2, 4}))  # (1 and 4 of 3 ready)
    assert isinstance(step, Change) and step.voters == (1, 3, 4)


def test_a_removed_observer_is_dropped_and_a_leaving_leader_hands_over_first() -> None:
    assert decide(1, (1, 2, 3), (7,), [1, 2, 3], frozenset()) == Change(
        (1, 2, 3), (), "observers [7] -> []"
    )
    # the leader (1) itself was removed: it hands over to a caught-up target voter
    assert decide(1, (1, 2, 3), (), [2, 3], frozenset({3})) == Transfer(3)
    assert isinstance(decide(1, (1, 2, 3), (), [2, 3], frozenset()), Wait)


@settings(max_examples=300, deadline=None)
@given(
    voters=st.sets(st.integers(1, 9), min_size=1, max_size=6),
    observers=st.sets(st.integers(1, 9), max_size=4),
    members=st.sets(st.integers(1, 9), min_size=1, max_size=8),
)
def test_every_step_changes_at_most_one_voter_and_the_steps_reach_the_target(
    voters: set[int], observers: set[int], members: set[int]
) -> None:
    """From any membership, following `decide` (with every replica caught up, and a
    hand-over when asked) reaches the target in a bounded number of steps, each of which
    adds or removes at most one voter and never leaves the partition without a voter."""
    current_v = tuple(sorted(voters))
    current_o = tuple(sorted(observers - voters))
    me = current_v[0]
    target_v, target_o = replica_config_members(sorted(members))
    for _ in range(40):
        step = decide(me, current_v, current_o, members, frozenset(range(1, 10)))
        if step is None:
            break
        assert not isinstance(step, Wait), step
        if isinstance(step, Transfer):
            assert step.target in current_v and step.target in target_v and step.target != me
            me = step.target
            continue
        assert len(set(step.voters) ^ set(current_v)) <= 1, (current_v, step)
        assert step.voters and not set(step.voters) & set(step.observers)
        current_v, current_o = step.voters, step.observers
    else:
        pytest.fail(f"no fixed point from {voters}, {observers} to {members}")
    assert set(current_v) == set(target_v) and set(current_o) == set(target_o)


def test_a_node_whose_applied_metadata_no_longer_lists_it_knows_it_was_removed() -> None:
    from types import SimpleNamespace

    from replog.server.cluster.membership import Members
    from replog.server.cluster.roster import Roster
    from replog.server.cluster.roster_keeper import RosterKeeper

    def keeper(me: int, *, single: bool) -> RosterKeeper:
        roster = Roster(me, {me: f"127.0.0.1:700{me}"}, {})
        return RosterKeeper(roster, metadata, None, rack="", single=single, spawn=None)  # type: ignore[arg-type]

    image = _image()
    metadata = SimpleNamespace(image=image)
    peers = SimpleNamespace(node_id=3)
    members = Members(metadata, peers, keeper(3, single=False), timeout_s=1.0)  # type: ignore[arg-type]
    assert not members.removed()
    _commit(image, image.remove_node(3))
    assert members.removed()
    _commit(image, image.add_node(3, "127.0.0.1:7003"))  # added again: a member again
    assert not members.removed()
    alone = Members(metadata, SimpleNamespace(node_id=9), keeper(9, single=True), timeout_s=1.0)  # type: ignore[arg-type]
    assert not alone.removed()  # a cluster of one is never "removed"
