"""The asyncio twin of `Client` (thin): the same calls, awaited, over a `grpc.aio` channel.

No producer batching or routing cache here: each call goes to the one address given, and
errors come back as the same typed `ReplogError`s (`replog.rpc_errors`). Retries: none;
wrap calls yourself if you need them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import grpc

from replog import frames
from replog.client.client import ACKS, CHANNEL_OPTIONS
from replog.client.consumer import STREAM_REPLY_BYTES
from replog.client.results import AppendResult, FetchResult, Offsets
from replog.rpc_errors import from_rpc_error
from replog.tls import ClientTls, aio_channel
from replog.v1 import admin_pb2, admin_pb2_grpc, log_pb2, log_pb2_grpc


class AsyncClient:
    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 30.0,
        tls: ClientTls | None = None,
        token: str | None = None,
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._channel = aio_channel(address, tls, CHANNEL_OPTIONS, token)
        self._log = log_pb2_grpc.LogStub(self._channel)  # type: ignore[no-untyped-call]
        self._admin = admin_pb2_grpc.AdminStub(self._channel)  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        await self._channel.close(None)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def create_topic(self, name: str, partitions: int = 1) -> None:
        req = admin_pb2.CreateTopicRequest(name=name, partitions=partitions)
        try:
            await self._admin.CreateTopic(req, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    async def list_offsets(self, topic: str, partitions: Sequence[int] = ()) -> list[Offsets]:
        req = admin_pb2.ListOffsetsRequest(topic=topic, partitions=list(partitions))
        try:
            resp = await self._admin.ListOffsets(req, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        return [
            Offsets(p.partition, p.earliest, p.latest, p.log_end_offset) for p in resp.partitions
        ]

    async def append(
        self, topic: str, partition: int, values: Sequence[bytes], *, acks: str = "all"
    ) -> AppendResult:
        req = log_pb2.AppendRequest(
            topic=topic, partition=partition, values=values, acks=ACKS[acks]
        )
        try:
            resp = await self._log.Append(req, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        return AppendResult(resp.base_offset, resp.last_offset, resp.high_watermark)

    async def fetch(
        self, topic: str, partition: int, offset: int, *, max_bytes: int = 0, max_wait_ms: int = 0
    ) -> FetchResult:
        req = log_pb2.FetchRequest(
            topic=topic,
            partition=partition,
            offset=offset,
            max_bytes=max_bytes,
            max_wait_ms=max_wait_ms,
        )
        try:
            resp = await self._log.Fetch(req, timeout=self.timeout_s + max_wait_ms / 1000)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        return FetchResult(
            frames.decode(resp.frames).data_records(),
            resp.high_watermark,
            resp.log_start_offset,
            resp.next_offset,
        )

    async def batches(
        self, topic: str, partition: int, offset: int
    ) -> AsyncIterator[frames.DecodedFrames]:
        """Data records from `offset` via StreamFrom, following the tail until cancelled."""
        req = log_pb2.StreamFromRequest(
            topic=topic, partition=partition, offset=offset, max_bytes=STREAM_REPLY_BYTES
        )
        call = self._log.StreamFrom(req)
        try:
            async for batch in call:
                decoded = frames.decode(batch.frames)
                if decoded.control is not None:
                    decoded = decoded.data_records()
                if len(decoded):
                    yield decoded
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        finally:
            call.cancel()
