"""Offset ranges for the Spark source: offset options, planning, read limits, stream offsets.

Pure logic, no Spark and no network, so it is unit-tested directly. A partition is a
`(topic, partition)` pair; "latest" is the high watermark, so a Spark job never sees an
uncommitted record.

Offset options follow Spark's Kafka source:

* `startingOffsets` / `endingOffsets`: `earliest`, `latest`, or JSON per partition such as
  `{"orders": {"0": 42, "1": -2}, "events": {"0": -1}}` where -2 means earliest and -1 latest.
  The JSON must name every partition the query reads, no more and no fewer (Kafka rejects it
  otherwise, and so does replog: a partition left out must never silently read nothing).
* `startingTimestamp` / `endingTimestamp` (one timestamp in ms for every partition) and
  `startingOffsetsByTimestamp` / `endingOffsetsByTimestamp` (JSON like the offsets, with
  timestamps): the earliest offset whose record timestamp is >= the timestamp. They take
  precedence over the offsets options, in that order. When no record is that recent, a
  start fails (`startingOffsetsByTimestampStrategy=error`, the default) or starts at the
  latest offset (`=latest`); an end reads to the latest offset.
* A stream offset (what Spark stores in its checkpoint) is
  `{topic: {partition: next_offset}}` with string partition keys, topics and partitions in
  sorted order (Spark compares offsets as JSON text).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from replog.errors import InvalidArgumentError, OffsetOutOfRangeError

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]
K = TypeVar("K")

# Offsets by time, as the server answers them: for each asked partition, the earliest offset
# whose timestamp is >= the asked one (None: no record that recent). Called with the name of
# the option that asked, for its errors.
TimeLookup = Callable[[str, Mapping[TopicPartition, int]], Mapping[TopicPartition, int | None]]


@dataclass(frozen=True, slots=True)
class Bounds:
    """What the cluster says about one partition right now."""

    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class OffsetRange:
    topic: str
    partition: int
    start: int  # inclusive
    end: int  # exclusive

    @property
    def count(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class SpecificOffsets:
    """`startingOffsets` / `endingOffsets` as JSON: an offset (or -2, -1) per partition."""

    option: str
    offsets: dict[TopicPartition, int]


@dataclass(frozen=True)
class ByTimestamp:
    """A timestamp option: one for every partition (`timestamp`) or one each (`timestamps`)."""

    option: str
    timestamps: dict[TopicPartition, int] | None
    timestamp: int | None
    no_match_latest: bool  # no record that recent: the latest offset (else an error)


# EARLIEST | LATEST | per partition | by time
OffsetSpec = int | SpecificOffsets | ByTimestamp


def name(tp: TopicPartition) -> str:
    return f"{tp[0]}/{tp[1]}"


def _names(tps: object) -> str:
    return ", ".join(name(tp) for tp in sorted(tps))  # type: ignore[call-overload]


def parse_spec(
    opts: Mapping[str, str],
    global_timestamp: str,
    by_timestamp: str,
    offsets: str,
    *,
    no_match_latest: bool,
) -> OffsetSpec | None:
    """The offset spec the options ask for (Kafka's precedence: one timestamp for all, then
    timestamps per partition, then offsets), None when none of them is given."""
    if global_timestamp in opts:
        raw = opts[global_timestamp].strip()
        try:
            ts = int(raw)
        except ValueError:
            raise InvalidArgumentError(
                f"option {global_timestamp} must be a timestamp in ms since the epoch, got {raw!r}"
            ) from None
        if ts < 0:
            raise InvalidArgumentError(f"option {global_timestamp} must be >= 0, got {ts}")
        return ByTimestamp(global_timestamp, None, ts, no_match_latest)
    if by_timestamp in opts:
        per = _partition_json(opts[by_timestamp], by_timestamp, minimum=0)
        return ByTimestamp(by_timestamp, per, None, no_match_latest)
    if offsets in opts:
        text = opts[offsets].strip()
        if text.lower() == "earliest":
            return EARLIEST
        if text.lower() == "latest":
            return LATEST
        return SpecificOffsets(offsets, _partition_json(text, offsets, minimum=EARLIEST))
    return None


def by_topic_json(raw: str, option: str, example: str, what: str = "") -> dict[str, object]:
    """An option's value that is a JSON object by topic, not empty (else
    `InvalidArgumentError` naming the option and showing `example`)."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidArgumentError(f"option {option} must be {what}JSON such as {example}: {raw!r}")
    return parsed


