"""Three real nodes under a leader-kill/pause loop while clients with very short deadlines
make the servers cancel most Append RPCs half way (issue 9's fault loop, in miniature).

Checked: no acknowledged record is lost, no committed read ever changes (every read is kept
and compared with every later one), `latest` asked right after an acks=all ack always
includes it, the replicas end byte-identical, and after every healed
fault each follower fetches again and reaches the HW within seconds (a follower whose state
ran ahead of its log used to stop fetching until it was restarted).

`REPLOG_NEMESIS_S` sets the duration (default 150 s); every loop is bounded in count and
time, and only processes this test started are signalled, by pid.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import ReplogError
from tests.integration.test_cluster import PATIENT
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.slow

TOPIC = "nemesis"
PARTITIONS = 3
DURATION_S = float(os.environ.get("REPLOG_NEMESIS_S", "150"))
DEADLINES_S = (0.005, 0.02, 0.1, 1.0)  # per producer: most of the first ones are cancelled
NO_RETRY = RetryPolicy(attempts_max=1)
STALL_S = 30.0  # after a heal, every follower is fetching and at the HW well within this


class Producer(threading.Thread):
    """acks=all appends with one short deadline, no retries; keeps what was acknowledged."""

    def __init__(self, bootstrap: str, index: int, deadline_s: float, stop: threading.Event):
        super().__init__(daemon=True)
        self.client = Client(bootstrap, timeout_s=deadline_s, retry=NO_RETRY)
        self.index, self.stop_event = index, stop
        self.acked: dict[tuple[int, int], bytes] = {}
        self.failures = 0

    def run(self) -> None:
        n = 0
        rng = random.Random(self.index)
        while not self.stop_event.is_set() and n < 2_000_000:
            partition = rng.randrange(PARTITIONS)
            batch = [b"p%d-%d" % (self.index, n + i) for i in range(rng.randint(1, 20))]
            n += len(batch)
            try:
                res = self.client.append(TOPIC, partition, batch, acks="all")
            except ReplogError:
                self.failures += 1
                time.sleep(0.005)
                continue
            for i, value in enumerate(batch):
                self.acked[(partition, res.base_offset + i)] = value
        self.client.close()


class AckThenLatest(threading.Thread):
    """Appends with acks=all and asks ListOffsets right after each ack: `latest` must
    include the acknowledged batch, across leader changes (issue 16)."""

    def __init__(self, bootstrap: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.client = Client(bootstrap, timeout_s=5, retry=PATIENT)
        self.stop_event = stop
        self.checks = 0
        self.behind: list[str] = []

    def run(self) -> None:
        n = 0
        while not self.stop_event.is_set() and n < 1_000_000:
            partition = n % PARTITIONS
            n += 1
            try:
                res = self.client.append(TOPIC, partition, [b"l-%d" % n], acks="all")
                latest = self.client.list_offsets(TOPIC, [partition])[0].latest
            except ReplogError:
                continue
            self.checks += 1
            if latest <= res.last_offset:
                self.behind.append(f"{partition}: acked {res.last_offset}, latest {latest}")
        self.client.close()


class Reader(threading.Thread):
    """Reads every partition's committed records again and again; any offset read twice
    with two values is a committed read that changed."""

    def __init__(self, bootstrap: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.client = Client(bootstrap, timeout_s=5, retry=PATIENT)
        self.stop_event = stop
        self.seen: dict[tuple[int, int], bytes] = {}
        self.changed: list[str] = []
        self.passes = 0

    def read_partition(self, partition: int) -> None:
        offset = 0
        for _ in range(100_000):
            try:
                fetched = self.client.fetch(TOPIC, partition, offset, max_bytes=1 << 20)
            except ReplogError:
                return  # a fault: read again on the next pass
            offsets = fetched.records.offsets
            if not offsets:
                return
            for o, value in zip(offsets, fetched.records.values, strict=True):
                before = self.seen.setdefault((partition, o), value)
                if before != value:
                    self.changed.append(f"{partition}/{o}: {before!r} then {value!r}")
            offset = fetched.next_offset

    def run(self) -> None:
        while not self.stop_event.is_set() and self.passes < 100_000:
            for p in range(PARTITIONS):
                self.read_partition(p)
            self.passes += 1
            self.stop_event.wait(1.0)
        self.client.close()


def followers_keep_up(client: Client) -> bool | None:
    """Every partition has a leader whose followers all fetched within the last 2 s and
    hold everything below the HW."""
    try:
        infos = client.describe_topic(TOPIC)
    except ReplogError:
        return None
    for info in infos:
        status = info.replica_status
        if info.leader_id is None or len(status) != 3:
            return None
        for r in status:
            if r.replica_id == info.leader_id:
                continue
            if not 0 <= r.last_fetch_ms_ago <= 2000 or r.log_end_offset < info.high_watermark:
                return None
    return True


def leader_of(client: Client, partition: int) -> int | None:
    try:
        meta = client.refresh_metadata([TOPIC])
    except ReplogError:
        return None
    leader = meta.topics[0].partitions[partition].leader_id
    return leader if leader > 0 else None


def test_cancelled_appends_under_a_kill_and_pause_loop_lose_nothing_and_never_change_a_read(
    cluster: DevCluster,
) -> None:
    rng = random.Random(9)
    stop = threading.Event()
    faults: list[str] = []
    with Client(cluster.bootstrap, retry=PATIENT) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 3)
        for p in range(PARTITIONS):
            wait_until(lambda p=p: leader_of(admin, p), f"partition {p} has a leader")
        producers = [Producer(cluster.bootstrap, i, d, stop) for i, d in enumerate(DEADLINES_S * 2)]
        reader = Reader(cluster.bootstrap, stop)
        latest = AckThenLatest(cluster.bootstrap, stop)
        for t in [*producers, reader, latest]:
            t.start()
        try:
            end = time.monotonic() + DURATION_S
            while time.monotonic() < end and len(faults) < 1000:
                leader = wait_until(
                    lambda: leader_of(admin, rng.randrange(PARTITIONS)), "a leader is known"
                )
                node = cluster.members[leader]
                kind = rng.choice(["kill leader", "pause leader", "pause follower"])
                if kind == "pause follower":
                    node = cluster.members[rng.choice([i for i in cluster.members if i != leader])]
                faults.append(f"{kind} {node.node_id}")
                if kind == "kill leader":
                    node.kill()
                    time.sleep(rng.uniform(0.5, 2.0))
                    node.start()
                else:
                    node.signal(signal.SIGSTOP)
                    time.sleep(rng.uniform(1.0, 4.0))
                    node.signal(signal.SIGCONT)
                # healed: every follower fetches again and reaches the HW (no stall)
                wait_until(
                    lambda: followers_keep_up(admin),
                    f"followers keep up after '{faults[-1]}'",
                    STALL_S,
                )
        finally:
            stop.set()
            for t in [*producers, reader, latest]:
                t.join(60)

        # quiet: one more acks=all record per partition, then every replica converges
        for p in range(PARTITIONS):
            admin.append(TOPIC, p, [b"sync-%d" % p], acks="all")
        dirs = [m.data_dir for m in cluster.members.values()]

        def identical() -> bool | None:
            for p in range(PARTITIONS):
                files = [segments_of(d, p) for d in dirs]
                if not (files[0] == files[1] == files[2]):
                    return None
            return True

        wait_until(identical, "the replicas are byte-identical", 90)
        final = Reader(cluster.bootstrap, stop)
        final.seen = dict(reader.seen)
        for p in range(PARTITIONS):
            final.read_partition(p)
        acked = {k: v for prod in producers for k, v in prod.acked.items()}
        lost = [k for k, v in acked.items() if final.seen.get(k) != v]
        failures = sum(prod.failures for prod in producers)

    assert not reader.changed and not final.changed, (reader.changed + final.changed)[:10]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}"
    assert not latest.behind, f"'latest' below an ack: {latest.behind[:5]}"
    assert latest.checks > 0
    assert len(faults) >= 3, faults
    assert acked, "nothing was acknowledged"
    assert failures > 0, "no append was cancelled: the deadlines were too long to test this"
    print(
        f"\n{len(faults)} faults, {len(acked)} acked, {failures} failed or cancelled appends, "
        f"{reader.passes} read passes, {latest.checks} ListOffsets-after-ack checks"
    )


def segments_of(node_dir: Path, partition: int) -> dict[str, bytes]:
    part = node_dir / TOPIC / f"partition_{partition}"
    return {p.name: p.read_bytes() for p in sorted(part.glob("*.log"))}
