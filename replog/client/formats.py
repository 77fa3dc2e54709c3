"""Topic formats on the client side: what `Client` and `AsyncClient` share about them.

A topic is `raw` (a record's value is the producer's bytes) or `envelope` (a record is a
`replog.records` envelope: key, value, timestamp, headers); see docs/api.md, Topic format.
The clients learn each topic's format from `GetMetadata` (`learn`), then:

* appends (`to_values`): to an envelope topic, plain `bytes` become envelopes without key
  or headers and `replog.Record`s keep theirs; records without a timestamp get the
  client's clock (one reading per batch). To a raw topic, bytes go as they are, and a
  `Record` carrying a key, headers or a timestamp is refused (the topic could not hold
  them): nothing is dropped silently;
* reads (`decode`): an envelope topic's frames decode to `records.DecodedRecords`, a raw
  topic's to `frames.DecodedFrames`, control records skipped either way.

A topic deleted and created again under the same name with another format while a client
runs: the client's cached format is dropped when a call says UNKNOWN_TOPIC, and replaced
at each metadata refresh; an Append that still guessed wrong either is refused by the
server (bytes that are not envelopes, to an envelope topic) or stores envelopes in a raw
topic. Clients that must not risk it ask `refresh_metadata([topic])` first.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from replog import frames, records
from replog.client.results import Offsets, TopicConfig
from replog.errors import InvalidArgumentError, TopicNotFoundError
from replog.v1 import admin_pb2

RAW = "raw"
ENVELOPE = "envelope"
CREATE_TIME = "create_time"
LOG_APPEND_TIME = "log_append_time"
WIRE_FORMATS = {RAW: admin_pb2.TOPIC_FORMAT_RAW, ENVELOPE: admin_pb2.TOPIC_FORMAT_ENVELOPE}
WIRE_TIMESTAMP_TYPES = {
    CREATE_TIME: admin_pb2.TIMESTAMP_TYPE_CREATE_TIME,
    LOG_APPEND_TIME: admin_pb2.TIMESTAMP_TYPE_LOG_APPEND_TIME,
}
Decoded = frames.DecodedFrames | records.DecodedRecords
Values = Sequence[bytes | records.Record]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def create_request(
    name: str,
    partitions: int,
    replication_factor: int,
    format: str,
    timestamp_type: str,
    configs: Mapping[str, str] | None = None,
) -> admin_pb2.CreateTopicRequest:
    if format not in WIRE_FORMATS or timestamp_type not in WIRE_TIMESTAMP_TYPES:
        raise InvalidArgumentError(
            f"format must be one of {list(WIRE_FORMATS)}, timestamp_type one of "
            f"{list(WIRE_TIMESTAMP_TYPES)}"
        )
    return admin_pb2.CreateTopicRequest(
        name=name,
        partitions=partitions,
        replication_factor=replication_factor,
        format=WIRE_FORMATS[format],
        timestamp_type=WIRE_TIMESTAMP_TYPES[timestamp_type],
        configs=configs or {},
    )


def configs_of(resp: admin_pb2.DescribeConfigsResponse) -> dict[str, TopicConfig]:
    """A DescribeConfigs answer: config name -> its value and source."""
    return {c.name: TopicConfig(c.value, c.source) for c in resp.configs}


def format_of(wire: int) -> str:
    """A topic's format from metadata (unset: a server that predates formats: raw)."""
    return ENVELOPE if wire == admin_pb2.TOPIC_FORMAT_ENVELOPE else RAW


def timestamp_type_of(wire: int) -> str:
    if wire == admin_pb2.TIMESTAMP_TYPE_LOG_APPEND_TIME:
        return LOG_APPEND_TIME
    return CREATE_TIME


def learn(known: dict[str, str], meta: admin_pb2.Metadata) -> None:
    """Record the formats of the topics `meta` describes."""
    for t in meta.topics:
        known[t.name] = format_of(t.format)


def config_in(meta: admin_pb2.Metadata, topic: str) -> tuple[str, str]:
    """(format, timestamp_type) of `topic` in `meta` (UNKNOWN_TOPIC when absent)."""
    for t in meta.topics:
        if t.name == topic:
            return format_of(t.format), timestamp_type_of(t.timestamp_type)
    raise TopicNotFoundError(f"topic {topic!r} does not exist", topic=topic)


def offsets_request(
    topic: str, partitions: Sequence[int], timestamp_ms: int | None
) -> admin_pb2.ListOffsetsRequest:
    req = admin_pb2.ListOffsetsRequest(topic=topic, partitions=list(partitions))
    if timestamp_ms is not None:
        req.timestamp_ms = timestamp_ms
    return req


def offsets_of(resp: admin_pb2.ListOffsetsResponse, by_time: bool) -> list[Offsets]:
    out = []
    for p in resp.partitions:
        found = p.found_timestamp_ms if p.HasField("found_timestamp_ms") else None
        for_time = p.offset_for_timestamp if by_time else None
        out.append(Offsets(p.partition, p.earliest, p.latest, p.log_end_offset, for_time, found))
    return out


def by_timestamp(times: Mapping[int, int]) -> dict[int, list[int]]:
    """Partitions grouped by the time asked for them (one ListOffsets per time)."""
    groups: dict[int, list[int]] = {}
    for partition, timestamp_ms in times.items():
        groups.setdefault(timestamp_ms, []).append(partition)
    return groups


def to_values(topic: str, items: Values, envelope: bool) -> Sequence[bytes]:
    """What an Append to `topic` carries for `items` (see the module doc)."""
    if envelope:
        return records.encode_batch(items, now_ms())
    if records.all_bytes(items):
        return items  # type: ignore[return-value]
    out = []
    for item in items:
        if isinstance(item, records.Record):
            if item.key is not None or item.headers or item.timestamp_ms is not None:
                raise InvalidArgumentError(
                    f"topic {topic!r} is raw: its records hold a value only (create the "
                    "topic with format='envelope' for keys, headers and timestamps)",
                    topic=topic,
                )
            if item.value is None:
                raise InvalidArgumentError(
                    f"topic {topic!r} is raw: its records have no null values (tombstones "
                    "need format='envelope')",
                    topic=topic,
                )
            out.append(item.value)
        else:
            out.append(bytes(item))
    return out


def decode(buf: bytes, envelope: bool) -> Decoded:
    """Data records of a run of frames: envelopes decoded on an envelope topic."""
    if envelope:
        return records.decode_frames(buf)
    return frames.decode_data(buf)


def parse_time_ms(text: str) -> int:
    """Milliseconds since the epoch from an integer ("1764064800000") or an ISO 8601 time
    ("2026-11-25T10:00:00Z"; without a zone: UTC)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidArgumentError(
            f"{text!r} is neither milliseconds since the epoch nor an ISO 8601 time"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)
