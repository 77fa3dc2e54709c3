"""A consumer of assigned partitions, without a group, against a real server: `poll`,
`seek`, `position`, `pause` / `resume` over several partitions, sync and asyncio (issue 29
item 2)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from replog.client import AsyncClient, Client, GroupRecord, RetryPolicy
from replog.errors import InvalidArgumentError
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration

WAIT_S = 60.0


@pytest.fixture
def client(shared_server: ServerProcess) -> Iterator[Client]:
    with Client(shared_server.address, timeout_s=30, retry=RetryPolicy(attempts_max=3)) as c:
        yield c


def _fill(client: Client, topic: str) -> dict[int, int]:
    """Partitions 0, 1, 2 hold 30, 5, 12 records named after their place; each one's first
    record's offset (control records come before)."""
    client.create_topic(topic, 3, format="raw")
    return {
        p: client.append(topic, p, [b"p%d-%d" % (p, i) for i in range(count)]).base_offset
        for p, count in ((0, 30), (1, 5), (2, 12))
    }


def _poll_until(poll: object, count: int) -> list[GroupRecord]:
    got: list[GroupRecord] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"{len(got)} of {count} records"
        batch = poll(0.5)  # type: ignore[operator]
        assert len(batch) <= 7  # max_poll_records
        got.extend(batch)
    return got


def test_an_assigned_consumer_polls_seeks_and_pauses_over_several_partitions(
    client: Client,
) -> None:
    first = _fill(client, "assigned-sync")
    with pytest.raises(InvalidArgumentError):
        client.assigned_consumer([])
    with client.assigned_consumer(
        [("assigned-sync", 0), ("assigned-sync", 2)],
        offsets={("assigned-sync", 2): first[2] + 10},
        max_poll_records=7,
    ) as consumer:
        got = _poll_until(consumer.poll, 32)
        assert sorted(r.value or b"" for r in got if r.partition == 2) == [b"p2-10", b"p2-11"]
        assert [r.value for r in got if r.partition == 0] == [b"p0-%d" % i for i in range(30)]
        assert {r.partition for r in got} == {0, 2}  # partition 1 is not assigned
        first_p0 = next(r.offset for r in got if r.partition == 0)
        assert consumer.position("assigned-sync", 0) == first_p0 + 30
        consumer.seek("assigned-sync", 0, first_p0 + 25)
        again = _poll_until(consumer.poll, 5)
        assert [r.value for r in again] == [b"p0-%d" % i for i in range(25, 30)]
        consumer.pause(("assigned-sync", 0))
        assert consumer.paused() == {("assigned-sync", 0)}
        client.append("assigned-sync", 0, [b"p0-late"])
        client.append("assigned-sync", 2, [b"p2-late"])
        late = _poll_until(consumer.poll, 1)
        assert [(r.partition, r.value) for r in late] == [(2, b"p2-late")]  # 0 is paused
        consumer.resume(("assigned-sync", 0))
        assert [r.value for r in _poll_until(consumer.poll, 1)] == [b"p0-late"]
        with pytest.raises(InvalidArgumentError, match="no group"):
            consumer.commit()


def test_the_async_assigned_consumer_polls_seeks_and_pauses(
    client: Client, shared_server: ServerProcess
) -> None:
    _fill(client, "assigned-async")

    async def poll_until(consumer: object, count: int) -> list[GroupRecord]:
        got: list[GroupRecord] = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < count:
            assert time.monotonic() < deadline, f"{len(got)} of {count} records"
            batch = await consumer.poll(0.5)  # type: ignore[attr-defined]
            assert len(batch) <= 7
            got.extend(batch)
        return got

    async def scenario() -> None:
        async with (
            AsyncClient(shared_server.address) as aclient,
            aclient.assigned_consumer(
                [("assigned-async", 1), ("assigned-async", 2)],
                offsets={("assigned-async", 1): "latest"},
                max_poll_records=7,
            ) as consumer,
        ):
            got = await poll_until(consumer, 12)
            assert [r.value for r in got] == [b"p2-%d" % i for i in range(12)]  # 1: at its end
            await aclient.append("assigned-async", 1, [b"p1-new"])
            assert [r.value for r in await poll_until(consumer, 1)] == [b"p1-new"]
            end = consumer.position("assigned-async", 2)
            await consumer.seek("assigned-async", 2, end - 2)
            assert [r.value for r in await poll_until(consumer, 2)] == [b"p2-10", b"p2-11"]
            consumer.pause(("assigned-async", 2))
            await aclient.append("assigned-async", 2, [b"p2-late"])
            await aclient.append("assigned-async", 1, [b"p1-late"])
            assert [r.value for r in await poll_until(consumer, 1)] == [b"p1-late"]
            consumer.resume(("assigned-async", 2))
            assert [r.value for r in await poll_until(consumer, 1)] == [b"p2-late"]

    asyncio.run(asyncio.wait_for(scenario(), WAIT_S * 2))
