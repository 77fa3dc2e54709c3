"""The threaded client's factory methods for producers and assigned consumers, with their
options as typed keywords (a misspelt option is a TypeError); `GroupOptions`, the group
consumer's options for `Client.consumer` and `AsyncClient.consumer`. A mixin of `client.Client`,
apart so that the client module stays one idea: calls and routing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict, Unpack

from replog.client.group_consumer import Callback
from replog.client.produce_rules import ProducerOptions
from replog.client.producer import Producer, ProducerClient

if TYPE_CHECKING:  # imported when used: it brings the asyncio consumers (a CLI start-up cost)
    from replog.client.assigned_consumer import AssignedConsumer


class GroupOptions(TypedDict, total=False):
    """The keyword options of `consumer(topic, group=...)`, sync and asyncio
    (`group_consumer.GroupConsumer`'s): typed, so that a checker flags a misspelt one (at
    run time it is a TypeError)."""

    auto_commit: bool
    auto_commit_interval_ms: int
    auto_offset_reset: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    max_poll_records: int
    fetch_bytes_max: int
    fetch_wait_ms: int
    on_assign: Callback | None
    on_revoke: Callback | None


class AssignedOptions(TypedDict, total=False):
    """The keyword options of `assigned_consumer(partitions, ...)`, sync and asyncio
    (`assigned_consumer.AssignedConsumer`'s), typed as `GroupOptions` are."""

    offsets: Mapping[tuple[str, int], int | str] | None
    auto_offset_reset: str
    max_poll_records: int
    fetch_bytes_max: int
    fetch_wait_ms: int


class Factories:
    def producer(self: ProducerClient, topic: str, **options: Unpack[ProducerOptions]) -> Producer:
        """A batching producer of `topic` (`producer.Producer`): `send(value, key=,
        on_delivery=)` returns a future of the record's `RecordMetadata`. Records leave
        per partition when `batch_bytes_max` / `batch_records_max` is reached or `linger_ms`
        after the first; `partitioner` places keys ("murmur2", Kafka's, or "crc32");
        `partition_in_flight_max` batches per partition and `in_flight_bytes_max` bytes in
        all travel pipelined (idempotent client), else `in_flight_max` unary Appends."""
        return Producer(self, topic, **options)

    def assigned_consumer(
        self, partitions: Sequence[tuple[str, int]], **options: Unpack[AssignedOptions]
    ) -> AssignedConsumer:
        """A consumer of `partitions` ((topic, partition) pairs, several topics allowed)
        without a group (Kafka's `assign`): `poll(timeout_s)`, `seek`, `position`, `pause`,
        `resume` (`assigned_consumer.AssignedConsumer`). Each starts at `offsets[tp]` (an
        int, "earliest" or "latest"), else at `auto_offset_reset`; nothing is committed."""
        from replog.client.assigned_consumer import AssignedConsumer

        return AssignedConsumer(self, partitions, **options)
