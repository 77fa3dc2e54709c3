"""The record frame: replog's one on-disk and on-wire record format (seed 003).

A frame is, byte by byte (all integers big-endian)::

    offset   u64   the record's logical offset in its partition
    length   u32   bit 31: control flag; bits 0-30: value length in bytes
    value    `length & 0x7FFF_FFFF` bytes, opaque

Frames are stored back to back in `.log` segment files and sent as they are in `Fetch`,
`StreamFrom` and `ReplicaFetch` replies, so a reader in any language decodes them with the
three lines above. Normal records never set bit 31 (the record size limit is far below
2**31), so files in the plain seed format read unchanged. Control records (leader-epoch
markers written by replication) set it; consumers skip them.

This module is pure (no I/O) and is shared by storage, client and the Spark source. The hot
paths do no Python-level work per record: batches are encoded with numpy block copies, runs
of equally sized frames are checked with strided slices and decoded by `struct.iter_unpack`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate, compress, repeat
from operator import add, itemgetter, not_

import numpy as np

HEADER = struct.Struct(">QI")
HEADER_BYTES = HEADER.size  # 12
CONTROL_FLAG = 0x8000_0000
LENGTH_MASK = 0x7FFF_FFFF
OFFSET_MAX = 2**64 - 1

_pack_header = HEADER.pack
_unpack_header = HEADER.unpack_from
_first = itemgetter(0)
_second = itemgetter(1)
HEADER_DTYPE = np.dtype([("offset", ">u8"), ("length", ">u4")])
_BE_U64 = np.dtype(">u8")


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    value: bytes
    control: bool = False


class DecodedFrames:
    """Columns of a decoded run of frames: `offsets[i]`, `values[i]`, `control[i]` (None:
    no control record in the run). `rows` pairs them up on first use."""

    __slots__ = ("_rows", "control", "offsets", "values")

    def __init__(
        self, offsets: list[int], values: list[bytes], control: list[bool] | None = None
    ) -> None:
        self.offsets = offsets
        self.values = values
        self.control = control
        self._rows: list[tuple[int, bytes]] | None = None

    @property
    def rows(self) -> list[tuple[int, bytes]]:
        if self._rows is None:
            self._rows = list(zip(self.offsets, self.values, strict=True))
        return self._rows

    def __len__(self) -> int:
        return len(self.offsets)

    def records(self, *, include_control: bool = False) -> list[Record]:
        if self.control is None:
            return list(map(Record, self.offsets, self.values))
        return [
            Record(o, v, c)
            for o, v, c in zip(self.offsets, self.values, self.control, strict=True)
            if include_control or not c
        ]

    def data_records(self) -> DecodedFrames:
        """The same run without control records."""
        if self.control is None:
            return self
        data = list(map(not_, self.control))  # (compress: C loops, no Python step per record)
        return DecodedFrames(list(compress(self.offsets, data)), list(compress(self.values, data)))


class FrameError(ValueError):
    """Bytes that are not a well-formed run of frames (position says where it broke)."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.position = position


_NUMPY_BATCH_MIN = 32  # below this, numpy's fixed cost per call exceeds its gain


def encode(base_offset: int, values: Sequence[bytes], *, control: bool = False) -> bytes:
    """Frames for `values` at offsets `base_offset, base_offset + 1, ...` in one buffer."""
    return encode_with_ends(base_offset, values, control=control)[0]


