"""replog as a `Target` of bench/peers.py: one `replog serve` (acks=leader) or a local
3-node cluster (`replog.devcluster`, topics replicated 3 times, acks=all).

Nodes run with `--flush interval` (fsync every second, the peers' own default durability:
Redis `appendfsync everysec`, NATS's periodic sync) and no metrics listener (as
bench/e2e.py). One partition per stream; a record's address is its offset.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from peer_common import BATCH_RECORDS, Deadline, batch_values, timed_loop_ms

from replog import __version__
from replog.client import Client
from replog.devcluster import DevCluster, NodeProcess, free_port
from replog.errors import ReplogError

NODE_ARGS = ["--flush", "interval", "--metrics-listen", "", "--log-level", "WARNING"]


class ReplogTarget:
    system = "replog"

    def __init__(self, work: Path, nodes: int) -> None:
        assert nodes in (1, 3), "1 node, or 3 replicated"
        self.nodes = nodes
        self.acks = "leader" if nodes == 1 else "all"
        self.values = batch_values()
        self.single: NodeProcess | None = None
        self.cluster: DevCluster | None = None
        if nodes == 1:  # a plain `replog serve` (no peers), its output in work/node1.log
            address = f"127.0.0.1:{free_port()}"
            args = [
                "--listen", address, "--data-dir", str(work / "data"),
                "--ready-file", str(work / "node1.ready"), *NODE_ARGS,
            ]  # fmt: skip
            self.single = NodeProcess(1, address, work / "data", work, args).start()
        else:
            self.cluster = DevCluster(work, nodes, extra_args=NODE_ARGS).start()
            address = self.cluster.bootstrap
        self.client = Client(address)

    @staticmethod
    def version() -> str:
        return __version__

    def pids(self) -> list[int]:
        nodes = [self.single] if self.single is not None else self.cluster_nodes()
        return [n.proc.pid for n in nodes if n.proc is not None]

    def cluster_nodes(self) -> list[NodeProcess]:
        assert self.cluster is not None
        return list(self.cluster.members.values())

    def prepare(self, stream: str, deadline: Deadline) -> None:
        self.client.create_topic(stream, 1, self.nodes)
        while True:  # until the partition has a leader that takes an append with our acks
            try:
                self.client.append(stream, 0, [b"warm"], acks=self.acks)
                return
            except ReplogError:
                deadline.check()
                time.sleep(0.05)

    def produce(self, stream: str, records: int, deadline: Deadline) -> float:
        """`Client.append` of batches of 1000, one at a time."""
        started = time.perf_counter()
        for _ in range(records // BATCH_RECORDS):
            self.client.append(stream, 0, self.values, acks=self.acks)
            deadline.check()
        return time.perf_counter() - started

    def produce_with_producer(self, stream: str, records: int, deadline: Deadline) -> float:
        """`Producer.send` of each record (default linger, batch and in-flight limits)."""
        producer = self.client.producer(stream, acks=self.acks, partitions=1)
        try:
            started = time.perf_counter()
            last = None
            for i in range(records):
                last = producer.send(self.values[i % BATCH_RECORDS])
                if i % BATCH_RECORDS == 0:
                    deadline.check()
            assert last is not None
            last.result(timeout=deadline.remaining())  # the last batch is acknowledged
            elapsed = time.perf_counter() - started
        finally:
            producer.close()
        return elapsed

    def consume(self, stream: str, records: int, deadline: Deadline) -> float:
        """`Consumer.batches()` from offset 0: StreamFrom + decoded offsets and values."""
        consumer = self.client.consumer(stream, 0, 0)
        got = 0
        started = time.perf_counter()
        try:
            for batch in consumer.batches():  # `records` <= what the stream holds: no tail wait
                got += len(batch)
                if got >= records:
                    break
                deadline.check()
        finally:
            consumer.close()
        return time.perf_counter() - started

    def latencies_ms(self, stream: str, samples: int, deadline: Deadline) -> list[float]:
        value = self.values[:1]
        return timed_loop_ms(
            lambda: self.client.append(stream, 0, value, acks=self.acks), samples, deadline
        )

    def cleanup(self, stream: str) -> None:
        """Nothing: topics stay until the scratch dir goes (so that every repeat measures the
        same amount of data on disk under the background scrubber)."""

    def close(self) -> None:
        self.client.close()
        for node in [self.single] if self.single is not None else self.cluster_nodes():
            if node.proc is not None and node.proc.poll() is not None:  # died before its stop
                code = node.proc.returncode
                print(
                    f"replog node {node.node_id} exited ({code}):\n{node.log_tail()}",
                    file=sys.stderr,
                )
        if self.single is not None:
            self.single.stop()
            self.single.kill()
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster.kill_all()
