"""A client given ONE address keeps working when that node dies; `replog dev-cluster`
restarts a node killed with SIGKILL (issue 13 item 5).

Three `replog serve` processes on 127.0.0.1; the node the client knows is the leader of the
partition it writes, and is killed with SIGKILL. Every wait is on a condition with a
generous deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from replog.client import AsyncClient, Client, RetryPolicy
from replog.client.results import PartitionInfo
from replog.devcluster import DevCluster
from replog.errors import ReplogError
from tests.integration.test_cluster import read_all
from tests.integration.waiting import DEADLINE_S, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T = TypeVar("T")
TOPIC = "orders"
PARTITIONS = 3
BOOTSTRAP_NODE = 1  # the one node the clients are given
# Bounded (attempts and time), with room for an election on a busy 2-core machine.
PATIENT = RetryPolicy(attempts_max=200, backoff_max_ms=500, deadline_ms=60_000)
BEFORE = [b"before %04d" % i for i in range(100)]
AFTER = [b"after %04d" % i for i in range(300)]


def partition_led_by(infos: list[PartitionInfo], node: int) -> tuple[int] | None:
    """(partition,) of a partition whose preferred replica `node` leads, once it does (the
    leader balancer keeps it there)."""
    for info in infos:
        if info.replicas[0] == node and info.leader_id == node:
            return (info.partition,)
    return None


def leader_of(infos: list[PartitionInfo], partition: int) -> int | None:
    return next(i.leader_id for i in infos if i.partition == partition)


def led_elsewhere(infos: list[PartitionInfo], partition: int, dead: int) -> bool:
    leader = leader_of(infos, partition)
    return leader is not None and leader != dead


class Collector:
    """Iterates a consumer in a thread until it has `count` values (or its client closes)."""

    def __init__(self, client: Client, partition: int, count: int) -> None:
        self.values: list[bytes] = []
        self.error: ReplogError | None = None
        self._consumer = client.consumer(TOPIC, partition, "earliest")
        self._count = count
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for record in self._consumer:
                self.values.append(record.value)
                if len(self.values) >= self._count:
                    return
        except ReplogError as err:
            self.error = err

    def wait_for(self, count: int) -> list[bytes]:
        def enough() -> bool | None:
            assert self.error is None, f"the consumer failed: {self.error}"
            return len(self.values) >= count or None

        wait_until(enough, f"the consumer has {count} records (has {len(self.values)})")
        return self.values[:count]


def test_a_client_given_one_address_keeps_working_when_that_node_dies(
    cluster: DevCluster,
) -> None:
    bootstrap = cluster.members[BOOTSTRAP_NODE]
    with Client(bootstrap.address, retry=PATIENT) as client:
        client.create_topic(TOPIC, PARTITIONS, 3)
        assert set(client.known_nodes) == set(cluster.addresses.values()), "learned the nodes"
        (partition,) = wait_until(
            lambda: partition_led_by(client.describe_topic(TOPIC), BOOTSTRAP_NODE),
            "the bootstrap node leads a partition",
        )
        client.append(TOPIC, partition, BEFORE, acks="all")
        consumer = Collector(client, partition, len(BEFORE) + len(AFTER))
        assert consumer.wait_for(len(BEFORE)) == BEFORE

        bootstrap.kill()  # SIGKILL: the client's only address, and the partition's leader

        assert client.list_topics() == {TOPIC: PARTITIONS}
        for i in range(0, len(AFTER), 50):
            res = client.append(TOPIC, partition, AFTER[i : i + 50], acks="all")
            assert res.last_offset - res.base_offset == 49
        infos = wait_until(
            lambda: (
                (d := client.describe_topic(TOPIC))
                and led_elsewhere(d, partition, BOOTSTRAP_NODE)
                and d
            ),
            "describe names the new leader",
        )
        assert leader_of(infos, partition) in (2, 3)
        assert [v for _, v in read_all(client, TOPIC, partition)] == BEFORE + AFTER
        assert consumer.wait_for(len(BEFORE) + len(AFTER)) == BEFORE + AFTER
        assert client.list_offsets(TOPIC, [partition])[0].latest > len(BEFORE) + len(AFTER)


async def await_until(condition: Callable[[], Awaitable[T | None]], what: str) -> T:
    """`wait_until` for coroutines: poll until truthy; fail after `DEADLINE_S`."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.05)


def test_the_async_client_given_one_address_keeps_working_when_that_node_dies(
    cluster: DevCluster,
) -> None:
    bootstrap = cluster.members[BOOTSTRAP_NODE]

    async def scenario() -> None:
        async with AsyncClient(bootstrap.address, retry=PATIENT) as client:
            await client.create_topic(TOPIC, PARTITIONS, 3)
            assert set(client.known_nodes) == set(cluster.addresses.values())

            async def led_by_bootstrap() -> tuple[int] | None:
                return partition_led_by(await client.describe_topic(TOPIC), BOOTSTRAP_NODE)

            (partition,) = await await_until(led_by_bootstrap, "node 1 leads a partition")
            await client.append(TOPIC, partition, BEFORE, acks="all")
            seen: list[bytes] = []
            total = len(BEFORE) + len(AFTER)

            async def consume() -> None:
                async for batch in client.batches(TOPIC, partition, 0):
                    seen.extend(batch.values)
                    if len(seen) >= total:
                        return

            consuming = asyncio.create_task(consume())

            async def seen_at_least(n: int) -> bool:
                assert not consuming.done() or len(seen) >= total, consuming.exception()
                return len(seen) >= n

            await await_until(lambda: seen_at_least(len(BEFORE)), "the stream read BEFORE")
            bootstrap.kill()

            assert await client.list_topics() == {TOPIC: PARTITIONS}
            for i in range(0, len(AFTER), 50):
                await client.append(TOPIC, partition, AFTER[i : i + 50], acks="all")

            async def moved() -> list[PartitionInfo] | None:
                infos = await client.describe_topic(TOPIC)
                return infos if led_elsewhere(infos, partition, BOOTSTRAP_NODE) else None

            await await_until(moved, "describe names the new leader")
            values: list[bytes] = []
            offset = 0
            (offsets,) = await client.list_offsets(TOPIC, [partition])
            while offset < offsets.latest:
                fetched = await client.fetch(TOPIC, partition, offset, max_bytes=1 << 20)
                values += fetched.records.values
                offset = fetched.next_offset
            assert values == BEFORE + AFTER
            await await_until(lambda: seen_at_least(total), "the stream read AFTER too")
            await consuming
            assert seen == BEFORE + AFTER

    asyncio.run(asyncio.wait_for(scenario(), 240))


