"""The `replog.v1.Log` service: Append, AppendStream (pipelined appends: `append_stream`),
Fetch (long poll) and StreamFrom (follows the HW).

Replies carry frames exactly as read from disk (format: `replog.frames`, documented in
`proto/replog/v1/log.proto`). Each reply's frames are bounded by `fetch_bytes_max` (at least
one whole frame when one is committed), which the settings keep under the gRPC message limit.

A stream's replies are bounded by `stream_bytes_max` (small: 64 KiB by default), and a
stream reads its next batch only once gRPC's flow control has taken the previous reply
(`rpc.streaming`): an idle or slow reader costs the node about one small batch, not a
growing queue. A reader that asks for larger replies (`max_bytes`, up to `fetch_bytes_max`)
gets them while it is behind the HW, the bytes above `stream_bytes_max` borrowed from the
node's `stream_bytes_pool_max` (`limits.StreamWindow`): catching up costs few messages, and
all streams together never hold more than the pool above their floors. Its memory is
released when the stream ends.

A Fetch reply is counted in the node's request pool (`limits.RequestPool`, shared with
Append requests) before its frames are read, as `REPLY_COPIES` x `max_bytes`, then at its
real size: a flood of Fetch calls waits for room instead of reading gigabytes at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from replog import frames, records
from replog.errors import EmptyBatchError, InvalidArgumentError, LogClosedError
from replog.replication import Acks
from replog.replication.producers import (
    PRODUCER_EPOCH_MAX,
    PRODUCER_ID_MAX,
    SEQUENCE_MAX,
    ProducerBatch,
)
from replog.server.control.producer_ids import ProducerIds, refuse_reservation
from replog.server.control.routing import Router
from replog.server.edge.limits import Limits
from replog.server.edge.rpc import Context, streaming, unary
from replog.server.meta.metadata import ENVELOPE, LOG_APPEND_TIME, TopicMeta
from replog.server.metrics import Metrics
from replog.server.partitions.replicated import ReplicatedPartition
from replog.server.peering.peers import FORWARDED
from replog.server.services import append_stream
from replog.server.settings import Settings
from replog.v1 import log_pb2, log_pb2_grpc

# Copies of a Fetch reply alive while its handler runs: the frames read, the reply message.
# (gRPC serializes it after the handler returns, into its send buffer: not counted.)
REPLY_COPIES = 2

WIRE_ACKS: dict[int, Acks] = {
    log_pb2.ACKS_NONE: Acks.NONE,
    log_pb2.ACKS_LEADER: Acks.LEADER,
    log_pb2.ACKS_ALL: Acks.ALL,
}


def acks_from_wire(value: int) -> Acks:
    """The request's acks (unset: all); INVALID_ARGUMENT for a value this server lacks."""
    if value == 0:
        return Acks.ALL
    acks = WIRE_ACKS.get(value)
    if acks is None:
        raise InvalidArgumentError(f"unknown acks value {value}", acks=value)
    return acks


def producer_from_wire(
    request: log_pb2.AppendRequest, count: int | None = None
) -> ProducerBatch | None:
    """The request's idempotent-producer fields, range-checked (None: not idempotent), for
    a batch of `count` records (default: the request's values)."""
    pid, epoch, seq = request.producer_id, request.producer_epoch, request.base_sequence
    if pid == 0:
        if epoch or seq:
            raise InvalidArgumentError(
                "producer_epoch and base_sequence need a producer_id", producer_id=0
            )
        return None
    if pid > PRODUCER_ID_MAX or epoch > PRODUCER_EPOCH_MAX:
        raise InvalidArgumentError(
            "producer_id or producer_epoch out of range", producer_id=pid, producer_epoch=epoch
        )
    if seq + (len(request.values) if count is None else count) - 1 > SEQUENCE_MAX:
        raise InvalidArgumentError("base_sequence out of range", base_sequence=seq)
    return ProducerBatch(pid, epoch, seq)


@dataclass(frozen=True, slots=True)
class PreparedAppend:
    """A checked append, ready for its partition (`LogService.prepare_append`)."""

    part: ReplicatedPartition
    values: list[bytes]
    acks: Acks
    producer: ProducerBatch | None
    values_bytes: int  # the values' total size (the append_bytes metric)


