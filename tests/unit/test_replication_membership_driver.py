"""Membership changes through the driver: real logs, the persisted history, the hook."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from replog.errors import (
    CorruptDataError,
    MembershipChangeBusyError,
    MembershipChangeRefusedError,
    NotLeaderError,
)
from replog.replication import Acks, Membership, MembershipEntry, ReplicaConfig, Role
from replog.replication.driver import (
    EPOCH_HISTORY_FILE,
    MEMBERSHIP_HISTORY_FILE,
    ReplicaDriver,
    decode_membership,
    encode_membership,
    load_membership_history,
)
from replog.replication.membership import MembershipHistory
from replog.replication.producers import decode_header
from replog.storage import PartitionLog
from tests.unit.test_replication_driver import DEADLINE_S, STORAGE, LocalNetwork, wait_for
from tests.unit.test_replication_driver import Cluster as DriverCluster

VOTERS = (1, 2, 3)


class Cluster(DriverCluster):
    """Voters 1-3; node 4 starts as a replica that joins later (itself an observer)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.seen: dict[int, list[Membership]] = {}

    async def start(self, node: int) -> None:
        log = PartitionLog(self.root / f"node{node}", "t", 0, STORAGE)
        config = ReplicaConfig(
            node, VOTERS, (4,) if node == 4 else (), election_timeout_ms_min=300,
            election_timeout_ms_max=600, fetch_wait_ms_max=100, fetch_retry_ms=200,
            begin_epoch_retry_ms=100,
        )  # fmt: skip
        seen = self.seen.setdefault(node, [])
        driver = ReplicaDriver(
            log, config, self.network.transport(node), rng=random.Random(node), tick_ms=20,
            on_membership=seen.append,
        )  # fmt: skip
        self.logs[node], self.drivers[node] = log, driver
        self.network.attach(node, driver)
        await driver.start()

    async def serving_leader(self) -> ReplicaDriver:
        def serving() -> ReplicaDriver | None:
            return next((d for d in self.drivers.values() if d.serving), None)

        driver = await wait_for(serving)
        assert isinstance(driver, ReplicaDriver)
        return driver


def run(test: object, root: Path) -> None:
    async def main() -> None:
        cluster = Cluster(root)
        try:
            for node in (*VOTERS, 4):
                await cluster.start(node)
            await test(cluster)  # type: ignore[operator]
        finally:
            await cluster.close()

    asyncio.run(main())


