"""The replog Python client (sync): `Client`, its `Producer` and `Consumer`.

Modules: `client` (channels, routing, admin and record calls), `producer` (batching,
partitioning, futures), `consumer` (iterate a partition via StreamFrom), `group_consumer`
(a member of a consumer group), `groups` (the Groups calls and their results), `results` (the
values calls return), `aio` (the thin asyncio twin), `retry` (backoff policy). gRPC status
back to typed `ReplogError`s happens in one place shared with the server,
`replog.rpc_errors` (`errors` here re-exports it).
"""

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from replog.client.aio import AsyncClient
    from replog.client.aio_producer import AsyncProducer
    from replog.client.assigned_consumer import AssignedConsumer, AsyncAssignedConsumer

# The asyncio client and the assigned consumers are imported on first use: `replog produce`
# and `replog consume` (and any threaded program) start without loading them.
_LAZY = {
    "AsyncClient": "replog.client.aio",
    "AsyncProducer": "replog.client.aio_producer",
    "AssignedConsumer": "replog.client.assigned_consumer",
    "AsyncAssignedConsumer": "replog.client.assigned_consumer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'replog.client' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
