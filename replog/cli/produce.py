"""`replog produce TOPIC`: append records read from stdin.

Input is lines (one record per line, the newline removed; a final line without one counts)
or u32 big-endian length-prefixed values, read in 1 MiB chunks.
"""

from __future__ import annotations

import argparse
import os
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
        help="partition by crc32 of this key (and, on an envelope topic, "
        "give each record this key)",
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
    produce.add_argument("--acks", choices=["none", "leader", "all"], default="all")
    produce.add_argument("--batch-records", type=int, default=1000, help="records per Append")
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


def read_lines(stream: BinaryIO) -> Iterator[list[bytes]]:
    """Chunks of records, one per line (a final line without newline counts)."""
    rest = b""
    while chunk := stream.read(CHUNK_BYTES):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        if lines:
            yield lines
    if rest:
        yield [rest]


def read_length_prefixed(stream: BinaryIO) -> Iterator[list[bytes]]:
    """Chunks of records framed as u32 big-endian length + value."""
    buf = b""
    while chunk := stream.read(CHUNK_BYTES):
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
        if values:
            yield values
    if buf:
        raise UsageError(f"stdin ends inside a length-prefixed record ({len(buf)} bytes left)")


def cmd_produce(args: argparse.Namespace, stdin: BinaryIO, out: TextIO) -> int:
    from replog.client import partition_for_key

    if args.batch_records < 1:
        raise UsageError("--batch-records must be >= 1")
    reader = read_lines if args.format == "lines" else read_length_prefixed
    framing_bytes = 1 if args.format == "lines" else _LENGTH.size
    progress = Progress(
        sys.stderr, "produced", enabled=progress_enabled(args), total_bytes=input_bytes_left(stdin)
    )
    with cli_client(args) as client:
        partitions = client.partition_count(args.topic)
        partition = args.partition
        if partition is None and args.key is not None:
            partition = partition_for_key(args.key.encode(), partitions)
        as_records = record_maker(args, client.topic_format(args.topic) == "envelope")
        producer = client.producer(
            args.topic, acks=args.acks, partitions=partitions, batch_records_max=args.batch_records
        )
        started = time.perf_counter()
        count = 0
        sent: list[tuple[int, Future[AppendResult]]] = []
        try:
            for values in reader(stdin):
                for i in range(0, len(values), args.batch_records):
                    batch = values[i : i + args.batch_records]
                    p = partition if partition is not None else len(sent) % partitions
                    sent.append((p, producer.send_batch(as_records(batch), p)))
                    count += len(batch)
                    progress.update(len(batch), sum(map(len, batch)) + framing_bytes * len(batch))
            producer.flush()
        finally:
            producer.close()
        ranges: dict[int, list[int]] = {}
        for p, fut in sent:
            res = fut.result()
            if res.base_offset < 0:
                continue
            span = ranges.setdefault(p, [res.base_offset, res.last_offset])
            span[0] = min(span[0], res.base_offset)
            span[1] = max(span[1], res.last_offset)
        elapsed = time.perf_counter() - started
        progress.finish()
        where = ", ".join(f"partition {p} offsets {a}..{b}" for p, (a, b) in sorted(ranges.items()))
        rate = count / elapsed if elapsed > 0 else 0.0
        if not where:
            where = "no offsets (acks=none)" if count else "nothing to send"
        print(
            f"produced {count} records to {args.topic}: {where} ({rate:,.0f} records/s)",
            file=out,
        )
    return 0


def record_maker(
    args: argparse.Namespace, envelope: bool
) -> Callable[[list[bytes]], Sequence[bytes | Record]]:
    """What `produce` sends for a batch of input values: records with `--key` and
    `--header`s on an envelope topic; the values on a raw topic (which holds no headers)."""
    headers = []
    for item in args.header:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--header wants NAME=VALUE, got {item!r}")
        headers.append((name, value.encode()))
    if headers and not envelope:
        raise UsageError(f"topic {args.topic} is raw: --header needs an envelope topic")
    if not envelope or (args.key is None and not headers):
        return lambda values: values
    from replog.records import Record

    key = None if args.key is None else args.key.encode()
    return lambda values: [Record(v, key=key, headers=headers) for v in values]
