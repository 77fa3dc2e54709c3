"""Kafka records (record batch v2's records section, `replog.kafka.records`) as columns:
decoded and encoded a batch at a time with numpy, no Python object per field.

Decoding (`decode_columns`) walks the records' length prefixes once in Python (one
varint per record: the records are variable-length, so each start depends on the one
before), then reads every other field of every record at once: each varint column is
decoded with a few numpy operations per byte of its widest value. It checks what the
per-record decoder (`records._decode_records`) checks: every length against the bytes of
its record, varints within their width and range, each record filled exactly, the records
filling the section exactly, `count` of them. Records with headers are left to that
decoder (`headers_seen`: the caller falls back), which is also the reference the property
tests compare this one against.

Encoding (`encode_columns`) builds each record's bytes from varint columns encoded the
same way (a matrix of up to 10 bytes per value, compacted by a mask) and joins, per
record, its prefix (length, attributes 0, timestamp delta, offset delta, key length), key,
value length, value and a header count of 0, in one C-level join. `encode_spans` (the
fetch path: keys and values are spans of the stored frames' bytes) builds no Python object
per record: runs of equal records are 2-D block copies, anything else one numpy gather.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Final, NamedTuple

import numpy as np

from replog.kafka.errors import CorruptRecordBatchError, KafkaDecodeError

PAD: Final = 10  # bytes after the section, so a varint read never indexes past the array
_NULL: Final = b"\x01"  # zigzag(-1): a null key or value
_NO_HEADERS: Final = b"\x00"


@dataclass(frozen=True, slots=True)
class Columns:
    """The records of a section: per record its offset and timestamp deltas and where its
    key and value are in `payload` (start, length; length -1: null)."""

    payload: bytes
    offset_deltas: np.ndarray
    timestamp_deltas: np.ndarray
    key_starts: np.ndarray
    key_lengths: np.ndarray
    value_starts: np.ndarray
    value_lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.offset_deltas)

    def key_list(self) -> list[bytes | None]:
        return _cut(self.payload, self.key_starts, self.key_lengths)

    def value_list(self) -> list[bytes | None]:
        return _cut(self.payload, self.value_starts, self.value_lengths)

    def keys_or_empty(self) -> list[bytes]:
        """The keys, a null one as b""."""
        return _slices(self.payload, self.key_starts, self.key_lengths)

    def values_or_empty(self) -> list[bytes]:
        """The values, a null one as b""."""
        return _slices(self.payload, self.value_starts, self.value_lengths)


def _slices(payload: bytes, starts: np.ndarray, lengths: np.ndarray) -> list[bytes]:
    ends = starts + np.maximum(lengths, 0)
    return list(map(payload.__getitem__, map(slice, starts.tolist(), ends.tolist())))


def _cut(payload: bytes, starts: np.ndarray, lengths: np.ndarray) -> list[bytes | None]:
    out: list[bytes | None] = list(_slices(payload, starts, lengths))
    if (lengths < 0).any():
        for i in np.flatnonzero(lengths < 0).tolist():
            out[i] = None
    return out


# -- decoding --------------------------------------------------------------------------------


def _starts(buf: bytes, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Each record's body start and length (after its length prefix). Records are walked
    by runs of equally long ones (the same length prefix at equally spaced positions,
    found by galloping numpy compares, as `frames` walks frames): a batch of equal records
    costs a few numpy calls, not a Python step per record."""
    if count < 0 or count > len(buf):
        raise CorruptRecordBatchError(f"{count} records in {len(buf)} bytes")
    starts: list[int] = []  # of the records in short runs (and of each long run's first)
    lengths: list[int] = []
    runs: list[tuple[int, int, int, int]] = []  # long runs: (index, count, stride, length)
    pos, end, left = 0, len(buf), count
    while left:
        if pos >= end:
            raise KafkaDecodeError("truncated varint in a record", position=pos)
        byte = buf[pos]
        if byte < 0x80:
            length, body = (byte >> 1) ^ -(byte & 1), pos + 1
        else:
            length, body = _slow_zigzag(buf, pos, end)
        if length < 1 or length > end - body:
            raise KafkaDecodeError(f"record of {length} bytes in {end - body}", position=body)
        stride = body - pos + length
        starts.append(body)
        lengths.append(length)
        run, nxt = 1, pos + stride
        if (  # the next record's prefix is this one's: a run (one compare per record else)
            left > 1
            and nxt < end
            and buf[nxt] == byte
            and (body - pos == 1 or buf.startswith(buf[pos:body], nxt))
        ):
            run = _equal_prefixes(buf, pos, body - pos, stride, min(left, (end - pos) // stride))
            if run > 1:
                runs.append((len(starts) - 1, run, stride, length))
        pos += run * stride
        left -= run
    if pos != end:
        raise CorruptRecordBatchError(f"{end - pos} bytes after the batch's {count} records")
    return _expanded(starts, lengths, runs)


def _expanded(
    starts: list[int], lengths: list[int], runs: list[tuple[int, int, int, int]]
) -> tuple[np.ndarray, np.ndarray]:
    """The columns of `_starts`: its records in short runs as they are, each long run
    (listed by its first record's index) expanded with numpy."""
    first = np.array(starts, dtype=np.int64)
    size = np.array(lengths, dtype=np.int64)
    if not runs:
        return first, size
    counts = np.ones(len(starts), dtype=np.int64)
    steps = np.zeros(len(starts), dtype=np.int64)
    at, count, stride, _ = (np.array(c, dtype=np.int64) for c in zip(*runs, strict=True))
    counts[at] = count
    steps[at] = stride
    out_starts = np.repeat(first, counts)
    within = np.arange(len(out_starts)) - np.repeat(np.cumsum(counts) - counts, counts)
    return out_starts + within * np.repeat(steps, counts), np.repeat(size, counts)


_RUN_CHECKED: Final = 32  # records of a run compared in Python before numpy's compares
_RUN_WINDOW_MIN: Final = 64  # records compared at once when measuring a run


def _equal_prefixes(buf: bytes, pos: int, width: int, stride: int, most: int) -> int:
    """How many records from `pos` on (at least 1, at most `most`) begin
    with the length prefix (`width` bytes) of the one at `pos`, each `stride` bytes after
    the one before: a few compares in Python first (numpy's calls pay for long runs only),
    then galloping numpy compares."""
    run, prefix, limit = 1, buf[pos : pos + width], min(most, _RUN_CHECKED)
    while run < limit and buf.startswith(prefix, pos + run * stride):
        run += 1
    if run < _RUN_CHECKED:
        return run
    window = _RUN_WINDOW_MIN
    while run < most:
        n = min(window, most - run)
        differs = np.zeros(n, dtype=bool)
        for j in range(width):
            at = np.ndarray((n,), np.uint8, buf, pos + run * stride + j, (stride,))
            differs |= at != buf[pos + j]
        first = np.flatnonzero(differs)
        if len(first):
            return run + int(first[0])
        run += n
        window *= 8
    return run


def _slow_zigzag(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    raw, shift = 0, 0
    for i in range(5):
        if pos + i >= end:
            raise KafkaDecodeError("truncated varint in a record", position=pos)
        byte = buf[pos + i]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            if raw >> 32:
                raise KafkaDecodeError("varint out of range in a record", position=pos)
            return (raw >> 1) ^ -(raw & 1), pos + i + 1
        shift += 7
    raise KafkaDecodeError("varint longer than 5 bytes in a record", position=pos)


def _varints(
    arr: np.ndarray, pos: np.ndarray, stop: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varints at `pos` (each at most `width` bytes, ending by `stop`): their
    values (int64) and the positions after them."""
    if (pos >= stop).any():
        raise KafkaDecodeError("truncated varint in a record")
    raw = np.zeros(len(pos), dtype=np.uint64)
    after = np.zeros(len(pos), dtype=np.int64)
    live = np.ones(len(pos), dtype=bool)
    for i in range(width):
        byte = arr[pos + i].astype(np.uint64)
        if i == 9 and (live & (byte > 1)).any():
            raise KafkaDecodeError("varint out of range in a record")
        raw |= np.where(live, (byte & np.uint64(0x7F)) << np.uint64(7 * i), np.uint64(0))
        ends = live & (byte < 0x80)
        after[ends] = pos[ends] + i + 1
        live &= ~ends
        if not live.any():
            break
    else:
        raise KafkaDecodeError(f"varint longer than {width} bytes in a record")
    if (after > stop).any():
        raise KafkaDecodeError("truncated varint in a record")
    if width == 5 and (raw >> np.uint64(32)).any():
        raise KafkaDecodeError("varint out of range in a record")
    value = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return value, after


def _blobs(
    arr: np.ndarray, pos: np.ndarray, stop: np.ndarray, what: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, lengths with -1 for null, positions after) of a key or value column."""
    lengths, starts = _varints(arr, pos, stop, 5)
    if (lengths < -1).any() or (lengths > stop - starts).any():
        raise KafkaDecodeError(f"record {what} longer than its record")
    return starts, lengths, starts + np.maximum(lengths, 0)


def decode_columns(buf: bytes, count: int) -> tuple[Columns, bool]:
    """The `count` records filling `buf` (a decompressed records section) as columns, and
    whether any record has headers (then the columns are incomplete: decode per record)."""
    starts, lengths = _starts(buf, count)
    arr = np.frombuffer(buf + bytes(PAD), dtype=np.uint8)
    stop = starts + lengths
    ts_deltas, pos = _varints(arr, starts + 1, stop, 10)  # after the attributes byte
    offset_deltas, pos = _varints(arr, pos, stop, 5)
    key_starts, key_lengths, pos = _blobs(arr, pos, stop, "key")
    value_starts, value_lengths, pos = _blobs(arr, pos, stop, "value")
    headers, pos = _varints(arr, pos, stop, 5)
    if (headers < 0).any():
        raise KafkaDecodeError("a negative header count in a record")
    columns = Columns(
        buf, offset_deltas, ts_deltas, key_starts, key_lengths, value_starts, value_lengths
    )
    if headers.any():
        return columns, True
    if (pos != stop).any():
        raise KafkaDecodeError("bytes left in a record")
    return columns, False


# -- encoding --------------------------------------------------------------------------------


def _varint_matrix(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints of int64 `values`: a (n, 10) byte matrix and each value's width."""
    v = values.astype(np.int64)
    u = ((v << np.int64(1)) ^ (v >> np.int64(63))).astype(np.uint64)
    n = len(u)
    out = np.zeros((n, 10), dtype=np.uint8)
    widths = np.ones(n, dtype=np.int64)
    rest = u.copy()
    for i in range(10):
        more = rest >= np.uint64(0x80)
        out[:, i] = (rest & np.uint64(0x7F)) | np.where(more, np.uint64(0x80), np.uint64(0))
        widths += more
        rest >>= np.uint64(7)
        if not more.any():
            break
    return out, widths


def _pieces(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[bytes]:
    """Per row, the bytes of each (matrix, widths) part side by side: one bytes per row."""
    matrix = np.concatenate([m for m, _ in parts], axis=1)
    mask = np.concatenate([np.arange(m.shape[1])[None, :] < w[:, None] for m, w in parts], axis=1)
    flat = matrix[mask].tobytes()
    ends = np.cumsum(sum(w for _, w in parts))
    starts = ends - sum(w for _, w in parts)
    return list(map(flat.__getitem__, map(slice, starts.tolist(), ends.tolist())))


def encode_columns(
    offset_deltas: Sequence[int] | np.ndarray,
    timestamp_deltas: Sequence[int] | np.ndarray,
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
) -> bytes:
    """The records section (uncompressed) of records without headers."""
    n = len(keys)
    if n == 0:
        return b""
    key_lengths = np.fromiter((-1 if k is None else len(k) for k in keys), np.int64, n)
    value_lengths = np.fromiter((-1 if v is None else len(v) for v in values), np.int64, n)
    ts = _varint_matrix(np.asarray(timestamp_deltas, dtype=np.int64))
    off = _varint_matrix(np.asarray(offset_deltas, dtype=np.int64))
    klen = _varint_matrix(key_lengths)
    vlen = _varint_matrix(value_lengths)
    body = (
        1 + ts[1] + off[1] + klen[1] + np.maximum(key_lengths, 0)
        + vlen[1] + np.maximum(value_lengths, 0) + 1
    )  # fmt: skip
    length = _varint_matrix(body)
    attributes = (np.zeros((n, 1), dtype=np.uint8), np.ones(n, dtype=np.int64))
    prefixes = _pieces([length, attributes, ts, off, klen])
    middles = _pieces([vlen])
    parts: list[bytes | None] = [None] * (5 * n)
    parts[0::5] = prefixes
    parts[1::5] = [b"" if k is None else k for k in keys]
    parts[2::5] = middles
    parts[3::5] = [b"" if v is None else v for v in values]
    parts[4::5] = [_NO_HEADERS] * n
    return b"".join(parts)  # type: ignore[arg-type]


RUN_RECORDS_MIN: Final = 32  # records per run (on average) for `assemble`'s block copies


class Gen(NamedTuple):
    """Generated bytes of each row: `matrix[i, :widths[i]]`."""

    matrix: np.ndarray
    widths: np.ndarray


class Span(NamedTuple):
    """Bytes of each row taken from the source: `buf[starts[i]:starts[i] + lengths[i]]`."""

    starts: np.ndarray
    lengths: np.ndarray


def assemble(buf: bytes, parts: Sequence[Gen | Span]) -> tuple[np.ndarray, np.ndarray]:
    """Rows made of `parts` side by side (generated bytes, spans of `buf`), the rows one
    after the other: (the bytes as one uint8 array, each row's size). No Python object per
    row: runs of rows of one shape (every part of one width in the run, each span's rows
    equally spaced in `buf`: a batch of equal records) are 2-D blocks filled by a few
    strided copies per run; rows of many shapes are one numpy gather of an index of one
    entry per output byte."""
    n = len(parts[0][1])
    shape = np.stack([p[1] for p in parts])
    sizes = shape.sum(axis=0)
    if n == 0:
        return np.empty(0, dtype=np.uint8), sizes
    breaks = (shape[:, 1:] != shape[:, :-1]).any(axis=0)
    spans = [p.starts for p in parts if isinstance(p, Span)]
    if spans:
        strides = np.stack([np.diff(s) for s in spans])
        breaks[1:] |= (strides[:, 1:] != strides[:, :-1]).any(axis=0)
    firsts = [0, *(np.flatnonzero(breaks) + 1).tolist()]
    if len(firsts) * RUN_RECORDS_MIN > n:
        return _gathered(buf, parts, sizes), sizes
    out = np.empty(int(sizes.sum()), dtype=np.uint8)
    at = 0
    for s, e in zip(firsts, [*firsts[1:], n], strict=True):
        row = int(sizes[s])
        block = out[at : at + (e - s) * row].reshape(e - s, row)
        at += (e - s) * row
        col = 0
        for part in parts:
            width = int(part[1][s])
            if isinstance(part, Gen):
                block[:, col : col + width] = part.matrix[s:e, :width]
            elif width:
                step = int(part.starts[s + 1] - part.starts[s]) if e - s > 1 else 0
                source = np.ndarray((e - s, width), np.uint8, buf, int(part.starts[s]), (step, 1))
                block[:, col : col + width] = source
            col += width
        assert col == row, "a run's parts fill its rows"
    return out, sizes


_GATHER_BYTES_MAX: Final = 4 * 1024 * 1024  # output bytes per gather (its index: 4-8x)


def _gathered(buf: bytes, parts: Sequence[Gen | Span], sizes: np.ndarray) -> np.ndarray:
    """`assemble` by numpy gathers, each of at most about `_GATHER_BYTES_MAX` bytes of
    rows (so the index arrays stay bounded whatever the request)."""
    ends = np.cumsum(sizes)
    cuts = np.searchsorted(ends, np.arange(_GATHER_BYTES_MAX, int(ends[-1]), _GATHER_BYTES_MAX))
    bounds = [0, *sorted({int(c) + 1 for c in cuts} - {0, len(sizes)}), len(sizes)]
    chunks = [
        _gather(buf, [type(p)(p[0][s:e], p[1][s:e]) for p in parts], sizes[s:e])
        for s, e in pairwise(bounds)
    ]
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


def _gather(buf: bytes, parts: Sequence[Gen | Span], sizes: np.ndarray) -> np.ndarray:
    """One gather from `buf` followed by `gen`: every row's generated bytes, rows one
    after the other; an index of one entry per output byte."""
    gens = [p for p in parts if isinstance(p, Gen)]
    gen = _compact(gens) if gens else np.empty(0, dtype=np.uint8)
    gen_rows = sum(p.widths for p in gens) if gens else np.zeros(len(sizes), dtype=np.int64)
    row_starts = np.cumsum(gen_rows) - gen_rows + len(buf)  # in the gathered-from array
    seg_lengths = np.stack([p[1] for p in parts], axis=1).ravel()
    sources = []
    within = np.zeros(len(sizes), dtype=np.int64)
    for part in parts:
        if isinstance(part, Gen):
            sources.append(row_starts + within)
            within = within + part.widths
        else:
            sources.append(part.starts)
    seg_sources = np.stack(sources, axis=1).ravel()
    total = int(sizes.sum())
    index_type = np.int32 if len(buf) + len(gen) + total < 2**31 else np.int64
    out_starts = np.cumsum(seg_lengths) - seg_lengths
    index = np.repeat((seg_sources - out_starts).astype(index_type), seg_lengths)
    index += np.arange(total, dtype=index_type)
    source = np.concatenate([np.frombuffer(buf, dtype=np.uint8), gen])
    out: np.ndarray = np.take(source, index)
    return out


def encode_spans(
    buf: bytes,
    offset_deltas: np.ndarray,
    timestamp_deltas: np.ndarray,
    keys: Span,
    values: Span,
) -> bytes:
    """The records section (uncompressed) of records without headers whose keys and values
    are spans of `buf` (length -1: null), with no Python object per record (`assemble`)."""
    n = len(keys.lengths)
    key_bytes = np.maximum(keys.lengths, 0)
    value_bytes = np.maximum(values.lengths, 0)
    ts = _varint_matrix(timestamp_deltas)
    off = _varint_matrix(offset_deltas)
    klen = _varint_matrix(keys.lengths)
    vlen = _varint_matrix(values.lengths)
    length = _varint_matrix(1 + ts[1] + off[1] + klen[1] + key_bytes + vlen[1] + value_bytes + 1)
    zero = Gen(np.zeros((n, 1), dtype=np.uint8), np.ones(n, dtype=np.int64))
    varint = [Gen(*length), zero, Gen(*ts), Gen(*off), Gen(*klen)]
    out, _ = assemble(
        buf,
        [*varint, Span(keys.starts, key_bytes), Gen(*vlen), Span(values.starts, value_bytes), zero],
    )
    return out.tobytes()


def _compact(parts: Sequence[Gen]) -> np.ndarray:
    """Per row, the bytes of each (matrix, widths) part side by side, rows one after the
    other: one flat uint8 array."""
    matrix = np.concatenate([m for m, _ in parts], axis=1)
    mask = np.concatenate([np.arange(m.shape[1])[None, :] < w[:, None] for m, w in parts], axis=1)
    flat: np.ndarray = matrix[mask]
    return flat
