"""The asyncio producer through a leader kill on a 3-node cluster: every acknowledged record
is in the log once, at the offset its metadata gave, in send order (issue 29 item 2)."""

from __future__ import annotations

import asyncio
import functools
import time

import pytest

from replog.client import AsyncClient, Client, RecordMetadata, RetryPolicy
from replog.devcluster import DevCluster
from tests.integration.test_append_stream import read_back
from tests.integration.test_cluster import PATIENT, leader_of

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WAIT_S = 120.0


def test_the_async_producer_writes_every_record_once_through_a_leader_kill(
    cluster: DevCluster,
) -> None:
    topic, partitions, records_max = "async-kill", 2, 200_000
    with Client(cluster.bootstrap, retry=PATIENT) as admin:
        admin.create_topic(topic, partitions, 3, format="raw")
        victim_id = leader_of(admin, topic, 0)
    acked: dict[bytes, tuple[int, int]] = {}
    failed: list[BaseException] = []

    def delivered(value: bytes, err: BaseException | None, md: RecordMetadata | None) -> None:
        if err is not None:
            failed.append(err)
        else:
            assert md is not None
            acked[value] = (md.partition, md.offset)

    async def wait_acked(count: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while len(acked) < count and not failed:
            assert time.monotonic() < deadline, f"{len(acked)} of {count} acknowledged"
            await asyncio.sleep(0.05)

    async def scenario() -> None:
        retry = RetryPolicy(attempts_max=1000, backoff_max_ms=300, deadline_ms=60_000)
        async with (
            AsyncClient(cluster.bootstrap, retry=retry, timeout_s=5) as client,
            client.producer(topic, linger_ms=2, batch_records_max=500) as producer,
        ):
            futures: list[asyncio.Future[RecordMetadata]] = []

            async def produce() -> None:
                for i in range(records_max):
                    value = b"r%d" % i
                    futures.append(
                        await producer.send(
                            value,
                            partition=i % partitions,
                            on_delivery=functools.partial(delivered, value),
                        )
                    )
                    if i % 1000 == 999 and i >= 5000:  # a bounded window in flight
                        await asyncio.wait([futures[i - 5000]])

            sender = asyncio.create_task(produce())
            await wait_acked(20_000)
            victim = cluster.members[victim_id]
            victim.kill()
            at_kill = len(acked)
            await wait_acked(at_kill + 40_000)
            victim.start()
            await asyncio.wait_for(sender, WAIT_S)
            await producer.flush()
            assert all(f.done() for f in futures)

    asyncio.run(asyncio.wait_for(scenario(), WAIT_S * 4))
    assert not failed, f"{len(failed)} sends failed, e.g. {failed[:3]}"
    assert len(acked) == records_max
    where, counts = read_back(cluster, topic, partitions)
    twice = [v for v, c in counts.items() if c > 1]
    assert not twice, f"{len(twice)} records written twice, e.g. {twice[:5]}"
    moved = [v for v, at in acked.items() if where.get(v) != at]
    assert not moved, f"acknowledged records lost or moved, e.g. {moved[:5]}"
    for p in range(partitions):
        held = sorted((offset, int(v[1:])) for v, (q, offset) in where.items() if q == p)
        order = [i for _, i in held]
        assert order == sorted(order), f"partition {p} out of send order"
