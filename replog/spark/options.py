"""The options of the `replog` source and sink: Kafka's names with Kafka's meaning, checked.

Pure parsing, no Spark and no network. Spark hands a data source its options as a
case-insensitive dict of strings whose keys arrive lower-cased; every option is looked up by
its lower-cased name and reported by its documented (camelCase) name.

* The source accepts the option names of Spark's Kafka source (`kafka.bootstrap.servers`,
  `subscribe`, `subscribePattern`, `assign`, `startingOffsets`, ...) and replog's older names
  as aliases (`bootstrap`, `topic`, `maxRecordsPerTrigger`, `maxRecordsPerTask`). Giving both
  names of one option is an error.
* An option neither knows is rejected, naming it and the closest known name: a Kafka job
  moved to replog must not believe it is rate-limited or assigned when it is not. Kafka
  options that have no meaning for replog (`kafka.*` client settings, `groupIdPrefix`, ...)
  are rejected with the reason.
* Values are validated as Kafka validates them (booleans are `true`/`false`, `minPartitions`
  and `maxRecordsPerPartition` are positive, `minOffsetsPerTrigger <= maxOffsetsPerTrigger`,
  exactly one of `subscribe`/`subscribePattern`/`assign`, ...).
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from replog.client.partitioner import DEFAULT_PARTITIONER, Partitioner, check_partitioner
from replog.errors import InvalidArgumentError
from replog.spark import offsets as off
from replog.spark.clients import ATTEMPT_TIMEOUT_MS, NO_TLS, TlsOptions, tls_options

log = logging.getLogger("replog.spark")

FETCH_BYTES_DEFAULT = 3 * 1024 * 1024
RECORDS_PER_TASK_DEFAULT = 2_000_000
RECORDS_PER_APPEND_DEFAULT = 500  # the exactly-once sink's batch size (rows per Append)
SINK_ID_BYTES_MAX = 160  # a producer name is at most 255 bytes: room for the rest
TRIGGER_DELAY_DEFAULT_MS = 15 * 60 * 1000  # Kafka's maxTriggerDelay default, "15m"

TLS_OPTIONS = ("tls.ca", "tls.cert", "tls.key", "tls.serverName")

# Documented name -> replog's older names for it (aliases).
SOURCE_OPTIONS: dict[str, tuple[str, ...]] = {
    "kafka.bootstrap.servers": ("bootstrap",),
    "subscribe": ("topic",),
    "subscribePattern": (),
    "assign": (),
    "startingOffsets": (),
    "endingOffsets": (),
    "startingOffsetsByTimestamp": (),
    "startingTimestamp": (),
    "endingOffsetsByTimestamp": (),
    "endingTimestamp": (),
    "startingOffsetsByTimestampStrategy": (),
    "maxOffsetsPerTrigger": ("maxRecordsPerTrigger",),
    "minOffsetsPerTrigger": (),
    "maxTriggerDelay": (),
    "minPartitions": (),
    "maxRecordsPerPartition": ("maxRecordsPerTask",),
    "failOnDataLoss": (),
    "includeHeaders": (),
    "fetchBytesMax": (),
    "commitToGroup": (),
    "attemptTimeout": (),
    **{name: () for name in TLS_OPTIONS},
}

SINK_OPTIONS: dict[str, tuple[str, ...]] = {
    "kafka.bootstrap.servers": ("bootstrap",),
    "topic": (),
    "kafka.acks": ("acks",),
    "exactlyOnce": (),
    "sinkId": (),
    "maxRecordsPerAppend": (),
    "partitioner": (),  # murmur2 (Kafka's default) or crc32 (replog's before murmur2)
    "checkpointLocation": (),  # Spark passes it to streaming sinks
    "attemptTimeout": (),
    **{name: () for name in TLS_OPTIONS},
}

# Kafka options that mean nothing to replog: rejected with the reason, never ignored.
WHY_NOT: dict[str, str] = {
    "groupidprefix": "Spark's checkpoint holds the offsets (commitToGroup shows them to a group)",
    "kafka.group.id": "Spark's checkpoint holds the offsets (commitToGroup shows them to a group)",
    "kafkaconsumer.polltimeoutms": "replog tasks stream their range; there is no poll timeout",
    "fetchoffset.numretries": "the replog client retries offset look-ups itself",
    "fetchoffset.retryintervalms": "the replog client retries offset look-ups itself",
}

_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}
_TIME_UNITS_MS["d"] = 24 * _TIME_UNITS_MS["h"]


def _normalize(
    options: Mapping[str, str], known: Mapping[str, tuple[str, ...]], what: str
) -> dict[str, str]:
    """Options by documented name (aliases folded in); unknown names rejected."""
    lower = {k.lower(): v for k, v in options.items()}
    names = {n.lower(): n for n in known} | {a.lower(): n for n, al in known.items() for a in al}
    out: dict[str, str] = {}
    problems: list[str] = []
    for key, value in lower.items():
        name = names.get(key)
        if name is None:
            problems.append(_unknown(key, names))
            continue
        if name in out and out[name] != value:
            spelled = [name, *known[name]]
            problems.append(f"give only one of {', '.join(spelled)} (they are the same option)")
            continue
        out[name] = value
    if problems:
        raise InvalidArgumentError(f"the replog {what}: " + "; ".join(problems))
    return out


def _unknown(key: str, names: Mapping[str, str]) -> str:
    if key in WHY_NOT:
        return f"option {key!r} is not supported: {WHY_NOT[key]}"
    if key.startswith("kafka."):
        return (
            f"option {key!r} is not supported: replog is not a Kafka client (its only "
            "kafka.* option is kafka.bootstrap.servers; TLS: tls.ca, tls.cert, tls.key)"
        )
    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.6)
    hint = f" (did you mean {names[close[0]]!r}?)" if close else ""
    return f"unknown option {key!r}{hint}"


def attempt_timeout_ms(opts: Mapping[str, str]) -> int:
    """Option `attemptTimeout` (a duration: "2s", "1500ms"): the replog client's deadline
    for one attempt of a call (`Client(attempt_timeout_s=...)`): a node that does not answer
    within it is passed over, an address that cannot be reached fails the query."""
    raw = opts.get("attemptTimeout")
    if raw is None:
        return ATTEMPT_TIMEOUT_MS
    ms = duration_ms(raw, "attemptTimeout")
    if ms < 100:
        raise InvalidArgumentError(f"option attemptTimeout must be at least 100ms, got {raw!r}")
    return ms


def _integer(opts: Mapping[str, str], name: str, minimum: int) -> int | None:
    raw = opts.get(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise InvalidArgumentError(f"option {name} must be >= {minimum}, got {value}")
    return value


def _boolean(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise InvalidArgumentError(f"option {name} must be true or false, got {raw!r}")
    return text == "true"


def duration_ms(raw: str, name: str) -> int:
    """Spark's time strings (`timeStringAsMs`): `500ms`, `10s`, `15m`, `1h`, `2d`; no unit: ms."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if not m or (m.group(2) and m.group(2) not in _TIME_UNITS_MS):
        raise InvalidArgumentError(
            f"option {name} must be a duration such as 500ms, 10s, 15m or 1h, got {raw!r}"
        )
    return int(int(m.group(1)) * _TIME_UNITS_MS[m.group(2) or "ms"])