def encode_with_ends(
    base_offset: int, values: Sequence[bytes], *, control: bool = False, position: int = 0
) -> tuple[bytes, list[int]]:
    """(frames, end position of each frame) for `values` from `base_offset`; the ends count
    from `position` (where these frames will start in a larger buffer).

    Batches are encoded with numpy (the headers as one structured array, the values as one
    join, then two block copies): no Python-level work per record. Small batches take a
    plain path whose fixed cost is lower.
    """
    n = len(values)
    if n < _NUMPY_BATCH_MIN:
        lengths = list(map(len, values))
        flagged: Iterable[int] = [x | CONTROL_FLAG for x in lengths] if control else lengths
        parts: list[bytes | None] = [None] * (2 * n)
        parts[::2] = map(_pack_header, range(base_offset, base_offset + n), flagged)
        parts[1::2] = values
        buf = b"".join(parts)  # type: ignore[arg-type]
        return buf, list(accumulate(map(add, lengths, repeat(HEADER_BYTES)), initial=position))[1:]
    lengths_np = np.fromiter(map(len, values), dtype=np.int64, count=n)
    headers = np.empty(n, dtype=HEADER_DTYPE)
    headers["offset"] = np.arange(base_offset, base_offset + n, dtype=np.uint64)
    headers["length"] = lengths_np | CONTROL_FLAG if control else lengths_np
    data = np.frombuffer(b"".join(values), dtype=np.uint8)
    first = int(lengths_np[0])
    if int(lengths_np.min()) == int(lengths_np.max()):
        grid = np.empty((n, HEADER_BYTES + first), dtype=np.uint8)
        grid[:, :HEADER_BYTES] = headers.view(np.uint8).reshape(n, HEADER_BYTES)
        grid[:, HEADER_BYTES:] = data.reshape(n, first)
        size = HEADER_BYTES + first
        return grid.tobytes(), list(range(position + size, position + n * size + 1, size))
    ends = np.cumsum(lengths_np + HEADER_BYTES)
    header_at = (ends - lengths_np - HEADER_BYTES)[:, None] + np.arange(HEADER_BYTES)
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    is_value = np.ones(len(out), dtype=bool)
    is_value[header_at.ravel()] = False
    out[header_at.ravel()] = headers.view(np.uint8)
    out[is_value] = data
    return out.tobytes(), (ends + position).tolist() if position else ends.tolist()


def frame_ends(values: Sequence[bytes]) -> list[int]:
    """End position of each frame of `encode(_, values)`, relative to the buffer start."""
    return list(accumulate(map(add, map(len, values), repeat(HEADER_BYTES))))


def _uniform(buf: bytes | memoryview, raw_len: int, size: int) -> bool:
    """Whether every frame of `buf` (whole frames of `size` bytes) has length field `raw_len`:
    four strided byte slices compared in C, no loop per frame."""
    total = len(buf)
    if total % size:
        return False
    count = total // size
    if count == 1:
        return True
    mv = buf if isinstance(buf, bytes) else bytes(buf)
    field = raw_len.to_bytes(4, "big")
    return all(mv[8 + i :: size] == field[i : i + 1] * count for i in range(4))


def scan(buf: bytes | memoryview, first_offset: int | None = None) -> list[int]:
    """Validate a run of complete frames; return the end position of each.

    Offsets must be consecutive (starting at `first_offset` when given) and every frame must
    be whole. Raises `FrameError` otherwise.
    """
    size = len(buf)
    if size == 0:
        return []
    if size < HEADER_BYTES:
        raise FrameError("truncated frame header", 0)
    first, raw_len = _unpack_header(buf, 0)
    if first_offset is not None and first != first_offset:
        raise FrameError(f"first offset {first} != expected {first_offset}", 0)
    length = raw_len & LENGTH_MASK
    frame = HEADER_BYTES + length
    # Fast path: a run of equally sized data frames is checked without a Python loop.
    if raw_len == length and _uniform(buf, raw_len, frame):
        count = size // frame
        last = int(_unpack_header(buf, size - frame)[0])
        if last == first + count - 1 and (count < 3 or _dense(buf, first, frame, count)):
            return list(range(frame, size + 1, frame))
    # Mixed (e.g. a batch header before each idempotent batch): by runs of equally long
    # data frames, each checked with numpy; a step per frame only where runs are short.
    ends: list[int] = []
    pos = 0
    expected = first
    while pos < size:
        if pos + HEADER_BYTES > size:
            raise FrameError("truncated frame header", pos)
        offset, raw_len = _unpack_header(buf, pos)
        if offset != expected:
            raise FrameError(f"offset {offset} at position {pos}, expected {expected}", pos)
        frame = HEADER_BYTES + (raw_len & LENGTH_MASK)
        end = pos + frame
        if end > size:
            raise FrameError(f"frame at position {pos} is cut short", pos)
        run = 1 if raw_len & CONTROL_FLAG else _run_length(buf, pos, raw_len, frame)
        if run >= _NUMPY_BATCH_MIN:
            run = _dense_prefix(buf, pos, expected, frame, run)  # the loop reports a gap
            ends += range(end, pos + run * frame + 1, frame)
            pos += run * frame
            expected += run
            continue
        ends.append(end)
        pos = end
        expected += 1
    return ends


