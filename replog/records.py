"""The record envelope: key, value, timestamp and headers inside a frame's value.

A topic of format `envelope` (see `docs/api.md`, Topic format) holds in each data frame's
value one envelope; a topic of format `raw` holds the user's bytes as they are. An
envelope is, byte by byte (all integers big-endian, like the frame around it)::

    0    u8    version       1 (the only version; a reader refuses any other)
    1    u8    attributes    bit 0: the record has a key; bit 1: the value is null (a
                             tombstone: value_length is 0, and a reader gets None, not
                             b""); bits 2-7: 0 (reserved)
    2    i64   timestamp_ms  milliseconds since the Unix epoch (create time from the
                             producer, or the leader's append time: see the topic)
    10   u32   key_length    0 when there is no key (bit 0 clear) or the key is empty
    14   u16   header_count
    16   u32   value_length
    20         key           key_length bytes
               headers       header_count times:
                                 u16  name_length   name: UTF-8, name_length bytes
                                 u32  value_length  value: value_length bytes
               value         value_length bytes: the envelope ends with them

So an envelope without key and headers is 20 bytes followed by the value; a key present
and empty (attribute bit 0 set, key_length 0) differs from no key, and a null value
(attribute bit 1 set, value_length 0: Kafka's tombstone) differs from an empty one. The
value's position is `size - value_length` and the key's is 20, whatever the headers. The
timestamp sits at a fixed position (bytes 2-9) so that a leader stamping log-append time
overwrites 8 bytes per record (`stamp`), never re-encoding. Decoding checks every length
against the bytes left, that the parts add up to the envelope's size exactly (a cut or
padded envelope is refused), the version, the reserved bits, that a null value has no bytes
and the names' UTF-8: anything else raises `InvalidRecordError` (INVALID_ARGUMENT, reason
`INVALID_RECORD`), never another exception.

Pure (no I/O), shared by the clients, the server (validation, log-append time, the time
index) and the Spark source. The batch paths do their per-record work in C: the 20-byte
fixed parts of a batch are read as one numpy structured array, keys and values are cut
with `map(slice)`; only records with headers take a Python loop (for the headers).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from operator import itemgetter
from typing import Final, NamedTuple

import numpy as np

from replog.errors import InvalidRecordError
from replog.frames import CONTROL_FLAG, HEADER, HEADER_BYTES, LENGTH_MASK, FrameError
from replog.frames import _run_length as run_length  # runs of equal frames, galloping

VERSION: Final = 1
ATTR_KEY: Final = 0x01
ATTR_NULL_VALUE: Final = 0x02  # a tombstone: value_length 0, read as None
_ATTRS_KNOWN: Final = ATTR_KEY | ATTR_NULL_VALUE
FIXED = struct.Struct(">BBqIHI")
FIXED_BYTES: Final = FIXED.size  # 20
TIMESTAMP_POSITION: Final = 2  # bytes 2-9 of an envelope
TIMESTAMP_MIN: Final = -(2**63)
TIMESTAMP_MAX: Final = 2**63 - 1
HEADER_NAME_BYTES_MAX: Final = 0xFFFF
HEADER_COUNT_MAX: Final = 0xFFFF
NO_TIMESTAMP: Final = TIMESTAMP_MIN  # the time index's "no timestamp yet"

_NAME_LEN = struct.Struct(">H")
_VALUE_LEN = struct.Struct(">I")
_TS = struct.Struct(">q")
FIXED_DTYPE = np.dtype(
    [
        ("version", "u1"),
        ("attributes", "u1"),
        ("ts", ">i8"),
        ("key_length", ">u4"),
        ("count", ">u2"),
        ("value_length", ">u4"),
    ]
)
_head = itemgetter(slice(0, FIXED_BYTES))
_unpack_fixed = FIXED.unpack_from
# Batches of at most this many envelopes are checked one by one (`_check_few`): below it,
# numpy's fixed cost (~18 us a batch of 1 to 4 here, in a dozen calls) is more than the
# per-record loop (1 us for one envelope, 7 us for 16; equal at about 32).
_FEW: Final = 16
_unpack_frame = HEADER.unpack_from

Header = tuple[str, bytes]


@dataclass(frozen=True, slots=True)
class Record:
    """A record to produce to an envelope topic. `timestamp_ms=None`: the client's clock
    when it is sent (a topic with log-append time replaces it with the leader's);
    `value=None`: a null value (a tombstone, distinct from an empty value)."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[Header] = ()
    timestamp_ms: int | None = None


class ConsumerRecord(NamedTuple):
    """A record read from an envelope topic (a named tuple: cheap to build per record)."""

    offset: int
    value: bytes | None  # None: a null value (a tombstone)
    key: bytes | None
    headers: tuple[Header, ...]
    timestamp_ms: int


@dataclass(slots=True, eq=False)
class DecodedRecords:
    """Columns of decoded envelopes: `offsets[i]`, `values[i]` (None: a null value),
    `keys[i]` (None: no key), `timestamps[i]`, `headers[i]` (a tuple, empty for most
    records)."""

    offsets: list[int]
    values: list[bytes | None]
    keys: list[bytes | None]
    timestamps: list[int]
    headers: list[tuple[Header, ...]]

    def __len__(self) -> int:
        return len(self.offsets)

    def records(self) -> list[ConsumerRecord]:
        columns = (self.offsets, self.values, self.keys, self.headers, self.timestamps)
        return list(map(ConsumerRecord._make, zip(*columns, strict=True)))


# -- encoding --------------------------------------------------------------------------------


def encode(
    value: bytes | None,
    *,
    key: bytes | None = None,
    headers: Iterable[Header] = (),
    timestamp_ms: int,
) -> bytes:
    """One envelope (`InvalidRecordError` for an out-of-range timestamp or header)."""
    head = list(headers)
    _check_timestamp(timestamp_ms)
    if len(head) > HEADER_COUNT_MAX:
        raise InvalidRecordError(f"a record has at most {HEADER_COUNT_MAX} headers")
    attributes = (ATTR_KEY if key is not None else 0) | (ATTR_NULL_VALUE if value is None else 0)
    size = 0 if value is None else len(value)
    parts = [FIXED.pack(VERSION, attributes, timestamp_ms, len(key or b""), len(head), size)]
    if key:
        parts.append(key)
    for name, hvalue in head:
        raw = name.encode() if isinstance(name, str) else None
        if raw is None or len(raw) > HEADER_NAME_BYTES_MAX:
            raise InvalidRecordError("a header name is a str of at most 65535 UTF-8 bytes")
        parts += (_NAME_LEN.pack(len(raw)), raw, _VALUE_LEN.pack(len(hvalue)), hvalue)
    if value is not None:
        parts.append(value)
    return b"".join(parts)


def encode_batch(
    records: Sequence[Record | bytes],
    timestamp_ms: int,
    times: Sequence[int] | None = None,
) -> list[bytes]:
    """Envelopes for `records` (plain bytes are values without key or headers); records
    without a timestamp get `timestamp_ms`, or with `times` (one per record, e.g. each
    record's send time in a `Producer`) plain bytes get theirs. Without headers (the usual
    batch) the fixed parts are built as one numpy array and each envelope is one C-level
    join."""
    _check_timestamp(timestamp_ms)
    n = len(records)
    if times is not None and len(times) != n:
        raise InvalidRecordError(f"{len(times)} times for {n} records")
    stamps: Sequence[int | None]
    if all_bytes(records):
        values: list[bytes] = list(records)  # type: ignore[arg-type]
        first = len(values[0]) if n else 0
        if times is None and list(map(len, values)).count(first) == n:  # one shared prefix
            prefix = FIXED.pack(VERSION, 0, timestamp_ms, 0, 0, first)
            return list(map(prefix.__add__, values))
        keys: list[bytes | None] = [None] * n
        stamps = [None] * n if times is None else times
    else:
        values, keys, stamps = [], [], []
        for i, r in enumerate(records):
            if isinstance(r, Record):
                if r.headers or r.value is None:  # rare: one envelope at a time
                    return _encode_each(records, timestamp_ms, times)
                values.append(r.value)
                keys.append(r.key)
                stamps.append(r.timestamp_ms)
            elif isinstance(r, bytes | bytearray | memoryview):
                values.append(bytes(r))
                keys.append(None)
                stamps.append(None if times is None else times[i])
            else:
                raise InvalidRecordError(
                    f"a record is bytes or replog.Record, got {type(r).__name__}"
                )
    fixed = np.zeros(n, dtype=FIXED_DTYPE)
    fixed["version"] = VERSION
    fixed["value_length"] = list(map(len, values))
    if stamps is times and times is not None:  # plain values with their own times
        try:
            fixed["ts"] = times
        except OverflowError:
            raise InvalidRecordError("a timestamp_ms does not fit in an i64") from None
    elif any(s is not None for s in stamps):
        try:
            fixed["ts"] = [timestamp_ms if s is None else s for s in stamps]
        except OverflowError:
            raise InvalidRecordError("a timestamp_ms does not fit in an i64") from None
    else:
        fixed["ts"] = timestamp_ms
    if any(k is not None for k in keys):
        fixed["attributes"] = [k is not None for k in keys]
        key_bytes = [k or b"" for k in keys]
        fixed["key_length"] = list(map(len, key_bytes))
    heads = fixed.tobytes()
    size = n * FIXED_BYTES
    cut = map(heads.__getitem__, map(slice, range(0, size, FIXED_BYTES), range(20, size + 1, 20)))
    if fixed["attributes"].any():
        return list(map(b"".join, zip(cut, key_bytes, values, strict=True)))
    return list(map(bytes.__add__, cut, values))


def encode_timed(
    records: Sequence[Record | bytes], timestamp_ms: int, times: Sequence[int]
) -> list[bytes]:
    """`encode_batch(records, timestamp_ms, times)`, faster for a producer's batch of plain
    values sent one by one: records sent in the same millisecond with values of the same
    length share their 20 bytes of fixed part, so each run of them is one prefix added to
    each value in C (`map(prefix.__add__, ...)`), with no 20-byte slice per record. Other
    batches (keys, headers, nulls, or more runs than records / 8) take `encode_batch`."""
    n = len(records)
    if not n or len(times) != n or not all_bytes(records):
        return encode_batch(records, timestamp_ms, times)
    values: list[bytes] = records  # type: ignore[assignment]  # all bytes (checked above)
    try:
        stamps = np.array(times, dtype=np.int64)
    except OverflowError:
        raise InvalidRecordError("a timestamp_ms does not fit in an i64") from None
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=n)
    cuts = np.flatnonzero((stamps[1:] != stamps[:-1]) | (lengths[1:] != lengths[:-1])) + 1
    if len(cuts) > n // 8:
        return encode_batch(records, timestamp_ms, times)
    out: list[bytes] = []
    start = 0
    for end in [*cuts.tolist(), n]:
        prefix = FIXED.pack(VERSION, 0, int(stamps[start]), 0, 0, int(lengths[start]))
        out += map(prefix.__add__, values[start:end])
        start = end
    return out


