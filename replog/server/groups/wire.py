"""Checks of every Groups request field before use: lengths, ranges, duplicates.

Each returns the checked value or raises INVALID_ARGUMENT (with a reason that names the
field); names echoed in messages are cut (`status` bounds them again on the way out).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from replog.errors import (
    InvalidArgumentError,
    InvalidGroupNameError,
    OffsetMetadataTooLargeError,
)
from replog.server.control.topics import OFFSETS_TOPIC
from replog.server.groups.config import GroupsConfig
from replog.server.meta.metadata import METADATA_TOPIC
from replog.storage import validate_topic_name
from replog.storage.names import PARTITIONS_MAX

GROUP_CHARS_MAX = 255
MEMBER_ID_CHARS_MAX = 128
CLIENT_ID_CHARS_MAX = 255
TOPICS_PER_MEMBER_MAX = 100
PARTITIONS_PER_REQUEST_MAX = 10_000
SHOWN_CHARS_MAX = 64
INT64_MAX = (1 << 63) - 1

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetToCommit:
    topic: str
    partition: int
    offset: int
    metadata: str


def _printable(value: str) -> bool:
    return all(ord(c) >= 32 and ord(c) != 127 for c in value)


def group_name(value: str) -> str:
    if not 1 <= len(value) <= GROUP_CHARS_MAX or not _printable(value):
        raise InvalidGroupNameError(
            f"a group name is 1-{GROUP_CHARS_MAX} characters without control characters, "
            f"got {value[:SHOWN_CHARS_MAX]!r} ({len(value)} characters)",
            group=value[:SHOWN_CHARS_MAX],
        )
    return value


def member_id(value: str, *, allow_empty: bool = False) -> str:
    if (not value and not allow_empty) or len(value) > MEMBER_ID_CHARS_MAX:
        raise InvalidArgumentError(
            f"member_id must be 1-{MEMBER_ID_CHARS_MAX} characters (the one JoinGroup gave)"
        )
    return value


def client_id(value: str) -> str:
    if len(value) > CLIENT_ID_CHARS_MAX or not _printable(value):
        raise InvalidArgumentError(
            f"client_id is at most {CLIENT_ID_CHARS_MAX} characters without control characters"
        )
    return value


def generation(value: int, member: str) -> int:
    if not member:
        if value != -1:
            raise InvalidArgumentError("a commit without member_id has generation -1")
    elif not 0 <= value <= INT64_MAX:
        raise InvalidArgumentError(f"generation must be >= 0, got {value}")
    return value


def topic(value: str) -> str:
    validate_topic_name(value)
    if value in (OFFSETS_TOPIC, METADATA_TOPIC):
        raise InvalidArgumentError(f"{value} is an internal topic", topic=value)
    return value


def topics(values: Sequence[str]) -> tuple[str, ...]:
    if not 1 <= len(values) <= TOPICS_PER_MEMBER_MAX:
        raise InvalidArgumentError(
            f"a member subscribes to 1-{TOPICS_PER_MEMBER_MAX} topics, got {len(values)}"
        )
    checked = tuple(topic(t) for t in values)
    if len(set(checked)) != len(checked):
        raise InvalidArgumentError("topics must be distinct")
    return checked


def partition(value: int) -> int:
    if not 0 <= value < PARTITIONS_MAX:
        raise InvalidArgumentError(f"partition {value} out of range [0, {PARTITIONS_MAX})")
    return value


def topic_partitions(
    items: Iterable[tuple[str, int]], count: int, *, allow_empty: bool
) -> list[TopicPartition]:
    if count > PARTITIONS_PER_REQUEST_MAX or (count == 0 and not allow_empty):
        raise InvalidArgumentError(
            f"1-{PARTITIONS_PER_REQUEST_MAX} partitions per request, got {count}"
        )
    out = [(topic(t), partition(p)) for t, p in items]
    if len(set(out)) != len(out):
        raise InvalidArgumentError("partitions must be distinct")
    return out


def offsets(
    items: Sequence[tuple[str, int, int, str]], config: GroupsConfig
) -> list[OffsetToCommit]:
    topic_partitions(((t, p) for t, p, _o, _m in items), len(items), allow_empty=False)
    out = []
    for t, p, offset, metadata in items:
        if not 0 <= offset <= INT64_MAX:
            raise InvalidArgumentError(f"offset of {t}/{p} must be >= 0, got {offset}")
        size = len(metadata.encode())
        if size > config.metadata_bytes_max:
            raise OffsetMetadataTooLargeError(
                f"metadata of {t}/{p} is {size} bytes; at most {config.metadata_bytes_max}",
                metadata_bytes=size,
                metadata_bytes_max=config.metadata_bytes_max,
            )
        out.append(OffsetToCommit(t, p, offset, metadata))
    return out


def session_timeout(value: int, config: GroupsConfig) -> int:
    if value == 0:
        return config.session_timeout_ms_default
    low, high = config.session_timeout_ms_min, config.session_timeout_ms_max
    if not low <= value <= high:
        raise InvalidArgumentError(
            f"session_timeout_ms {value} out of [{low}, {high}] (0: the default)"
        )
    return value


def rebalance_timeout(value: int, config: GroupsConfig) -> int:
    if value == 0:
        return config.rebalance_timeout_ms_default
    if not 1 <= value <= config.rebalance_timeout_ms_max:
        raise InvalidArgumentError(
            f"rebalance_timeout_ms {value} out of [1, {config.rebalance_timeout_ms_max}]"
        )
    return value