# -- replog dev-cluster --------------------------------------------------------------------

NODE_LINE = re.compile(r"^node (\d+): (\S+)  pid (\d+)")
RESTARTED = re.compile(r"^node (\d+) \(pid (\d+)\) died: (.*); restarting it as pid (\d+)")
BACK = re.compile(r"^node (\d+) is back: pid (\d+)")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class DevClusterCommand:
    """`replog dev-cluster --plaintext` as a subprocess; its output lines, read in a thread."""

    def __init__(self, data_dir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REPLOG_")}
        cmd = [sys.executable, "-u", "-m", "replog", "dev-cluster", "--nodes", "3"]
        self.proc = subprocess.Popen(
            [*cmd, "--data-dir", str(data_dir), "--plaintext"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            # As a terminal's Ctrl-C finds it: a test run started in the background by a
            # non-interactive shell inherits SIGINT ignored, and Python then never raises
            # KeyboardInterrupt, so the test's Ctrl-C would go unheard.
            preexec_fn=_default_sigint,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def wait_line(self, pattern: re.Pattern[str], what: str, after: int = 0) -> re.Match[str]:
        def found() -> re.Match[str] | None:
            for line in self.lines[after:]:
                if m := pattern.match(line):
                    return m
            assert self.proc.poll() is None, f"dev-cluster exited:\n{self.output}"
            return None

        return wait_until(found, f"{what}; output so far:\n{self.output}")

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def nodes(self) -> dict[int, tuple[str, int]]:
        """node id -> (address, pid), once every node's start line was printed."""

        def printed() -> dict[int, tuple[str, int]] | None:
            assert self.proc.poll() is None, f"dev-cluster exited:\n{self.output}"
            found = {
                int(m[1]): (m[2], int(m[3])) for line in self.lines if (m := NODE_LINE.match(line))
            }
            return found if len(found) == 3 else None

        return wait_until(printed, "the node pids are printed")

    def kill(self) -> None:
        """Only at the end of a failed test: SIGKILL the dev-cluster itself."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def serving(address: str) -> bool:
    try:
        with Client(address, timeout_s=5, retry=RetryPolicy(attempts_max=1)) as client:
            client.list_topics()
    except ReplogError:
        return False
    return True


def test_dev_cluster_restarts_a_killed_node_and_gives_up_on_one_that_keeps_dying(
    tmp_path: Path,
) -> None:
    dev = DevClusterCommand(tmp_path / "dev")
    pids: set[int] = set()
    try:
        nodes = dev.nodes()
        pids.update(pid for _, pid in nodes.values())
        address2, pid2 = nodes[2]
        os.kill(pid2, signal.SIGKILL)  # a user's `kill -9` of one node
        restarted = dev.wait_line(RESTARTED, "node 2 is restarted")
        assert (int(restarted[1]), int(restarted[2])) == (2, pid2)
        assert restarted[3] == "killed by SIGKILL"
        new_pid2 = int(restarted[4])
        pids.add(new_pid2)
        back = dev.wait_line(BACK, "node 2 is back")
        assert (int(back[1]), int(back[2])) == (2, new_pid2)
        wait_until(lambda: serving(address2), "node 2 serves again, on the same address")
        with Client(nodes[1][0], retry=PATIENT) as client:
            client.create_topic("after-restart", 1, 3)
            assert client.append("after-restart", 0, [b"x"], acks="all").base_offset >= 0

        # Node 3 dies three times within 30 s: the third time it is left down.
        pid3 = nodes[3][1]
        for death in range(3):
            os.kill(pid3, signal.SIGKILL)
            if death < 2:
                m = dev.wait_line(
                    re.compile(rf"^node 3 \(pid {pid3}\) died: .*; restarting it as pid (\d+)"),
                    f"node 3 is restarted after death {death + 1}",
                )
                pid3 = int(m[1])
                pids.add(pid3)
        gave_up = dev.wait_line(
            re.compile(rf"^node 3 \(pid {pid3}\) died: .*NOT restarting it again"),
            "dev-cluster gives up on node 3",
        )
        assert "3 times within 30s" in gave_up[0]
        assert serving(nodes[1][0]) and serving(address2), "the other nodes keep running"
        assert dev.proc.poll() is None, "dev-cluster keeps running"

        dev.proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert dev.proc.wait(120) == 0, dev.output
    finally:
        dev.kill()
    wait_until(lambda: not any(alive(p) for p in pids), "no node process is left")
    with contextlib.suppress(Exception):
        assert dev.proc.stdout is not None
        dev.proc.stdout.close()