def all_bytes(items: Sequence[object]) -> bool:
    """Whether every item is exactly `bytes` (one C-level pass, no Python per item)."""
    return not items or set(map(type, items)) == {bytes}


def _encode_each(
    records: Sequence[Record | bytes], timestamp_ms: int, times: Sequence[int] | None
) -> list[bytes]:
    out = []
    for i, r in enumerate(records):
        if isinstance(r, Record):
            ts = timestamp_ms if r.timestamp_ms is None else r.timestamp_ms
            out.append(encode(r.value, key=r.key, headers=r.headers, timestamp_ms=ts))
        else:
            ts = timestamp_ms if times is None else times[i]
            out.append(encode(bytes(r), timestamp_ms=ts))
    return out


def _check_timestamp(timestamp_ms: int) -> None:
    if not TIMESTAMP_MIN <= timestamp_ms <= TIMESTAMP_MAX:
        raise InvalidRecordError(f"timestamp_ms {timestamp_ms} does not fit in an i64")


_before_timestamp = itemgetter(slice(0, TIMESTAMP_POSITION))
_after_timestamp = itemgetter(slice(TIMESTAMP_POSITION + 8, None))


def stamp(envelopes: Sequence[bytes], timestamp_ms: int) -> list[bytes]:
    """The same envelopes with their timestamp replaced (log-append time): 8 bytes
    overwritten per record, as one C-level join each (`ts.join((head, tail))`)."""
    ts = _TS.pack(timestamp_ms)
    return list(
        map(
            ts.join,
            zip(map(_before_timestamp, envelopes), map(_after_timestamp, envelopes), strict=True),
        )
    )