def scan_ascending(buf: bytes | memoryview, low: int, high: int) -> tuple[list[int], int]:
    """Validate a run of complete frames whose offsets strictly ascend inside `[low, high)`,
    gaps allowed (a range of a log the cleaner compacted, `replog.storage.cleaner`); return
    (the end position of each frame, how many offset gaps the run has, a gap before its
    first frame included). Consecutive runs take `scan`'s fast path. Raises `FrameError`."""
    try:
        ends = scan(buf, low)
    except FrameError:
        pass
    else:
        if low + len(ends) > high:
            raise FrameError(f"frames reach offset {low + len(ends) - 1}, not below {high}", 0)
        return ends, 0
    ends = []
    gaps = 0
    pos, size, expected = 0, len(buf), low
    while pos < size:
        if pos + HEADER_BYTES > size:
            raise FrameError("truncated frame header", pos)
        offset, raw_len = _unpack_header(buf, pos)
        if not expected <= offset < high:
            raise FrameError(f"offset {offset} at position {pos} not in [{expected}, {high})", pos)
        gaps += offset != expected
        end = pos + HEADER_BYTES + (raw_len & LENGTH_MASK)
        if end > size:
            raise FrameError(f"frame at position {pos} is cut short", pos)
        ends.append(end)
        pos, expected = end, offset + 1
    return ends, gaps


def _dense_prefix(buf: bytes | memoryview, pos: int, first: int, frame: int, count: int) -> int:
    """How many of the `count` frames of size `frame` from position `pos` carry offsets
    first, first + 1, ... before the first that does not (at least 1: the caller checked
    the first)."""
    rows = np.frombuffer(buf, dtype=np.uint8, count=count * frame, offset=pos)
    column = np.ascontiguousarray(rows.reshape(count, frame)[:, :8]).view(_BE_U64).ravel()
    wrong = np.flatnonzero(column != np.arange(first, first + count, dtype=np.uint64))
    return int(wrong[0]) if len(wrong) else count


def _dense(buf: bytes | memoryview, first: int, frame: int, count: int) -> bool:
    """Whether frames of equal size `frame` carry offsets first, first + 1, ... (numpy)."""
    rows = np.frombuffer(buf, dtype=np.uint8, count=count * frame).reshape(count, frame)
    column = np.ascontiguousarray(rows[:, :8]).view(_BE_U64).ravel()
    return bool((column == np.arange(first, first + count, dtype=np.uint64)).all())


_DECODE_CHUNK = 256  # frames per cached Struct: few tuples, so little work for the GC


@lru_cache(maxsize=256)
def _chunk_struct(length: int, count: int) -> struct.Struct:
    return struct.Struct(">" + f"Q4x{length}s" * count)


def _decode_uniform(buf: bytes | memoryview, length: int) -> DecodedFrames:
    """Equally sized data frames: one `unpack_from` per 256 frames gives a flat
    (offset, value, offset, value, ...) tuple whose columns are two C-level slices."""
    frame = HEADER_BYTES + length
    count = len(buf) // frame
    offsets: list[int] = []
    values: list[bytes] = []
    full, rest = divmod(count, _DECODE_CHUNK)
    if full:
        unpack = _chunk_struct(length, _DECODE_CHUNK).unpack_from
        step = _DECODE_CHUNK * frame
        for pos in range(0, full * step, step):
            flat = unpack(buf, pos)
            offsets += flat[0::2]
            values += flat[1::2]
    if rest:
        flat = _chunk_struct(length, rest).unpack_from(buf, full * _DECODE_CHUNK * frame)
        offsets += flat[0::2]
        values += flat[1::2]
    return DecodedFrames(offsets, values, None)


def decode(buf: bytes | memoryview) -> DecodedFrames:
    """Decode a run of complete frames (no check of offset order)."""
    return _decode(buf, keep_control=True)


def decode_data(buf: bytes | memoryview) -> DecodedFrames:
    """`decode(buf).data_records()` without building the control records and a flag per
    record first: what a consumer of a raw topic wants."""
    return _decode(buf, keep_control=False)


