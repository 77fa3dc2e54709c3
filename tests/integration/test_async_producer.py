"""The asyncio producer against a real server: batching, murmur2 keys, tombstones,
`RecordMetadata` futures, `on_delivery`, and cancellation that never half-sends a batch nor
leaves a future pending (issue 29 item 2)."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from replog import records
from replog.client import AsyncClient, RecordMetadata, partition_for_key
from replog.errors import InvalidArgumentError, ReplogError
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration

WAIT_S = 60.0


async def _values(client: AsyncClient, topic: str, partition: int, count: int) -> list[bytes]:
    """The first `count` record values of the partition (fetched until that many)."""
    out: list[bytes | None] = []
    offset = 0
    while len(out) < count:
        got = await client.fetch(topic, partition, offset)
        out.extend(got.records.values)
        offset = got.next_offset
    return [v if v is not None else b"<null>" for v in out]


def test_the_async_producer_batches_keys_and_tombstones_with_metadata_and_callbacks(
    shared_server: ServerProcess,
) -> None:
    seen: list[tuple[int, BaseException | None, RecordMetadata | None, int]] = []

    async def scenario() -> None:
        async with AsyncClient(shared_server.address) as client:
            await client.create_topic("aprod-env", 3)
            async with client.producer("aprod-env", linger_ms=2, batch_records_max=10) as p:
                futures = []
                for i in range(60):
                    key = b"k%d" % (i % 4)

                    def cb(
                        err: BaseException | None, md: RecordMetadata | None, i: int = i
                    ) -> None:
                        seen.append((i, err, md, threading.get_ident()))

                    value = None if i == 59 else b"v%d" % i
                    futures.append(await p.send(value, key=key, on_delivery=cb))
                stamped = await p.send_and_wait(b"at", partition=2, timestamp_ms=5_000)
                await p.flush()
                assert len(seen) == 60  # flush returns after the callbacks ran
                mds = [f.result() for f in futures]
            loop_thread = threading.get_ident()
            assert (stamped.partition, stamped.timestamp_ms) == (2, 5_000)
            for i, md in enumerate(mds):
                assert md.partition == partition_for_key(b"k%d" % (i % 4), 3)
                assert md.topic == "aprod-env" and md.serialized_key_size == 2
            assert mds[59].serialized_value_size == -1  # the tombstone
            by_key: dict[bytes, list[int]] = {}
            for i, md in enumerate(mds):
                by_key.setdefault(b"k%d" % (i % 4), []).append(md.offset)
            assert all(offs == sorted(offs) for offs in by_key.values())  # in send order
            assert sorted(i for i, *_ in seen) == list(range(60))
            assert all(err is None and md == mds[i] for i, err, md, _ in seen)
            assert {ident for *_, ident in seen} == {loop_thread}  # on the event loop
            last = mds[59]
            fetched = await client.fetch("aprod-env", last.partition, last.offset)
            assert isinstance(fetched.records, records.DecodedRecords)
            assert (fetched.records.keys[0], fetched.records.values[0]) == (b"k3", None)

    asyncio.run(asyncio.wait_for(scenario(), WAIT_S))


def test_the_async_producer_sends_unary_appends_without_idempotence_and_reports_errors(
    shared_server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "replog.client.producer")
    errors: list[BaseException | None] = []

    def explode(err: BaseException | None, md: RecordMetadata | None) -> None:
        raise RuntimeError("the callback's own bug")

    async def scenario() -> None:
        async with AsyncClient(shared_server.address, idempotent=False) as client:
            await client.create_topic("aprod-raw", 1, format="raw")
            async with client.producer("aprod-raw", linger_ms=1) as p:
                with pytest.raises(InvalidArgumentError, match="null values"):
                    await p.send(None)
                big = await p.send(b"x" * 8192, on_delivery=lambda e, m: errors.append(e))
                with pytest.raises(InvalidArgumentError):
                    await big
                first = await p.send_and_wait(b"a", on_delivery=explode)
                second = await p.send_and_wait(b"b")
            assert second.offset == first.offset + 1 and first.timestamp_ms is None
            assert len(errors) == 1 and isinstance(errors[0], ReplogError)
            assert await _values(client, "aprod-raw", 0, 2) == [b"a", b"b"]  # not the big one
            with pytest.raises(TypeError, match="lingr_ms"):
                client.producer("aprod-raw", lingr_ms=1)  # type: ignore[call-arg]

    asyncio.run(asyncio.wait_for(scenario(), WAIT_S))
    assert "the callback's own bug" in caplog.text


def test_cancelled_sends_and_flushes_never_half_send_a_batch_nor_leave_a_future_pending(
    shared_server: ServerProcess,
) -> None:
    """A task sending records and flushing is cancelled at many points; every record whose
    `send` returned is appended exactly once, in order, and every future is settled."""

    async def scenario() -> None:
        async with AsyncClient(shared_server.address) as client:
            await client.create_topic("aprod-cancel", 1, format="raw")
            producer = client.producer("aprod-cancel", linger_ms=0, batch_records_max=3)
            await producer.start()
            returned: list[tuple[bytes, asyncio.Future[RecordMetadata]]] = []

            async def worker(round_: int) -> None:
                for i in range(40):
                    value = b"r%d-%d" % (round_, i)
                    fut = await producer.send(value)
                    returned.append((value, fut))
                    if i % 7 == 0:
                        await producer.flush()
                    if i % 5 == 0:  # cancelled while waiting: the record goes on
                        await producer.send_and_wait(b"w%d-%d" % (round_, i))

            for round_ in range(12):
                task = asyncio.create_task(worker(round_))
                for _ in range(round_ * 3 + 1):  # cancelled at a different point each round
                    await asyncio.sleep(0)
                await asyncio.sleep(0.002 * round_)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            waiting = asyncio.create_task(producer.send_and_wait(b"w-queued"))
            await asyncio.sleep(0)  # queued: `send` does not wait once started
            waiting.cancel()
            await producer.flush()
            await producer.close()
            assert waiting.cancelled()
            assert all(f.done() for _, f in returned)  # close settles every future
            sent = [v for v, _ in returned]
            offsets = [f.result().offset for _, f in returned]
            assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
            high = (await client.list_offsets("aprod-cancel"))[0].latest
            got: list[bytes] = []
            offset = 0
            while offset < high:
                chunk = await client.fetch("aprod-cancel", 0, offset)
                got.extend(v for v in chunk.records.values if v is not None)
                offset = chunk.next_offset
            assert len(got) == len(set(got))  # nothing appended twice
            assert [v for v in got if v.startswith(b"r")] == sent  # each once, in order
            assert b"w-queued" in got  # its waiter was cancelled, not the record

    asyncio.run(asyncio.wait_for(scenario(), WAIT_S))
