"""Three nodes in three containers: failover, rejoin, drain, a hung leader and a rolling restart.

One cluster for the module (nodes 1, 2, 3 on 127.0.0.21, .22, .23, host networking, data dirs
bind-mounted, flush=always); each test creates its own topic (one partition, three replicas)
and runs a steady acks=all producer through `Client("a,b,c")` while it breaks a node the way
an operator or the orchestrator would: `docker kill`, `docker stop`, `docker pause`. Then it
reads the partition back and checks that every acknowledged record is still at its offset.

TLS is on as in deploy/k8s (`nodes.py`): every client call goes over TLS to a client
listener, replication and forwarded calls over mutual TLS between the nodes' peer listeners,
with certificates from a throwaway CA; readiness is probed on the plaintext health listener.

Every wait is on a condition with a generous deadline; nothing asserts wall-clock speed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from replog.client import Client, PartitionInfo, RetryPolicy
from replog.errors import ReplogError
from tests.containers.conftest import free_ports
from tests.containers.nodes import Node, Pki, data_dir_for
from tests.integration.waiting import wait_until

HOSTS = {1: "127.0.0.21", 2: "127.0.0.22", 3: "127.0.0.23"}
DEADLINE_S = 90.0  # any one condition; a 2-core machine under load is slow, never this slow
PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)
ONCE = RetryPolicy(attempts_max=1)
PROBE_TIMEOUT_S = 5.0  # one probe of one node; a paused node never answers
PRODUCER_TIMEOUT_S = 5.0  # one Append; a hung leader makes it time out (outcome unknown)
REROUTE_DEADLINE_S = 45.0  # several Append timeouts plus an election
BATCH = 10  # records per Append
STEP = 200  # acknowledged records that show the producer is making progress


class ContainerCluster:
    """Nodes 1..3, each in its own container on its own loopback address."""

    def __init__(self, image: str, root: Path) -> None:
        self.pki = Pki(root / "tls")
        # Per node: client, peer and health ports.
        ports = {i: free_ports(host, 3) for i, host in HOSTS.items()}
        # id=client address/peer address: clients are sent to the first, peers dial the second.
        peers = ",".join(
            f"{i}={host}:{ports[i][0]}/{host}:{ports[i][1]}" for i, host in HOSTS.items()
        )
        self.nodes = {
            i: Node(
                image,
                host,
                ports[i][0],
                data_dir_for(root / f"node{i}"),
                self.pki,
                peer_port=ports[i][1],
                health_port=ports[i][2],
                env={"REPLOG_NODE_ID": str(i), "REPLOG_PEERS": peers},
                node_id=i,
            )
            for i, host in HOSTS.items()
        }

    def start(self) -> ContainerCluster:
        for node in self.nodes.values():
            node.start(wait=False)
        for node in self.nodes.values():
            node.wait_serving()
        return self

    def remove(self) -> None:
        for node in self.nodes.values():
            node.remove()

    def bootstrap(self, excluding: Iterable[int] = ()) -> str:
        return ",".join(n.address for i, n in self.nodes.items() if i not in set(excluding))

    def client(self, excluding: Iterable[int] = ()) -> Client:
        return Client(self.bootstrap(excluding), retry=PATIENT, tls=self.pki.client_tls)

    def logs(self) -> str:
        return "\n".join(f"--- node {i} ---\n{n.logs(3000)}" for i, n in self.nodes.items())


# -- observing the cluster ------------------------------------------------------------------


def probe_client(node: Node) -> Client:
    """A client of `node` alone (over TLS) that tries once, briefly."""
    return Client(node.address, timeout_s=PROBE_TIMEOUT_S, retry=ONCE, tls=node.client_tls)


def leader_seen_by(node: Node, topic: str) -> tuple[int | None, int] | None:
    """(leader id, epoch) of partition 0 as `node` itself knows it (GetMetadata is answered
    locally); None when the node does not answer."""
    with probe_client(node) as probe:
        try:
            meta = probe.refresh_metadata([topic])
        except ReplogError:
            return None
    part = meta.topics[0].partitions[0]
    return (part.leader_id if part.leader_id >= 0 else None), part.epoch


def wait_leader(
    cluster: ContainerCluster,
    topic: str,
    among: Iterable[int] = (1, 2, 3),
    other_than: int | None = None,
    what: str = "a leader is elected",
) -> tuple[int, int]:
    """The leader and epoch that every node of `among` agrees on (and is not `other_than`)."""
    voters = list(among)

    def agreed() -> tuple[int, int] | None:
        views = {leader_seen_by(cluster.nodes[i], topic) for i in voters}
        if len(views) != 1:
            return None
        (view,) = views
        if view is None or view[0] is None or view[0] == other_than or view[0] not in voters:
            return None
        return view[0], view[1]

    return wait_until(agreed, what, DEADLINE_S)


def describe(cluster: ContainerCluster, topic: str, among: Iterable[int]) -> PartitionInfo | None:
    """The leader's description of partition 0 (with every replica's progress), asked of the
    first node of `among` that answers; a follower forwards the call to its leader."""
    for i in among:
        with probe_client(cluster.nodes[i]) as probe:
            try:
                info = probe.describe_topic(topic)[0]
            except ReplogError:
                continue
        if info.replica_status:
            return info
    return None


def wait_caught_up(
    cluster: ContainerCluster, topic: str, node_id: int, since: float, among: Iterable[int]
) -> None:
    """Wait until the leader has seen `node_id` fetch since `since` (time.monotonic()) and
    its log end reach the leader's HW: the restarted replica rejoined and caught up."""
    asked = list(among)

    def caught_up() -> bool:
        info = describe(cluster, topic, asked)
        if info is None:
            return False
        status = {r.replica_id: r for r in info.replica_status}
        replica = status.get(node_id)
        if replica is None:
            return False
        fetched_since_ms = (time.monotonic() - since) * 1000
        fresh = 0 <= replica.last_fetch_ms_ago <= fetched_since_ms
        return fresh and replica.log_end_offset >= info.high_watermark

    wait_until(caught_up, f"node {node_id} rejoins and catches up with the leader", DEADLINE_S)


