"""Three `replog serve` processes on 127.0.0.1: replication, failover, and no acknowledged loss.

Every wait is on a condition with a generous deadline; nothing depends on wall-clock speed.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import ReplogError
from tests.integration.faults import ProxyMesh
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.slow

PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)


def leader_of(client: Client, topic: str, partition: int = 0) -> int:
    """The partition's leader, as its replicas describe it. (Not from GetMetadata: a node
    that holds no replica of the partition answers it from its leader directory, a hint
    that may lag a leader change, and the node the client asks may be such a node, e.g.
    after a metadata call moved it on.)"""

    def known() -> int | None:
        try:
            described = client.describe_topic(topic)
        except ReplogError:
            return None
        leader = described[partition].leader_id if partition < len(described) else None
        return leader if leader else None

    return wait_until(known, "a leader is known")


def read_all(client: Client, topic: str, partition: int = 0) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    offset = 0
    hw = client.list_offsets(topic, [partition])[0].latest
    while offset < hw:  # `hw` may come from a follower: a lower bound of the leader's
        fetched = client.fetch(topic, partition, offset, max_bytes=1 << 20)
        offsets = fetched.records.offsets
        assert all(o < fetched.high_watermark for o in offsets), "nothing at or above the HW"
        out += list(zip(offsets, fetched.records.values, strict=True))
        offset = fetched.next_offset
    return out


class SteadyProducer:
    """Appends batches with acks=all in a thread; remembers every acknowledged offset."""

    def __init__(self, client: Client, topic: str) -> None:
        self.client = client
        self.topic = topic
        self.acked: dict[int, bytes] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    RECORDS_MAX = 1_000_000  # bounded in count and in time; a test stops it long before
    RUN_S_MAX = 600.0

    def _run(self) -> None:
        n = 0
        deadline = time.monotonic() + self.RUN_S_MAX
        while not self._stop.is_set() and n < self.RECORDS_MAX and time.monotonic() < deadline:
            batch = [b"v%06d" % (n + i) for i in range(20)]
            try:
                res = self.client.append(self.topic, 0, batch, acks="all")
            except ReplogError as err:
                self.errors.append(err.reason)
                continue
            for i, value in enumerate(batch):
                assert res.base_offset + i not in self.acked, "an acked offset was reused"
                self.acked[res.base_offset + i] = value
            n += len(batch)

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def wait_acked(self, count: int) -> None:
        def acked() -> bool | None:
            if len(self.acked) >= count:
                return True
            assert self._thread.is_alive(), f"the producer stopped at its bounds ({count} wanted)"
            return None

        wait_until(
            acked,
            f"{count} records acked (have {len(self.acked)}; last errors {self.errors[-5:]})",
        )


def scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


def segments(node_dir: Path, topic: str) -> dict[str, bytes]:
    part = node_dir / topic / "partition_0"
    return {p.name: p.read_bytes() for p in sorted(part.glob("*.log"))}


def test_a_killed_leader_is_replaced_and_no_acknowledged_record_is_lost(
    cluster: DevCluster,
) -> None:
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic("orders", 1, 3)
        first = leader_of(client, "orders")
        with SteadyProducer(client, "orders") as producer:
            producer.wait_acked(500)
            cluster.members[first].kill()
            acked_before = len(producer.acked)
            producer.wait_acked(acked_before + 500)  # a new leader took over
        second = leader_of(client, "orders")
        assert second != first
        records = dict(read_all(client, "orders"))
        for offset, value in producer.acked.items():
            assert records.get(offset) == value, f"acked offset {offset} lost or changed"

        cluster.members[first].start()  # the old leader rejoins, truncates and catches up
        leo = client.list_offsets("orders")[0].log_end_offset
        dirs = {i: m.data_dir for i, m in cluster.members.items()}

        def caught_up() -> bool:
            sizes = {i: sum(map(len, segments(d, "orders").values())) for i, d in dirs.items()}
            return len(set(sizes.values())) == 1 and all(s > 0 for s in sizes.values())

        client.append("orders", 0, [b"sync"], acks="all")
        wait_until(lambda: caught_up() or None, "every replica holds the same bytes")
        assert leo > 0
        files = [segments(d, "orders") for d in dirs.values()]
        assert files[0] == files[1] == files[2], "replicas are byte-identical"

        def in_sync() -> bool | None:
            info = client.describe_topic("orders")[0]
            lags = [r.lag_records for r in info.replica_status]
            return (len(lags) == 3 and not any(lags)) or None

        wait_until(in_sync, "describe shows every replica caught up")
        metrics = scrape(cluster.members[second].metrics_address).splitlines()
        assert any(
            line.startswith("replog_replica_role{")
            and 'topic="orders"' in line
            and 'role="leader"' in line
            and line.endswith(" 1.0")
            for line in metrics
        ), "the new leader exports its role"
        assert any(line.startswith("replog_elections_total{") for line in metrics)
        assert any(line.startswith("replog_follower_lag_records{") for line in metrics)


def test_writes_continue_without_a_follower_and_stop_without_a_majority(
    cluster: DevCluster,
) -> None:
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic("t", 1, 3)
        leader = leader_of(client, "t")
        followers = [i for i in cluster.members if i != leader]
        client.append("t", 0, [b"all three"], acks="all")
        cluster.members[followers[0]].kill()
        client.append("t", 0, [b"two of three"], acks="all")
        cluster.members[followers[1]].kill()
        hasty = Client(
            cluster.members[leader].address,
            timeout_s=5,
            retry=RetryPolicy(attempts_max=1),
        )
        with pytest.raises(ReplogError) as err:
            hasty.append("t", 0, [b"no majority"], acks="all")
        hasty.close()
        assert err.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "FAILED_PRECONDITION")
        for i in followers:
            cluster.members[i].start()
        client.append("t", 0, [b"majority back"], acks="all")
        values = [v for _, v in read_all(client, "t")]
        assert values[:2] == [b"all three", b"two of three"]
        assert values[-1] == b"majority back"


def test_a_rolling_restart_under_load_loses_nothing(cluster: DevCluster) -> None:
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic("roll", 1, 3)
        leader_of(client, "roll")
        with SteadyProducer(client, "roll") as producer:
            for node in cluster.members.values():
                producer.wait_acked(len(producer.acked) + 200)
                assert node.stop() == 0, node.log_tail()  # SIGTERM: graceful
                node.start()
            producer.wait_acked(len(producer.acked) + 200)
        records = dict(read_all(client, "roll"))
        missing = [o for o in producer.acked if records.get(o) != producer.acked[o]]
        assert not missing, f"{len(missing)} acknowledged records lost"


def test_a_cut_off_leader_steps_down_and_the_majority_moves_on(tmp_path: Path) -> None:
    mesh = ProxyMesh()
    cluster = DevCluster(
        tmp_path / "cluster", 3, extra_args=["--flush", "always"], peer_address=mesh.route
    )
    cluster.start()
    try:
        with Client(cluster.bootstrap, retry=PATIENT) as client:
            client.create_topic("p", 1, 3)
            old = leader_of(client, "p")
            client.append("p", 0, [b"before the cut"], acks="all")
            mesh.isolate(old)  # alive, but it can reach no peer and no peer can reach it
            majority = ",".join(a for i, a in cluster.addresses.items() if i != old)
            with Client(majority, retry=PATIENT) as survivors:
                new = wait_until(
                    lambda: ((leader := leader_of(survivors, "p")) != old and leader) or None,
                    "the majority elects a new leader",
                )
                survivors.append("p", 0, [b"during the cut"], acks="all")
            with Client(cluster.members[old].address, retry=RetryPolicy(attempts_max=1)) as alone:

                def stepped_down() -> bool | None:
                    meta = alone.refresh_metadata(["p"])
                    return meta.topics[0].partitions[0].leader_id != old or None

                wait_until(stepped_down, "the cut-off leader steps down")
                with pytest.raises(ReplogError):
                    alone.append("p", 0, [b"refused"], acks="all")
            mesh.heal()
            client.append("p", 0, [b"after the heal"], acks="all")
            leo = client.list_offsets("p")[0].log_end_offset
            dirs = [m.data_dir for m in cluster.members.values()]
            wait_until(
                lambda: len({sum(map(len, segments(d, "p").values())) for d in dirs}) == 1 or None,
                "the old leader catches up",
            )
            values = [v for _, v in read_all(client, "p")]
            assert values == [b"before the cut", b"during the cut", b"after the heal"]
            assert new != old and leo > 0
    finally:
        cluster.kill_all()
        mesh.close()