# -- decoding --------------------------------------------------------------------------------


def decode(envelope: bytes, offset: int = -1) -> ConsumerRecord:
    """One envelope (`InvalidRecordError` if it is not a well-formed one)."""
    return decode_values([envelope], [offset]).records()[0]


def decode_values(values: Sequence[bytes], offsets: Sequence[int] | None = None) -> DecodedRecords:
    """Decode a batch of envelopes (e.g. `frames.decode(buf).values` of an envelope topic)."""
    n = len(values)
    offs = list(range(n)) if offsets is None else list(offsets)
    if n == 0:
        return DecodedRecords([], [], [], [], [])
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=n)
    ends = np.cumsum(lengths)
    buf = values[0] if n == 1 else b"".join(values)
    return _decode_spans(bytes(buf), ends - lengths, lengths, offs)


def decode_frames(buf: bytes | memoryview) -> DecodedRecords:
    """Decode a run of frames of an envelope topic, control records skipped
    (`frames.FrameError` for broken frames, `InvalidRecordError` for broken envelopes).

    The frames are walked by runs of equally long ones (a batch of equal records between
    two batch headers is one run, measured with galloping numpy compares of the length
    fields); a long run of envelopes without key and headers is decoded with one `struct`
    call per 256 frames, everything else with the column decoder (`_decode_spans`)."""
    data = bytes(buf)
    parts: list[DecodedRecords] = []
    pending: tuple[list[int], list[int], list[int]] = ([], [], [])  # offsets, starts, lengths
    for pos, count, length in _data_runs(data):
        plain = None
        if count >= _PLAIN_RUN_MIN and length >= FIXED_BYTES:
            plain = _decode_uniform_plain(data, pos, count, length)
        if plain is None:
            frame = HEADER_BYTES + length
            at = np.ndarray((count,), dtype=">u8", buffer=data, offset=pos, strides=(frame,))
            pending[0].extend(at.tolist())
            pending[1].extend(range(pos + HEADER_BYTES, pos + count * frame, frame))
            pending[2].extend([length] * count)
            continue
        if pending[0]:
            parts.append(_decode_pending(data, pending))
            pending = ([], [], [])
        parts.append(plain)
    if pending[0] or not parts:
        parts.append(_decode_pending(data, pending))
    return parts[0] if len(parts) == 1 else _concat(parts)


