"""The producer's rules, shared by `producer.Producer` (threads) and `aio_producer.AsyncProducer`
(asyncio): pure, no I/O, no locks, no threads, no event loop.

- `check_options`: the limits both producers take, range-checked once.
- `prepare`: one `send`'s record checked and shaped for its topic (an envelope topic keeps
  key, headers and a timestamp, the send time unless given; a raw topic takes bytes only)
  before anything is queued: a bad record must never reach a sender.
- `Chooser`: a record's partition (explicit; the key's by `partitioner`; else sticky: one
  partition's batch at a time), and a ready-made batch's (round-robin).
- `OpenBatch`: the records accumulating for one partition and when they must leave
  (`full`: `batch_bytes_max` bytes of values or `batch_records_max` records; `due_s`:
  `linger_ms` after the first record), and what the Append carries (`wire_values`).
- `RecordMetadata` (Kafka's): where one record landed, built from its batch's
  `AppendResult` (`metadata`), and `deliver`, which calls an `on_delivery(err, metadata)`
  callback and logs (never hides) what it raises.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from replog import records
from replog.client import formats
from replog.client.partitioner import Partitioner, check_partitioner, partition_for_key
from replog.client.results import AppendResult
from replog.errors import InvalidArgumentError
from replog.records import Header, Record
from replog.v1 import log_pb2

log = logging.getLogger("replog.client.producer")

ACKS = ("none", "leader", "all")
ACKS_WIRE = {"none": log_pb2.ACKS_NONE, "leader": log_pb2.ACKS_LEADER, "all": log_pb2.ACKS_ALL}


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where one sent record landed (Kafka's `RecordMetadata`).

    `offset` is -1 with acks="none" (no answer carries it). `timestamp_ms` is the record's
    time as the producer stamped it on an envelope topic (the given `timestamp_ms`, else the
    send time); None on a raw topic (its records hold no time). A topic created with
    `timestamp_type="log_append_time"` stores the leader's time instead, which the answer
    does not carry: `timestamp_ms` is then the producer's. `serialized_key_size` and
    `serialized_value_size` are the key's and value's lengths in bytes, -1 for none (a null
    value, a tombstone), as in Kafka.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    serialized_key_size: int
    serialized_value_size: int


DeliveryCallback = Callable[[BaseException | None, RecordMetadata | None], object]


def check_options(
    acks: str,
    linger_ms: int,
    batch_bytes_max: int,
    batch_records_max: int,
    partition_in_flight_max: int,
    in_flight_bytes_max: int,
    partitioner: str,
) -> Partitioner:
    """Range-check a producer's options; its partitioner (InvalidArgumentError otherwise)."""
    if acks not in ACKS:
        raise InvalidArgumentError(f"acks is one of {', '.join(ACKS)}, not {acks!r}")
    if linger_ms < 0 or batch_bytes_max < 1 or batch_records_max < 1:
        raise InvalidArgumentError("linger_ms >= 0; batch limits >= 1")
    if partition_in_flight_max < 1 or in_flight_bytes_max < 1:
        raise InvalidArgumentError("in-flight limits >= 1")
    try:
        return check_partitioner(partitioner)
    except ValueError as err:
        raise InvalidArgumentError(str(err)) from None


class AsyncProducerOptions(TypedDict, total=False):
    """The keyword options of `AsyncClient.producer` (`aio_producer.AsyncProducer`'s):
    typed, so that a checker flags a misspelt one (at run time it is a TypeError)."""

    acks: str
    linger_ms: int
    batch_bytes_max: int
    batch_records_max: int
    partitions: int | None
    partitioner: Partitioner


ASYNC_PRODUCER_DEFAULTS: AsyncProducerOptions = {
    "acks": "all",
    "linger_ms": 5,
    "batch_bytes_max": 1024 * 1024,
    "batch_records_max": 10_000,
    "partitions": None,
}  # (and the partitioner: partitioner.DEFAULT_PARTITIONER); `Producer`'s defaults too


class SendOptions(TypedDict, total=False):
    """The keyword options of a producer's `send` (both producers'): the record's `key`,
    its `partition` (default: from the key, `Chooser`), `headers`, `timestamp_ms`
    (default: the producer's clock, or the leader's on a log_append_time topic), and
    `on_delivery(err, metadata)`, called once when the record's batch is answered."""

    key: bytes | None
    partition: int | None
    headers: Sequence[Header]
    timestamp_ms: int | None
    on_delivery: DeliveryCallback | None


