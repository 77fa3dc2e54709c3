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
from collections.abc import AsyncIterator, Generator
from typing import Any, Literal, TypeVar

import grpc

from replog.client import member_flows as flows
from replog.client.client_calls import drive
from replog.client.fetch_rules import GroupRecord, PartitionState, fetched, offset_at
from replog.client.group_consumer import QUEUE_BATCHES_MAX, ConsumerBase
from replog.client.group_rpcs import GroupRpc
from replog.client.groups import Coordinators, TopicPartition
from replog.client.results import FetchResult
from replog.client.retry import acall_with_retry
from replog.errors import (
    OffsetOutOfRangeError,
    ReplogError,
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
    blocking: Literal[False] = False

    def _init_driver(self, client: Any, calls: AsyncGroupCalls | None) -> None:
        self.calls = calls or AsyncGroupCalls(client)
        self._heartbeat_now = asyncio.Event()
        self._answered = asyncio.Event()
        self._queue: asyncio.Queue[tuple[TopicPartition, int, object]] = asyncio.Queue(
            QUEUE_BATCHES_MAX
        )
        self._closed = False
        self._heartbeats: asyncio.Task[None] | None = None
        self.lock = contextlib.nullcontext()  # one task changes the member's state at a time

    # -- the member's I/O (`member_flows` says when) ----------------------------------

    async def run(self, flow: Generator[Any, Any, T]) -> T:
        """Perform a member flow's steps (`member_flows`), awaited."""
        return await drive(flow, self._perform)

    async def _perform(self, step: flows.Step) -> Any:
        if isinstance(step, GroupRpc):
            return await self.calls.run(step)
        return await getattr(self, step.method)(step)

    async def _do_reset_offset(self, step: flows.ResetOffset) -> int:
        return await self._offset_at(step.tp, step.where)

    async def _do_restart_fetch(self, step: flows.Restart) -> None:
        self._restart(step.tp, step.state)

    async def _do_stop_fetch(self, step: flows.StopFetch) -> None:
        for state in step.states:
            _cancel(state)

    async def _do_start_heartbeats(self, _step: flows.StartHeartbeats) -> None:
        if self._heartbeats is None:
            self._heartbeats = asyncio.create_task(self._heartbeat_loop())

    async def _do_heartbeat_now(self, _step: flows.HeartbeatNow) -> None:
        self._heartbeat_now.set()

    async def _do_await_heartbeat(self, step: flows.AwaitHeartbeat) -> None:
        self._answered.clear()
        self._heartbeat_now.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._answered.wait(), step.timeout_s)

    async def _heartbeat_loop(self) -> None:
        while not self._closed:
            beat = self._member.heartbeat(self._pos.partitions)
            if beat is not None and await self.run(flows.heartbeat(self, beat)):
                self._answered.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._heartbeat_now.wait(), self._member.heartbeat_interval_s
                )
            self._heartbeat_now.clear()

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
        return await self.run(flows.records(self, timeout_s))

    async def _do_take(self, step: flows.Take) -> object:
        if not step.timeout_s:
            return self._queue.get_nowait() if not self._queue.empty() else None
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(self._queue.get(), step.timeout_s)
        return None

    async def _maintain(self) -> None:
        if self._closed:
            raise ReplogError("the consumer is closed")
        await self.run(flows.maintain(self))

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
        wait_ms = self.fetch_wait_ms
        while not self._closed:
            item: FetchResult | ReplogError
            try:
                item = await self.client.fetch(
                    topic, partition, offset, max_bytes=self.fetch_bytes_max, max_wait_ms=wait_ms
                )
            except ReplogError as err:
                item = err
            after = fetched(item, offset, wait_ms)
            offset = after.offset
            if after.deliver:
                await self._queue.put((tp, epoch, item))
            elif after.pause_s:
                await asyncio.sleep(after.pause_s)
            if after.last:
                return

    # -- positions and the end ---------------------------------------------------------

    async def seek_to_time(self, topic: str, partition: int, timestamp_ms: int) -> None:
        """See `GroupConsumer.seek_to_time`."""
        found = await self.client.offsets_for_times(topic, {partition: timestamp_ms})
        await self.seek(topic, partition, found[partition])

    async def close(self) -> None:
        if self._closed:
            return
        try:
            await self.run(flows.leave(self))
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