_PLAIN_RUN_MIN = 8  # shorter runs go to the column decoder
_length_at = struct.Struct(">I").unpack_from


def _data_runs(buf: bytes) -> list[tuple[int, int, int]]:
    """(position, count, value length) of each run of equally long data frames of `buf`,
    in order; control records are left out. `FrameError` for a cut or truncated frame."""
    size = len(buf)
    out = []
    pos = 0
    while pos < size:
        if pos + HEADER_BYTES > size:
            raise FrameError("truncated frame header", pos)
        raw_len = _length_at(buf, pos + 8)[0]
        frame = HEADER_BYTES + (raw_len & LENGTH_MASK)
        if pos + frame > size:
            raise FrameError(f"frame at position {pos} is cut short", pos)
        if raw_len & CONTROL_FLAG:
            pos += frame
            continue
        count = 1
        nxt = pos + frame
        if nxt + HEADER_BYTES <= size and _length_at(buf, nxt + 8)[0] == raw_len:
            count = run_length(buf, pos, raw_len, frame)
        out.append((pos, count, raw_len))
        pos += count * frame
    return out


def _decode_pending(buf: bytes, pending: tuple[list[int], list[int], list[int]]) -> DecodedRecords:
    offsets, starts, lengths = pending
    if not offsets:
        return DecodedRecords([], [], [], [], [])
    return _decode_spans(
        buf, np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64), offsets
    )