def test_an_observer_joins_is_promoted_and_keeps_its_membership_across_a_restart(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.serving_leader()
        me = leader.config.replica_id
        added = await leader.change_membership(VOTERS, (4,), DEADLINE_S)
        assert leader.log.high_watermark > added >= 0
        await wait_for(lambda: cluster.drivers[4].log.log_end_offset == leader.log.log_end_offset)
        # caught up: wait until the leader has seen it fetch at its HW, then promote
        await wait_for(lambda: leader.replica.followers()[4][0] >= leader.log.high_watermark)
        promoted = await leader.change_membership((*VOTERS, 4), (), DEADLINE_S)
        assert promoted > added
        four = Membership((*VOTERS, 4), ())
        # every replica told its server (the hook runs once the outputs are performed)
        await wait_for(lambda: all(seen[-1:] == [four] for seen in cluster.seen.values()))
        assert cluster.seen[me] == [Membership(VOTERS, (4,)), four]
        # the records are in the log as control records, and the history is on disk
        value = leader.log.read_uncommitted(promoted, 1 << 16, end_offset=promoted + 1)
        assert decode_membership(value[-len(encode_membership((*VOTERS, 4), ())) :]) == four
        history = load_membership_history(cluster.drivers[4].log.directory)
        assert [e.offset for e in history] == [added, promoted]
        # restarted, node 4 is a voter by its history (its config says observer)
        await cluster.crash(4)
        await cluster.start(4)
        assert cluster.drivers[4].membership == four
        assert cluster.drivers[4].replica.is_voter
        await leader.append([b"x"], Acks.ALL, DEADLINE_S)

    run(scenario, tmp_path)


def test_refusals_raise_typed_errors_and_a_follower_names_the_leader(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.serving_leader()
        me = leader.config.replica_id
        others = tuple(v for v in VOTERS if v != me)
        with pytest.raises(MembershipChangeRefusedError) as refused:
            await leader.change_membership(others, (), DEADLINE_S)
        assert refused.value.refusal == "LEADER_REMOVAL"
        with pytest.raises(MembershipChangeBusyError) as busy:
            await leader.change_membership((*VOTERS, 4), (), DEADLINE_S)
        assert busy.value.refusal == "NOT_CAUGHT_UP" and busy.value.retriable
        follower = cluster.drivers[others[0]]
        with pytest.raises(NotLeaderError) as not_leader:
            await follower.change_membership(VOTERS, (4,), DEADLINE_S)
        assert not_leader.value.leader_id == me
        assert leader.membership == Membership(VOTERS, ())

    run(scenario, tmp_path)


def test_a_cancelled_caller_leaves_the_change_to_the_owner_and_a_retry_finds_it(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.serving_leader()
        call = asyncio.ensure_future(leader.change_membership(VOTERS, (4,), DEADLINE_S))
        await asyncio.sleep(0)  # submitted
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        target = Membership(VOTERS, (4,))
        await wait_for(lambda: leader.membership == target and leader.idle)  # performed
        # asking again appends nothing: it answers with the same record once committed
        end = leader.log.log_end_offset
        offset = await leader.change_membership(VOTERS, (4,), DEADLINE_S)
        assert offset == end - 1 and leader.log.log_end_offset == end
        assert leader.role is Role.LEADER

    run(scenario, tmp_path)


def test_a_directory_written_before_membership_changes_opens_with_the_static_membership(
    tmp_path: Path,
) -> None:
    # what the current code writes: quorum-state and epoch-history, no membership file
    directory = tmp_path / "node1"
    log = PartitionLog(directory, "t", 0, STORAGE)
    log.append([b"a", b"b"])
    (directory / EPOCH_HISTORY_FILE).write_text(json.dumps([[1, 0]]))
    assert load_membership_history(directory) == []
    driver = ReplicaDriver(log, ReplicaConfig(1, VOTERS), LocalNetwork().transport(1))
    assert driver.membership == Membership(VOTERS, ())
    log.close()


def test_the_persisted_history_reads_back_and_a_damaged_one_is_refused(tmp_path: Path) -> None:
    entries = [
        MembershipEntry(3, Membership((1, 2, 3), (4,))),
        MembershipEntry(9, Membership((1, 2, 3, 4), ())),
    ]
    path = tmp_path / MEMBERSHIP_HISTORY_FILE
    path.write_text(json.dumps([[3, [1, 2, 3], [4]], [9, [1, 2, 3, 4], []]]))
    assert load_membership_history(tmp_path) == entries
    assert MembershipHistory(Membership(VOTERS), entries).current == entries[-1].membership
    for bad in (
        [[9, [1, 2], []], [3, [1, 2, 3], []]],  # offsets out of order
        [[3, [], [4]]],  # no voter
        [[3, [1, 2], [2]]],  # in both sets
        [[-1, [1], []]],  # out of range
        {"offset": 3},
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(CorruptDataError):
            load_membership_history(tmp_path)


def test_a_membership_record_is_told_apart_from_epoch_markers_and_batch_headers() -> None:
    value = encode_membership((1, 2, 3), (4,))
    assert value[:2] == b"\x00\x02"
    assert decode_header(value) is None
    assert decode_membership(value) == Membership((1, 2, 3), (4,))
    from replog.replication.driver import encode_marker

    assert decode_membership(encode_marker(3, 1, (1, 2, 3))) is None
