"""The replog Python client (sync): `Client`, its `Producer` and `Consumer`.

Modules: `client` (channels, routing, admin and record calls), `producer` (batching,
partitioning, futures), `consumer` (iterate a partition via StreamFrom), `group_consumer`
(a member of a consumer group), `groups` (the Groups calls and their results), `results` (the
values calls return), `aio` (the thin asyncio twin), `retry` (backoff policy). gRPC status
back to typed `ReplogError`s happens in one place shared with the server,
`replog.rpc_errors` (`errors` here re-exports it).
"""

from replog.client.aio import AsyncClient
from replog.client.aio_producer import AsyncProducer
from replog.client.assigned_consumer import AssignedConsumer, AsyncAssignedConsumer
from replog.client.client import Client
from replog.client.consumer import Consumer
from replog.client.group_consumer import GroupConsumer, GroupRecord
from replog.client.partitioner import partition_for_key
from replog.client.produce_rules import RecordMetadata
from replog.client.producer import Producer, RecordFuture
from replog.client.results import (
    AppendResult,
    CorruptRange,
    FetchResult,
    Offsets,
    PartitionInfo,
)
from replog.client.retry import RetryPolicy
from replog.records import ConsumerRecord, Record
from replog.tls import ClientTls

__all__ = [
    "AppendResult",
    "AssignedConsumer",
    "AsyncAssignedConsumer",
    "AsyncClient",
    "AsyncProducer",
    "Client",
    "ClientTls",
    "Consumer",
    "ConsumerRecord",
    "CorruptRange",
    "FetchResult",
    "GroupConsumer",
    "GroupRecord",
    "Offsets",
    "PartitionInfo",
    "Producer",
    "Record",
    "RecordFuture",
    "RecordMetadata",
    "RetryPolicy",
    "partition_for_key",
]
