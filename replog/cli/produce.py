"""`replog produce TOPIC`: append records read from stdin.

Input is lines (one record per line, the newline removed; a final line without one counts)
or u32 big-endian length-prefixed values, read in chunks of what stdin has ready, up to
1 MiB. Records leave in Appends of at most `--batch-records` records and `--batch-bytes`
bytes of values (librdkafka's batch.num.messages and batch.size: each Append costs the
client and the server a fixed amount, so fewer and larger ones are quicker). A batch that is
not full yet waits for the next chunk only when stdin had a full 1 MiB ready (more is coming
at once); otherwise it leaves now, so `tail -f log | replog produce T` sends each line as it
arrives, as kcat does.
"""

from __future__ import annotations

import argparse
import bisect
import functools
import itertools
import os
import select
import stat
import struct
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, BinaryIO, TextIO

from replog.cli.common import (
    Subparsers,
    UsageError,
    add_progress_argument,
    cli_client,
    client_parser,
    progress_enabled,
)
from replog.cli.progress import Progress

if TYPE_CHECKING:
    from replog.client import AppendResult
    from replog.records import Record

CHUNK_BYTES = 1 << 20
BATCH_RECORDS = 10_000  # librdkafka's batch.num.messages
BATCH_BYTES = 1 << 20  # the values' bytes (keys included): the client producer's batch_bytes_max
_LENGTH = struct.Struct(">I")


def add_parser(sub: Subparsers) -> None:
    produce = client_parser(sub, "produce", "append records read from stdin")
    produce.set_defaults(run=lambda args, out: cmd_produce(args, sys.stdin.buffer, out))
    produce.add_argument("topic")
    produce.add_argument(
        "--partition",
        "-p",
        type=int,
        default=None,
        help="default: by key, else round-robin batches",
    )
    produce.add_argument(
        "--key",
        default=None,
        help="partition by this key (and, on an envelope topic, give each record this key)",
    )
    produce.add_argument(
        "--partitioner",
        choices=("murmur2", "crc32"),
        default="murmur2",
        help="how a key picks its partition: murmur2 (Kafka's default) or crc32 (replog's "
        "before murmur2)",
    )
    produce.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="envelope topics: a header on each record (repeat for more)",
    )
    produce.add_argument(
        "--format",
        choices=["lines", "length-prefixed"],
        default="lines",
        help="lines: one record per line (newline removed); length-prefixed: u32 BE length + value",
    )
    produce.add_argument(
        "--key-delimiter",
        "-K",
        default=None,
        metavar="DELIM",
        help="each line is KEY DELIM VALUE: the record's key (envelope topics), which also "
        "picks its partition; a line without DELIM has no key",
    )
    produce.add_argument("--acks", choices=["none", "leader", "all"], default="all")
    produce.add_argument(
        "--batch-records",
        type=int,
        default=BATCH_RECORDS,
        help="records per Append at most (default %(default)s)",
    )
    produce.add_argument(
        "--batch-bytes",
        type=int,
        default=BATCH_BYTES,
        help="bytes of values (and keys) per Append at most; a larger record goes alone "
        "(default %(default)s)",
    )
    add_progress_argument(produce)


def input_bytes_left(stream: BinaryIO) -> int | None:
    """Bytes still to read when stdin is a regular file (for an ETA); None for a pipe."""
    try:
        fd = stream.fileno()
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        return max(st.st_size - stream.tell(), 0)
    except (OSError, ValueError, AttributeError):
        return None


def read_chunks(stream: BinaryIO) -> Iterator[tuple[bytes, bool]]:
    """What stdin has ready, up to CHUNK_BYTES at a time, with whether the chunk is full
    (more input is likely waiting). Never waits for more than one byte: a pipe fed slowly
    (`tail -f`) gives each write as it comes, a file or a fast pipe gives full chunks."""
    read1 = getattr(stream, "read1", stream.read)
    while chunk := read1(CHUNK_BYTES):
        parts, size = [chunk], len(chunk)
        while size < CHUNK_BYTES and _ready(stream):
            more = read1(CHUNK_BYTES - size)
            if not more:
                break  # the end of the input: the next read1 says so again
            parts.append(more)
            size += len(more)
        yield b"".join(parts) if len(parts) > 1 else chunk, size >= CHUNK_BYTES


