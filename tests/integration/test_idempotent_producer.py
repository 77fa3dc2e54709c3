"""Idempotent producers against three real nodes under a leader kill/pause loop.

Several producers append acks=all batches of unique values through `Client.append`, which
retries timeouts, lost connections and leader changes with the same sequence numbers.
Short client deadlines make many attempts time out after the leader appended them, so
retries of batches that did land are common. At the end every partition is read back:
no value is there twice, and every acknowledged value is there at its acknowledged offset.
A fenced (older-epoch) named producer is refused throughout.

`REPLOG_IDEMPOTENT_S` sets the nemesis duration (default 60 s); loops are bounded in
count and time, and only processes this test started are signalled, by pid.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter

import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import ProducerFencedError, ReplogError
from tests.integration.test_cluster import PATIENT
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.slow

TOPIC = "exactly-once"
PARTITIONS = 2
DURATION_S = float(os.environ.get("REPLOG_IDEMPOTENT_S", "60"))
DEADLINES_S = (0.05, 0.2, 1.0)  # per producer: the short ones time out after appending
BATCHES_MAX = 20_000  # per producer


class Producer(threading.Thread):
    def __init__(self, bootstrap: str, index: int, deadline_s: float, stop: threading.Event):
        super().__init__(daemon=True)
        retry = RetryPolicy(attempts_max=1000, backoff_max_ms=300, deadline_ms=20_000)
        self.client = Client(bootstrap, timeout_s=deadline_s, retry=retry)
        self.index, self.stop_event = index, stop
        self.acked: dict[bytes, tuple[int, int]] = {}  # value -> (partition, offset)
        self.failed = 0  # appends that raised in the end: outcome unknown

    def run(self) -> None:
        n = 0
        while not self.stop_event.is_set() and n < BATCHES_MAX:
            partition = n % PARTITIONS
            values = [b"p%d-%d-%d" % (self.index, n, j) for j in range(5)]
            n += 1
            try:
                res = self.client.append(TOPIC, partition, values, acks="all")
            except ReplogError:
                self.failed += 1
                continue
            assert res.last_offset - res.base_offset == len(values) - 1, res
            for i, v in enumerate(values):
                self.acked[v] = (partition, res.base_offset + i)
        self.client.close()


def leader_of(client: Client, partition: int) -> int | None:
    try:
        meta = client.refresh_metadata([TOPIC])
    except ReplogError:
        return None
    leader = meta.topics[0].partitions[partition].leader_id
    return leader if leader > 0 else None


def read_partition(client: Client, partition: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    offset = 0
    hw = client.list_offsets(TOPIC, [partition])[0].latest
    while offset < hw:
        fetched = client.fetch(TOPIC, partition, offset, max_bytes=1 << 20)
        out += list(zip(fetched.records.offsets, fetched.records.values, strict=True))
        offset = fetched.next_offset
    return out


def test_retrying_producers_through_leader_kills_write_every_batch_exactly_once(
    cluster: DevCluster,
) -> None:
    rng = random.Random(13)
    stop = threading.Event()
    faults: list[str] = []
    with Client(cluster.bootstrap, retry=PATIENT) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 3)
        for p in range(PARTITIONS):
            wait_until(lambda p=p: leader_of(admin, p), f"partition {p} has a leader")
        # A named producer, then a newer instance of it: the older one is fenced.
        old = Client(cluster.bootstrap, retry=PATIENT, producer_name="fenced-app")
        old.append(TOPIC, 0, [b"old-instance"])
        new = Client(cluster.bootstrap, retry=PATIENT, producer_name="fenced-app")
        new.append(TOPIC, 0, [b"new-instance"])
        assert new.producer_identity().producer_epoch == old.producer_identity().producer_epoch + 1
        with pytest.raises(ProducerFencedError):
            old.append(TOPIC, 0, [b"zombie"])
        producers = [Producer(cluster.bootstrap, i, d, stop) for i, d in enumerate(DEADLINES_S * 2)]
        for t in producers:
            t.start()
        try:
            end = time.monotonic() + DURATION_S
            while time.monotonic() < end and len(faults) < 200:
                leader = wait_until(
                    lambda: leader_of(admin, rng.randrange(PARTITIONS)), "a leader is known"
                )
                node = cluster.members[leader]
                kind = rng.choice(["kill leader", "pause leader"])
                faults.append(f"{kind} {node.node_id}")
                if kind == "kill leader":
                    node.kill()
                    time.sleep(rng.uniform(0.5, 2.0))
                    node.start()
                else:
                    node.signal(signal.SIGSTOP)
                    time.sleep(rng.uniform(1.0, 3.0))
                    node.signal(signal.SIGCONT)
                time.sleep(rng.uniform(0.5, 2.0))  # producers make progress in between
        finally:
            stop.set()
            for t in producers:
                t.join(120)
        assert not any(t.is_alive() for t in producers), "a producer did not stop"

        records: dict[int, list[tuple[int, bytes]]] = {}
        for p in range(PARTITIONS):
            wait_until(lambda p=p: leader_of(admin, p), f"partition {p} has a leader")
            records[p] = read_partition(admin, p)
        counts = Counter(v for rows in records.values() for _, v in rows)
        twice = [v for v, c in counts.items() if c > 1]
        assert not twice, f"{len(twice)} values written more than once, e.g. {twice[:5]}"
        where = {v: (p, o) for p, rows in records.items() for o, v in rows}
        acked = {v: at for t in producers for v, at in t.acked.items()}
        lost = [v for v in acked if v not in where]
        assert not lost, f"{len(lost)} acknowledged values lost, e.g. {lost[:5]}"
        moved = [v for v, at in acked.items() if where[v] != at]
        assert not moved, f"acknowledged offsets changed, e.g. {moved[:5]}"
        assert b"zombie" not in counts and counts[b"new-instance"] == 1
        assert len(acked) > 1000, f"too little progress to mean anything: {len(acked)}"
        print(
            f"faults={len(faults)} acked={len(acked)} "
            f"failed_calls={sum(t.failed for t in producers)} records={sum(counts.values())}"
        )