# -- what to read ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subscription:
    """Which partitions a query reads: Kafka's `subscribe`, `subscribePattern` or `assign`."""

    option: str  # "subscribe" | "subscribePattern" | "assign"
    topics: tuple[str, ...] = ()  # subscribe
    pattern: str = ""  # subscribePattern
    assigned: tuple[off.TopicPartition, ...] = ()  # assign

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> Subscription:
        given = [k for k in ("subscribe", "subscribePattern", "assign") if k in opts]
        if len(given) != 1:
            raise InvalidArgumentError(
                "the replog source needs exactly one of the options subscribe (alias: topic), "
                f"subscribePattern, assign; got {', '.join(given) or 'none'}"
            )
        option = given[0]
        raw = opts[option].strip()
        if option == "subscribe":
            topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
            if not topics:
                raise InvalidArgumentError(f"option subscribe names no topic: {raw!r}")
            return cls(option, topics=topics)
        if option == "subscribePattern":
            if not raw:
                raise InvalidArgumentError("option subscribePattern is empty")
            try:
                re.compile(raw)
            except re.error as exc:
                raise InvalidArgumentError(
                    f"option subscribePattern is not a regular expression: {exc}"
                ) from None
            return cls(option, pattern=raw)
        return cls(option, assigned=_assign(raw))

    def matches(self, topic: str) -> bool:
        """Whether `subscribePattern` takes `topic` (the whole name must match, as in Kafka;
        names starting with `__` are internal and never match)."""
        return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None