def _ready(stream: BinaryIO) -> bool:
    """Whether a read of `stream` would return at once (a stream without a descriptor, such
    as BytesIO, always would)."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return True
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


def read_lines(stream: BinaryIO) -> Iterator[tuple[list[bytes], bool]]:
    """Chunks of records, one per line (a final line without newline counts), each with
    whether more input was waiting behind it."""
    rest = b""
    for chunk, full in read_chunks(stream):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        yield lines, full
    if rest:
        yield [rest], False


def read_length_prefixed(stream: BinaryIO) -> Iterator[tuple[list[bytes], bool]]:
    """Chunks of records framed as u32 big-endian length + value, each with whether more
    input was waiting behind it."""
    buf = b""
    for chunk, full in read_chunks(stream):
        buf += chunk
        pos = 0
        values: list[bytes] = []
        while pos + 4 <= len(buf):
            (n,) = _LENGTH.unpack_from(buf, pos)
            if pos + 4 + n > len(buf):
                break
            values.append(buf[pos + 4 : pos + 4 + n])
            pos += 4 + n
        buf = buf[pos:]
        yield values, full
    if buf:
        raise UsageError(f"stdin ends inside a length-prefixed record ({len(buf)} bytes left)")


def cmd_produce(args: argparse.Namespace, stdin: BinaryIO, out: TextIO) -> int:
    if args.batch_records < 1 or args.batch_bytes < 1:
        raise UsageError("--batch-records and --batch-bytes must be >= 1")
    if args.key_delimiter is not None and (args.key is not None or not args.key_delimiter):
        raise UsageError("-K takes a non-empty delimiter and excludes --key")
    reader = read_lines if args.format == "lines" else read_length_prefixed
    framing_bytes = 1 if args.format == "lines" else _LENGTH.size
    progress = Progress(
        sys.stderr, "produced", enabled=progress_enabled(args), total_bytes=input_bytes_left(stdin)
    )
    with cli_client(args) as client:
        partitions = client.partition_count(args.topic)
        split = batcher(args, partitions, client.topic_format(args.topic) == "envelope")
        producer = client.producer(
            args.topic,
            acks=args.acks,
            partitions=partitions,
            batch_records_max=args.batch_records,
            batch_bytes_max=args.batch_bytes,
        )
        started = time.perf_counter()
        count = 0
        sent: list[tuple[int, Future[AppendResult]]] = []
        try:
            for values, full in itertools.chain(reader(stdin), [(None, False)]):
                # A batch not yet full waits only while more input is waiting (None: the end).
                for p, batch in split(values or [], not full):
                    sent.append((p, producer.send_batch(batch, p)))
                if values is None:
                    break
                count += len(values)
                if progress.enabled and values:
                    progress.update(
                        len(values), sum(map(len, values)) + framing_bytes * len(values)
                    )
            producer.flush()
        finally:
            producer.close()
        elapsed = time.perf_counter() - started
        progress.finish()
        where = ", ".join(
            f"partition {p} offsets {a}..{b}" for p, (a, b) in sorted(offset_ranges(sent).items())
        )
        rate = count / elapsed if elapsed > 0 else 0.0
        if not where:
            where = "no offsets (acks=none)" if count else "nothing to send"
        print(
            f"produced {count} records to {args.topic}: {where} ({rate:,.0f} records/s)",
            file=out,
        )
    return 0


def offset_ranges(sent: list[tuple[int, Future[AppendResult]]]) -> dict[int, list[int]]:
    """Each partition's [first, last] offset written (raises a batch's error)."""
    ranges: dict[int, list[int]] = {}
    for p, fut in sent:
        res = fut.result()
        if res.base_offset < 0:
            continue
        span = ranges.setdefault(p, [res.base_offset, res.last_offset])
        span[0] = min(span[0], res.base_offset)
        span[1] = max(span[1], res.last_offset)
    return ranges


Batches = list[tuple[int, Sequence["bytes | Record"]]]


def batch_slices(sizes: list[int], records_max: int, bytes_max: int) -> list[slice]:
    """Records of `sizes` bytes, in order, cut into consecutive batches of at most
    `records_max` records and `bytes_max` bytes (a record larger than that goes alone)."""
    n = len(sizes)
    if sum(sizes) <= bytes_max:
        return [slice(i, min(i + records_max, n)) for i in range(0, n, records_max)]
    ends = list(itertools.accumulate(sizes, initial=0))  # ends[i]: the bytes before record i
    cuts = []
    start = 0
    while start < n:
        stop = bisect.bisect_right(ends, ends[start] + bytes_max, start + 1) - 1
        stop = min(max(stop, start + 1), start + records_max)
        cuts.append(slice(start, stop))
        start = stop
    return cuts


def batcher(
    args: argparse.Namespace, partitions: int, envelope: bool
) -> Callable[[list[bytes], bool], Batches]:
    """How chunks of input values become (partition, records) batches of at most
    `--batch-records` records and `--batch-bytes` bytes: to `--partition`, to `--key`'s
    partition, by each line's key with `-K` (a line without the delimiter has no key),
    else round-robin batches. Called with each chunk and `last`, true when no more input
    is waiting (a slow pipe, or the input's end): without keys, the values of a batch not
    yet full wait for the next chunk unless `last`."""
    from replog.client import partition_for_key

    size, bytes_max = args.batch_records, args.batch_bytes
    headers = parse_headers(args, envelope)
    fixed = args.partition
    if fixed is None and args.key is not None:
        fixed = partition_for_key(args.key.encode(), partitions, args.partitioner)
    turn = itertools.count()
    if args.key_delimiter is None:
        as_records = record_maker(args, envelope, headers)
        pending: list[bytes] = []

        def slices(values: list[bytes], last: bool) -> Batches:
            nonlocal pending
            if pending:
                values = pending + values
            cuts = batch_slices(list(map(len, values)), size, bytes_max)
            pending = [] if last or not cuts else values[cuts.pop()]
            return [
                (fixed if fixed is not None else next(turn) % partitions, as_records(values[c]))
                for c in cuts
            ]

        return slices
    if not envelope:
        raise UsageError(f"topic {args.topic} is raw: -K (keys) needs an envelope topic")
    from replog.records import Record

    delimiter = args.key_delimiter.encode()
    from replog.client import partition_for_key

    @functools.lru_cache(maxsize=4096)  # keys repeat: one hash per distinct key
    def partition_of(key: bytes) -> int:
        return partition_for_key(key, partitions, args.partitioner)

    def keyed(values: list[bytes], last: bool) -> Batches:
        del last  # each chunk's batches leave with it
        keyless = fixed if fixed is not None else next(turn) % partitions
        buckets: dict[int, tuple[list[bytes | Record], list[int]]] = {}
        for line in values:
            key, sep, value = line.partition(delimiter)
            if sep:
                p = fixed if fixed is not None else partition_of(key)
                record = Record(value, key=key, headers=headers)
            else:
                p, record = keyless, Record(line, headers=headers)
            records, sizes = buckets.setdefault(p, ([], []))
            records.append(record)
            sizes.append(len(line))
        return [
            (p, records[cut])
            for p, (records, sizes) in buckets.items()
            for cut in batch_slices(sizes, size, bytes_max)
        ]

    return keyed


def parse_headers(args: argparse.Namespace, envelope: bool) -> tuple[tuple[str, bytes], ...]:
    headers = []
    for item in args.header:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--header wants NAME=VALUE, got {item!r}")
        headers.append((name, value.encode()))
    if headers and not envelope:
        raise UsageError(f"topic {args.topic} is raw: --header needs an envelope topic")
    return tuple(headers)


def record_maker(
    args: argparse.Namespace, envelope: bool, headers: tuple[tuple[str, bytes], ...]
) -> Callable[[list[bytes]], Sequence[bytes | Record]]:
    """What `produce` sends for a batch of input values: records with `--key` and
    `--header`s on an envelope topic; the values on a raw topic (which holds no headers)."""
    if not envelope or (args.key is None and not headers):
        return lambda values: values
    from replog.records import Record

    key = None if args.key is None else args.key.encode()
    return lambda values: [Record(v, key=key, headers=headers) for v in values]
