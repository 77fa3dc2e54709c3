"""`replog consume TOPIC`: print a topic's records."""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Iterator
from itertools import repeat
from typing import TYPE_CHECKING, TextIO

from replog.cli.common import (
    Subparsers,
    UsageError,
    add_progress_argument,
    cli_client,
    client_parser,
    progress_enabled,
    time_ms_arg,
)
from replog.cli.progress import Progress

if TYPE_CHECKING:
    from replog.frames import DecodedFrames
    from replog.records import DecodedRecords


def add_parser(sub: Subparsers) -> None:
    consume = client_parser(sub, "consume", "print records of a partition")
    consume.set_defaults(run=cmd_consume)
    consume.add_argument("topic")
    consume.add_argument("--partition", "-p", type=int, default=0)
    consume.add_argument(
        "--from", dest="start", default="earliest", help="earliest, latest or an offset"
    )
    consume.add_argument(
        "--from-time",
        default=None,
        metavar="TIME",
        help="start at the first record at or after TIME: ISO 8601 (2026-11-25T10:00:00Z; "
        "no zone: UTC) or milliseconds since the epoch (replaces --from)",
    )
    consume.add_argument("--follow", "-f", action="store_true", help="keep waiting for new records")
    consume.add_argument(
        "--until-latest",
        action="store_true",
        help="stop at the high watermark seen at start (the default without --follow)",
    )
    consume.add_argument("--format", choices=["text", "hex", "json"], default="text")
    consume.add_argument("--max-records", "-n", type=int, default=None, help="stop after N records")
    add_progress_argument(consume)


def _text_or_base64(body: dict[str, object], name: str, data: bytes) -> None:
    try:
        body[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        body[f"{name}_base64"] = base64.b64encode(data).decode()


def format_record(
    offset: int,
    value: bytes,
    fmt: str,
    partition: int,
    meta: tuple[bytes | None, tuple[tuple[str, bytes], ...], int] | None = None,
) -> str:
    """One record as `consume` prints it; `meta` (key, headers, timestamp_ms) for an
    envelope topic's records, shown by the json format."""
    if fmt == "hex":
        return value.hex()
    if fmt == "json":
        body: dict[str, object] = {"partition": partition, "offset": offset}
        _text_or_base64(body, "value", value)
        if meta is not None:
            key, headers, timestamp_ms = meta
            if key is not None:
                _text_or_base64(body, "key", key)
            body["timestamp_ms"] = timestamp_ms
            shown = []
            for name, hvalue in headers:
                header: dict[str, object] = {"name": name}
                _text_or_base64(header, "value", hvalue)
                shown.append(header)
            if shown:
                body["headers"] = shown
        return json.dumps(body)
    return value.decode("utf-8", errors="replace")


def batch_rows(
    batch: DecodedFrames | DecodedRecords,
) -> Iterator[tuple[int, bytes, tuple[bytes | None, tuple[tuple[str, bytes], ...], int] | None]]:
    """(offset, value, (key, headers, timestamp_ms) or None on a raw topic) per record."""
    from replog.records import DecodedRecords

    if isinstance(batch, DecodedRecords):
        meta = zip(batch.keys, batch.headers, batch.timestamps, strict=True)
        return zip(batch.offsets, batch.values, meta, strict=True)
    return zip(batch.offsets, batch.values, repeat(None))


def cmd_consume(args: argparse.Namespace, out: TextIO) -> int:

    limit = args.max_records
    if limit is not None and limit < 0:
        raise UsageError("--max-records must be >= 0")
    if args.follow and args.until_latest:
        raise UsageError("--follow and --until-latest exclude each other")
    with cli_client(args) as client:
        from_time_ms = (
            None if args.from_time is None else time_ms_arg(args.from_time, "--from-time")
        )
        (offs,) = client.list_offsets(args.topic, [args.partition], timestamp_ms=from_time_ms)
        start: str = args.start
        if offs.offset_for_timestamp is not None:
            offset = offs.offset_for_timestamp
        elif start == "earliest":
            offset = offs.earliest
        elif start == "latest":
            offset = offs.latest
        elif start.isdigit():
            offset = int(start)
        else:
            raise UsageError(f"--from must be earliest, latest or an offset, got {start!r}")
        shown = 0
        if limit == 0:
            return 0
        if args.follow:
            consumer = client.consumer(args.topic, args.partition, offset)
            try:
                for batch in consumer.batches():
                    for o, v, m in batch_rows(batch):
                        print(format_record(o, v, args.format, args.partition, m), file=out)
                        shown += 1
                        if limit is not None and shown >= limit:
                            return 0
                    out.flush()
            finally:
                consumer.close()
            return 0
        end = offs.latest  # without --follow: what is committed now
        total = max(end - offset, 0)
        if limit is not None:
            total = min(total, limit)
        progress = Progress(
            sys.stderr, "consumed", enabled=progress_enabled(args), total_records=total
        )
        try:
            while offset < end:
                res = client.fetch(args.topic, args.partition, offset)
                batch_records = batch_bytes = 0
                for o, v, m in batch_rows(res.records):
                    if o >= end:
                        return 0
                    print(format_record(o, v, args.format, args.partition, m), file=out)
                    shown += 1
                    batch_records += 1
                    batch_bytes += len(v)
                    if limit is not None and shown >= limit:
                        return 0
                progress.update(batch_records, batch_bytes)
                if res.next_offset <= offset:
                    break
                offset = res.next_offset
        finally:
            out.flush()
            progress.finish()
    return 0