SEND_OPTIONS = SendOptions.__optional_keys__


def check_keywords(given: Mapping[str, object], known: frozenset[str], what: str) -> None:
    """A misspelt keyword option is a TypeError, as for a function that lists them."""
    if not given.keys() <= known:
        unknown = ", ".join(repr(k) for k in sorted(given.keys() - known))
        raise TypeError(f"{what} got unexpected keyword arguments: {unknown}")


class ProducerOptions(AsyncProducerOptions, total=False):
    """The keyword options of `Client.producer` (`producer.Producer`'s): the asyncio
    producer's, and the threaded one's in-flight limits and transport."""

    in_flight_max: int
    streaming: bool
    partition_in_flight_max: int
    in_flight_bytes_max: int


class ProducerSettings:
    """The options both producers keep, checked once (`configure`): the base of
    `producer.Producer` and `aio_producer.AsyncProducer`."""

    topic: str
    acks: str
    linger_s: float
    batch_bytes_max: int
    batch_records_max: int
    partitioner: Partitioner

    def configure(
        self,
        topic: str,
        acks: str,
        linger_ms: int,
        batch_bytes_max: int,
        batch_records_max: int,
        partitioner: str,
        partition_in_flight_max: int = 1,
        in_flight_bytes_max: int = 1,
    ) -> None:
        self.partitioner = check_options(
            acks,
            linger_ms,
            batch_bytes_max,
            batch_records_max,
            partition_in_flight_max,
            in_flight_bytes_max,
            partitioner,
        )
        self.topic = topic
        self.acks = acks
        self.linger_s = linger_ms / 1000
        self.batch_bytes_max = batch_bytes_max
        self.batch_records_max = batch_records_max


# One checked record (a plain tuple: one is made per `send`): what a batch holds for it,
# its timestamp (0 on a raw topic), its key's and value's sizes (-1: none).
Prepared = tuple[bytes | Record, int, int, int]


def prepare(
    topic: str,
    envelope: bool,
    value: object,
    key: bytes | None,
    headers: Sequence[Header],
    timestamp_ms: int | None,
) -> Prepared:
    """`value` (bytes, or None for a tombstone on an envelope topic) as a batch item."""
    if type(value) is bytes and key is None and not headers:  # the usual record, fast
        if envelope:
            ts = formats.now_ms() if timestamp_ms is None else timestamp_ms
            return value, ts, -1, len(value)
        if timestamp_ms is None:
            return value, 0, -1, len(value)
    if value is not None and not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgumentError(
            f"a record's value is bytes or None, not {type(value).__name__}", topic=topic
        )
    if key is not None and not isinstance(key, bytes | bytearray | memoryview):
        raise InvalidArgumentError(
            f"a record's key is bytes or None, not {type(key).__name__}", topic=topic
        )
    key_size = -1 if key is None else len(key)
    value_size = -1 if value is None else len(value)
    if envelope:
        ts = formats.now_ms() if timestamp_ms is None else timestamp_ms
        if key is not None or headers or value is None:
            data = None if value is None else bytes(value)
            return Record(data, key, headers, ts), ts, key_size, value_size
        return bytes(value), ts, key_size, value_size
    if value is None:
        raise InvalidArgumentError(
            f"topic {topic!r} is raw: its records have no null values (tombstones need an "
            "envelope topic)",
            topic=topic,
        )
    if headers or timestamp_ms is not None:
        raise InvalidArgumentError(
            f"topic {topic!r} is raw: its records hold no headers or timestamps", topic=topic
        )
    return bytes(value), 0, key_size, value_size


