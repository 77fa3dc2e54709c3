"""`replog consume TOPIC`: print a topic's records, every partition unless `-p` narrows it.

    replog consume TOPIC [-p P[,P]...]... [-o beginning|end|stored|N|-N | --from-time T]
                         [-f text|hex|json|FORMAT] [-K DELIM] [-c N] [-e | --follow]
                         [--group G]

Where each partition starts (`-o`, `--offset`; `--from` is the same flag): `beginning`
(`earliest`, the default) its log start, `end` (`latest`) its high watermark, `N` offset N,
`-N` N records before its high watermark (not before its log start); `stored` the group's
committed offsets (with `--group`); `--from-time T` (or kcat's `-o s@T`) the first record
at or after T.

When it stops: without `--follow` or `--group`, at each partition's high watermark as it
was at start (`-e`, `--until-latest`); `--follow` keeps waiting for new records; `--group
G` consumes as a member of group G (the partitions the group gives it, from its committed
offsets; what is printed is committed) until interrupted, or with `-e` once its partitions
are read to their end. `-c N` (`--count`, `-n`, `--max-records`) stops after N records.

Each partition is read with `StreamFrom` (the server pushes batches: no round trip per
batch) and each batch printed as one blob (render.py; the default format's usual batch
straight from its frames, lines.py). Up to the ends, the partitions are read one after the
other in the main thread; following (`--follow`), a reader thread per partition feeds a
bounded queue and partitions interleave by batch. One partition's records always print in
offset order.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import queue
import sys
import threading
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, TextIO

from replog.cli.common import (
    Subparsers,
    UsageError,
    add_progress_argument,
    cli_client,
    client_parser,
    int_list,
    progress_enabled,
    time_ms_arg,
)
from replog.cli.progress import Progress
from replog.cli.render import NAMED_FORMATS, FormatError, Render, Rows, renderer

if TYPE_CHECKING:
    from replog.cli.lines import Lines
    from replog.client import Client, Offsets
    from replog.client.group_consumer import GroupConsumer, GroupRecord
    from replog.frames import DecodedFrames
    from replog.records import DecodedRecords

STREAM_REPLY_BYTES = 1 << 20  # = replog.client.consumer's
QUEUE_BATCHES_MAX = 8  # per reader thread: bounds memory while stdout is slower
PUT_WAIT_S = 0.2  # a reader re-checks the stop flag this often while the queue is full
GROUP_POLL_S = 0.5
FORMAT_HELP = (
    "text (default), hex, json, or a format string of kcat's letters: %%t topic, %%p "
    "partition, %%o offset, %%k key, %%K key length, %%s value, %%S value length, %%T "
    "timestamp (ms), %%h headers (name=value,...), %%%% a percent sign; escapes \\n \\t \\r; "
    "e.g. -f '%%p:%%o %%k=%%s\\n'"
)


def add_parser(sub: Subparsers) -> None:
    consume = client_parser(sub, "consume", "print records of a topic (every partition)")
    consume.set_defaults(run=cmd_consume)
    consume.add_argument("topic")
    consume.add_argument(
        "--partition",
        "-p",
        action="append",
        type=lambda text: int_list(text, "partitions", 0),
        default=[],
        help="only these partitions (repeat, or a comma list; default: every partition)",
    )
    consume.add_argument(
        "--offset",
        "--from",
        "-o",
        dest="start",
        default="beginning",
        help="where each partition starts: beginning (earliest; default), end (latest), "
        "stored (the group's committed offsets, with --group), N (offset N), -N (N "
        "records before the end) or s@TIME (kcat's: as --from-time TIME)",
    )
    consume.add_argument(
        "--from-time",
        default=None,
        metavar="TIME",
        help="start at the first record at or after TIME: ISO 8601 (2026-11-25T10:00:00Z; "
        "no zone: UTC) or milliseconds since the epoch (replaces --offset)",
    )
    consume.add_argument("--follow", action="store_true", help="keep waiting for new records")
    consume.add_argument(
        "--until-latest",
        "-e",
        action="store_true",
        help="exit at the end of the partitions: the high watermark seen at start (the "
        "default without --follow or --group); with --group, once its partitions are read",
    )
    consume.add_argument("--group", "-G", default=None, help="consume as a member of this group")
    fmt = consume.add_argument("--format", "-f", default="text", metavar="FORMAT", help=FORMAT_HELP)
    fmt.completions = list(NAMED_FORMATS)  # type: ignore[attr-defined]  # completion.py
    consume.add_argument(
        "--key-delimiter",
        "-K",
        default=None,
        metavar="DELIM",
        help="text and hex formats: print each record's key, DELIM, then its value",
    )
    consume.add_argument(
        "--count",
        "--max-records",
        "-c",
        "-n",
        dest="max_records",
        type=int,
        default=None,
        help="stop after N records",
    )
    add_progress_argument(consume)


@dataclass(frozen=True, slots=True)
class Plan:
    """Where each partition starts, and where it stops (None: it follows the tail)."""

    starts: dict[int, int]
    ends: dict[int, int | None]
    total: int | None  # records up to the ends, for the progress ETA


class Output:
    """Stdout as bytes: each batch written in one call; flushed per batch when following."""

    def __init__(self, out: TextIO, *, flush_each: bool) -> None:
        self.text = out
        self.binary: BinaryIO | None = getattr(out, "buffer", None)
        self.flush_each = flush_each
        out.flush()

    def write(self, blob: bytes | memoryview) -> None:
        if self.binary is None:
            self.text.write(bytes(blob).decode(errors="replace"))
        else:
            self.binary.write(blob)
        if self.flush_each:
            self.flush()

    def flush(self) -> None:
        (self.binary or self.text).flush()


def cmd_consume(args: argparse.Namespace, out: TextIO) -> int:
    limit = args.max_records
    if limit is not None and limit < 0:
        raise UsageError("--count must be >= 0")
    if args.follow and args.until_latest:
        raise UsageError("--follow and --until-latest exclude each other")
    key_delimiter = None if args.key_delimiter is None else args.key_delimiter.encode()
    try:
        render = renderer(args.format, args.topic, key_delimiter)
    except FormatError as err:
        raise UsageError(f"--format: {err}") from None
    if limit == 0:
        return 0
    output = Output(out, flush_each=args.follow or args.group is not None)
    with cli_client(args) as client:
        try:
            if args.group is not None:
                return consume_group(client, args, render, output)
            return consume_partitions(client, args, render, output)
        finally:
            output.flush()


def partitions_of(client: Client, args: argparse.Namespace) -> list[int]:
    count = client.partition_count(args.topic)
    wanted = sorted({p for chunk in args.partition for p in chunk})
    if not wanted:
        return list(range(count))
    missing = [p for p in wanted if p >= count]
    if missing:
        raise UsageError(f"{args.topic} has {count} partition(s): no partition {missing}")
    return wanted


def start_offset(start: str, offsets: Offsets) -> int:
    """`-o`'s value for one partition (the time case is resolved by ListOffsets)."""
    if offsets.offset_for_timestamp is not None:
        return offsets.offset_for_timestamp
    if start in ("beginning", "earliest"):
        return offsets.earliest
    if start in ("end", "latest"):
        return offsets.latest
    if start == "stored":
        raise UsageError("-o stored needs --group (the group's committed offsets)")
    try:
        offset = int(start)
    except ValueError:
        raise UsageError(
            f"--offset must be beginning, end, stored, N or -N, got {start!r}"
        ) from None
    if start.startswith("-"):
        return max(offsets.latest + offset, offsets.earliest)
    return offset