def read_all(client: Client, topic: str) -> dict[int, bytes]:
    """Every committed record of partition 0, by offset (the leader's HW bounds the read)."""
    out: dict[int, bytes] = {}
    offset = 0
    hw = client.list_offsets(topic, [0])[0].latest
    while offset < hw:
        fetched = client.fetch(topic, 0, offset, max_bytes=1 << 20)
        out.update(zip(fetched.records.offsets, fetched.records.values, strict=True))
        offset = fetched.next_offset
    return out


def assert_no_acked_record_lost(
    cluster: ContainerCluster, topic: str, acked: dict[int, bytes], excluding: Iterable[int] = ()
) -> None:
    with cluster.client(excluding) as client:
        records = read_all(client, topic)
    lost = {o: (v, records.get(o)) for o, v in acked.items() if records.get(o) != v}
    assert not lost, (
        f"{len(lost)} of {len(acked)} acknowledged records lost or changed "
        f"(offset: (acked, found)): {sorted(lost.items())[:10]}"
    )
    assert len(set(acked.values())) == len(acked), "one value acknowledged at two offsets"


def segments(data_dir: Path, topic: str) -> dict[str, bytes]:
    part = data_dir / topic / "partition_0"
    return {p.name: p.read_bytes() for p in sorted(part.glob("*.log"))}


# -- the producer ---------------------------------------------------------------------------