def _decode(buf: bytes | memoryview, *, keep_control: bool) -> DecodedFrames:
    size = len(buf)
    if size == 0:
        return DecodedFrames([], [])
    if size < HEADER_BYTES:
        raise FrameError("truncated frame header", 0)
    _, raw_len = _unpack_header(buf, 0)
    length = raw_len & LENGTH_MASK
    if raw_len == length and _uniform(buf, raw_len, HEADER_BYTES + length):
        return _decode_uniform(buf, length)
    # Mixed: walk by runs of equally long data frames (each decoded as above, no Python
    # step per record), e.g. idempotent batches, each after its header control record.
    offsets: list[int] = []
    values: list[bytes] = []
    control_at: list[int] = []  # indexes of the control records kept
    mv = memoryview(buf)
    pos = 0
    while pos < size:
        if pos + HEADER_BYTES > size:
            raise FrameError("truncated frame header", pos)
        offset, raw_len = _unpack_header(buf, pos)
        start = pos + HEADER_BYTES
        length = raw_len & LENGTH_MASK
        end = start + length
        if end > size:
            raise FrameError(f"frame at position {pos} is cut short", pos)
        if raw_len & CONTROL_FLAG:
            if keep_control:
                control_at.append(len(offsets))
                offsets.append(offset)
                values.append(bytes(mv[start:end]))
            pos = end
            continue
        run = _run_length(buf, pos, raw_len, end - pos)
        if run >= _NUMPY_BATCH_MIN:
            part = _decode_uniform(mv[pos : pos + run * (end - pos)], length)
            offsets += part.offsets
            values += part.values
            pos += run * (end - pos)
            continue
        frame = end - pos
        for at in range(pos, pos + run * frame, frame):  # a short run: frame by frame
            offsets.append(_unpack_header(buf, at)[0])
            values.append(bytes(mv[at + HEADER_BYTES : at + frame]))
        pos += run * frame
    if not control_at:
        return DecodedFrames(offsets, values, None)
    control = [False] * len(offsets)
    for i in control_at:
        control[i] = True
    return DecodedFrames(offsets, values, control)


def last_offset(buf: bytes | memoryview, ends: Sequence[int]) -> int:
    """Offset of the last frame in `buf`, given its frame ends from `scan`."""
    start = ends[-2] if len(ends) > 1 else 0
    return int(_unpack_header(buf, start)[0])


def next_offset(buf: bytes, offset: int) -> int:
    """The offset after the last frame of `buf` (whole frames starting at `offset`)."""
    if not buf:
        return offset
    raw_len = int(_unpack_header(buf, 0)[1])
    size = HEADER_BYTES + (raw_len & LENGTH_MASK)
    if _uniform(buf, raw_len, size):
        return int(_unpack_header(buf, len(buf) - size)[0]) + 1
    # Mixed runs (a batch header before each idempotent batch): hop from run to run of
    # equally long frames (numpy compares of the length fields) to the last frame.
    pos, last, total = 0, -1, len(buf)
    while pos + HEADER_BYTES <= total:
        last = pos
        raw_len = int(_unpack_header(buf, pos)[1])
        frame = HEADER_BYTES + (raw_len & LENGTH_MASK)
        if pos + frame > total:
            raise FrameError(f"frame at position {pos} is cut short", pos)
        run = 1 if raw_len & CONTROL_FLAG else _run_length(buf, pos, raw_len, frame)
        last = pos + (run - 1) * frame
        pos += run * frame
    if pos != total:
        raise FrameError("truncated frame header", pos)
    return int(_unpack_header(buf, last)[0]) + 1


_RUN_WINDOW_MIN = 64  # frames compared at once when measuring a run of equal lengths


def control_records(buf: bytes | memoryview) -> list[tuple[int, bytes]]:
    """(offset, value) of every control record in a run of frames, in order.

    Walks the run by *runs* of equally long data frames, each measured with strided numpy
    compares of the length fields (galloping windows), so a batch of equal records costs a
    few numpy calls, not a Python step per record. Stops quietly at a malformed or cut tail:
    callers that must know use `scan`.
    """
    size = len(buf)
    out: list[tuple[int, bytes]] = []
    pos = 0
    while pos + HEADER_BYTES <= size:
        offset, raw_len = _unpack_header(buf, pos)
        frame = HEADER_BYTES + (raw_len & LENGTH_MASK)
        if pos + frame > size:
            break
        if raw_len & CONTROL_FLAG:
            out.append((int(offset), bytes(buf[pos + HEADER_BYTES : pos + frame])))
            pos += frame
            continue
        pos += frame * _run_length(buf, pos, raw_len, frame)
    return out


def _run_length(buf: bytes | memoryview, pos: int, raw_len: int, frame: int) -> int:
    """How many frames from `pos` on (at least 1: the one at `pos`) are whole and carry
    length field `raw_len`, i.e. have size `frame`."""
    available = (len(buf) - pos) // frame
    run = 1
    window = _RUN_WINDOW_MIN
    while run < available:
        count = min(window, available - run)
        lengths = np.ndarray(
            (count,), dtype=">u4", buffer=buf, offset=pos + run * frame + 8, strides=(frame,)
        )
        differs = np.flatnonzero(lengths != raw_len)
        if len(differs):
            return run + int(differs[0])
        run += count
        window *= 8  # a batch of 1000 equal records: three compares
    return run