class Chooser:
    """A record's partition among `partitions`: explicit, by key, else sticky (Kafka's
    sticky partitioner, KIP-480): keyless records fill one partition's batch, and the next
    batch goes to the next partition (`sealed`), so that record-by-record sends make full
    batches rather than one small batch per partition. `next_batch`: round-robin per
    ready-made batch (`send_batch`)."""

    __slots__ = ("_round_robin", "partitioner", "partitions", "sticky")

    def __init__(self, partitions: int, partitioner: Partitioner) -> None:
        if partitions < 1:
            raise InvalidArgumentError(f"a topic has >= 1 partitions, not {partitions}")
        self.partitions = partitions
        self.partitioner = partitioner
        self._round_robin = itertools.cycle(range(partitions))
        self.sticky = 0  # where keyless records go until that partition's batch is sealed

    def choose(self, key: bytes | None, partition: int | None) -> int:
        if partition is not None:
            if not 0 <= partition < self.partitions:
                raise InvalidArgumentError(
                    f"partition {partition} outside [0, {self.partitions})", partition=partition
                )
            return partition
        if key is not None:
            return partition_for_key(key, self.partitions, self.partitioner)
        return self.sticky

    def sealed(self, partition: int) -> None:
        """Partition `partition`'s open batch left (full or lingered): keyless records
        move on to the next partition."""
        if partition == self.sticky:
            self.sticky = (partition + 1) % self.partitions

    def next_batch(self, partition: int | None) -> int:
        """A ready-made batch's partition: `partition`, else round-robin."""
        if partition is None:
            return next(self._round_robin)
        return self.choose(None, partition)


class OpenBatch:
    """Records of one partition, in send order, until they leave as one Append."""

    __slots__ = ("bytes", "callbacks", "created", "partition", "times", "values")

    def __init__(self, partition: int, values: list[bytes | Record] | None = None) -> None:
        self.partition = partition
        self.values: list[bytes | Record] = values if values is not None else []
        # Envelope topics, `send`: each record's time (plain values stay bytes, no Record
        # object per record; `records.encode_batch(..., times=)`). None: `send_batch`.
        self.times: list[int] | None = None if values is not None else []
        self.bytes = 0
        self.created = time.monotonic()
        # (index, callback, the record's Prepared) of records sent with `on_delivery`
        self.callbacks: list[tuple[int, DeliveryCallback, Prepared]] = []

    def add(self, record: Prepared, on_delivery: DeliveryCallback | None) -> int:
        """Append `record`; its index in the batch (check `full` after)."""
        index = len(self.values)
        self.values.append(record[0])
        if self.times is not None:
            self.times.append(record[1])
        if record[3] > 0:
            self.bytes += record[3]
        if on_delivery is not None:
            self.callbacks.append((index, on_delivery, record))
        return index

    def full(self, batch_bytes_max: int, batch_records_max: int) -> bool:
        return self.bytes >= batch_bytes_max or len(self.values) >= batch_records_max

    def due_s(self, linger_s: float) -> float:
        """The monotonic time at which the batch leaves, full or not."""
        return self.created + linger_s

    def wire_values(self, topic: str, envelope: bool) -> Sequence[bytes]:
        """What the Append carries: on an envelope topic, records sent one by one keep
        each its own time."""
        if envelope and self.times:
            return records.encode_timed(self.values, formats.now_ms(), self.times)
        return formats.to_values(topic, self.values, envelope)

    def unary_values(self, envelope: bool) -> list[bytes | Record]:
        """The batch for `Client.append`: plain values as Records with their times."""
        if not (envelope and self.times):
            return self.values
        return [
            Record(v, timestamp_ms=t) if isinstance(v, bytes) else v
            for v, t in zip(self.values, self.times, strict=True)
        ]


def metadata(
    topic: str, partition: int, result: AppendResult, index: int, record: Prepared, envelope: bool
) -> RecordMetadata:
    """Record `index` of a batch answered with `result`."""
    offset = result.base_offset + index if result.base_offset >= 0 else -1
    _, timestamp_ms, key_size, value_size = record
    return RecordMetadata(
        topic, partition, offset, timestamp_ms if envelope else None, key_size, value_size
    )


def deliver(
    topic: str,
    batch: OpenBatch,
    result: AppendResult | None,
    error: BaseException | None,
    envelope: bool,
) -> None:
    """Call each `on_delivery` callback of `batch` once: (None, metadata) when the batch was
    acknowledged, (error, None) when it failed. What a callback raises is logged with its
    traceback, and the others are still called."""
    for index, callback, record in batch.callbacks:
        md = None
        if result is not None:
            md = metadata(topic, batch.partition, result, index, record, envelope)
        try:
            callback(error, md)
        except Exception:
            log.exception("on_delivery callback %r raised (topic %s)", callback, topic)
