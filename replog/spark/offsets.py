"""Offset ranges for the Spark source: option parsing, planning and read-limit spreading.

Pure logic, no Spark and no network, so it is unit-tested directly.

Offsets follow Spark's Kafka source conventions:

* `startingOffsets` / `endingOffsets`: `earliest`, `latest`, or JSON per partition such as
  `{"orders": {"0": 42, "1": -2}}` where -2 means earliest and -1 latest.
* A stream offset is `{topic: {partition: next_offset}}` with string partition keys in
  sorted order (Spark stores offsets as JSON text and compares them as text).
* "latest" is the high watermark: a Spark job never sees an uncommitted record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from replog.errors import InvalidArgumentError, OffsetOutOfRangeError

EARLIEST = -2
LATEST = -1


@dataclass(frozen=True, slots=True)
class PartitionBounds:
    """What the cluster says about one partition right now."""

    partition: int
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


def parse_offsets_option(raw: str | None, topic: str, default: int) -> dict[int, int] | int:
    """`earliest`/`latest` -> EARLIEST/LATEST for every partition; JSON -> per partition."""
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip()
    if text.lower() == "earliest":
        return EARLIEST
    if text.lower() == "latest":
        return LATEST
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(
            f"offsets option is not earliest, latest or JSON: {raw!r}"
        ) from exc
    if (
        not isinstance(parsed, dict)
        or set(parsed) != {topic}
        or not isinstance(parsed[topic], dict)
    ):
        raise InvalidArgumentError(
            f'offsets JSON must look like {{"{topic}": {{"0": 42}}}}: {raw!r}'
        )
    try:
        return {int(p): int(o) for p, o in parsed[topic].items()}
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"offsets JSON must map partitions to integers: {raw!r}"
        ) from exc


def resolve(
    spec: dict[int, int] | int,
    bounds: Mapping[int, PartitionBounds],
    *,
    fail_on_data_loss: bool,
    topic: str,
) -> dict[int, int]:
    """Concrete offsets for every partition in `bounds` (partitions missing from a JSON spec
    take `earliest`)."""
    resolved: dict[int, int] = {}
    for p, b in sorted(bounds.items()):
        want = spec if isinstance(spec, int) else spec.get(p, EARLIEST)
        if want == EARLIEST:
            resolved[p] = b.log_start_offset
        elif want == LATEST:
            resolved[p] = b.high_watermark
        else:
            resolved[p] = clamp(want, b, fail_on_data_loss=fail_on_data_loss, topic=topic)
    if not isinstance(spec, int):
        unknown = set(spec) - set(bounds)
        if unknown:
            raise InvalidArgumentError(f"topic {topic!r} has no partitions {sorted(unknown)}")
    return resolved


def clamp(offset: int, b: PartitionBounds, *, fail_on_data_loss: bool, topic: str) -> int:
    """Check `offset` against the partition's committed range."""
    if offset < b.log_start_offset:
        if fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {topic}/{b.partition} was deleted (log starts at "
                f"{b.log_start_offset}); set failOnDataLoss=false to skip ahead",
                offset=offset,
                log_start_offset=b.log_start_offset,
                high_watermark=b.high_watermark,
            )
        return b.log_start_offset
    if offset > b.high_watermark:
        raise OffsetOutOfRangeError(
            f"offset {offset} of {topic}/{b.partition} is past the high watermark "
            f"{b.high_watermark}",
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


def spread_limit(
    start: Mapping[int, int], latest: Mapping[int, int], rows_max: int
) -> dict[int, int]:
    """End offsets that admit at most `rows_max` records in all, shared in proportion to each
    partition's lag (largest remainders first), so that no partition starves."""
    lags = {p: max(0, latest[p] - start.get(p, latest[p])) for p in latest}
    total = sum(lags.values())
    if total <= rows_max:
        return dict(latest)
    shares = {p: rows_max * lag // total for p, lag in lags.items()}
    left = rows_max - sum(shares.values())
    by_remainder = sorted(lags, key=lambda p: (-(rows_max * lags[p] % total), p))
    for p in by_remainder:
        if left <= 0:
            break
        if shares[p] < lags[p]:
            shares[p] += 1
            left -= 1
    return {p: start.get(p, latest[p]) + shares[p] for p in latest}


def to_stream_offset(topic: str, offsets: Mapping[int, int]) -> dict[str, dict[str, int]]:
    """Spark's offset dict: string keys, sorted by partition number."""
    return {topic: {str(p): int(offsets[p]) for p in sorted(offsets)}}


def from_stream_offset(topic: str, offset: Mapping[str, Mapping[str, int]]) -> dict[int, int]:
    inner = offset.get(topic, {})
    return {int(p): int(o) for p, o in inner.items()}