class LogService(log_pb2_grpc.LogServicer):
    def __init__(
        self,
        router: Router,
        metrics: Metrics,
        settings: Settings,
        limits: Limits,
        producer_ids: ProducerIds,
    ) -> None:
        self.producer_ids = producer_ids
        self.router = router
        self.metrics = metrics
        self.settings = settings
        self.limits = limits

    def _max_bytes(self, requested: int) -> int:
        limit = self.settings.fetch_bytes_max
        return limit if requested == 0 else min(requested, limit)

    # -- Append -----------------------------------------------------------------------------

    @unary("Append")
    async def Append(
        self, request: log_pb2.AppendRequest, context: Context
    ) -> log_pb2.AppendResponse:
        base, last, hw = await self.complete_append(await self.prepare_append(request))
        return log_pb2.AppendResponse(base_offset=base, last_offset=last, high_watermark=hw)

    @streaming("AppendStream")
    def AppendStream(
        self, requests: AsyncIterator[log_pb2.AppendRequest], context: Context
    ) -> AsyncGenerator[log_pb2.AppendStreamResponse, None]:
        return append_stream.answer(self, requests)

    async def prepare_append(
        self, request: log_pb2.AppendRequest, values: list[bytes] | None = None
    ) -> PreparedAppend:
        """What an append checks before its partition takes it (Append and AppendStream
        alike): a batch, valid acks and producer fields, this node leads the partition
        (NOT_LEADER with the leader hint), the topic's record format.

        Each value is taken out of the request once (`list(request.values)`: a Python
        `bytes` per record) and measured once (`values_bytes`, for the metrics and for
        `ReplicatedPartition.append`'s size check of the batch as a whole).

        `values`: the batch, when the caller holds it as a list already (the Kafka edge's
        envelopes; `request` then carries none): not copied into the request and out."""
        values = list(request.values) if values is None else values
        if not values:
            raise EmptyBatchError("an append needs at least one record")
        acks = acks_from_wire(request.acks)
        producer = producer_from_wire(request, len(values))
        part = await self.router.leader_replica(request.topic, request.partition)
        values, values_bytes = _as_topic_stores(await self.router.topic(request.topic), values)
        if values_bytes < 0:
            values_bytes = sum(map(len, values))
        return PreparedAppend(part, values, acks, producer, values_bytes)

    async def complete_append(self, prepared: PreparedAppend) -> tuple[int, int, int]:
        """Append a prepared batch: (base_offset, last_offset, high_watermark) once its acks
        are met ((-1, -1, hw) for acks=none). Its partition's owner performs the append: a
        caller cancelled at any await leaves it whole (done, or not started)."""
        part, values = prepared.part, prepared.values
        timeout_s = self.settings.ack_timeout_ms / 1000
        result = await part.append(
            values, prepared.acks, timeout_s, prepared.producer, values_bytes=prepared.values_bytes
        )
        self.metrics.append_records.inc(len(values))
        self.metrics.append_bytes.inc(prepared.values_bytes)
        if result is None:  # acks=none: no offsets
            return -1, -1, part.high_watermark
        return result.base_offset, result.last_offset, part.high_watermark

    # -- InitProducer -------------------------------------------------------------------------

    @unary("InitProducer")
    async def InitProducer(
        self, request: log_pb2.InitProducerRequest, context: Context
    ) -> log_pb2.InitProducerResponse:
        refuse_reservation(request)  # (a node's call, on the peer listener only)
        return await self._init_producer(request, context)

    async def _init_producer(
        self, request: log_pb2.InitProducerRequest, context: Context
    ) -> log_pb2.InitProducerResponse:
        forwarded = any(k == FORWARDED for k, _ in (context.invocation_metadata() or ()))
        pid, epoch = await self.producer_ids.init(
            request.name, resume=request.resume, forwarded=forwarded
        )
        return log_pb2.InitProducerResponse(producer_id=pid, producer_epoch=epoch)

    @unary("InitProducer")
    async def InitProducerFromPeer(
        self, request: log_pb2.InitProducerRequest, context: Context
    ) -> log_pb2.InitProducerResponse:
        """The peer listener's InitProducer: a forwarded one, or a node's reservation of a
        block of anonymous producer ids (`producer_ids`), proposed here as metadata leader."""
        if not request.reserve_block:
            return await self._init_producer(request, context)
        block = await self.producer_ids.reserve_here()
        return log_pb2.InitProducerResponse(
            producer_id=block.start, producer_epoch=0, block_ids=len(block)
        )

    # -- Fetch ------------------------------------------------------------------------------

    @unary("Fetch")
    async def Fetch(self, request: log_pb2.FetchRequest, context: Context) -> log_pb2.FetchResponse:
        return await self.fetch(request)

    async def fetch(self, request: log_pb2.FetchRequest) -> log_pb2.FetchResponse:
        """Fetch's work (the Kafka listener's Fetch comes here too)."""
        part = await self.router.leader_replica(request.topic, request.partition)
        offset = request.offset
        max_bytes = self._max_bytes(request.max_bytes)
        wait_s = min(request.max_wait_ms, self.settings.fetch_wait_ms_max) / 1000
        if wait_s > 0 and _not_committed_yet(part, offset):
            # Deleted while waiting: UNKNOWN_TOPIC (even if created again since: that is
            # another topic); the node is stopping: SHUTTING_DOWN.
            await part.wait_high_watermark(offset, wait_s)
        # The reply is counted in the node's request pool before it is read (after the wait:
        # a long poll holds none of it), at its real size once read.
        pool = self.limits.requests
        held, read = REPLY_COPIES * max_bytes, False
        await pool.reserve(held)
        try:
            hw = part.high_watermark
            data = await _read_committed(part, offset, max_bytes)
            pool.resize(held, REPLY_COPIES * len(data))
            held, read = REPLY_COPIES * len(data), True
            self.metrics.read_bytes.inc(len(data))
            return log_pb2.FetchResponse(
                frames=data,
                high_watermark=part.high_watermark,
                log_start_offset=part.log.log_start_offset,
                next_offset=_next_offset(data, offset, hw),
            )
        finally:
            pool.release(held, read=read)

    # -- StreamFrom -------------------------------------------------------------------------

    @streaming("StreamFrom")
    async def StreamFrom(
        self, request: log_pb2.StreamFromRequest, context: Context
    ) -> AsyncGenerator[log_pb2.StreamBatch, None]:
        topic, partition = request.topic, request.partition
        part = await self.router.leader_replica(topic, partition)
        offset = request.offset
        asked = self._max_bytes(request.max_bytes)
        floor = min(asked, self.settings.stream_bytes_max)
        window = self.limits.stream_window(floor, asked if request.max_bytes else floor)
        try:
            # Validate the start offset now (OUT_OF_RANGE) rather than after a wait.
            data = await _read_committed(part, offset, window.widen())
            while True:
                if data:
                    nxt = frames.next_offset(data, offset)
                    self.metrics.read_bytes.inc(len(data))
                    reply = log_pb2.StreamBatch(
                        frames=data,
                        high_watermark=part.high_watermark,
                        log_start_offset=part.log.log_start_offset,
                        next_offset=nxt,
                    )
                    data = b""  # the reply holds the one copy while it waits for flow control
                    offset = nxt
                    yield reply
                    del reply
                event = part.hw_changed()
                if part.closed:  # deleted (UNKNOWN_TOPIC, even if created again) or shutdown
                    raise part.closed_error()
                if offset >= part.high_watermark:
                    window.shrink()  # caught up: wait holding the floor only
                    await event.wait()
                    continue
                hw = part.high_watermark
                data = await _read(part, offset, window.widen())
                offset = _next_offset(data, offset, hw) if not data else offset
        finally:
            window.close()


