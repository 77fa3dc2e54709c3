"""The asyncio twin of the consumer groups: `AsyncGroupCalls` and `AsyncGroupConsumer`.

    async with client.consumer("orders", group="billing") as consumer:   # AsyncClient
        async for record in consumer:
            await handle(record)

The same protocol and guarantees as `group_consumer.GroupConsumer` (at least once: see its
docstring), in one event loop: a heartbeat task, one fetch task per partition into a
bounded queue, and joining, reconciling and auto-commits inside `poll()` / the iterator,
driving the same sans-I/O member core (`member_rules.Membership`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal, TypeVar

import grpc

from replog.client.fetch_rules import GroupRecord, PartitionState, offset_at
from replog.client.group_consumer import QUEUE_BATCHES_MAX, ConsumerBase
from replog.client.group_rpcs import GroupRpc
from replog.client.groups import Coordinators, TopicPartition
from replog.client.member_rules import Heartbeat
from replog.client.results import FetchResult
from replog.client.retry import RetryPolicy, acall_with_retry
from replog.errors import (
    IllegalGenerationError,
    OffsetOutOfRangeError,
    ReplogError,
    UnknownMemberError,
)
from replog.rpc_errors import from_rpc_error

T = TypeVar("T")


class AsyncGroupCalls(Coordinators):
    """`groups.GroupCalls`, awaited (over an `AsyncClient`'s channels and retry policy)."""

    blocking: Literal[False] = False

    async def run(self, rpc: GroupRpc[T]) -> T:
        """`GroupCalls.run`, awaited."""
        send, group = self._sender(rpc), rpc.group
        if group is None:
            reply = await self.client._call(lambda node: send(node.address), idempotent=True)
            return rpc.read(reply)

        async def attempt() -> T:
            address = self.coordinators.get(group) or await self.find_coordinator(group)
            try:
                return rpc.read(await send(address))
            except grpc.RpcError as exc:
                raise self.failed(rpc, from_rpc_error(exc), address) from None

        follow = self.follow(rpc)

        async def moved(err: ReplogError) -> bool:
            return follow(err)

        return await acall_with_retry(attempt, self.policy_of(rpc), moved)


class AsyncGroupConsumer(ConsumerBase):
    """`group_consumer.GroupConsumer` in asyncio (the same options, rules and cores)."""

    CLIENT_ID = "replog-python-aio"

    def _init_driver(self, client: Any, calls: AsyncGroupCalls | None) -> None:
        self.calls = calls or AsyncGroupCalls(client)
        self._heartbeat_now = asyncio.Event()
        self._answered = asyncio.Event()
        self._queue: asyncio.Queue[tuple[TopicPartition, int, object]] = asyncio.Queue(
            QUEUE_BATCHES_MAX
        )
        self._closed = False
        self._heartbeats: asyncio.Task[None] | None = None

    # -- membership ----------------------------------------------------------------------

    async def _join(self) -> None:
        answer, session_ms = await self.calls.join(
            self.group,
            self.topics,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            client_id=self.client_id,
        )
        self._member.joined(answer, session_ms, time.monotonic())
        if self._heartbeats is None:
            self._heartbeats = asyncio.create_task(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        while not self._closed:
            beat = self._member.heartbeat(self._pos.partitions)
            if beat is not None:
                await self._heartbeat(beat)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._heartbeat_now.wait(), self._member.heartbeat_interval_s
                )
            self._heartbeat_now.clear()

    async def _heartbeat(self, beat: Heartbeat) -> None:
        policy = RetryPolicy(attempts_max=1000, deadline_ms=beat.deadline_ms)
        try:
            answer = await self.calls.heartbeat(
                self.group, beat.member_id, beat.generation, beat.owned, policy, beat.timeout_s
            )
        except ReplogError as err:
            unknown = isinstance(err, UnknownMemberError)
            self._member.heartbeat_failed(beat, unknown, time.monotonic())
        else:
            self._member.heartbeat_answered(beat, answer, time.monotonic())
            self._answered.set()

    # -- the caller's task ---------------------------------------------------------------

    async def poll(self, timeout_s: float = 1.0) -> list[GroupRecord]:
        """Records (up to about `max_poll_records`), waiting up to `timeout_s` for some; what
        the previous call returned counts as processed."""
        self._poll_api = True
        self._pos.processed()
        await self._maintain()
        out = await self._records(timeout_s)
        self._pos.delivered(out)
        return out

    async def __aiter__(self) -> AsyncIterator[GroupRecord]:
        while not self._closed:
            await self._maintain()
            for record in self._hand_out(await self._records(1.0)):
                yield record

    async def _records(self, timeout_s: float) -> list[GroupRecord]:
        out = self._pos.take_held()
        if self._pos.held:
            return out  # still more held than one call returns
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while len(out) < self.max_poll_records:
            try:
                if out:
                    item = self._queue.get_nowait()
                else:
                    remaining = max(0.0, deadline - loop.time())
                    item = await asyncio.wait_for(self._queue.get(), remaining)
            except (asyncio.QueueEmpty, TimeoutError):
                break
            out.extend(await self._accept(*item))
            if self._member.changed:
                break
        return self._pos.cut(out)

    async def _accept(self, tp: TopicPartition, epoch: int, item: object) -> list[GroupRecord]:
        records = self._pos.accept(tp, epoch, item)
        if records is None:  # out of range: start again where auto_offset_reset says
            self._restart(tp, self._pos.reset(tp, await self._reset_position(tp)))
            return []
        return records

    async def _maintain(self) -> None:
        if self._closed:
            raise ReplogError("the consumer is closed")
        if self._member.needs_join():
            await self._drop(set(self._pos.partitions), commit=False)
            await self._join()
        plan = self._member.reconcile(self._pos.partitions)
        if plan is not None:
            await self._reconcile(*plan)
        if self._member.auto_commit_due(time.monotonic()):
            with contextlib.suppress(ReplogError):
                await self._commit(self._pos.consumed_offsets())

    async def _reconcile(self, revoked: set[TopicPartition], added: set[TopicPartition]) -> None:
        """Release `revoked` (committed, then `on_revoke`), then take `added`."""
        if revoked:
            await self._drop(revoked, commit=True)
        if added:
            await self._add(added)
        if revoked or added:
            self._member.rebalanced()
            self._heartbeat_now.set()  # tell the coordinator at once

    async def _drop(self, tps: set[TopicPartition], *, commit: bool) -> None:
        if not tps:
            return
        if commit and self.auto_commit:
            with contextlib.suppress(ReplogError):
                await self._commit(self._pos.consumed_offsets(tps))
        if self.on_revoke is not None:
            self.on_revoke(set(tps))
        for state in self._pos.drop(tps):
            _cancel(state)

    async def _add(self, tps: set[TopicPartition]) -> None:
        found = await self.calls.committed(self.group, sorted(tps))
        committed = {(c.topic, c.partition): c.offset for c in found}
        for tp in sorted(tps):
            offset = committed.get(tp, -1)
            if offset < 0:
                offset = await self._reset_position(tp)
            self._restart(tp, self._pos.add(tp, offset))
        if self.on_assign is not None:
            self.on_assign(set(tps))

    async def _reset_position(self, tp: TopicPartition) -> int:
        return await self._offset_at(tp, self.auto_offset_reset)

    async def _offset_at(self, tp: TopicPartition, where: str) -> int:
        """See `group_consumer.reset_offset`."""
        try:
            found: FetchResult | OffsetOutOfRangeError = await self.client.fetch(
                tp[0], tp[1], 0, max_bytes=1
            )
        except OffsetOutOfRangeError as err:
            found = err
        return offset_at(found, where)

    # -- fetching ------------------------------------------------------------------------

    def _restart(self, tp: TopicPartition, state: PartitionState) -> None:
        _cancel(state)
        epoch = self._pos.restart(state)
        if not state.paused:
            state.fetcher = asyncio.create_task(self._fetch_loop(tp, epoch, state.position))

    async def _fetch_loop(self, tp: TopicPartition, epoch: int, offset: int) -> None:
        topic, partition = tp
        while not self._closed:
            item: object
            try:
                item = await self.client.fetch(
                    topic,
                    partition,
                    offset,
                    max_bytes=self.fetch_bytes_max,
                    max_wait_ms=self.fetch_wait_ms,
                )
            except ReplogError as err:
                if err.retriable:
                    await asyncio.sleep(self.fetch_wait_ms / 1000)
                    continue
                item = err
            if isinstance(item, FetchResult):
                offset = item.next_offset
                if not len(item.records):
                    continue
            await self._queue.put((tp, epoch, item))
            if not isinstance(item, FetchResult):
                return

    # -- commits and positions -----------------------------------------------------------

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        member = self.member_id
        if member is None or not offsets:
            return
        try:
            await self.calls.commit(self.group, offsets, member, self.generation)
        except IllegalGenerationError:
            self._answered.clear()
            self._heartbeat_now.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._answered.wait(), self._member.session_s)
            await self.calls.commit(self.group, offsets, member, self.generation)
        except UnknownMemberError:
            self._member.mark_lost(member)
            raise

    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit `offsets`, or every partition's position (all records delivered so far)."""
        if offsets is None:
            offsets = self._pos.positions()
        await self._commit(offsets)

    async def committed(
        self, partitions: Sequence[TopicPartition] = ()
    ) -> dict[TopicPartition, int]:
        wanted = list(partitions) or sorted(self._pos.partitions)
        found = await self.calls.committed(self.group, wanted)
        return {(c.topic, c.partition): c.offset for c in found}

    async def seek(self, topic: str, partition: int, offset: int | str) -> None:
        tp = (topic, partition)
        if isinstance(offset := self._pos.seek_target(tp, offset), str):
            offset = await self._offset_at(tp, offset)
        self._restart(tp, self._pos.reset(tp, offset))

    async def seek_to_time(self, topic: str, partition: int, timestamp_ms: int) -> None:
        """See `GroupConsumer.seek_to_time`."""
        found = await self.client.offsets_for_times(topic, {partition: timestamp_ms})
        await self.seek(topic, partition, found[partition])

    async def close(self) -> None:
        if self._closed:
            return
        member = self.member_id
        try:
            if member is not None and not self._member.lost:
                if self.auto_commit:
                    if self._poll_api:
                        self._pos.processed()
                    with contextlib.suppress(ReplogError):
                        await self._commit(self._pos.consumed_offsets())
                with contextlib.suppress(ReplogError):
                    await self.calls.leave(self.group, member, RetryPolicy(attempts_max=3))
        finally:
            self._closed = True
            fetchers = [s.fetcher for s in self._pos.partitions.values()]
            tasks = [t for t in fetchers if isinstance(t, asyncio.Task)]
            if self._heartbeats is not None:
                tasks.append(self._heartbeats)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> AsyncGroupConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _cancel(state: PartitionState) -> None:
    """Cancel the partition's fetch task, if one runs."""
    if isinstance(state.fetcher, asyncio.Task):
        state.fetcher.cancel()
    state.fetcher = None
