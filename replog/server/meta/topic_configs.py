"""Per-topic configs (Kafka's names): which exist, their types and ranges, their defaults.

A topic's configs are replicated in the metadata log (`metadata.TopicMeta.configs`: the
values the topic set, canonical strings) and validated here before any command that sets
them is proposed. A config the topic does not set takes the node's default: its flag
(`--retention-ms`, `--retention-bytes`, `--segment-bytes-max`, `--record-bytes-max`), read
from the node's `StorageConfig`. Changes take effect without a restart: the reconciler gives
each running replica's log the topic's storage config again when the topic changes
(`storage_config`), and retention and segment rolls read it on every pass and append.

    retention.ms            -1 (keep) or >= 0        time retention of closed segments
    retention.bytes         -1 (keep) or >= 0        size retention, per partition
    segment.bytes           [1024, 2**32-1]          segment roll size
    max.message.bytes       [1, the node's record_bytes_max]   the leader's limit on new records
    segment.ms              [1, 2**63-1]             segment roll age (at the next append)
    cleanup.policy          delete | compact | compact,delete   (compact: envelope topics)
    delete.retention.ms     [0, 2**63-1]             how long the cleaner keeps tombstones
    min.cleanable.dirty.ratio  [0, 1]                dirty share that starts a cleaning pass
    min.compaction.lag.ms   [0, 2**63-1]             records younger are never cleaned
    message.timestamp.type  CreateTime | LogAppendTime   the topic's `timestamp_type`

`cleanup.policy=compact` turns the node's log cleaner on for the topic's replicas
(`server/partitions/cleaning.py`) and, without `delete`, retention off (Kafka's rule);
it needs keys, so only envelope topics take it (`check_format`). `message.timestamp.type`
is not kept among the configs: it is the topic's `timestamp_type` (one owner), which the
commands set.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from replog.errors import InvalidArgumentError
from replog.storage import StorageConfig

RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
SEGMENT_BYTES = "segment.bytes"
MAX_MESSAGE_BYTES = "max.message.bytes"
CLEANUP_POLICY = "cleanup.policy"
TIMESTAMP_TYPE = "message.timestamp.type"
SEGMENT_MS = "segment.ms"
DELETE_RETENTION_MS = "delete.retention.ms"
MIN_CLEANABLE_DIRTY_RATIO = "min.cleanable.dirty.ratio"
MIN_COMPACTION_LAG_MS = "min.compaction.lag.ms"
NAMES = (
    CLEANUP_POLICY,
    DELETE_RETENTION_MS,
    MAX_MESSAGE_BYTES,
    TIMESTAMP_TYPE,
    MIN_CLEANABLE_DIRTY_RATIO,
    MIN_COMPACTION_LAG_MS,
    RETENTION_BYTES,
    RETENTION_MS,
    SEGMENT_BYTES,
    SEGMENT_MS,
)
NOT_SUPPORTED: dict[str, str] = {}
POLICIES = ("compact", "compact,delete", "delete")
SEGMENT_BYTES_MIN = 1024
SEGMENT_BYTES_MAX = 2**32 - 1  # u32 positions in a segment
LONG_MAX = 2**63 - 1
RECORD_BYTES_MAX = 2**31 - 1
VALUE_CHARS_MAX = 64
CONFIGS_MAX = 32  # entries of one request's set or delete
# Kafka's names of the timestamp types <-> the topic's timestamp_type (metadata.py's values)
KAFKA_TIMESTAMP_TYPES = {"CreateTime": "create_time", "LogAppendTime": "log_append_time"}

DEFAULT = "default"  # the source of a value the topic does not set
TOPIC = "topic"


@dataclass(frozen=True, slots=True)
class ConfigValue:
    name: str
    value: str
    source: str  # TOPIC | DEFAULT


def _long(name: str, text: str, low: int, high: int) -> str:
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidArgumentError(
            f"{name} must be an integer, got {text[:VALUE_CHARS_MAX]!r}", config=name
        ) from None
    if not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be in [{low}, {high}], got {value}", config=name)
    return str(value)


def _ratio(name: str, text: str) -> str:
    try:
        value = float(text.strip())
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:  # (nan too)
        raise InvalidArgumentError(
            f"{name} must be a number in [0, 1], got {text[:VALUE_CHARS_MAX]!r}", config=name
        )
    return repr(value)


def compacted(configs: Mapping[str, str]) -> bool:
    """Whether a topic with `configs` is compacted (its cleanup.policy has compact)."""
    return "compact" in configs.get(CLEANUP_POLICY, "delete").split(",")


def check_format(configs: Mapping[str, str], envelope: bool) -> None:
    """Compaction keeps the latest record of each key: only envelope topics have keys."""
    if compacted(configs) and not envelope:
        raise InvalidArgumentError(
            "cleanup.policy compact needs records with keys: only envelope topics take it",
            config=CLEANUP_POLICY,
        )


def canonical(name: str, value: str) -> str:
    """The canonical form of config `name` set to `value`, or INVALID_ARGUMENT."""
    if not isinstance(value, str) or len(value) > VALUE_CHARS_MAX:
        raise InvalidArgumentError(f"{name}: a value has at most {VALUE_CHARS_MAX} characters")
    if name in (RETENTION_MS, RETENTION_BYTES):
        return _long(name, value, -1, LONG_MAX)
    if name == SEGMENT_BYTES:
        return _long(name, value, SEGMENT_BYTES_MIN, SEGMENT_BYTES_MAX)
    if name == MAX_MESSAGE_BYTES:
        return _long(name, value, 1, RECORD_BYTES_MAX)
    if name in (SEGMENT_MS,):
        return _long(name, value, 1, LONG_MAX)
    if name in (DELETE_RETENTION_MS, MIN_COMPACTION_LAG_MS):
        return _long(name, value, 0, LONG_MAX)
    if name == MIN_CLEANABLE_DIRTY_RATIO:
        return _ratio(name, value)
    if name == CLEANUP_POLICY:
        policy = ",".join(sorted({p.strip() for p in value.split(",")}))
        if policy not in POLICIES:
            raise InvalidArgumentError(
                f"cleanup.policy must be one of {list(POLICIES)}, got {value[:VALUE_CHARS_MAX]!r}",
                config=name,
            )
        return policy
    if name == TIMESTAMP_TYPE:
        if value not in KAFKA_TIMESTAMP_TYPES:
            raise InvalidArgumentError(
                f"message.timestamp.type must be one of {list(KAFKA_TIMESTAMP_TYPES)}, "
                f"got {value[:VALUE_CHARS_MAX]!r}",
                config=name,
            )
        return value
    _check_name(name)
    raise AssertionError(name)  # _check_name raised: every known name is handled above


def _check_name(name: str) -> None:
    if name in NOT_SUPPORTED:
        raise InvalidArgumentError(
            f"{name} is not supported yet: {NOT_SUPPORTED[name]}", config=name
        )
    if name not in NAMES:
        raise InvalidArgumentError(
            f"unknown topic config {name[:VALUE_CHARS_MAX]!r} (known: {list(NAMES)})",
            config=name[:VALUE_CHARS_MAX],
        )


def checked(configs: Mapping[str, str]) -> dict[str, str]:
    """`configs` in canonical form, or INVALID_ARGUMENT for an unknown name or a bad value."""
    if len(configs) > CONFIGS_MAX:
        raise InvalidArgumentError(f"at most {CONFIGS_MAX} configs in one request")
    return {name: canonical(name, value) for name, value in sorted(configs.items())}


def checked_deletes(names: Iterable[str]) -> tuple[str, ...]:
    """The names of configs to reset to their defaults, or INVALID_ARGUMENT."""
    found = tuple(sorted(set(names)))
    if len(found) > CONFIGS_MAX:
        raise InvalidArgumentError(f"at most {CONFIGS_MAX} configs in one request")
    for name in found:
        _check_name(name)
    return found


def checked_alter(
    set_: Mapping[str, str], delete: Iterable[str]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """An incremental alter's (configs to set, names to reset), or INVALID_ARGUMENT."""
    configs, deletes = checked(set_), checked_deletes(delete)
    both = sorted(set(configs) & set(deletes))
    if both:
        raise InvalidArgumentError(f"configs {both[:8]} are both set and deleted")
    return configs, deletes