def _as_topic_stores(meta: TopicMeta, values: list[bytes]) -> tuple[list[bytes], int]:
    """An envelope topic takes well-formed envelopes only (INVALID_RECORD, nothing
    appended); with log-append time each gets the leader's clock (8 bytes rewritten).
    With the values' total size when it was measured on the way (-1: not measured)."""
    if meta.format != ENVELOPE:
        return values, -1
    values_bytes = records.validate(values)
    if meta.timestamp_type == LOG_APPEND_TIME:  # same sizes: 8 bytes rewritten in place
        return records.stamp(values, time.time_ns() // 1_000_000), values_bytes
    return values, values_bytes


def _next_offset(data: bytes, offset: int, hw: int) -> int:
    """Where a reader of `data` from `offset` goes on: past its last frame, or, when a read
    below `hw` (the HW before it: it only grows) found nothing, to `hw`: the log cleaner
    left a gap there (a compacted topic), which a reader steps over."""
    if data:
        return frames.next_offset(data, offset)
    return max(offset, hw)


def _not_committed_yet(part: ReplicatedPartition, offset: int) -> bool:
    """`offset` is at or past the HW but inside the log: its record may still commit. A
    newly elected leader's HW reaches what its predecessor acknowledged only once its own
    epoch commits, so a reader may briefly be ahead of it: it waits instead of failing."""
    return part.high_watermark <= offset <= part.log.log_end_offset


async def _read_committed(part: ReplicatedPartition, offset: int, max_bytes: int) -> bytes:
    """Committed frames from `offset`; b"" while it is not committed yet; OUT_OF_RANGE
    below the log start or past the LEO."""
    if _not_committed_yet(part, offset):
        return b""
    return await _read(part, offset, max_bytes)


async def _read(part: ReplicatedPartition, offset: int, max_bytes: int) -> bytes:
    """Committed frames from `offset`; a log closed under the read (its topic deleted, or
    the node stopping) ends the request as the replica's closing says."""
    try:
        return await asyncio.to_thread(part.log.read, offset, max_bytes)
    except LogClosedError as exc:
        raise part.closed_error() from exc
