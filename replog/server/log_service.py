"""The `replog.v1.Log` service: Append, Fetch (long poll) and StreamFrom (follows the HW).

Replies carry frames exactly as read from disk (format: `replog.frames`, documented in
`proto/replog/v1/log.proto`). Each reply's frames are bounded by `fetch_bytes_max` (at least
one whole frame when one is committed), which the settings keep under the gRPC message limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from replog import frames
from replog.errors import (
    EmptyBatchError,
    InvalidArgumentError,
    RecordTooLargeError,
    ReplogError,
    ShuttingDownError,
)
from replog.server.logs import log
from replog.server.partition import Acks, Partition
from replog.server.rpc import Context, streaming, unary
from replog.v1 import log_pb2, log_pb2_grpc

if TYPE_CHECKING:
    from replog.server.node import Node

_log = logging.getLogger("replog.server.log")


class LogService(log_pb2_grpc.LogServicer):
    def __init__(self, node: Node) -> None:
        self.node = node
        self.metrics = node.metrics
        self.settings = node.settings
        self.supervisor = node.supervisor

    def _max_bytes(self, requested: int) -> int:
        limit = self.settings.fetch_bytes_max
        return limit if requested == 0 else min(requested, limit)

    # -- Append -----------------------------------------------------------------------------

    @unary("Append")
    async def Append(
        self, request: log_pb2.AppendRequest, context: Context
    ) -> log_pb2.AppendResponse:
        values = list(request.values)
        if not values:
            raise EmptyBatchError("an append needs at least one record")
        if request.acks not in (0, *Acks):
            raise InvalidArgumentError(f"unknown acks value {request.acks}", acks=request.acks)
        acks = Acks(request.acks) if request.acks else Acks.ALL
        part = await self.node.partition_async(request.topic, request.partition)
        timeout_s = self.settings.ack_timeout_ms / 1000
        if acks is Acks.NONE:  # validate what can be now: nobody hears about later failures
            part.check_leader()
            limit = part.log.config.record_bytes_max
            biggest = max(map(len, values))
            if biggest > limit:
                raise RecordTooLargeError(
                    f"a record of {biggest} bytes exceeds record_bytes_max={limit}",
                    record_bytes=biggest,
                    record_bytes_max=limit,
                )
            self.supervisor.spawn(self._append(part, values, acks), "append-acks-none")
            return log_pb2.AppendResponse(
                base_offset=-1, last_offset=-1, high_watermark=part.high_watermark
            )
        result = await part.append(values, acks, timeout_s)
        self.metrics.append_records.inc(len(values))
        self.metrics.append_bytes.inc(sum(map(len, values)))
        return log_pb2.AppendResponse(
            base_offset=result.base_offset,
            last_offset=result.last_offset,
            high_watermark=part.high_watermark,
        )

    async def _append(self, part: Partition, values: list[bytes], acks: Acks) -> None:
        try:
            await part.append(values, acks, self.settings.ack_timeout_ms / 1000)
        except ReplogError as exc:  # acks=none: nobody waits for the outcome; log it
            log(_log, "append.dropped", logging.WARNING, topic=part.topic, error=repr(exc))
            return
        self.metrics.append_records.inc(len(values))
        self.metrics.append_bytes.inc(sum(map(len, values)))

    # -- Fetch ------------------------------------------------------------------------------

    @unary("Fetch")
    async def Fetch(self, request: log_pb2.FetchRequest, context: Context) -> log_pb2.FetchResponse:
        part = await self.node.partition_async(request.topic, request.partition)
        part.check_leader()
        offset = request.offset
        max_bytes = self._max_bytes(request.max_bytes)
        wait_s = min(request.max_wait_ms, self.settings.fetch_wait_ms_max) / 1000
        if wait_s > 0 and _not_committed_yet(part, offset):
            with contextlib.suppress(ShuttingDownError):
                await part.wait_high_watermark(offset, wait_s)
            if part.closed:  # deleted or shutting down while waiting: the lookup says which
                part = await self.node.partition_async(request.topic, request.partition)
        data = await _read_committed(part, offset, max_bytes)
        self.metrics.read_bytes.inc(len(data))
        return log_pb2.FetchResponse(
            frames=data,
            high_watermark=part.high_watermark,
            log_start_offset=part.log.log_start_offset,
            next_offset=frames.next_offset(data, offset),
        )

    # -- StreamFrom -------------------------------------------------------------------------

    @streaming("StreamFrom")
    async def StreamFrom(
        self, request: log_pb2.StreamFromRequest, context: Context
    ) -> AsyncIterator[log_pb2.StreamBatch]:
        topic, partition = request.topic, request.partition
        part = await self.node.partition_async(topic, partition)
        part.check_leader()
        offset = request.offset
        max_bytes = self._max_bytes(request.max_bytes)
        # Validate the start offset now (OUT_OF_RANGE) rather than after a wait.
        data = await _read_committed(part, offset, max_bytes)
        while True:
            if data:
                nxt = frames.next_offset(data, offset)
                self.metrics.read_bytes.inc(len(data))
                yield log_pb2.StreamBatch(
                    frames=data,
                    high_watermark=part.high_watermark,
                    log_start_offset=part.log.log_start_offset,
                    next_offset=nxt,
                )
                offset = nxt
                data = b""
            event = part.hw_changed()
            if offset >= part.high_watermark:
                if part.closed:  # deleted topic or shutdown: the lookup raises
                    part = await self.node.partition_async(topic, partition)
                    continue
                await event.wait()
                continue
            data = await asyncio.to_thread(part.log.read, offset, max_bytes)


def _not_committed_yet(part: Partition, offset: int) -> bool:
    """`offset` is at or past the HW but inside the log: its record may still commit. A
    newly elected leader's HW reaches what its predecessor acknowledged only once its own
    epoch commits, so a reader may briefly be ahead of it: it waits instead of failing."""
    return part.high_watermark <= offset <= part.log.log_end_offset


async def _read_committed(part: Partition, offset: int, max_bytes: int) -> bytes:
    """Committed frames from `offset`; b"" while it is not committed yet; OUT_OF_RANGE
    below the log start or past the LEO."""
    if _not_committed_yet(part, offset):
        return b""
    return await asyncio.to_thread(part.log.read, offset, max_bytes)
