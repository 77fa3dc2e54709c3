"""Records and numbers as the console shows them (pure: no I/O).

A record's value is shown decoded as text (UTF-8, undecodable bytes replaced), JSON
(pretty-printed when it parses, else said so and shown as text) or hex (16 bytes a line
with their position); at most `SHOWN_BYTES_MAX` bytes of it, with the full size beside.
Keys and header values are shown as text when they are UTF-8, else as hex.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import repeat

from replog import frames, records

DECODINGS = ("text", "json", "hex")
Meta = tuple[bytes | None, tuple[tuple[str, bytes], ...], int] | None  # key, headers, time
SHOWN_BYTES_MAX = 4096


@dataclass(frozen=True, slots=True)
class ShownRecord:
    offset: int
    timestamp: str  # "" on a raw topic
    key: str | None  # None: no key (or a raw topic)
    headers: tuple[tuple[str, str], ...]
    value: str
    size_bytes: int
    truncated: bool
    note: str  # e.g. "not JSON"


def decode_value(value: bytes, decoding: str) -> tuple[str, bool, str]:
    """(what to show, truncated, note) for `value` shown as `decoding`."""
    assert decoding in DECODINGS, decoding
    truncated = len(value) > SHOWN_BYTES_MAX
    shown = value[:SHOWN_BYTES_MAX]
    if decoding == "hex":
        return hex_dump(shown), truncated, ""
    if decoding == "json" and not truncated:
        try:
            return json.dumps(json.loads(value), indent=2, ensure_ascii=False), False, ""
        except (ValueError, RecursionError):
            return shown.decode("utf-8", errors="replace"), False, "not JSON"
    note = "cut: too large for JSON" if decoding == "json" else ""
    return shown.decode("utf-8", errors="replace"), truncated, note


def hex_dump(data: bytes) -> str:
    lines = []
    for at in range(0, len(data), 16):
        chunk = data[at : at + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {chunk.hex(' '):<47}  {text}")
    return "\n".join(lines)


def text_or_hex(data: bytes) -> str:
    """A key or header value: its text when it is printable UTF-8, else 0x and hex."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + data.hex()
    return text if text.isprintable() else "0x" + data.hex()


def timestamp(ms: int) -> str:
    """ISO 8601 in UTC with milliseconds ("" for a time out of range)."""
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"


def shown_records(
    batch: frames.DecodedFrames | records.DecodedRecords, decoding: str, limit: int
) -> Iterator[ShownRecord]:
    """At most `limit` records of a decoded batch (control records already skipped)."""
    rows = record_rows(batch)
    for n, (offset, value, m) in enumerate(rows):
        if n >= limit:
            return
        yield shown_record(int(offset), value, m, decoding)


def record_rows(
    batch: frames.DecodedFrames | records.DecodedRecords,
) -> Iterator[tuple[int, bytes | None, Meta]]:
    """(offset, value, (key, headers, timestamp) or None on a raw topic) of each record."""
    if isinstance(batch, records.DecodedRecords):
        meta = zip(batch.keys, batch.headers, batch.timestamps, strict=True)
        yield from zip(batch.offsets, batch.values, meta, strict=True)
    else:
        yield from zip(batch.offsets, batch.values, repeat(None))


def shown_record(offset: int, value: bytes | None, m: Meta, decoding: str) -> ShownRecord:
    if value is None:  # a null value: a tombstone
        text, truncated, note = "", False, "null value (a tombstone)"
    else:
        text, truncated, note = decode_value(bytes(value), decoding)
    key: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    when = ""
    if m is not None:
        raw_key, raw_headers, ts = m
        key = None if raw_key is None else text_or_hex(bytes(raw_key))
        headers = tuple((name, text_or_hex(bytes(v))) for name, v in raw_headers)
        when = timestamp(int(ts))
    shown_size = 0 if value is None else len(value)
    return ShownRecord(offset, when, key, headers, text, shown_size, truncated, note)


def size(n: int) -> str:
    """Bytes for people: 1023 B, 1.5 KiB, 12.0 MiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
