"""The replog Python client (sync): `Client`, its `Producer` and `Consumer`.

Modules: `client` (channels, routing, admin and record calls), `producer` (batching,
partitioning, futures), `consumer` (iterate a partition via StreamFrom), `aio` (the thin
asyncio twin), `errors` (gRPC status back to typed `ReplogError`s, in one place), `retry`
(backoff policy).
"""

from replog.client.aio import AsyncClient
from replog.client.client import AppendResult, Client, FetchResult, Offsets, PartitionInfo
from replog.client.consumer import Consumer
from replog.client.producer import OffsetFuture, Producer, partition_for_key
from replog.client.retry import RetryPolicy

__all__ = [
    "AppendResult",
    "AsyncClient",
    "Client",
    "Consumer",
    "FetchResult",
    "OffsetFuture",
    "Offsets",
    "PartitionInfo",
    "Producer",
    "RetryPolicy",
    "partition_for_key",
]
