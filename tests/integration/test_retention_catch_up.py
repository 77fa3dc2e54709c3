"""A follower whose next record was deleted by the leader's retention still catches up.

Three `replog serve` processes with tiny segments and a small retention limit: a follower
that was down while the leader's retention went past its log end, or whose volume was
wiped, is sent to the leader's log start and replicates from there. (Before, the leader
failed to read what the follower asked for and stepped down, over and over, leaving the
partition without a leader.)
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import ReplogError
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.slow

PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)
RETENTION = [
    "--segment-bytes-max", "4096",
    "--retention-bytes", "16384",
    "--retention-check-interval-ms", "100",
]  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(tmp_path / "cluster", 3, extra_args=["--flush", "never", *RETENTION])
    c.start()
    yield c
    c.kill_all()


def describe(client: Client, topic: str) -> tuple[int, int, int, dict[int, int]]:
    """(leader, epoch, HW, replica -> LEO) as the leader reports them."""

    def known() -> tuple[int, int, int, dict[int, int]] | None:
        try:
            (p,) = client.describe_topic(topic)
        except ReplogError:
            return None
        if p.leader_id is None:
            return None
        leos = {r.replica_id: r.log_end_offset for r in p.replica_status}
        return p.leader_id, p.epoch, p.high_watermark, leos

    return wait_until(known, "the partition has a leader")


def batch(i: int) -> list[bytes]:
    return [b"r%05d-%d-%s" % (i, k, b"x" * 90) for k in range(50)]


def produce(client: Client, topic: str, batches: int) -> None:
    for i in range(batches):
        client.append(topic, 0, batch(i), acks="all")


@pytest.mark.parametrize("wiped", [False, True], ids=["down", "wiped"])
def test_a_follower_behind_the_leaders_log_start_catches_up_from_it(
    cluster: DevCluster, wiped: bool
) -> None:
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic("t", 1, 3)
        produce(client, "t", 5)
        leader, _, _, _ = describe(client, "t")
        behind = next(i for i in cluster.members if i != leader)
        cluster.members[behind].kill()
        if wiped:
            shutil.rmtree(cluster.members[behind].data_dir / "t")
        behind_leo = 0 if wiped else 5 * 50
        produce(client, "t", 60)  # ~660 KiB: far past retention_bytes

        def retention_passed_it() -> bool | None:
            (offsets,) = client.list_offsets("t")
            return offsets.earliest > behind_leo or None

        wait_until(retention_passed_it, "the leader's retention deleted the follower's next record")
        cluster.members[behind].start()

        def caught_up() -> bool | None:
            _, _, hw, leos = describe(client, "t")
            return leos.get(behind, -1) >= hw > 0 or None

        wait_until(caught_up, "the follower caught up from the log start")
        (offsets,) = client.list_offsets("t")
        assert offsets.latest == offsets.log_end_offset  # everything committed
        values: list[bytes] = []
        offset = offsets.earliest
        while offset < offsets.latest:
            fetched = client.fetch("t", 0, offset, max_bytes=1 << 20)
            values += fetched.records.values
            offset = fetched.next_offset
        # what retention kept is a suffix of what was produced: no gap, no duplicate
        produced = [v for i in (*range(5), *range(60)) for v in batch(i)]
        assert values and values == produced[-len(values) :]
    # the follower's log starts where the leader's did when it asked, nothing below it
    part = cluster.members[behind].data_dir / "t" / "partition_0"
    first_segment = min(int(p.stem) for p in part.glob("*.log"))
    assert first_segment > behind_leo
