"""A node on an empty data directory: bootstrap or replacement (server/cluster/identity.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from replog.errors import CorruptDataError
from replog.replication.driver import load_quorum_state
from replog.server.cluster import identity as ids
from replog.server.cluster.identity import (
    BOOTSTRAP,
    EXISTING,
    JOINING,
    REPLACEMENT,
    Answer,
    Identity,
    decide,
)

EMPTY = Answer(deciding=True, metadata_epoch=0, metadata_end_offset=0)
BOOTSTRAPPED = Answer(deciding=False, metadata_epoch=0, metadata_end_offset=0)
# a running cluster: its metadata leader wrote the starting quorum at its first election
RUNNING = Answer(False, 3, 120, membership_changed=True, voters=(1, 2, 3))
# one whose log holds no quorum yet (the moment after its first election)
UNRECORDED = Answer(deciding=False, metadata_epoch=3, metadata_end_offset=120)


def test_a_peer_that_has_seen_metadata_makes_an_empty_node_a_replacement() -> None:
    assert decide(1, (1, 2, 3), {2: RUNNING}) == REPLACEMENT
    assert decide(1, (1, 2, 3), {2: EMPTY, 3: RUNNING}) == REPLACEMENT
    only_end = Answer(False, 0, 1, membership_changed=True, voters=(1, 2, 3))
    assert decide(1, (1, 2, 3), {2: only_end}) == REPLACEMENT
    other_replacement = Answer(False, 0, 0, replacement=True)
    assert decide(1, (1, 2, 3), {2: other_replacement, 3: RUNNING}) == REPLACEMENT


def test_an_existing_cluster_whose_log_holds_no_quorum_yet_is_asked_again() -> None:
    """The cluster exists (a peer has metadata, or is a replacement) but no peer that
    answered holds a membership record: the node neither bootstraps nor takes its peer
    list as the quorum (the gap this closes: a node added whose peer list differs from the
    voters could be elected without committed records); it asks again, and the metadata
    leader records the quorum at its first election."""
    assert decide(1, (1, 2, 3), {2: UNRECORDED}) is None
    assert decide(4, (1, 2, 3, 4), {1: UNRECORDED, 2: EMPTY, 3: EMPTY}) is None
    only_end = Answer(deciding=False, metadata_epoch=0, metadata_end_offset=1)
    assert decide(1, (1, 2, 3), {2: only_end, 3: EMPTY}) is None
    assert decide(1, (1, 2, 3), {2: Answer(False, 0, 0, replacement=True), 3: EMPTY}) is None
    # one peer that holds the record is enough
    assert decide(1, (1, 2, 3), {2: UNRECORDED, 3: RUNNING}) == REPLACEMENT


def test_a_node_the_members_do_not_list_joins_once_the_log_changed_the_quorum() -> None:
    """A node being added (`replog node add`, a StatefulSet scaled up, a rolling-restart
    growth) starts as a non-voter: "joining", whatever its peer list says."""
    listed = Answer(False, 3, 120, members=(1, 2, 3), membership_changed=True, voters=(1, 2, 3))
    assert decide(4, (1, 2, 3, 4), {1: listed, 2: RUNNING}) == JOINING
    assert decide(3, (1, 2, 3), {1: listed}) == REPLACEMENT  # a member's lost disk
    # one peer already lists it (its AddNode applied there): still not a voter of the log
    knows = Answer(False, 3, 121, members=(1, 2, 3, 4), membership_changed=True, voters=(1, 2, 3))
    assert decide(4, (1, 2, 3, 4), {1: listed, 2: knows}) == JOINING
    assert ids.starting_quorum(4, {1: listed, 2: knows}) == ((1, 2, 3), (4,))
    assert Identity(4, "d", JOINING).catching_up and Identity(4, "d", JOINING).floors(7)


def test_once_the_log_changed_the_quorum_an_empty_node_starts_from_the_freshest_peers() -> None:
    """Not from its peer list: a node being added is an observer of the quorum the most
    advanced peer reports, a lost disk of a voter a voter of it, whatever their settings."""
    older = Answer(False, 3, 100, membership_changed=True, voters=(1, 2, 3), observers=(4,))
    newer = Answer(False, 3, 130, membership_changed=True, voters=(2, 3, 4))
    answers = {1: older, 2: newer}
    assert ids.starting_quorum(5, answers) == ((2, 3, 4), (5,))
    assert decide(5, (1, 2, 3, 4, 5), answers) == JOINING
    assert ids.starting_quorum(4, answers) == ((2, 3, 4), ())
    assert decide(4, (1, 2, 3, 4), answers) == REPLACEMENT  # a voter's lost disk
    # a voter removed dead and added again before it left the quorum starts as a voter,
    # so it campaigns (pre-votes) and hears from its leader
    assert decide(3, (1, 2), {1: newer}) == REPLACEMENT
    # a peer whose log holds no record does not say the quorum: ask again
    static = Answer(False, 3, 120, voters=(1, 2, 3))
    assert ids.starting_quorum(4, {1: static}) is None
    assert decide(4, (1, 2, 3, 4), {1: static}) is None


def test_the_starting_quorum_is_kept_in_the_identity_file(tmp_path: Path) -> None:
    identity = Identity(5, "d" * 32, JOINING, None, (2, 3, 4), (5,))
    ids.save(tmp_path, identity)
    assert ids.load(tmp_path) == identity
    (tmp_path / ids.IDENTITY_FILE).write_text(
        '{"node_id": 5, "directory_id": "d", "start": "joining", "caught_up_at": null, '
        '"voters": [2, 2], "observers": [5]}'
    )
    with pytest.raises(CorruptDataError):
        ids.load(tmp_path)


def test_a_majority_of_empty_voters_bootstraps_and_less_waits() -> None:
    assert decide(1, (1, 2, 3), {2: EMPTY}) == BOOTSTRAP
    assert decide(1, (1, 2, 3), {2: BOOTSTRAPPED, 3: EMPTY}) == BOOTSTRAP
    assert decide(1, (1, 2, 3), {}) is None  # nobody answers: nothing is decided
    assert decide(1, (1, 2, 3, 4, 5), {2: EMPTY}) is None  # 2 of 5 voters
    assert decide(1, (1, 2, 3, 4, 5), {2: EMPTY, 5: EMPTY}) == BOOTSTRAP
    # an observer of the metadata partition does not count toward the voters' majority
    assert decide(6, (1, 2, 3, 4, 5), {1: EMPTY, 2: EMPTY}) is None
    assert decide(6, (1, 2, 3, 4, 5), {1: EMPTY, 2: EMPTY, 3: EMPTY}) == BOOTSTRAP
    assert decide(1, (1,), {}) == BOOTSTRAP  # a cluster of one


def test_establish_asks_until_it_can_decide_and_writes_its_identity_first(
    tmp_path: Path,
) -> None:
    answers: list[dict[int, Answer | None]] = [
        {2: None, 3: None},  # nobody up yet
        {2: None, 3: None},
        {2: RUNNING, 3: None},  # node 2 is up and has metadata: this disk was lost
    ]
    asked: list[int] = []

    async def ask(peer: int) -> Answer | None:
        asked.append(peer)
        round_ = answers[min(len(asked) - 1, 2 * len(answers) - 1) // 2]
        return round_[peer]

    data_dir = tmp_path / "data"
    identity = asyncio.run(ids.establish(data_dir, 1, (1, 2, 3), (1, 2, 3), ask, interval_s=0))
    assert identity.start == REPLACEMENT and identity.catching_up
    assert ids.load(data_dir) == identity
    assert asked == [2, 3, 2, 3, 2, 3]
    # once written, the identity is read back and nobody is asked
    again = asyncio.run(ids.establish(data_dir, 1, (1, 2, 3), (1, 2, 3), ask, interval_s=0))
    assert again == identity and len(asked) == 6


def test_a_directory_with_data_and_no_identity_file_is_adopted_without_asking(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "__cluster" / "partition_0").mkdir(parents=True)

    async def ask(peer: int) -> Answer | None:
        raise AssertionError("asked")

    identity = asyncio.run(ids.establish(data_dir, 2, (1, 2, 3), (1, 2, 3), ask))
    assert identity.start == EXISTING and not identity.catching_up
    assert not identity.floors(0)


def test_an_empty_volume_with_lost_and_found_is_empty(tmp_path: Path) -> None:
    (tmp_path / "lost+found").mkdir()
    assert ids.is_empty(tmp_path)
    (tmp_path / "orders").mkdir()
    assert not ids.is_empty(tmp_path)


def test_a_replacement_floors_replicas_of_topics_older_than_its_catch_up(
    tmp_path: Path,
) -> None:
    identity = Identity(1, "d", REPLACEMENT)
    assert identity.floors(5) and identity.floors(10**6)  # not caught up: every replica
    done = ids.caught_up(tmp_path, identity, 100)
    assert done.caught_up_at == 100 and ids.load(tmp_path) == done
    assert done.floors(99) and not done.floors(100) and not done.catching_up
    assert not Identity(1, "d", BOOTSTRAP).floors(0)


def test_a_floored_replica_votes_for_nobody_until_it_has_caught_up(tmp_path: Path) -> None:
    replica_dir = tmp_path / "orders" / "partition_0"
    assert ids.floor_replica(replica_dir)
    state = load_quorum_state(replica_dir)
    assert state.vote_floor == ids.UNREACHABLE_FLOOR.vote_floor > 0
    assert state.epoch == 0 and state.voted_for is None
    assert not ids.floor_replica(replica_dir)  # a replica with a quorum state keeps it


def test_an_identity_of_another_node_or_a_damaged_file_stops_the_node(tmp_path: Path) -> None:
    ids.save(tmp_path, Identity(3, "d", BOOTSTRAP))

    async def ask(peer: int) -> Answer | None:
        return None

    with pytest.raises(CorruptDataError, match="belongs to node 3"):
        asyncio.run(ids.establish(tmp_path, 1, (1, 2, 3), (1, 2, 3), ask))
    (tmp_path / ids.IDENTITY_FILE).write_text('{"node_id": 1, "start": "maybe"}')
    with pytest.raises(CorruptDataError):
        ids.load(tmp_path)


def test_a_quorum_out_of_shape_in_an_answer_counts_as_unsaid() -> None:
    """A peer's reported quorum is kept in the identity file: one that could not be loaded
    again (no voter, a duplicate, an id out of range, too many) is dropped on receipt."""
    assert ids._is_quorum((1, 2, 3), (4,))
    assert not ids._is_quorum((), (4,))
    assert not ids._is_quorum((1, 1), ())
    assert not ids._is_quorum((1, 2), (2,))
    assert not ids._is_quorum((0, 2), ())
    assert not ids._is_quorum((1, 2**32), ())
    assert not ids._is_quorum(tuple(range(1, ids.NODES_MAX + 2)), ())


def test_a_node_whose_peers_found_with_other_voters_waits_and_never_bootstraps() -> None:
    """Found by the auto-join test: node 4 (peers 1-4) started while nodes 1-3 (peers 1-3)
    had no metadata yet counted them as empty founders and bootstrapped as a voter of
    (1, 2, 3, 4), a quorum their log never names (and two sets that differ by two nodes
    or more can elect two leaders in one epoch). Peers reporting other starting voters are
    no founders of its cluster: it asks again, and joins once the cluster exists."""
    three = Answer(False, 0, 0, voters=(1, 2, 3))
    assert decide(4, (1, 2, 3, 4), {1: three, 2: three, 3: three}) is None
    assert ids.disagreeing((1, 2, 3, 4), {1: three, 2: three}) == [1, 2]
    deciding_three = Answer(True, 0, 0, voters=(1, 2, 3))
    assert decide(4, (1, 2, 3, 4), {1: deciding_three, 2: deciding_three}) is None
    # the same voters (any order) found the cluster together, as before
    assert decide(1, (1, 2, 3), {2: Answer(True, 0, 0, voters=(3, 2, 1))}) == BOOTSTRAP
    assert decide(1, (1, 2, 3), {2: three, 3: three}) == BOOTSTRAP
    # a peer that does not say (an earlier release) counts as before
    assert decide(1, (1, 2, 3), {2: EMPTY}) == BOOTSTRAP
    # once the cluster exists, the log's quorum decides: node 4 joins
    recorded = Answer(False, 1, 2, membership_changed=True, voters=(1, 2, 3))
    assert decide(4, (1, 2, 3, 4), {1: recorded, 2: three}) == JOINING


def test_a_founder_that_decides_late_bootstraps_and_a_lost_disk_stays_a_replacement(
    tmp_path: Path,
) -> None:
    """Nodes 2 and 3 founded the cluster counting node 1 (deciding, directory "d1"), and
    elected and created topics before node 1 asked again. Node 1 with that same directory
    is a founder (it never voted): "bootstrap", no vote floors (a replacement's floor on a
    partition of two replicas would let no leader be elected). A node 1 with another
    directory (a lost disk since) is a replacement as before."""
    founders = ((1, "d1"), (2, "d2"), (3, "d3"))
    founded = Answer(False, 3, 120, membership_changed=True, voters=(1, 2, 3), founders=founders)
    assert decide(1, (1, 2, 3), {2: founded}, "d1") == BOOTSTRAP
    assert decide(1, (1, 2, 3), {2: founded}, "other") == REPLACEMENT
    assert decide(1, (1, 2, 3), {2: founded}) == REPLACEMENT  # no id: as before
    assert decide(4, (1, 2, 3, 4), {2: founded}, "d1") == JOINING  # not node 4's entry

    asked: list[int] = []

    async def ask(peer: int) -> Answer | None:
        asked.append(peer)
        return founded if peer == 2 else None

    data_dir = tmp_path / "late"
    late = asyncio.run(
        ids.establish(data_dir, 1, (1, 2, 3), (1, 2, 3), ask, interval_s=0, directory_id="d1")
    )
    assert late.start == BOOTSTRAP and not late.catching_up and not late.floors(0)
    assert late.founders == founders and late.directory_id == "d1"
    assert (late.voters, late.observers) == ((1, 2, 3), ())  # the log's quorum
    assert ids.load(data_dir) == late


def test_a_bootstrap_records_whom_it_counted_with_their_directory_ids(tmp_path: Path) -> None:
    empty_2 = Answer(True, 0, 0, directory_id="d2")
    old_release = Answer(True, 0, 0)  # no directory id while deciding: not recorded
    answers = {2: empty_2, 3: old_release}
    assert decide(1, (1, 2, 3), answers, "d1") == BOOTSTRAP
    assert ids.counted_founders(1, "d1", (1, 2, 3), answers) == ((1, "d1"), (2, "d2"))

    async def ask(peer: int) -> Answer | None:
        return answers[peer]

    data_dir = tmp_path / "founder"
    made = asyncio.run(
        ids.establish(data_dir, 1, (1, 2, 3), (1, 2, 3), ask, interval_s=0, directory_id="d1")
    )
    assert made.founders == ((1, "d1"), (2, "d2"))
    assert ids.load(data_dir) == made  # kept, and answered in Identify after restarts


def test_a_single_node_with_id_0_reads_its_identity_back(tmp_path: Path) -> None:
    made = asyncio.run(ids.establish(tmp_path / "one", 0, (0,), (), ids._nobody))
    assert made.start == BOOTSTRAP and ids.load(tmp_path / "one") == made