def plan(client: Client, args: argparse.Namespace) -> Plan:
    partitions = partitions_of(client, args)
    from_time = args.from_time
    if args.start.startswith("s@"):  # kcat's -o s@TIMESTAMP
        if from_time is not None:
            raise UsageError("-o s@TIME and --from-time exclude each other")
        from_time = args.start[2:]
    from_time_ms = None if from_time is None else time_ms_arg(from_time, "--from-time")
    found = client.list_offsets(args.topic, partitions, timestamp_ms=from_time_ms)
    starts = {o.partition: start_offset(args.start, o) for o in found}
    if args.follow:
        return Plan(starts, dict.fromkeys(starts), None)
    ends: dict[int, int | None] = {o.partition: o.latest for o in found}
    total = sum(max(o.latest - starts[o.partition], 0) for o in found)
    if args.max_records is not None:
        total = min(total, args.max_records)
    return Plan(starts, ends, total)


def consume_partitions(
    client: Client, args: argparse.Namespace, render: Render, output: Output
) -> int:
    the_plan = plan(client, args)
    progress = Progress(
        sys.stderr, "consumed", enabled=progress_enabled(args), total_records=the_plan.total
    )
    left = args.max_records
    plain_text = args.format == "text" and args.key_delimiter is None
    try:
        for rows in read_all(client, args.topic, the_plan, plain_text):
            if left is not None:
                rows = rows.head(left)
                left -= len(rows)
            if isinstance(rows, Rows):
                output.write(render(rows))
            else:  # the default format's lines, made from the frames (lines.py)
                output.write(rows.blob)
            if progress.enabled:
                shown = sum(map(len, rows.values)) if isinstance(rows, Rows) else rows.value_bytes()
                progress.update(len(rows), shown)
            if left == 0:
                break
    finally:
        progress.finish()
    return 0


def rows_of(partition: int, batch: DecodedFrames | DecodedRecords) -> Rows:
    from replog.records import DecodedRecords  # loaded by the client already

    if not isinstance(batch, DecodedRecords):
        return Rows(partition, batch.offsets, batch.values)
    values, nulls = Rows.split_nulls(batch.values)
    return Rows(
        partition, batch.offsets, values, batch.keys, batch.headers, batch.timestamps, nulls
    )