def _concat(parts: list[DecodedRecords]) -> DecodedRecords:
    out = DecodedRecords([], [], [], [], [])
    for part in parts:
        out.offsets += part.offsets
        out.values += part.values
        out.keys += part.keys
        out.timestamps += part.timestamps
        out.headers += part.headers
    return out


_DECODE_CHUNK = 256  # frames per cached Struct (as in `frames`)


@lru_cache(maxsize=256)
def _plain_struct(length: int, count: int) -> struct.Struct:
    """`count` frames of `length`-byte envelopes without key and headers: (offset,
    timestamp, value) each; the other fields are checked beforehand with numpy."""
    return struct.Struct(">" + f"Q4x2xq10x{length - FIXED_BYTES}s" * count)


def _decode_uniform_plain(buf: bytes, pos: int, count: int, length: int) -> DecodedRecords | None:
    """`count` equal data frames from `pos` whose envelopes have no key and no headers (the
    usual batch): their fixed fields are checked as strided numpy views, then one
    `unpack_from` per 256 frames gives offsets, timestamps and values. None when the frames
    are not like that."""
    frame = HEADER_BYTES + length

    def field(at: int, dtype: str) -> np.ndarray:
        return np.ndarray((count,), dtype=dtype, buffer=buf, offset=pos + at, strides=(frame,))

    base = HEADER_BYTES
    if not (
        (field(base, "u1") == VERSION).all()
        and not field(base + 1, "u1").any()
        and not field(base + 10, ">u4").any()
        and not field(base + 14, ">u2").any()
        and (field(base + 16, ">u4") == length - FIXED_BYTES).all()
    ):
        return None
    offsets: list[int] = []
    stamps: list[int] = []
    values: list[bytes | None] = []  # never None here: the attributes are all 0
    full, rest = divmod(count, _DECODE_CHUNK)
    step = _DECODE_CHUNK * frame
    chunks = [(pos + p, _DECODE_CHUNK) for p in range(0, full * step, step)]
    for at, n in [*chunks, (pos + full * step, rest)]:
        if n:
            flat = _plain_struct(length, n).unpack_from(buf, at)
            offsets += flat[0::3]
            stamps += flat[1::3]
            values += flat[2::3]
    return DecodedRecords(offsets, values, [None] * count, stamps, [()] * count)


def _fixed_parts(buf: bytes, starts: np.ndarray) -> np.ndarray:
    """The 20-byte fixed parts at `starts` (each at least 20 bytes long) as one array."""
    whole = np.frombuffer(buf, dtype=np.uint8)
    rows = whole[starts[:, None] + np.arange(FIXED_BYTES)]
    return rows.view(FIXED_DTYPE).ravel()


