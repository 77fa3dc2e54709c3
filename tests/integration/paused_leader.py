"""A paused partition leader, seen from a client (issue 25 item 6): SIGSTOP the leader,
time the client's first acknowledged append after the pause, SIGCONT it.

Shared by `test_client_paused_leader.py` (asserts the ack comes and the records are intact)
and `bench/client_failover.py` (the median over several pauses). The client knows every
node (it was given one address and learned the rest) and the partition's leader (it has
just appended to it), with default timeouts: the pause costs it the election plus one
attempt deadline (`Client(attempt_timeout_s=...)`, 2 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterator

from replog.client import AsyncClient, Client, RetryPolicy
from replog.devcluster import DevCluster
from tests.integration.waiting import wait_until

TOPIC = "paused"
# Bounded in attempts and time, with room for an election on a busy 2-core machine.
PATIENT = RetryPolicy(attempts_max=400, backoff_max_ms=500, deadline_ms=60_000)


def leader(client: Client, partition: int = 0) -> int | None:
    info = client.describe_topic(TOPIC)[partition]
    return info.leader_id


def caught_up(client: Client) -> bool:
    """Every replica of the partition is in sync (the resumed node caught up)."""
    info = client.describe_topic(TOPIC)[0]
    return (
        info.leader_id is not None
        and len(info.replica_status) == len(info.replicas)
        and all(r.lag_records == 0 for r in info.replica_status)
    )


@contextlib.contextmanager
def paused(cluster: DevCluster, node_id: int) -> Iterator[None]:
    """SIGSTOP `node_id` for the block; SIGCONT it whatever happens."""
    member = cluster.members[node_id]
    member.signal(signal.SIGSTOP)
    try:
        yield
    finally:
        member.signal(signal.SIGCONT)


def prepare(client: Client) -> None:
    client.create_topic(TOPIC, 1, 3)
    wait_until(lambda: leader(client) is not None, "the partition has a leader")
    wait_until(lambda: caught_up(client), "every replica is in sync")


def pause_once_sync(cluster: DevCluster, client: Client, round_: int) -> float:
    """Pause the leader; seconds until the client's first ack after it. The records of
    the round are checked in order once the node is resumed."""
    client.append(TOPIC, 0, [b"warm %d" % round_])  # the client knows the leader now
    node = wait_until(lambda: leader(client), "a leader")
    with paused(cluster, node):
        started = time.monotonic()
        client.append(TOPIC, 0, [b"after pause %d" % round_])
        took = time.monotonic() - started
    wait_until(lambda: caught_up(client), "the resumed node caught up")
    return took


async def pause_once_async(
    cluster: DevCluster, client: AsyncClient, node: int, round_: int
) -> float:
    await client.append(TOPIC, 0, [b"warm async %d" % round_])
    with paused(cluster, node):
        started = time.monotonic()
        await client.append(TOPIC, 0, [b"after pause async %d" % round_])
        return time.monotonic() - started


def pause_rounds(cluster: DevCluster, rounds: int, *, aio: bool) -> list[float]:
    """`rounds` pauses of the current leader, through a sync (or asyncio) client."""
    bootstrap = cluster.members[1].address
    with Client(bootstrap, retry=PATIENT) as admin:
        if TOPIC not in admin.list_topics():
            prepare(admin)
        if not aio:
            return [pause_once_sync(cluster, admin, r) for r in range(rounds)]

        async def run() -> list[float]:
            out: list[float] = []
            async with AsyncClient(bootstrap, retry=PATIENT) as client:
                for r in range(rounds):
                    node = wait_until(lambda: leader(admin), "a leader")
                    out.append(await pause_once_async(cluster, client, node, r))
                    wait_until(lambda: caught_up(admin), "the resumed node caught up")
            return out

        return asyncio.run(asyncio.wait_for(run(), 60 + 60 * rounds))


def values(client: Client) -> list[bytes]:
    """Every committed value of the partition, in order."""
    end = client.list_offsets(TOPIC, [0])[0].latest
    out: list[bytes] = []
    offset = 0
    while offset < end:
        fetched = client.fetch(TOPIC, 0, offset, max_bytes=1 << 20)
        out += fetched.records.values
        offset = fetched.next_offset
    return out
