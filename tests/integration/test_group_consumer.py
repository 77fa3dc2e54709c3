"""The Python group consumers (sync and asyncio) against a real node: sharing partitions,
resuming from commits, what counts as processed, seek, pause/resume, several topics."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Iterator

import pytest

from replog.client import AsyncClient, Client, Consumer, GroupConsumer, GroupRecord, RetryPolicy
from replog.errors import GroupNotEmptyError, UnknownGroupError
from tests.integration.servers import ServerProcess
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration

_names = itertools.count()
OPTIONS = {"session_timeout_ms": 1000, "fetch_wait_ms": 100}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("group-consumer")
    args = ["--group-session-timeout-ms-min", "300", "--group-heartbeat-interval-ms", "200"]
    server = ServerProcess(work / "data", work, args).start()
    yield server
    server.kill()


@pytest.fixture
def client(node: ServerProcess) -> Iterator[Client]:
    with Client(node.address, retry=RetryPolicy(attempts_max=200, deadline_ms=60_000)) as c:
        yield c


def fresh(client: Client, partitions: int, records: int) -> str:
    """A new topic with `records` records in each partition (values "p<p>-<i>")."""
    name = f"gc{next(_names)}"
    client.create_topic(name, partitions)
    for p in range(partitions):
        client.append(name, p, [b"p%d-%d" % (p, i) for i in range(records)])
    return name


def read(consumer: GroupConsumer, count: int) -> list[GroupRecord]:
    out: list[GroupRecord] = []
    wait_until(lambda: len(out.__iadd__(consumer.poll(0.2))) >= count, f"{count} records")
    return out


def test_a_group_resumes_from_its_commits_and_shares_partitions_between_members(
    client: Client,
) -> None:
    topic = fresh(client, 4, 25)
    with client.consumer(topic, group="g1", **OPTIONS) as first:
        got = read(first, 100)
        assert len({(r.partition, r.offset) for r in got}) == 100
        assert first.assignment() == {(topic, p) for p in range(4)}
    # Everything was processed and committed at close: the next member starts after it.
    for p in range(4):
        client.append(topic, p, [b"new"])
    a = client.consumer(topic, group="g1", **OPTIONS)
    b = client.consumer(topic, group="g1", **OPTIONS)
    try:
        seen: list[GroupRecord] = []

        def split() -> bool:
            seen.extend(a.poll(0.1) + b.poll(0.1))
            return len(a.assignment()) == 2 and len(b.assignment()) == 2

        wait_until(split, "two members split four partitions")
        assert not a.assignment() & b.assignment()
        wait_until(lambda: len(seen.__iadd__(a.poll(0.1) + b.poll(0.1))) >= 4, "the new records")
        assert sorted(r.value for r in seen) == [b"new"] * 4
    finally:
        a.close()
        b.close()
    described = client.describe_group("g1")
    assert described.state == "EMPTY"
    assert all(p.lag == 0 for p in described.partitions)


def test_a_record_counts_as_processed_only_once_the_caller_asks_for_the_next(
    client: Client,
) -> None:
    topic = fresh(client, 1, 10)
    with client.consumer(topic, group="g2", **OPTIONS) as consumer:
        taken = []
        for record in consumer:
            taken.append(record)
            if len(taken) == 4:
                break  # the fourth was handed over, never finished
    (committed,) = client.committed_offsets("g2")
    assert committed.offset == taken[3].offset
    with client.consumer(topic, group="g2", **OPTIONS) as again:
        (first, *_rest) = read(again, 1)
        assert first.offset == taken[3].offset and first.value == b"p0-3"


def test_commit_stores_what_was_delivered_and_seek_moves_the_position(client: Client) -> None:
    topic = fresh(client, 1, 5)
    with client.consumer(topic, group="g3", auto_commit=False, **OPTIONS) as consumer:
        got = read(consumer, 5)
        consumer.commit()
        assert consumer.committed() == {(topic, 0): got[-1].offset + 1}
        consumer.seek(topic, 0, "earliest")
        assert read(consumer, 1)[0].value == b"p0-0"
        consumer.seek(topic, 0, got[2].offset)
        assert read(consumer, 1)[0].value == b"p0-2"
        consumer.seek(topic, 0, "latest")
        assert consumer.poll(0.3) == []
        client.append(topic, 0, [b"after"])
        assert read(consumer, 1)[0].value == b"after"
        with pytest.raises(ValueError):
            consumer.seek(topic, 7, 0)
    # Without auto-commit nothing more was stored.
    assert client.committed_offsets("g3")[0].offset == got[-1].offset + 1


def test_a_paused_partition_delivers_nothing_until_resumed(client: Client) -> None:
    topic = fresh(client, 2, 3)
    with client.consumer(topic, group="g4", **OPTIONS) as consumer:
        wait_until(
            lambda: consumer.poll(0.1) is not None and len(consumer.assignment()) == 2, "assigned"
        )
        consumer.seek(topic, 0, "earliest")
        consumer.seek(topic, 1, "earliest")
        consumer.pause((topic, 1))
        assert consumer.paused() == {(topic, 1)}
        got = read(consumer, 3)
        assert {r.partition for r in got} == {0}
        assert consumer.poll(0.3) == []
        consumer.resume((topic, 1))
        assert {r.partition for r in read(consumer, 3)} == {1}


def test_one_member_consumes_several_topics(client: Client) -> None:
    one, two = fresh(client, 1, 2), fresh(client, 2, 2)
    with client.consumer([one, two], group="g5", **OPTIONS) as consumer:
        got = read(consumer, 6)
        assert {(r.topic, r.partition) for r in got} == {(one, 0), (two, 0), (two, 1)}


def test_groups_can_be_listed_reset_and_deleted(client: Client) -> None:
    topic = fresh(client, 1, 3)
    with client.consumer(topic, group="g6", **OPTIONS) as consumer:
        read(consumer, 3)
        with pytest.raises(GroupNotEmptyError):
            client.commit_offsets("g6", {(topic, 0): 0})
        with pytest.raises(GroupNotEmptyError):
            client.delete_group("g6")
    assert "g6" in {g.group for g in client.list_groups()}
    client.commit_offsets("g6", {(topic, 0): 1})  # a reset, with the group stopped
    with client.consumer(topic, group="g6", **OPTIONS) as consumer:
        assert read(consumer, 1)[0].value == b"p0-0"
    client.delete_group("g6")
    with pytest.raises(UnknownGroupError):
        client.describe_group("g6")


def test_the_single_partition_consumer_is_unchanged(client: Client) -> None:
    topic = fresh(client, 1, 1)
    consumer = client.consumer(topic, 0, offset="earliest")
    assert isinstance(consumer, Consumer)
    with pytest.raises(ValueError):
        client.consumer(topic, 1, group="g7")


def test_the_asyncio_consumer_shares_a_group_with_a_thread_of_the_sync_one(
    node: ServerProcess, client: Client
) -> None:
    topic = fresh(client, 4, 10)
    done = threading.Event()
    sync_seen: list[GroupRecord] = []
    sync_holds: list[int] = [0]

    def sync_member() -> None:
        with Client(node.address) as other, other.consumer(topic, group="g8", **OPTIONS) as c:
            while not done.is_set():
                sync_seen.extend(c.poll(0.1))
                sync_holds[0] = len(c.assignment())

    thread = threading.Thread(target=sync_member, daemon=True)

    async def scenario() -> set[tuple[int, int]]:
        seen: set[tuple[int, int]] = set()
        loop = asyncio.get_running_loop()
        async with AsyncClient(node.address) as aclient:
            async with aclient.consumer(topic, group="g8", **OPTIONS) as consumer:
                thread.start()

                async def until(condition: Callable[[], bool], what: str) -> None:
                    deadline = loop.time() + 60
                    while not condition():
                        assert loop.time() < deadline, f"timed out waiting until {what}"
                        seen.update((r.partition, r.offset) for r in await consumer.poll(0.1))

                await until(
                    lambda: 0 < len(consumer.assignment()) < 4 and sync_holds[0] > 0,
                    "both members hold partitions",
                )
                for p in range(4):  # new records: each member must consume its share
                    await aclient.append(topic, p, [b"more"] * 10)

                def everything() -> set[tuple[int, int]]:
                    return seen | {(r.partition, r.offset) for r in sync_seen}

                await until(lambda: len(everything()) >= 80, "every record is consumed")
                await consumer.commit()
                assert await consumer.committed()
            assert "g8" in {g.group for g in await aclient.list_groups()}
            assert (await aclient.describe_group("g8")).group == "g8"
        return seen

    try:
        seen = asyncio.run(asyncio.wait_for(scenario(), 120))
    finally:
        done.set()
        thread.join(30)
    both = seen | {(r.partition, r.offset) for r in sync_seen}
    assert len(both) == 80
    new_async = {p for p, _o in seen}
    new_sync = {r.partition for r in sync_seen if r.value == b"more"}
    assert new_async and new_sync, "both members consumed new records of their partitions"


def test_a_member_of_an_envelope_topic_gets_keys_headers_and_timestamps(client: Client) -> None:
    from replog.records import Record

    name = f"gc{next(_names)}"
    client.create_topic(name, 1, format="envelope")
    client.append(name, 0, [Record(b"v", key=b"k", headers=[("h", b"1")], timestamp_ms=1234)])
    with client.consumer(name, group="g9", **OPTIONS) as consumer:
        (record,) = read(consumer, 1)
    assert (record.value, record.key, record.headers, record.timestamp_ms) == (
        b"v",
        b"k",
        (("h", b"1"),),
        1234,
    )


def test_poll_returns_at_most_max_poll_records_and_every_record_once_in_order(
    client: Client,
) -> None:
    topic = fresh(client, 2, 3000)  # one 1 MiB fetch holds all of a partition's records
    with client.consumer(topic, group="g-max", max_poll_records=200, **OPTIONS) as consumer:
        got: list[GroupRecord] = []
        sizes: list[int] = []

        def poll() -> bool:
            batch = consumer.poll(0.2)
            sizes.append(len(batch))
            got.extend(batch)
            return len(got) >= 6000

        wait_until(poll, "6000 records")
        assert max(sizes) <= 200
        for p in range(2):
            offsets = [r.offset for r in got if r.partition == p]
            assert offsets == sorted(set(offsets)) and len(offsets) == 3000


def test_a_seek_drops_the_records_held_beyond_max_poll_records(client: Client) -> None:
    topic = fresh(client, 1, 3000)
    with client.consumer(topic, group="g-seek", max_poll_records=100, **OPTIONS) as consumer:
        first: list[GroupRecord] = []
        wait_until(lambda: bool(first.__iadd__(consumer.poll(0.2))), "a first poll")
        assert [r.value for r in first] == [b"p0-%d" % i for i in range(len(first))]
        assert len(first) <= 100
        base = first[0].offset  # after the leader's epoch marker
        consumer.seek(topic, 0, base + 2000)  # the rest of that fetch is held: it must not come
        after = read(consumer, 1)
        assert after[0].offset == base + 2000 and after[0].value == b"p0-2000"


def test_the_asyncio_poll_returns_at_most_max_poll_records(
    node: ServerProcess, client: Client
) -> None:
    topic = fresh(client, 1, 3000)

    async def scenario() -> tuple[list[int], list[int]]:
        sizes: list[int] = []
        offsets: list[int] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        async with (
            AsyncClient(node.address) as aclient,
            aclient.consumer(topic, group="g-amax", max_poll_records=150, **OPTIONS) as consumer,
        ):
            while len(offsets) < 3000:
                assert loop.time() < deadline, "timed out waiting for 3000 records"
                batch = await consumer.poll(0.2)
                sizes.append(len(batch))
                offsets.extend(r.offset for r in batch)
        return sizes, offsets

    sizes, offsets = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert max(sizes) <= 150
    assert offsets == sorted(set(offsets)) and len(offsets) == 3000