def _decode_spans(
    buf: bytes, starts: np.ndarray, lengths: np.ndarray, offsets: list[int]
) -> DecodedRecords:
    n = len(starts)
    try:
        _check_lengths(lengths)
        fixed = _fixed_parts(buf, starts)
        _check_fixed(fixed, lengths)
    except _Malformed as exc:
        raise _bad(offsets[exc.index], exc.why) from None
    key_lengths = fixed["key_length"].astype(np.int64)
    key_starts = starts + FIXED_BYTES
    ends = starts + lengths
    value_starts = ends - fixed["value_length"].astype(np.int64)
    headers: list[tuple[Header, ...]] = [()] * n
    for i in np.flatnonzero(fixed["count"]).tolist():
        try:
            headers[i] = _parse_headers(
                buf,
                int(key_starts[i] + key_lengths[i]),
                int(value_starts[i]),
                int(fixed["count"][i]),
                i,
            )
        except _Malformed as exc:
            raise _bad(offsets[i], exc.why) from None
    getter = buf.__getitem__
    values: list[bytes | None] = list(map(getter, map(slice, value_starts.tolist(), ends.tolist())))
    for i in np.flatnonzero(fixed["attributes"] & ATTR_NULL_VALUE).tolist():
        values[i] = None  # a tombstone (its value_length was checked to be 0)
    has_key = fixed["attributes"] & ATTR_KEY
    if not has_key.any():
        keys: list[bytes | None] = [None] * n
    else:
        key_ends = (key_starts + key_lengths).tolist()
        cut: list[bytes | None] = list(map(getter, map(slice, key_starts.tolist(), key_ends)))
        if not has_key.all():
            cut = [k if h else None for k, h in zip(cut, has_key.tolist(), strict=True)]
        keys = cut
    timestamps: list[int] = fixed["ts"].tolist()
    return DecodedRecords(offsets, values, keys, timestamps, headers)


class _Malformed(Exception):
    """Internal: record `index` of a batch is malformed (`why`); callers say where."""

    def __init__(self, index: int, why: str) -> None:
        super().__init__(why)
        self.index = index
        self.why = why


def _check_lengths(lengths: np.ndarray) -> None:
    short = np.flatnonzero(lengths < FIXED_BYTES)
    if len(short):
        i = int(short[0])
        raise _Malformed(i, f"{int(lengths[i])} bytes: shorter than the 20-byte envelope head")


def _check_fixed(fixed: np.ndarray, lengths: np.ndarray | int) -> None:
    """Vectorized checks of the fixed parts: version, reserved bits, the parts' lengths
    (exactly the envelope's size without headers, at most it with headers); `lengths`: each
    envelope's size, or one size for all."""
    parts = FIXED_BYTES + fixed["key_length"].astype(np.int64) + fixed["value_length"]
    bad = (
        (fixed["version"] != VERSION)
        | (fixed["attributes"] & ~np.uint8(_ATTRS_KNOWN)).astype(bool)
        | ((fixed["attributes"] & ATTR_KEY) == 0) & (fixed["key_length"] != 0)
        | ((fixed["attributes"] & ATTR_NULL_VALUE) != 0) & (fixed["value_length"] != 0)
        | (parts > lengths)
        | (fixed["count"] == 0) & (parts != lengths)
    )
    if not bad.any():
        return
    i = int(np.flatnonzero(bad)[0])
    row = fixed[i]
    size = lengths if isinstance(lengths, int) else int(lengths[i])
    why = _fixed_why(
        int(row["version"]),
        int(row["attributes"]),
        int(row["key_length"]),
        int(row["value_length"]),
        size,
    )
    raise _Malformed(i, why)


def _fixed_why(version: int, attributes: int, key: int, value: int, size: int) -> str:
    """Why the fixed part of an envelope of `size` bytes is malformed (it is)."""
    if version != VERSION:
        return f"envelope version {version} (this reader knows {VERSION})"
    if attributes & ~_ATTRS_KNOWN:
        return f"reserved attribute bits set ({attributes:#04x})"
    if not attributes & ATTR_KEY and key:
        return "a key length without the key attribute"
    if attributes & ATTR_NULL_VALUE and value:
        return "a null value with a value length"
    return f"a key of {key} and a value of {value} bytes in {size}"


def _check_few(values: Sequence[bytes], sizes: list[int]) -> None:
    """`validate`'s checks, one envelope at a time with `struct` (for a few envelopes,
    where numpy's fixed cost per array operation is most of the check): the same checks in
    the same order (every length, then every fixed part, then every header list), so the
    same first error."""
    for i, size in enumerate(sizes):
        if size < FIXED_BYTES:
            raise _Malformed(i, f"{size} bytes: shorter than the 20-byte envelope head")
    heads = [_unpack_fixed(value) for value in values]
    for i, (version, attributes, _ts, key, count, value) in enumerate(heads):
        size = sizes[i]
        parts = FIXED_BYTES + key + value
        if (
            version != VERSION
            or attributes & ~_ATTRS_KNOWN
            or (not attributes & ATTR_KEY and key)
            or (attributes & ATTR_NULL_VALUE and value)
            or parts > size
            or (count == 0 and parts != size)
        ):
            raise _Malformed(i, _fixed_why(version, attributes, key, value, size))
    for i, (_v, _a, _ts, key, count, value) in enumerate(heads):
        if count:
            whole = bytes(values[i])
            _parse_headers(whole, FIXED_BYTES + key, len(whole) - value, count, i)