class SteadyProducer:
    """Appends small batches with acks=all from a thread through a client that knows every
    node; remembers every acknowledged (offset, value). Bounded in records and in time."""

    def __init__(
        self,
        cluster: ContainerCluster,
        topic: str,
        name: str = "p",
        excluding: Iterable[int] = (),
        records_max: int = 200_000,
        duration_s_max: float = 240.0,
    ) -> None:
        self.client = Client(
            cluster.bootstrap(excluding),
            timeout_s=PRODUCER_TIMEOUT_S,
            retry=PATIENT,
            tls=cluster.pki.client_tls,
        )
        self.topic = topic
        self.name = name  # in every value, so that two producers never write the same one
        self.records_max = records_max
        self.duration_s_max = duration_s_max
        self.errors: list[str] = []
        self.reused: list[int] = []  # acknowledged offsets handed out a second time
        self._acked: dict[int, bytes] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{topic}", daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + self.duration_s_max
        prefix = f"{self.topic}-{self.name}-".encode()
        n = 0
        while not self._stop.is_set() and n < self.records_max and time.monotonic() < deadline:
            batch = [prefix + b"%07d" % (n + i) for i in range(BATCH)]
            try:
                res = self.client.append(self.topic, 0, batch, acks="all")
            except ReplogError as err:  # outcome unknown or refused: the next try resends
                self.errors.append(err.reason)
                self._stop.wait(0.05)  # pacing only
                continue
            except Exception as err:  # a bug in the client: keep it for the assertion message
                self.errors.append(repr(err))
                self._stop.wait(0.05)
                continue
            with self._lock:
                for i, value in enumerate(batch):
                    if res.base_offset + i in self._acked:
                        self.reused.append(res.base_offset + i)
                    self._acked[res.base_offset + i] = value
            n += len(batch)

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(PRODUCER_TIMEOUT_S * 3)
        assert not self._thread.is_alive(), "the producer thread did not stop"
        self.client.close()

    @property
    def acked(self) -> dict[int, bytes]:
        with self._lock:
            return dict(self._acked)

    def count(self) -> int:
        with self._lock:
            return len(self._acked)

    def wait_acked(
        self, count: int, what: str = "records are acknowledged", deadline_s: float = DEADLINE_S
    ) -> None:
        try:
            wait_until(lambda: self.count() >= count, what, deadline_s)
        except AssertionError as err:
            raise AssertionError(
                f"{err}: {count} acked wanted, {self.count()} acked "
                f"({len(self.errors)} failed appends, the last: {self.errors[-5:]})"
            ) from None
        assert not self.reused, f"acknowledged offsets handed out twice: {self.reused[:10]}"


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerCluster]:
    c = ContainerCluster(image, tmp_path_factory.mktemp("cluster")).start()
    yield c
    c.remove()


@pytest.fixture
def healthy(cluster: ContainerCluster) -> ContainerCluster:
    """Every node running and serving, whatever an earlier (failed) test left behind."""
    for node in cluster.nodes.values():
        status = node.status()
        if status == "paused":
            node.unpause()
        elif status != "running":
            node.restart(wait=False)
    for node in cluster.nodes.values():
        node.wait_serving()
    return cluster


def create(cluster: ContainerCluster, topic: str) -> tuple[int, int]:
    with cluster.client() as client:
        client.create_topic(topic, 1, 3)
    return wait_leader(cluster, topic)


def others(node_id: int) -> list[int]:
    return [i for i in HOSTS if i != node_id]


# -- the scenarios --------------------------------------------------------------------------


def test_a_killed_leader_is_replaced_and_rejoins_caught_up_without_losing_acked_records(
    healthy: ContainerCluster,
) -> None:
    cluster, topic = healthy, "killed"
    old, old_epoch = create(cluster, topic)
    with SteadyProducer(cluster, topic) as producer:
        producer.wait_acked(STEP)
        cluster.nodes[old].kill()
        at_kill = producer.count()
        _, new_epoch = wait_leader(
            cluster, topic, among=others(old), other_than=old, what="the survivors elect"
        )
        assert new_epoch > old_epoch
        producer.wait_acked(at_kill + STEP, "acks continue under the new leader")
        assert_no_acked_record_lost(cluster, topic, producer.acked, excluding=[old])

        restarted = time.monotonic()
        cluster.nodes[old].restart()  # the same container on the same data dir
        wait_caught_up(cluster, topic, old, restarted, among=others(old))
        producer.wait_acked(producer.count() + STEP, "acks continue after the rejoin")
    assert_no_acked_record_lost(cluster, topic, producer.acked)