def check_node_limits(configs: Mapping[str, str], node: StorageConfig) -> None:
    """The limits only the node knows: max.message.bytes up to its record_bytes_max (a
    larger record would not fit its messages)."""
    value = configs.get(MAX_MESSAGE_BYTES)
    if value is not None and int(value) > node.record_bytes_max:
        raise InvalidArgumentError(
            f"max.message.bytes {value} exceeds the node's record_bytes_max "
            f"({node.record_bytes_max})",
            config=MAX_MESSAGE_BYTES,
        )


def split_timestamp_type(configs: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """(the configs kept on the topic, its timestamp_type if `configs` set one)."""
    kept = {k: v for k, v in configs.items() if k != TIMESTAMP_TYPE}
    kafka = configs.get(TIMESTAMP_TYPE)
    return kept, (KAFKA_TIMESTAMP_TYPES[kafka] if kafka is not None else None)


def altered(
    configs: Mapping[str, str],
    timestamp_type: str,
    set_: Mapping[str, str],
    delete: Iterable[str],
) -> tuple[dict[str, str], str]:
    """A topic's (configs, timestamp_type) after an incremental alter (pure; deletes first,
    then sets; deleting message.timestamp.type makes it create time again)."""
    deleted = set(delete)
    out = {k: v for k, v in configs.items() if k not in deleted}
    kept, new_type = split_timestamp_type(set_)
    out.update(kept)
    if new_type is None:
        new_type = "create_time" if TIMESTAMP_TYPE in deleted else timestamp_type
    return dict(sorted(out.items())), new_type


def _optional(value: str | None) -> int | None:
    return None if value is None or int(value) < 0 else int(value)


# The configs that override a field of the node's `StorageConfig`: the field, and how the
# config's canonical string reads as the field's value.
_STORAGE_FIELDS: dict[str, tuple[str, Callable[[str], object]]] = {
    RETENTION_MS: ("retention_ms", _optional),
    RETENTION_BYTES: ("retention_bytes", _optional),
    SEGMENT_BYTES: ("segment_bytes_max", int),
    MAX_MESSAGE_BYTES: ("topic_record_bytes_max", int),
    SEGMENT_MS: ("segment_ms", int),
    DELETE_RETENTION_MS: ("delete_retention_ms", int),
    MIN_CLEANABLE_DIRTY_RATIO: ("min_cleanable_dirty_ratio", float),
    MIN_COMPACTION_LAG_MS: ("min_compaction_lag_ms", int),
}


def storage_config(base: StorageConfig, configs: Mapping[str, str]) -> StorageConfig:
    """The node's storage config `base` with a topic's configs over it."""
    changes: dict[str, object] = {
        field: parse(configs[name])
        for name, (field, parse) in _STORAGE_FIELDS.items()
        if name in configs
    }
    if compacted(configs):
        changes["compact"] = True
        if "delete" not in configs[CLEANUP_POLICY].split(","):  # compact only: kept for good
            changes["retention_ms"] = changes["retention_bytes"] = None
    return dataclasses.replace(base, **changes) if changes else base  # type: ignore[arg-type]


def describe(
    configs: Mapping[str, str], timestamp_type: str, node: StorageConfig
) -> list[ConfigValue]:
    """Every config of a topic with its value and where it comes from (the topic, or the
    node's default), by name."""

    def unlimited(value: int | None) -> str:
        return "-1" if value is None else str(value)

    defaults = {
        CLEANUP_POLICY: "delete",
        MAX_MESSAGE_BYTES: str(node.record_bytes_max),
        RETENTION_BYTES: unlimited(node.retention_bytes),
        RETENTION_MS: unlimited(node.retention_ms),
        SEGMENT_BYTES: str(node.segment_bytes_max),
        SEGMENT_MS: str(node.segment_ms),
        DELETE_RETENTION_MS: str(node.delete_retention_ms),
        MIN_CLEANABLE_DIRTY_RATIO: repr(node.min_cleanable_dirty_ratio),
        MIN_COMPACTION_LAG_MS: str(node.min_compaction_lag_ms),
    }
    out = [
        ConfigValue(name, configs[name], TOPIC)
        if name in configs
        else ConfigValue(name, default, DEFAULT)
        for name, default in defaults.items()
    ]
    kafka = {v: k for k, v in KAFKA_TIMESTAMP_TYPES.items()}[timestamp_type]
    source = DEFAULT if kafka == "CreateTime" else TOPIC
    out.append(ConfigValue(TIMESTAMP_TYPE, kafka, source))
    return sorted(out, key=lambda c: c.name)