def _assign(raw: str) -> tuple[off.TopicPartition, ...]:
    example = '{"orders": [0, 1], "events": [2]}'
    parsed = off.by_topic_json(raw, "assign", example)
    out: list[off.TopicPartition] = []
    for topic, parts in parsed.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise InvalidArgumentError(f"option assign must be JSON such as {example}: {raw!r}")
        out += ((topic, p) for p in parts)
    if not out:
        raise InvalidArgumentError(f"option assign names no partition: {raw!r}")
    return tuple(sorted(set(out)))


# -- the source ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceOptions:
    """Everything the source was asked, checked; plain values, so picklable."""

    bootstrap: str
    subscription: Subscription
    starting: off.OffsetSpec | None  # None: the mode's default (batch earliest, stream latest)
    ending: off.OffsetSpec | None  # None: latest
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    trigger_delay_ms_max: int = TRIGGER_DELAY_DEFAULT_MS
    min_partitions: int = 0  # 0: one task per partition range (or more, see records_per_task)
    records_per_task_max: int = RECORDS_PER_TASK_DEFAULT
    fetch_bytes_max: int = FETCH_BYTES_DEFAULT
    tls: TlsOptions = NO_TLS
    commit_to_group: str | None = None  # a stream commits each batch's end offsets there
    attempt_timeout_ms: int = ATTEMPT_TIMEOUT_MS  # the client's per-attempt deadline
    given: frozenset[str] = field(default_factory=frozenset)  # documented names given

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Checks what holds for batch and streaming alike (`for_batch` / `for_stream` add
        the rest): Spark calls this when the DataFrame is created, so mistakes fail early."""
        opts = _normalize(options, SOURCE_OPTIONS, "source")
        bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
        if not bootstrap:
            raise InvalidArgumentError(
                "the replog source needs option kafka.bootstrap.servers (alias: bootstrap): "
                "a comma-separated list of node addresses, or a Service name"
            )
        max_per_trigger = _integer(opts, "maxOffsetsPerTrigger", 1)
        min_per_trigger = _integer(opts, "minOffsetsPerTrigger", 1)
        if max_per_trigger and min_per_trigger and min_per_trigger > max_per_trigger:
            raise InvalidArgumentError(
                f"minOffsetsPerTrigger ({min_per_trigger}) is higher than "
                f"maxOffsetsPerTrigger ({max_per_trigger})"
            )
        delay = opts.get("maxTriggerDelay")
        strategy = opts.get("startingOffsetsByTimestampStrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise InvalidArgumentError(
                "option startingOffsetsByTimestampStrategy must be error or latest, "
                f"got {strategy!r}"
            )
        return cls(
            bootstrap=bootstrap,
            subscription=Subscription.parse(opts),
            starting=off.parse_spec(
                opts,
                "startingTimestamp",
                "startingOffsetsByTimestamp",
                "startingOffsets",
                no_match_latest=strategy == "latest",
            ),
            ending=off.parse_spec(
                opts,
                "endingTimestamp",
                "endingOffsetsByTimestamp",
                "endingOffsets",
                no_match_latest=True,
            ),
            fail_on_data_loss=_boolean(opts, "failOnDataLoss", True),
            include_headers=_boolean(opts, "includeHeaders", False),
            max_offsets_per_trigger=max_per_trigger,
            min_offsets_per_trigger=min_per_trigger,
            trigger_delay_ms_max=TRIGGER_DELAY_DEFAULT_MS
            if delay is None
            else duration_ms(delay, "maxTriggerDelay"),
            min_partitions=_integer(opts, "minPartitions", 1) or 0,
            records_per_task_max=_integer(opts, "maxRecordsPerPartition", 1)
            or RECORDS_PER_TASK_DEFAULT,
            fetch_bytes_max=_integer(opts, "fetchBytesMax", 1024) or FETCH_BYTES_DEFAULT,
            tls=tls_options({k: opts[k] for k in TLS_OPTIONS if k in opts}),
            commit_to_group=opts.get("commitToGroup", "").strip() or None,
            attempt_timeout_ms=attempt_timeout_ms(opts),
            given=frozenset(opts),
        )

    def for_batch(self) -> SourceOptions:
        """Kafka's batch rules: no `latest` start, no `earliest` end, and the per-trigger
        options have no meaning (a warning, as Kafka logs)."""
        if off.asks_for(self.starting, off.LATEST):
            raise InvalidArgumentError(
                "startingOffsets can't be latest (-1) for batch queries: a batch read would "
                "return nothing"
            )
        if off.asks_for(self.ending, off.EARLIEST):
            raise InvalidArgumentError(
                "endingOffsets can't be earliest (-2) for batch queries: a batch read would "
                "return nothing"
            )
        off.check_start_before_end(self.starting, self.ending)
        if self.commit_to_group is not None:
            raise InvalidArgumentError(
                "option commitToGroup is for streaming queries: a batch query commits nothing"
            )
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if name in self.given:
                log.warning("option %s is ignored in batch queries (as Kafka's source does)", name)
        return self

    def for_stream(self) -> SourceOptions:
        """Kafka's streaming rule: a stream has no end."""
        for name in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"):
            if name in self.given:
                raise InvalidArgumentError(f"option {name} is not valid in streaming queries")
        return self


