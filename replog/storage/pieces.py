"""The frames of one `PartitionLog.append_pieces` write: runs of records, each after an
optional control record (a producer batch header), encoded back to back in one buffer
with the end position of every frame (`replog.frames` owns the frame format)."""

from __future__ import annotations

from collections.abc import Sequence

from replog import frames


def encode_pieces(
    base_offset: int, pieces: Sequence[tuple[bytes | None, Sequence[bytes]]]
) -> tuple[bytes, list[int]]:
    """Frames of `pieces` (each: an optional control record, then data records) from
    `base_offset`, with the end position of every frame."""
    parts: list[bytes] = []
    ends: list[int] = []
    offset = base_offset
    size = 0
    for control, values in pieces:
        if control is not None:
            parts.append(frames.encode(offset, [control], control=True))
            size += len(parts[-1])
            ends.append(size)
            offset += 1
        data, data_ends = frames.encode_with_ends(offset, values, position=size)
        parts.append(data)
        ends += data_ends
        size += len(data)
        offset += len(values)
    return b"".join(parts), ends