def read_all(
    client: Client, topic: str, the_plan: Plan, plain_text: bool = False
) -> Iterator[Rows | Lines]:
    """Every planned partition's records: up to their ends, one partition after the other
    in this thread (no hand-off between threads: on a busy machine each costs a wake-up);
    following the tails, from one reader thread per partition. With `plain_text` (the
    default format) a batch of plain records comes as its printed `Lines`."""
    todo = {
        p: offset
        for p, offset in the_plan.starts.items()
        if the_plan.ends[p] is None or offset < the_plan.ends[p]  # type: ignore[operator]
    }
    if len(todo) == 1 or all(the_plan.ends[p] is not None for p in todo):
        for partition, offset in todo.items():
            end = the_plan.ends[partition]
            yield from partition_rows(client, topic, partition, offset, end, plain_text)
        return
    inbox: queue.Queue[Rows | Lines | BaseException | None] = queue.Queue(
        QUEUE_BATCHES_MAX * len(todo)
    )
    stop = threading.Event()
    for partition, offset in todo.items():
        threading.Thread(
            target=_read_partition,
            args=(
                client,
                topic,
                partition,
                offset,
                the_plan.ends[partition],
                plain_text,
                inbox,
                stop,
            ),
            name=f"replog-consume-{partition}",
            daemon=True,
        ).start()
    running = len(todo)
    try:
        while running:
            item = inbox.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        stop.set()


def partition_rows(
    client: Client,
    topic: str,
    partition: int,
    offset: int,
    end: int | None,
    plain_text: bool = False,
) -> Generator[Rows | Lines, None, None]:
    """One partition's records from `offset` (StreamFrom: the server pushes batches), up to
    `end` (None: following the tail, until the caller stops); with `plain_text`, a batch
    of plain records as its printed `Lines` (lines.py)."""
    from replog.cli.lines import text_lines
    from replog.client.formats import ENVELOPE, decode

    envelope = client.topic_format(topic) == ENVELOPE
    stream = client.stream(topic, partition, offset, max_bytes=STREAM_REPLY_BYTES)
    try:
        for batch in stream:
            rows: Rows | Lines | None = None
            if plain_text:
                rows = text_lines(batch.frames, envelope, end)
            if rows is None:
                rows = rows_of(partition, decode(batch.frames, envelope))
                if end is not None:
                    rows = rows.head(bisect.bisect_left(rows.offsets, end))
            if len(rows):
                yield rows
            if end is not None and batch.next_offset >= end:
                return
    finally:
        stream.close()


def _read_partition(
    client: Client,
    topic: str,
    partition: int,
    offset: int,
    end: int | None,
    plain_text: bool,
    inbox: queue.Queue[Rows | Lines | BaseException | None],
    stop: threading.Event,
) -> None:
    def put(item: Rows | Lines | BaseException | None) -> bool:
        while not stop.is_set():
            with contextlib.suppress(queue.Full):
                inbox.put(item, timeout=PUT_WAIT_S)
                return True
        return False

    try:
        rows = partition_rows(client, topic, partition, offset, end, plain_text)
        try:
            for batch in rows:
                if not put(batch) or stop.is_set():
                    return
        finally:
            rows.close()
        put(None)
    except BaseException as err:  # handed to the main thread, which raises it
        put(err)


def consume_group(client: Client, args: argparse.Namespace, render: Render, output: Output) -> int:
    """As a member of `--group`: print what it is given, commit what was printed."""
    if args.from_time is not None or args.start not in ("stored", "beginning", "end"):
        raise UsageError(
            "with --group, -o is stored, beginning or end (where a partition "
            "without a committed offset starts)"
        )
    if args.partition or args.follow:
        raise UsageError("with --group, the group assigns the partitions: no -p or --follow")
    reset = "latest" if args.start == "end" else "earliest"
    consumer = client.consumer(
        args.topic, group=args.group, auto_commit=False, auto_offset_reset=reset
    )
    left = args.max_records
    try:
        while left is None or left > 0:
            records = consumer.poll(GROUP_POLL_S)
            if left is not None:
                records = records[:left]
                left -= len(records)
            if records:
                _print_group_records(records, render, output)
                consumer.commit(_next_offsets(records))
            elif args.until_latest and _at_end(client, consumer):
                break
    finally:
        consumer.close()
    return 0


def _print_group_records(records: list[GroupRecord], render: Render, output: Output) -> None:
    by_partition: dict[int, list[GroupRecord]] = {}
    for r in records:
        by_partition.setdefault(r.partition, []).append(r)
    for partition, rs in by_partition.items():
        envelope = rs[0].timestamp_ms is not None
        values, nulls = Rows.split_nulls([r.value for r in rs])
        rows = Rows(
            partition,
            [r.offset for r in rs],
            values,
            [r.key for r in rs] if envelope else None,
            [r.headers for r in rs] if envelope else None,
            [r.timestamp_ms or 0 for r in rs] if envelope else None,
            nulls,
        )
        output.write(render(rows))


def _next_offsets(records: list[GroupRecord]) -> dict[tuple[str, int], int]:
    return {(r.topic, r.partition): r.offset + 1 for r in records}


def _at_end(client: Client, consumer: GroupConsumer) -> bool:
    """Whether the member holds partitions and has read each to its high watermark."""
    assigned = consumer.assignment()
    if not assigned:
        return False
    topic = next(iter(assigned))[0]
    latest = {o.partition: o.latest for o in client.list_offsets(topic)}
    return all(consumer.position(t, p) >= latest[p] for t, p in assigned)