# -- the sink --------------------------------------------------------------------------------

_KAFKA_ACKS = {"all": "all", "-1": "all", "1": "leader", "0": "none"}
_REPLOG_ACKS = ("all", "leader", "none")


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: str
    topic: str | None  # None: each row's `topic` column
    acks: str  # replog's vocabulary: all | leader | none
    tls: TlsOptions
    exactly_once: bool | None = None  # None: not given (streaming: on; batch: with sinkId)
    sink_id: str | None = None  # a batch write's identity (exactly-once)
    records_per_append: int = RECORDS_PER_APPEND_DEFAULT
    attempt_timeout_ms: int = ATTEMPT_TIMEOUT_MS
    partitioner: Partitioner = DEFAULT_PARTITIONER

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        opts = _normalize(options, SINK_OPTIONS, "sink")
        bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
        if not bootstrap:
            raise InvalidArgumentError(
                "the replog sink needs option kafka.bootstrap.servers (alias: bootstrap)"
            )
        raw_acks = opts.get("kafka.acks", "all").strip().lower()
        acks = _KAFKA_ACKS.get(raw_acks, raw_acks)
        if acks not in _REPLOG_ACKS:
            raise InvalidArgumentError(
                f"option kafka.acks (alias: acks) must be all, 1, 0 (Kafka) or all, leader, "
                f"none (replog), got {raw_acks!r}"
            )
        topic = opts.get("topic", "").strip() or None
        tls = tls_options({k: opts[k] for k in TLS_OPTIONS if k in opts})
        exactly_once = _boolean(opts, "exactlyOnce", True) if "exactlyOnce" in opts else None
        sink_id = opts.get("sinkId", "").strip() or None
        if sink_id is not None and len(sink_id.encode()) > SINK_ID_BYTES_MAX:
            raise InvalidArgumentError(
                f"option sinkId must be at most {SINK_ID_BYTES_MAX} bytes, got {len(sink_id)}"
            )
        if (exactly_once or sink_id is not None) and acks == "none":
            raise InvalidArgumentError(
                "exactlyOnce needs acks: kafka.acks=0 (none) appends are never deduplicated"
            )
        if sink_id is not None and exactly_once is False:
            raise InvalidArgumentError("option sinkId only serves exactlyOnce=true")
        per_append = _integer(opts, "maxRecordsPerAppend", 1) or RECORDS_PER_APPEND_DEFAULT
        try:
            partitioner = check_partitioner(opts.get("partitioner", DEFAULT_PARTITIONER).strip())
        except ValueError as err:
            raise InvalidArgumentError(f"option partitioner: {err}") from None
        return cls(
            bootstrap,
            topic,
            acks,
            tls,
            exactly_once,
            sink_id,
            per_append,
            attempt_timeout_ms(opts),
            partitioner,
        )

    def exactly_once_for(self, streaming: bool) -> bool:
        """Whether a writer of this sink writes exactly once. Exactly once is never turned
        off quietly: `kafka.acks=0` is refused unless `exactlyOnce=false` says at least once
        is meant, and `exactlyOnce=false` (or acks 0 with it) is logged as a warning naming
        the option. A batch write without `sinkId` is at least once, as documented (no
        option turned anything off)."""
        if self.exactly_once is False:
            why = " with kafka.acks=0 (none)" if self.acks == "none" else ""
            log.warning(
                "replog sink: option exactlyOnce=false%s: this %s write is at least once "
                "(a retried task or a replayed micro-batch writes its rows again)",
                why,
                "streaming" if streaming else "batch",
            )
            return False
        if self.acks == "none" and streaming:
            raise InvalidArgumentError(
                "kafka.acks=0 (none) turns the streaming sink's exactly once off (those "
                "appends get no answer and are never deduplicated): use kafka.acks=all or 1, "
                "or set exactlyOnce=false to write at least once"
            )
        if not streaming:
            return self.sink_id is not None
        return True