def _parse_headers(buf: bytes, pos: int, end: int, count: int, index: int) -> tuple[Header, ...]:
    """`count` headers from `pos`, which must end exactly at `end` (the value's start)."""
    out = []
    for _ in range(count):
        if pos + 2 > end:
            raise _Malformed(index, "a header name length past the envelope's end")
        (name_len,) = _NAME_LEN.unpack_from(buf, pos)
        pos += 2
        if pos + name_len + 4 > end:
            raise _Malformed(index, "a header name past the envelope's end")
        try:
            name = buf[pos : pos + name_len].decode()
        except UnicodeDecodeError:
            raise _Malformed(index, "a header name is not UTF-8") from None
        pos += name_len
        (value_len,) = _VALUE_LEN.unpack_from(buf, pos)
        pos += 4
        if pos + value_len > end:
            raise _Malformed(index, "a header value past the envelope's end")
        out.append((name, buf[pos : pos + value_len]))
        pos += value_len
    if pos != end:
        raise _Malformed(index, f"{end - pos} bytes between the headers and the value")
    return tuple(out)


def _bad(offset: int, why: str) -> InvalidRecordError:
    where = f"record at offset {offset}" if offset >= 0 else "record"
    return InvalidRecordError(f"{where} is not a valid envelope: {why}", offset=offset)


def validate(values: Sequence[bytes]) -> int:
    """Raise `InvalidRecordError` unless every value is a well-formed envelope (the
    server's check of an Append to an envelope topic). `offset` in the error's metadata is
    the index of the first bad record in the batch. Returns the values' total size (the
    lengths are measured here anyway)."""
    n = len(values)
    if n == 0:
        return 0
    sizes = list(map(len, values))
    try:
        if n <= _FEW:
            _check_few(values, sizes)
            return sum(sizes)
        if sizes.count(sizes[0]) == n:  # equal envelopes: a strided view of them joined
            # one length for all (numpy broadcasts it): no array of n lengths to build
            lengths: np.ndarray | int = sizes[0]
            if sizes[0] < FIXED_BYTES:
                raise _Malformed(0, f"{sizes[0]} bytes: shorter than the 20-byte envelope head")
            joined = b"".join(values)
            fixed = np.ndarray((n,), dtype=FIXED_DTYPE, buffer=joined, strides=(sizes[0],))
        else:
            lengths = np.array(sizes, dtype=np.int64)
            _check_lengths(lengths)
            fixed = np.frombuffer(b"".join(map(_head, values)), dtype=FIXED_DTYPE)
        _check_fixed(fixed, lengths)
        for i in np.flatnonzero(fixed["count"]).tolist():
            value = bytes(values[i])
            start = FIXED_BYTES + int(fixed["key_length"][i])
            end = len(value) - int(fixed["value_length"][i])
            _parse_headers(value, start, end, int(fixed["count"][i]), i)
    except _Malformed as exc:
        raise InvalidRecordError(
            f"record {exc.index} of the batch is not a valid envelope: {exc.why}",
            index=exc.index,
        ) from None
    return sizes[0] * n if isinstance(lengths, int) else sum(sizes)


def check_keyed(values: Sequence[bytes]) -> None:
    """Raise `InvalidRecordError` (`index`: the first one) unless every envelope of
    `values` has a key: a compacted topic keeps the latest record of each key, so it takes
    no record without one (Kafka refuses them too). The values are valid envelopes."""
    for i, value in enumerate(values):
        if len(value) < FIXED_BYTES or not value[1] & ATTR_KEY:
            raise InvalidRecordError(
                f"record {i} of the batch has no key: a compacted topic (cleanup.policy "
                "compact) takes keyed records only",
                index=i,
            )


