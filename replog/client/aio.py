"""The asyncio twin of `Client`: the same calls, awaited, over `grpc.aio` channels.

Routing and retries as in `Client` (`routing.Routing`, `retry.acall_with_retry`): one
bootstrap address is enough (the client learns every node from metadata before its first
call), a node that does not answer is passed over, data calls go to the partition's
leader (NOT_LEADER hints followed), and retriable errors are retried within the
`RetryPolicy`. No producer batching here. Errors come back as the same typed
`ReplogError`s (`replog.rpc_errors`).

Idempotent appends (the default) travel over AppendStream, one stream per node shared by
the client's tasks (`aio_append_stream`): concurrent appends to a partition are pipelined,
up to 5 in flight, in order by their sequence numbers. `streaming=False` sends one unary
Append per batch instead (as do non-idempotent and acks="none" appends), and so does a
node that does not know AppendStream (UNIMPLEMENTED: an older server).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import cached_property
from typing import Any, Literal, TypeVar, Unpack

import grpc

from replog.client import client_calls as calls
from replog.client import connect, formats
from replog.client.aio_append_stream import AsyncAppendStreams
from replog.client.aio_groups import AsyncGroupCalls, AsyncGroupConsumer
from replog.client.aio_pipeline import Answered, AsyncPipeline
from replog.client.aio_producer import AsyncProducer
from replog.client.assigned_consumer import AsyncAssignedConsumer
from replog.client.client_base import ClientBase, Node
from replog.client.consumer import STREAM_REPLY_BYTES
from replog.client.factories import AssignedOptions, GroupOptions
from replog.client.group_rpcs import GroupRpc
from replog.client.pipeline_rules import unimplemented
from replog.client.produce_rules import AsyncProducerOptions
from replog.client.results import AppendResult
from replog.client.retry import RetryPolicy, acall_with_retry
from replog.client.sequences import Identity
from replog.errors import ReplogError, TopicNotFoundError
from replog.rpc_errors import from_rpc_error
from replog.tls import aio_channel
from replog.v1 import log_pb2

T = TypeVar("T")


class AsyncClient(ClientBase):
    """The asyncio twin of `Client` (see the module doc): the same calls, awaited
    (`client_calls.ClientCalls`), the same options (`client_base.ClientBase`); its
    producers are `AsyncProducer`s (`producer`), its group consumers `AsyncGroupConsumer`s
    (`consumer(topic, group=...)`), its assigned consumers `AsyncAssignedConsumer`s.
    `await close()` (or `async with`) ends its channels."""

    blocking: Literal[False] = False

    def _init_driver(self) -> None:
        self._identity_lock = asyncio.Lock()
        self._discovering = False
        self._streams = AsyncAppendStreams(self.routing, self.attempt_timeout_s)
        self._pipeline = AsyncPipeline(
            self._send,
            self._reroute,
            self.producer_identity,
            self._sequences,
            self.retry,
            in_flight_bytes_max=self.in_flight_bytes_max,
        )

    # -- plumbing ---------------------------------------------------------------------------

    _open_channel = staticmethod(aio_channel)

    async def run(self, flow: calls.Flow[T]) -> T:
        """Perform `flow`'s steps in turn, awaited (`client_calls.drive`)."""
        return await calls.drive(flow, self._perform)

    async def _perform(self, step: calls.Step) -> Any:
        if isinstance(step, GroupRpc):
            return await self.groups.run(step)
        send = calls.Sender(step, self)
        try:
            reply = await self._call(send, *send.route, **send.options)
        except ReplogError as err:
            return send.settle(err)
        return step.read(reply)

    async def _call(
        self, fn: Callable[[Node], Awaitable[T]], topic: str | None = None, partition: int = 0,
        *, idempotent: bool = False, discover: bool = True, retry: RetryPolicy | None = None,
    ) -> T:  # fmt: skip
        """`fn(node)` with typed errors, retries and routing (see `Client._call`)."""
        if discover:
            await self._discover(topic)

        async def attempt() -> T:
            address = self.routing.address(topic, partition)
            try:
                out = await fn(self._node(address))
            except grpc.RpcError as exc:
                raise await self._failed(exc, address, idempotent=idempotent) from None
            self.routing.answered(address)
            return out

        async def rerouted(err: ReplogError) -> bool:
            return await self._reroute(err, topic, partition)

        return await acall_with_retry(attempt, retry or self.retry, rerouted)

    async def _failed(self, exc: grpc.RpcError, address: str, *, idempotent: bool) -> ReplogError:
        """The typed error of a failed attempt (`connect.check`; its probes block, so they
        run in a thread, and only before the first contact with the cluster)."""
        err = from_rpc_error(exc)
        if connect.transport_failure(err):
            tls, routing = self.tls is not None, self.routing
            if routing.reached:
                err = connect.check(err, address, tls, routing)
            else:
                err = await asyncio.to_thread(connect.check, err, address, tls, routing)
        else:
            self.routing.answered(address)
        return self.routing.failed(err, address, idempotent=idempotent)

    async def _discover(self, topic: str | None) -> None:
        """Before the first call: learn every node of the cluster (`client_calls.discover`)."""
        if self.routing.discovered or self._discovering:
            return
        self._discovering = True
        try:
            await self.run(calls.discover(self, topic))
        finally:
            self._discovering = False

    async def _reroute(self, err: ReplogError, topic: str | None, partition: int) -> bool:
        """See `Client._reroute` (`client_calls.reroute`)."""
        return await self.run(calls.reroute(self, err, topic, partition))

    async def close(self) -> None:
        await self._pipeline.close()  # appends still waiting fail (outcome unknown)
        await self._streams.close()
        nodes = list(self._nodes.values())
        self._nodes.clear()
        for node in nodes:
            await node.channel.close(None)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- records ----------------------------------------------------------------------------

    async def append(
        self, topic: str, partition: int, values: formats.Values, *, acks: str = "all"
    ) -> AppendResult:
        """Append one batch; idempotent, and records as in `Client.append`."""
        try:
            envelope = await self.topic_format(topic) == formats.ENVELOPE
            encoded = formats.to_values(topic, values, envelope)
            return await self._append(topic, partition, encoded, acks)
        except TopicNotFoundError:
            self._formats.pop(topic, None)
            raise

    async def _append(
        self, topic: str, partition: int, values: Sequence[bytes], acks: str
    ) -> AppendResult:
        req = log_pb2.AppendRequest(
            topic=topic, partition=partition, values=values, acks=calls.ACKS[acks]
        )

        async def call(node: Node) -> AppendResult:  # not retried after a timeout: see Client
            resp = await node.log.Append(req, timeout=self.commit_timeout_s)
            return AppendResult(resp.base_offset, resp.last_offset, resp.high_watermark)

        if not self.idempotent or acks == "none" or not values:
            return await self._call(call, topic, partition)
        await self._discover(topic)
        return await self._pipeline.append(req)

    async def _enqueue(self, req: log_pb2.AppendRequest) -> asyncio.Future[AppendResult]:
        """Queue an idempotent batch on the pipeline (`AsyncPipeline.enqueue`): batches of a
        partition enqueued in turn are appended in that order, several in flight."""
        await self._discover(req.topic)
        return await self._pipeline.enqueue(req)

    async def _send(self, req: log_pb2.AppendRequest) -> Answered:
        """Write `req` to its partition's leader now (over its AppendStream, or as a unary
        Append with `streaming=False` or to a node without AppendStream, noted when it
        answers UNIMPLEMENTED); returns how to await its answer (`aio_pipeline`)."""
        address = self.routing.address(req.topic, req.partition)
        node = self._node(address)
        if not self.streaming or address in self._streams.unary_only:
            task = asyncio.ensure_future(self._unary(req, node))
            return lambda: task
        stream = self._streams.get(address, node.log)
        fut = await stream.send(req)

        async def answered() -> AppendResult:
            try:
                resp = await stream.answer(fut)
            except ReplogError as err:
                if unimplemented(err):  # an older server: nothing appended
                    self._streams.unary_only.add(address)
                raise
            return AppendResult(resp.base_offset, resp.last_offset, resp.high_watermark)

        return answered

    async def _unary(self, req: log_pb2.AppendRequest, node: Node) -> AppendResult:
        try:
            resp = await node.log.Append(req, timeout=self.attempt_timeout_s)
        except grpc.RpcError as exc:
            raise await self._failed(exc, node.address, idempotent=True) from None
        return AppendResult(resp.base_offset, resp.last_offset, resp.high_watermark)

    async def producer_identity(self) -> Identity:
        """This client's producer id and epoch (see `Client.producer_identity`)."""
        async with self._identity_lock:
            known = self._sequences.identity
            return known if known is not None else await self.run(calls.init_producer(self))

    async def batches(
        self, topic: str, partition: int, offset: int
    ) -> AsyncIterator[formats.Decoded]:
        """Data records from `offset` via StreamFrom, following the tail until cancelled;
        reconnects (to the partition's leader, wherever it is now) on retriable errors.
        On an envelope topic the records are decoded envelopes (`records.DecodedRecords`)."""
        await self._discover(topic)
        envelope = await self.topic_format(topic) == formats.ENVELOPE
        resume = calls.StreamResume(self.retry, topic, partition, offset, STREAM_REPLY_BYTES)
        while True:
            address = self.routing.address(topic, partition)
            call = self._node(address).log.StreamFrom(resume.request())
            try:
                async for batch in call:
                    decoded = formats.decode(resume.advanced(batch).frames, envelope)
                    if len(decoded):
                        yield decoded
                return  # the server ended the stream normally
            except grpc.RpcError as exc:
                err = await self._failed(exc, address, idempotent=True)
                backoff_s = resume.backoff_s(err)
                if backoff_s is None:
                    raise err from None
                rerouted = await self._reroute(err, topic, partition)
                await asyncio.sleep(resume.pause_s(backoff_s, rerouted))
            finally:
                call.cancel()

    def producer(self, topic: str, **options: Unpack[AsyncProducerOptions]) -> AsyncProducer:
        """A batching producer of `topic` on this loop (`aio_producer.AsyncProducer`; use
        `async with`): `await send(value, key=, on_delivery=)` returns a future of the
        record's `RecordMetadata`. Batches leave per partition when `batch_bytes_max` /
        `batch_records_max` is reached or `linger_ms` after their first record, pipelined
        through this client's idempotent pipeline (its `in_flight_bytes_max`, 5 batches per
        partition)."""
        return AsyncProducer(self, topic, **options)

    def assigned_consumer(
        self, partitions: Sequence[tuple[str, int]], **options: Unpack[AssignedOptions]
    ) -> AsyncAssignedConsumer:
        """`Client.assigned_consumer` on this loop (`async with`, or the first `poll`,
        starts its fetch tasks)."""
        return AsyncAssignedConsumer(self, partitions, **options)

    def consumer(
        self, topic: str | Sequence[str], *, group: str, **options: Unpack[GroupOptions]
    ) -> AsyncGroupConsumer:
        """A member of consumer group `group` (`aio_groups.AsyncGroupConsumer`, whose keyword
        arguments `options` are); `batches()` reads one partition without a group."""
        return AsyncGroupConsumer(self, topic, group, calls=self.groups, **options)

    # -- consumer groups (replog.v1.Groups) ----------------------------------------------

    @cached_property
    def groups(self) -> AsyncGroupCalls:
        return AsyncGroupCalls(self)