def test_a_stopped_node_drains_and_exits_cleanly_while_the_cluster_keeps_going(
    healthy: ContainerCluster,
) -> None:
    cluster, topic = healthy, "stopped"
    leader, _ = create(cluster, topic)
    node = cluster.nodes[leader]
    with SteadyProducer(cluster, topic) as producer:
        producer.wait_acked(STEP)
        assert node.stop() == 0, node.logs()  # SIGTERM: drained, flushed, exit code 0
        assert node.events()[-1]["event"] == "server.stopped", node.logs()
        at_stop = producer.count()
        wait_leader(cluster, topic, among=others(leader), other_than=leader)
        producer.wait_acked(at_stop + STEP, "acks continue without the stopped node")

        restarted = time.monotonic()
        node.restart()
        wait_caught_up(cluster, topic, leader, restarted, among=others(leader))
        producer.wait_acked(producer.count() + STEP, "acks continue after the restart")
    assert_no_acked_record_lost(cluster, topic, producer.acked)


def test_a_paused_leader_is_replaced_then_steps_down_and_catches_up_when_resumed(
    healthy: ContainerCluster,
) -> None:
    cluster, topic = healthy, "paused"
    old, old_epoch = create(cluster, topic)
    hung = cluster.nodes[old]
    with SteadyProducer(cluster, topic) as producer:
        producer.wait_acked(STEP)
        hung.pause()  # alive but frozen: its connections stay open and never answer
        try:
            _, new_epoch = wait_leader(
                cluster, topic, among=others(old), other_than=old, what="the others elect"
            )
            assert new_epoch > old_epoch
            # A client that only knows the others gets acks while the old leader hangs.
            with SteadyProducer(cluster, topic, name="q", excluding=[old]) as survivor:
                survivor.wait_acked(STEP, "acks continue while the old leader hangs")
        finally:
            hung.unpause()
        resumed = time.monotonic()

        def stepped_down() -> tuple[int | None, int] | None:
            view = leader_seen_by(hung, topic)
            if view is None or view[0] in (None, old) or view[1] < new_epoch:
                return None
            return view

        leader, epoch = wait_until(stepped_down, "the resumed old leader steps down", DEADLINE_S)
        assert epoch > old_epoch and leader != old
        wait_caught_up(cluster, topic, old, resumed, among=others(old))
        producer.wait_acked(producer.count() + STEP, "acks continue after the resume")
    acked = {**producer.acked, **survivor.acked}
    assert len(acked) == len(producer.acked) + len(survivor.acked), "an offset acked twice"
    assert_no_acked_record_lost(cluster, topic, acked)


def test_a_rolling_restart_under_load_loses_nothing_and_leaves_identical_replicas(
    healthy: ContainerCluster,
) -> None:
    cluster, topic = healthy, "rolled"
    create(cluster, topic)
    with SteadyProducer(cluster, topic) as producer:
        for i, node in cluster.nodes.items():
            producer.wait_acked(producer.count() + STEP, f"acks continue before node {i} stops")
            assert node.stop() == 0, node.logs()
            restarted = time.monotonic()
            node.restart()
            wait_caught_up(cluster, topic, i, restarted, among=others(i))
        producer.wait_acked(producer.count() + STEP, "acks continue after the rolling restart")
    assert_no_acked_record_lost(cluster, topic, producer.acked)

    with cluster.client() as client:
        client.append(topic, 0, [b"quiet"], acks="all")

    def in_sync() -> bool:
        info = describe(cluster, topic, HOSTS)
        return (
            info is not None
            and len(info.replica_status) == len(HOSTS)
            and all(
                r.log_end_offset == info.log_end_offset == info.high_watermark
                for r in info.replica_status
            )
        )

    wait_until(in_sync, "every replica holds the leader's whole log", DEADLINE_S)
    files = [segments(node.data_dir, topic) for node in cluster.nodes.values()]
    assert files[0] and files[0] == files[1] == files[2], "replicas are byte-identical"


def test_a_producer_moves_from_a_hung_leader_to_the_new_one(healthy: ContainerCluster) -> None:
    cluster, topic = healthy, "hung"
    old, _ = create(cluster, topic)
    hung = cluster.nodes[old]
    with SteadyProducer(cluster, topic) as producer:
        producer.wait_acked(STEP)
        hung.pause()
        try:
            wait_leader(cluster, topic, among=others(old), other_than=old, what="the others elect")
            producer.wait_acked(
                producer.count() + STEP,
                "the producer gets acks from the new leader while the old one hangs",
                REROUTE_DEADLINE_S,
            )
        finally:
            hung.unpause()
