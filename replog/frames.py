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
paths iterate in C (`map`, `zip`, `struct.iter_unpack`) instead of a Python loop per record.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, repeat
from operator import add, itemgetter

HEADER = struct.Struct(">QI")
HEADER_BYTES = HEADER.size  # 12
CONTROL_FLAG = 0x8000_0000
LENGTH_MASK = 0x7FFF_FFFF
OFFSET_MAX = 2**64 - 1

_pack_header = HEADER.pack
_unpack_header = HEADER.unpack_from
_first = itemgetter(0)
_second = itemgetter(1)
_third = itemgetter(2)


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    value: bytes
    control: bool = False


@dataclass(frozen=True, slots=True)
class DecodedFrames:
    """Columns of a run of frames: `offsets[i]`, `values[i]`, `control[i]`."""

    offsets: list[int]
    values: list[bytes]
    control: list[bool] | None  # None: no control record in the run

    def __len__(self) -> int:
        return len(self.offsets)

    def records(self, *, include_control: bool = False) -> list[Record]:
        if self.control is None:
            return [Record(o, v) for o, v in zip(self.offsets, self.values, strict=True)]
        return [
            Record(o, v, c)
            for o, v, c in zip(self.offsets, self.values, self.control, strict=True)
            if include_control or not c
        ]

    def data_records(self) -> DecodedFrames:
        """The same run without control records."""
        if self.control is None:
            return self
        keep = [i for i, c in enumerate(self.control) if not c]
        return DecodedFrames([self.offsets[i] for i in keep], [self.values[i] for i in keep], None)


class FrameError(ValueError):
    """Bytes that are not a well-formed run of frames (position says where it broke)."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.position = position


def encode(base_offset: int, values: Sequence[bytes], *, control: bool = False) -> bytes:
    """Frames for `values` at offsets `base_offset, base_offset + 1, ...` in one buffer."""
    lengths: map[int] | list[int] = map(len, values)
    if control:
        lengths = [n | CONTROL_FLAG for n in map(len, values)]
    headers = map(_pack_header, range(base_offset, base_offset + len(values)), lengths)
    return b"".join(chain.from_iterable(zip(headers, values, strict=True)))


def frame_ends(values: Sequence[bytes]) -> list[int]:
    """End position of each frame of `encode(_, values)`, relative to the buffer start."""
    return list(accumulate(map(add, map(len, values), repeat(HEADER_BYTES))))


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
    if raw_len == length and size % frame == 0:
        count = size // frame
        fmt = f">QI{length}x" if length else ">QI"
        rows = list(struct.iter_unpack(fmt, buf))
        if list(map(_second, rows)).count(length) == count and list(map(_first, rows)) == list(
            range(first, first + count)
        ):
            return list(range(frame, size + 1, frame))
    ends: list[int] = []
    pos = 0
    expected = first
    while pos < size:
        if pos + HEADER_BYTES > size:
            raise FrameError("truncated frame header", pos)
        offset, raw_len = _unpack_header(buf, pos)
        if offset != expected:
            raise FrameError(f"offset {offset} at position {pos}, expected {expected}", pos)
        end = pos + HEADER_BYTES + (raw_len & LENGTH_MASK)
        if end > size:
            raise FrameError(f"frame at position {pos} is cut short", pos)
        ends.append(end)
        pos = end
        expected += 1
    return ends


def decode(buf: bytes | memoryview) -> DecodedFrames:
    """Decode a run of complete frames into columns (no validation of offset order)."""
    size = len(buf)
    if size == 0:
        return DecodedFrames([], [], None)
    if size < HEADER_BYTES:
        raise FrameError("truncated frame header", 0)
    _, raw_len = _unpack_header(buf, 0)
    length = raw_len & LENGTH_MASK
    frame = HEADER_BYTES + length
    if raw_len == length and size % frame == 0:
        rows = list(struct.iter_unpack(f">QI{length}s", buf))
        if list(map(_second, rows)).count(length) == len(rows):
            return DecodedFrames(list(map(_first, rows)), list(map(_third, rows)), None)
    offsets: list[int] = []
    values: list[bytes] = []
    control: list[bool] = []
    mv = memoryview(buf)
    pos = 0
    while pos < size:
        if pos + HEADER_BYTES > size:
            raise FrameError("truncated frame header", pos)
        offset, raw_len = _unpack_header(buf, pos)
        start = pos + HEADER_BYTES
        end = start + (raw_len & LENGTH_MASK)
        if end > size:
            raise FrameError(f"frame at position {pos} is cut short", pos)
        offsets.append(offset)
        values.append(bytes(mv[start:end]))
        control.append(bool(raw_len & CONTROL_FLAG))
        pos = end
    return DecodedFrames(offsets, values, control if any(control) else None)


def last_offset(buf: bytes | memoryview, ends: Sequence[int]) -> int:
    """Offset of the last frame in `buf`, given its frame ends from `scan`."""
    start = ends[-2] if len(ends) > 1 else 0
    return int(_unpack_header(buf, start)[0])