# -- timestamps of frames (the time index) ---------------------------------------------------


def frame_timestamps(buf: bytes | memoryview, starts: Sequence[int] | np.ndarray) -> np.ndarray:
    """The envelope timestamp of each frame starting at `starts` in `buf` (whole frames);
    `NO_TIMESTAMP` for control records and for values too short to be envelopes."""
    n = len(starts)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    whole = np.frombuffer(buf, dtype=np.uint8)
    at = np.asarray(starts, dtype=np.int64)
    fields = whole[at[:, None] + np.arange(HEADER_BYTES)].view(">u4")[:, 2]
    lengths = (fields & LENGTH_MASK).astype(np.int64)
    usable = ((fields & CONTROL_FLAG) == 0) & (lengths >= FIXED_BYTES)
    out = np.full(n, NO_TIMESTAMP, dtype=np.int64)
    if usable.any():
        pos = at[usable] + HEADER_BYTES + TIMESTAMP_POSITION
        stamps = whole[pos[:, None] + np.arange(8)].copy().view(">i8").ravel()
        out[usable] = stamps
    return out


# -- envelopes as spans of their frames (the Kafka edge's fetch) -----------------------------


class EnvelopeSpans(NamedTuple):
    """Where each data frame's envelope parts are in the frames' buffer, as int64 columns
    (control records left out): `key_lengths[i]` -1 for no key, `value_lengths[i]` -1 for
    a null value; `header_counts[i]` > 0: the envelope has headers, between its key and its
    value (not located here: decode those with `decode_frames`)."""

    offsets: np.ndarray
    timestamps: np.ndarray
    key_starts: np.ndarray
    key_lengths: np.ndarray
    value_starts: np.ndarray
    value_lengths: np.ndarray
    header_counts: np.ndarray


def envelope_spans(buf: bytes) -> EnvelopeSpans:
    """The envelopes of a run of frames of an envelope topic as spans of `buf`, checked as
    `decode_frames` checks them (same errors), with no Python object per record."""
    runs = _data_runs(buf)
    empty = np.empty(0, dtype=np.int64)
    if not runs:
        return EnvelopeSpans(empty, empty, empty, empty, empty, empty, empty)
    starts = np.concatenate(
        [np.arange(c, dtype=np.int64) * (HEADER_BYTES + n) + (p + HEADER_BYTES) for p, c, n in runs]
    )
    lengths = np.concatenate([np.full(c, n, dtype=np.int64) for _, c, n in runs])
    offsets = np.concatenate(
        [
            np.ndarray((c,), dtype=">u8", buffer=buf, offset=p, strides=(HEADER_BYTES + n,))
            for p, c, n in runs
        ]
    ).astype(np.int64)
    try:
        _check_lengths(lengths)
        fixed = _fixed_parts(buf, starts)
        _check_fixed(fixed, lengths)
    except _Malformed as exc:
        raise _bad(int(offsets[exc.index]), exc.why) from None
    attributes = fixed["attributes"]
    value_lengths = fixed["value_length"].astype(np.int64)
    key_lengths = fixed["key_length"].astype(np.int64)
    return EnvelopeSpans(
        offsets,
        fixed["ts"].astype(np.int64),
        starts + FIXED_BYTES,
        np.where(attributes & ATTR_KEY, key_lengths, -1),
        starts + lengths - value_lengths,
        np.where(attributes & ATTR_NULL_VALUE, -1, value_lengths),
        fixed["count"].astype(np.int64),
    )


__all__ = [
    "ConsumerRecord",
    "DecodedRecords",
    "EnvelopeSpans",
    "Record",
    "decode",
    "decode_frames",
    "decode_values",
    "encode",
    "encode_batch",
    "envelope_spans",
    "frame_timestamps",
    "stamp",
    "validate",
]
