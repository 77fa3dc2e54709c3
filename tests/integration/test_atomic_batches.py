"""A batch is atomic: readers see all of its records or none, also across failovers.

Followers fetch at most `--fetch-bytes-max` at a time, far less than one batch here, so
without care a follower would hold half a batch, the HW could stop inside it, and a new
leader elected with half a batch would commit that half (its producer never got an ack,
and the other half is gone). Leaders therefore end fetch answers above the HW only at batch
boundaries. This test appends batches larger than the fetch limit through a leader-kill
loop and then reads every committed record: each batch is there whole (once or, when a
retry after an unknown outcome wrote it again, whole each time) or not at all.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import ReplogError
from tests.integration.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)
FETCH_BYTES = 16 * 1024
BATCH = 64  # records of 512 bytes: a batch is twice the fetch limit
KILLS = 3


def record(batch: int, index: int) -> bytes:
    return (b"%08d-%04d-" % (batch, index)).ljust(512, b".")


class Producer:
    """Appends numbered batches (acks=all) until stopped; bounded in count and time."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.acked = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + 300
        for batch in range(100_000):
            if self._stop.is_set() or time.monotonic() > deadline:
                return
            try:
                self.client.append("b", 0, [record(batch, i) for i in range(BATCH)], acks="all")
                self.acked += 1
            except ReplogError:
                continue  # outcome unknown: the batch may be in the log, whole

    def wait_acked(self, count: int) -> None:
        wait_until(lambda: self.acked >= count or None, f"{count} batches acked")

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)


def leader_of(client: Client) -> int:
    def known() -> int | None:
        leader = client.refresh_metadata(["b"]).topics[0].partitions[0].leader_id
        return leader if leader and leader > 0 else None

    return wait_until(known, "a leader is known")


def test_batches_larger_than_a_fetch_are_never_half_committed_across_failovers(
    tmp_path: Path,
) -> None:
    cluster = DevCluster(
        tmp_path / "cluster", 3, extra_args=["--fetch-bytes-max", str(FETCH_BYTES)]
    )
    cluster.start()
    try:
        with Client(cluster.bootstrap, retry=PATIENT) as client:
            client.create_topic("b", 1, 3)
            with Producer(client) as producer:
                for _ in range(KILLS):
                    producer.wait_acked(producer.acked + 20)
                    old = leader_of(client)
                    cluster.members[old].kill()
                    wait_until(lambda o=old: leader_of(client) != o or None, "a new leader")
                    cluster.members[old].start()
                producer.wait_acked(producer.acked + 20)
            seen: dict[int, list[int]] = defaultdict(list)
            offset = 0
            latest = client.list_offsets("b")[0].latest
            while offset < latest:
                fetched = client.fetch("b", 0, offset, max_bytes=1 << 20)
                for value in fetched.records.values:
                    batch, index = int(value[:8]), int(value[9:13])
                    seen[batch].append(index)
                offset = fetched.next_offset
            assert len(seen) >= producer.acked > 0
            half = {
                b: len(indexes)
                for b, indexes in seen.items()
                if indexes != list(range(BATCH)) * (len(indexes) // BATCH) or len(indexes) % BATCH
            }
            assert not half, (
                f"batches not whole (batch: records seen): {dict(list(half.items())[:10])}"
            )
    finally:
        cluster.kill_all()