def _partition_json(raw: str, option: str, *, minimum: int) -> dict[TopicPartition, int]:
    example = '{"orders": {"0": 42, "1": -2}}'
    what = "earliest, latest or " if option.endswith("Offsets") else ""
    parsed = by_topic_json(raw, option, example, what)
    out: dict[TopicPartition, int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise InvalidArgumentError(f"option {option} must be JSON such as {example}: {raw!r}")
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise InvalidArgumentError(
                    f"option {option}: partition {p!r} of topic {topic!r} is not a number"
                ) from None
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise InvalidArgumentError(
                    f"option {option}: {topic}/{p} must be an integer >= {minimum}, got {value!r}"
                )
            out[(topic, partition)] = value
    return out


def asks_for(spec: OffsetSpec | None, which: int) -> bool:
    """Whether `spec` asks for EARLIEST or LATEST for at least one partition."""
    if isinstance(spec, int):
        return spec == which
    return isinstance(spec, SpecificOffsets) and which in spec.offsets.values()


def check_start_before_end(start: OffsetSpec | None, end: OffsetSpec | None) -> None:
    """Kafka's check of two per-partition specs: the same partitions, start <= end."""
    pairs: tuple[dict[TopicPartition, int], dict[TopicPartition, int]] | None = None
    if isinstance(start, SpecificOffsets) and isinstance(end, SpecificOffsets):
        pairs = (start.offsets, end.offsets)
        names = (start.option, end.option)
    elif (
        isinstance(start, ByTimestamp)
        and isinstance(end, ByTimestamp)
        and start.timestamps is not None
        and end.timestamps is not None
    ):
        pairs = (start.timestamps, end.timestamps)
        names = (start.option, end.option)
    if pairs is None:
        return
    if set(pairs[0]) != set(pairs[1]):
        raise InvalidArgumentError(
            f"{names[0]} and {names[1]} must name the same partitions: "
            f"{_names(pairs[0])} vs {_names(pairs[1])}"
        )
    for tp, s in pairs[0].items():
        e = pairs[1][tp]
        if s >= 0 and e >= 0 and s > e:
            raise InvalidArgumentError(f"{names[0]} {s} is after {names[1]} {e} for {name(tp)}")


def no_time_lookup(option: str, wanted: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    raise AssertionError(f"{option}: resolved without a time lookup")


def resolve(
    spec: OffsetSpec,
    bounds: Mapping[TopicPartition, Bounds],
    *,
    fail_on_data_loss: bool,
    times: TimeLookup = no_time_lookup,
) -> dict[TopicPartition, int]:
    """Concrete offsets for every partition in `bounds` (the partitions the query reads)."""
    if isinstance(spec, int):
        return {
            tp: b.log_start_offset if spec == EARLIEST else b.high_watermark
            for tp, b in sorted(bounds.items())
        }
    asked = spec.offsets if isinstance(spec, SpecificOffsets) else spec.timestamps
    if asked is not None and set(asked) != set(bounds):
        missing, extra = set(bounds) - set(asked), set(asked) - set(bounds)
        parts = [f"leaves out {_names(missing)}" if missing else ""]
        parts.append(f"names {_names(extra)}, which the query does not read" if extra else "")
        raise InvalidArgumentError(
            f"option {spec.option} must name every partition the query reads (as Kafka's "
            f"source requires; use -2 for earliest, -1 for latest): it "
            + " and ".join(p for p in parts if p)
        )
    resolved: dict[TopicPartition, int] = {}
    if isinstance(spec, SpecificOffsets):
        for tp, b in sorted(bounds.items()):
            want = spec.offsets[tp]
            if want == EARLIEST:
                resolved[tp] = b.log_start_offset
            elif want == LATEST:
                resolved[tp] = b.high_watermark
            else:
                resolved[tp] = clamp(want, tp, b, fail_on_data_loss=fail_on_data_loss)
        return resolved
    wanted = {
        tp: spec.timestamp if spec.timestamps is None else spec.timestamps[tp]
        for tp in sorted(bounds)
    }
    assert all(ts is not None for ts in wanted.values())
    found = times(spec.option, {tp: int(ts) for tp, ts in wanted.items() if ts is not None})
    for tp, b in sorted(bounds.items()):
        offset = found.get(tp)
        if offset is None:
            if not spec.no_match_latest:
                raise InvalidArgumentError(
                    f"option {spec.option}: no record of {name(tp)} has a timestamp >= "
                    f"{wanted[tp]} (startingOffsetsByTimestampStrategy=latest starts at the "
                    "latest offset instead)"
                )
            resolved[tp] = b.high_watermark
        else:
            resolved[tp] = clamp(offset, tp, b, fail_on_data_loss=fail_on_data_loss)
    return resolved


def data_lost(tp: TopicPartition, offset: int, log_start_offset: int) -> str:
    return (
        f"offset {offset} of {name(tp)} was deleted by retention (the log starts at "
        f"{log_start_offset})"
    )


def clamp(offset: int, tp: TopicPartition, b: Bounds, *, fail_on_data_loss: bool) -> int:
    """Check `offset` against the partition's committed range `[log start, HW]`."""
    if offset < b.log_start_offset:
        if fail_on_data_loss:
            raise OffsetOutOfRangeError(
                data_lost(tp, offset, b.log_start_offset)
                + ": failOnDataLoss=true (the default) stops here; set failOnDataLoss=false "
                "to continue from the log start",
                offset=offset,
                log_start_offset=b.log_start_offset,
                high_watermark=b.high_watermark,
            )
        return b.log_start_offset
    if offset > b.high_watermark:
        raise OffsetOutOfRangeError(
            f"offset {offset} of {name(tp)} is past the high watermark {b.high_watermark}",
            offset=offset,
            log_start_offset=b.log_start_offset,
            high_watermark=b.high_watermark,
        )
    return offset


def split(
    ranges: list[OffsetRange], records_per_task_max: int, tasks_min: int
) -> list[OffsetRange]:
    """Split ranges so that no task has more than `records_per_task_max` records and there are
    at least `tasks_min` tasks when the records allow it."""
    total = sum(r.count for r in ranges)
    per_task = records_per_task_max
    if tasks_min > 0 and total > 0:
        per_task = max(1, min(per_task, -(-total // tasks_min)))
    out: list[OffsetRange] = []
    for r in ranges:
        if r.count <= 0:
            continue
        pieces = -(-r.count // per_task)
        step = -(-r.count // pieces)
        for start in range(r.start, r.end, step):
            out.append(OffsetRange(r.topic, r.partition, start, min(start + step, r.end)))
    return out


def spread_limit(start: Mapping[K, int], latest: Mapping[K, int], rows_max: int) -> dict[K, int]:
    """End offsets that admit at most `rows_max` records in all, shared in proportion to each
    partition's lag (largest remainders first), so that no partition starves."""
    lags = {p: max(0, latest[p] - start.get(p, latest[p])) for p in latest}
    total = sum(lags.values())
    if total <= rows_max:
        return dict(latest)
    shares = {p: rows_max * lag // total for p, lag in lags.items()}
    left = rows_max - sum(shares.values())
    order = {p: i for i, p in enumerate(latest)}
    by_remainder = sorted(lags, key=lambda p: (-(rows_max * lags[p] % total), order[p]))
    for p in by_remainder:
        if left <= 0:
            break
        if shares[p] < lags[p]:
            shares[p] += 1
            left -= 1
    return {p: start.get(p, latest[p]) + shares[p] for p in latest}


def admit(
    begin: Mapping[K, int],
    latest: Mapping[K, int],
    *,
    rows_min: int | None,
    rows_max: int | None,
    delay_ms_max: int,
    now_ms: int,
    last_trigger_ms: int,
) -> tuple[dict[K, int], int]:
    """Kafka's admission control for one trigger: `(end offsets, last trigger time)`.

    `minOffsetsPerTrigger` (`rows_min`): fewer new records than that and the trigger is
    skipped (the end is `begin`), unless `maxTriggerDelay` passed since the last batch that
    ran (the first trigger always runs: `last_trigger_ms` starts at 0, as in Kafka).
    `maxOffsetsPerTrigger` (`rows_max`): at most that many records, shared by lag.
    """
    if rows_min is not None:
        if now_ms - last_trigger_ms >= delay_ms_max:
            last_trigger_ms = now_ms
        elif sum(latest[p] - begin[p] for p in latest) < rows_min:
            return {p: begin[p] for p in latest}, last_trigger_ms
        else:
            last_trigger_ms = now_ms
    if rows_max is not None:
        return spread_limit(begin, latest, rows_max), last_trigger_ms
    return dict(latest), last_trigger_ms


def to_stream_offset(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's offset dict: topics, then partitions, in sorted order; string partition keys."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def from_stream_offset(offset: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {(t, int(p)): int(o) for t, parts in offset.items() for p, o in parts.items()}
