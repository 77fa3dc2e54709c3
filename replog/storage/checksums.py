"""CRC32C sidecar of one segment: `{base_offset:020d}.crc` (issue 16; the `.log` stays seed 003).

The `.log` is cut into fixed blocks of `chunk_bytes` (block k = log bytes `[k*C, (k+1)*C)`);
the sidecar holds the CRC32C (Castagnoli, `google-crc32c`) of the written part of each block.
All integers big-endian. The file is a 16-byte header, then 16-byte entries, append-only::

    header   magic        4 bytes  b"RLCK"
             version      u16      1
             reserved     u16      0
             chunk_bytes  u32      C, the block size this file was written with
             header_crc   u32      CRC32C of header bytes 0-11

    entry    kind         u8       1 = chunk, 2 = flushed
             reserved     3 bytes  0
             end_position u32      a `.log` position (segment positions fit in u32)
             crc32c       u32      chunk: CRC32C of `.log` bytes [k*C, end_position) with
                                   k = (end_position - 1) // C; flushed: 0
             entry_crc    u32      CRC32C of entry bytes 0-11

Every write of `n` bytes at position `p` (one `Segment.append`, i.e. one write group) appends,
in one `write` right after the data's `write`, one chunk entry per block it touches: the
first one extends the open block's CRC (`crc32c.extend`), the others start new blocks. A
later entry for the same block *supersedes* the earlier one (same start, larger end), so the
effective checksums are one per block however small the writes were, while every earlier
end stays on file as a fallback point for recovery (never overwritten in place, so a torn
write can only damage the newest entry). An entry is valid when its `entry_crc` matches,
its end is past the coverage so far, and it lies in the open block or the next one.

A flushed entry is appended after each fsync of the segment (log and sidecar): every `.log`
byte below its `end_position` was durable at that moment. Recovery trusts it to tell a torn
tail (damage at or above the newest flushed position: cut at the last verifiable frame end)
from corruption (below it: marked, reported, never truncated).

This module owns the format and the in-memory coverage; `segment_checksums.py` and
`segment_recovery.py` decide what to do.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import google_crc32c  # C (SSE4.2); takes `bytes` only, so memoryview slices are copied

MAGIC = b"RLCK"
VERSION = 1
HEADER = struct.Struct(">4sHHI")
HEADER_CRC = struct.Struct(">I")
HEADER_BYTES = 16
ENTRY = struct.Struct(">B3xII")
ENTRY_WHOLE = struct.Struct(">B3xIII")
ENTRY_BYTES = 16
KIND_CHUNK = 1
KIND_FLUSHED = 2

crc32c_value = google_crc32c.value
crc32c_extend = google_crc32c.extend


def checksum_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}.crc"


def encode_header(chunk_bytes: int) -> bytes:
    head = HEADER.pack(MAGIC, VERSION, 0, chunk_bytes)
    return head + HEADER_CRC.pack(crc32c_value(head))


def encode_entry(kind: int, end_position: int, crc: int) -> bytes:
    body = ENTRY.pack(kind, end_position, crc)
    return body + HEADER_CRC.pack(crc32c_value(body))


def encode_entries(kind: int, items: list[tuple[int, int]]) -> bytes:
    return b"".join([encode_entry(kind, end, crc) for end, crc in items])


class SidecarHeaderError(ValueError):
    """The header is missing, cut short or fails its CRC."""


def decode_header(data: bytes) -> int:
    """The chunk size recorded in a sidecar header (raises SidecarHeaderError)."""
    if len(data) < HEADER_BYTES:
        raise SidecarHeaderError(f"header cut short ({len(data)} of {HEADER_BYTES} bytes)")
    magic, version, _, chunk_bytes = HEADER.unpack_from(data)
    (stored,) = HEADER_CRC.unpack_from(data, 12)
    if stored != crc32c_value(data[:12]):
        raise SidecarHeaderError("header CRC mismatch")
    if magic != MAGIC or version != VERSION or chunk_bytes < 1:
        raise SidecarHeaderError(f"unknown header {magic!r} v{version} C={chunk_bytes}")
    return int(chunk_bytes)


@dataclass(slots=True)
class Coverage:
    """What a sidecar's entries say, parsed without touching the `.log`.

    `crcs[k]` is block k's effective CRC (None: its checksum is lost, see `lost_blocks`);
    `covered_end` is the end of the newest chunk entry; `history` keeps every valid chunk
    entry `(end, crc)` in file order (recovery's fallback points); `damaged` lists entry
    numbers whose bytes are invalid; `torn_tail` says whether they are all at the file's end
    (a torn append rather than damage)."""

    chunk_bytes: int
    crcs: list[int | None] = field(default_factory=list)
    covered_end: int = 0
    flushed_position: int = 0
    history: list[tuple[int, int]] = field(default_factory=list)
    damaged: list[int] = field(default_factory=list)
    lost_blocks: list[int] = field(default_factory=list)
    torn_tail: bool = True
    valid_bytes: int = HEADER_BYTES  # file length up to the last valid entry

    def accept_chunk(self, end: int, crc: int) -> bool:
        """Apply a chunk entry; False if it cannot follow the coverage so far."""
        c = self.chunk_bytes
        e = self.covered_end
        if end <= e:
            return False
        block = (end - 1) // c
        if block != e // c:
            if block < e // c:
                return False
            # A gap: the entries that closed the open block (and any in between) are lost.
            for k in range(e // c, block):
                self._set(k, None)
                self.lost_blocks.append(k)
        self._set(block, crc)
        self.covered_end = end
        self.history.append((end, crc))
        return True

    def _set(self, block: int, crc: int | None) -> None:
        crcs = self.crcs
        if block < len(crcs):
            crcs[block] = crc
        else:
            assert block == len(crcs)
            crcs.append(crc)


def parse(data: bytes) -> Coverage:
    """Parse a whole sidecar (header included). Raises SidecarHeaderError for a bad header."""
    cov = Coverage(decode_header(data))
    n = (len(data) - HEADER_BYTES) // ENTRY_BYTES
    value = crc32c_value
    unpack = ENTRY.unpack_from
    unpack_crc = HEADER_CRC.unpack_from
    last_valid = -1
    garbage = []  # damaged entries that are not what a torn append leaves (zeros)
    for i in range(n):
        at = HEADER_BYTES + i * ENTRY_BYTES
        body = data[at : at + 12]
        if unpack_crc(data, at + 12)[0] != value(body):
            cov.damaged.append(i)
            if data[at : at + ENTRY_BYTES].strip(b"\0"):
                garbage.append(i)
            continue
        kind, end, crc = unpack(data, at)
        if data[at + 1 : at + 4] != b"\0\0\0":
            cov.damaged.append(i)
            continue
        if kind == KIND_CHUNK:
            if not cov.accept_chunk(end, crc):
                cov.damaged.append(i)
                continue
        elif kind == KIND_FLUSHED:
            cov.flushed_position = max(cov.flushed_position, end)
        else:
            cov.damaged.append(i)
            continue
        last_valid = i
    partial = (len(data) - HEADER_BYTES) % ENTRY_BYTES
    if partial:
        cov.damaged.append(n)
    # An append is one sector-aligned 16-byte write: a crash leaves it whole, missing, cut
    # short or zeros. A whole non-zero entry failing its CRC is damage, even at the end.
    cov.torn_tail = all(i > last_valid for i in cov.damaged) and not garbage
    cov.valid_bytes = HEADER_BYTES + (last_valid + 1) * ENTRY_BYTES
    return cov


def chunk_entries(
    crcs: list[int | None], chunk_bytes: int, position: int, data: memoryview
) -> list[tuple[int, int]]:
    """Extend `crcs` (effective per-block CRCs of a log whose size is `position`) with `data`
    written at `position`; return the chunk entries `(end, crc)` to append, one per block."""
    c = chunk_bytes
    n = len(data)
    out: list[tuple[int, int]] = []
    at = 0
    pos = position
    inside = pos % c
    if inside:
        take = min(c - inside, n)
        prev = crcs[-1]
        assert prev is not None, "appends never continue a block whose checksum is lost"
        crc = crc32c_extend(prev, bytes(data[:take]))
        crcs[-1] = crc
        at = take
        pos += take
        out.append((pos, crc))
    value = crc32c_value
    while at < n:
        take = min(c, n - at)
        crc = value(bytes(data[at : at + take]))
        crcs.append(crc)
        at += take
        pos += take
        out.append((pos, crc))
    return out


def block_crc(crcs: list[int | None], block: int) -> int | None:
    return crcs[block] if block < len(crcs) else None


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def rewrite(path: Path, chunk_bytes: int, entries: list[tuple[int, int]], flushed: int) -> None:
    """Replace the sidecar atomically and durably (temp file, fsync, rename, fsync the dir:
    after a truncation the old sidecar must never come back over new data)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        body = encode_header(chunk_bytes) + encode_entries(KIND_CHUNK, entries)
        if flushed:
            body += encode_entry(KIND_FLUSHED, flushed, 0)
        write_all(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def effective_entries(crcs: list[int | None], chunk_bytes: int, end: int) -> list[tuple[int, int]]:
    """One chunk entry per block of a log of `end` bytes (blocks whose CRC is lost are
    skipped: the next entry then opens a gap, which `parse` reports as lost again)."""
    out: list[tuple[int, int]] = []
    for k, crc in enumerate(crcs):
        block_end = min((k + 1) * chunk_bytes, end)
        if block_end <= k * chunk_bytes:
            break
        if crc is not None:
            out.append((block_end, crc))
    return out


class Sidecar:
    """The open `.crc` file of one segment and its effective per-block CRCs."""

    def __init__(self, path: Path, fd: int, chunk_bytes: int, file_bytes: int) -> None:
        self.path = path
        self.chunk_bytes = chunk_bytes
        self.crcs: list[int | None] = []
        self.covered_end = 0
        self.flushed_position = 0
        self._fd = fd
        self._file_bytes = file_bytes

    @property
    def needs_compaction(self) -> bool:
        """Whether superseded entries dominate the file (many small appends): a sealed
        segment's sidecar is then rewritten with one entry per block (`reset`)."""
        entries = (self._file_bytes - HEADER_BYTES) // ENTRY_BYTES
        return entries > 2 * len(self.crcs) + 8

    @classmethod
    def create(cls, path: Path, chunk_bytes: int) -> Sidecar:
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o644)
        try:
            write_all(fd, encode_header(chunk_bytes))
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        return cls(path, fd, chunk_bytes, HEADER_BYTES)

    @classmethod
    def open(cls, path: Path) -> tuple[Sidecar, Coverage]:
        """Open and parse an existing sidecar (SidecarHeaderError if its header is bad).

        The returned sidecar holds the parsed coverage; a torn or damaged tail of entries
        stays on file until the caller truncates or rewrites it."""
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
        try:
            size = os.fstat(fd).st_size
            cov = parse(os.pread(fd, size, 0))
        except BaseException:
            os.close(fd)
            raise
        sidecar = cls(path, fd, cov.chunk_bytes, size)
        sidecar.crcs = list(cov.crcs)
        sidecar.covered_end = cov.covered_end
        sidecar.flushed_position = min(cov.flushed_position, cov.covered_end)
        return sidecar, cov

    def append(self, position: int, data: memoryview) -> None:
        """Record the CRCs of `data`, just written at log position `position` (one `write`).
        On OSError the file and the in-memory state are as before."""
        assert position == self.covered_end, "the sidecar must cover the log up to here"
        crcs = self.crcs
        c = self.chunk_bytes
        n = len(data)
        inside = position % c
        if inside + n <= c and (not inside or crcs[-1] is not None):
            # The common small append: one block, one entry, no lists.
            prev = crcs[-1] if inside else None
            raw = bytes(data)
            crc = crc32c_extend(prev, raw) if prev is not None else crc32c_value(raw)
            end = position + n
            entry = ENTRY_WHOLE.pack(
                KIND_CHUNK, end, crc, crc32c_value(ENTRY.pack(KIND_CHUNK, end, crc))
            )
            try:
                write_all(self._fd, entry)
            except OSError:
                os.ftruncate(self._fd, self._file_bytes)
                raise
            if inside:
                crcs[-1] = crc
            else:
                crcs.append(crc)
            self._file_bytes += ENTRY_BYTES
            self.covered_end = end
            return
        saved_len = len(crcs)
        saved_last = crcs[-1] if crcs else None
        items = chunk_entries(crcs, self.chunk_bytes, position, data)
        body = encode_entries(KIND_CHUNK, items)
        try:
            write_all(self._fd, body)
        except OSError:
            del crcs[saved_len:]
            if saved_len:
                crcs[saved_len - 1] = saved_last
            os.ftruncate(self._fd, self._file_bytes)
            raise
        self._file_bytes += len(body)
        self.covered_end = position + len(data)

    def sync(self) -> None:
        os.fdatasync(self._fd)

    def dup_fd(self) -> int:
        """A duplicate of the open file's descriptor (an fsync outside the log's lock)."""
        return os.dup(self._fd)

    def mark_flushed(self, position: int) -> None:
        """Record that the log is durable below `position` (call after fsyncing both files).
        Not fsynced itself: it becomes durable with the next sync, which is enough."""
        if position <= self.flushed_position:
            return
        entry = encode_entry(KIND_FLUSHED, position, 0)
        write_all(self._fd, entry)
        self._file_bytes += len(entry)
        self.flushed_position = position

    def reset(self, covered_end: int, crcs: list[int | None], flushed: int) -> None:
        """Rewrite the file atomically to cover exactly `[0, covered_end)` with `crcs`."""
        c = self.chunk_bytes
        blocks = -(-covered_end // c)
        crcs = crcs[:blocks]
        assert len(crcs) == blocks
        flushed = min(flushed, covered_end)
        rewrite(self.path, c, effective_entries(crcs, c, covered_end), flushed)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        self._file_bytes = os.fstat(self._fd).st_size
        self.crcs = crcs
        self.covered_end = covered_end
        self.flushed_position = flushed

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@lru_cache(maxsize=8)
def shift_tables(length: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """Byte tables of the linear map M with crc(A + B) = M(crc(A)) ^ crc(B) for |B| = length,
    so that the CRC of many blocks of `length` bytes combines from theirs without their
    bytes: M(c) = T0[c & 255] ^ T1[c >> 8 & 255] ^ T2[c >> 16 & 255] ^ T3[c >> 24]."""
    zeros = bytes(length)
    base = crc32c_value(zeros)
    columns = [crc32c_extend(1 << i, zeros) ^ base for i in range(32)]  # M of each bit
    tables: list[list[int]] = []
    for j in range(4):
        table = [0] * 256
        for b in range(1, 256):
            low = b & -b  # build each entry from a smaller one plus its lowest bit
            table[b] = table[b ^ low] ^ columns[8 * j + low.bit_length() - 1]
        tables.append(table)
    return tables[0], tables[1], tables[2], tables[3]


def combine(crcs: list[int | None], length: int, first: int, last: int) -> int | None:
    """The CRC32C of blocks `first..last` (each `length` bytes long) from their CRCs;
    None if one of them is lost."""
    t0, t1, t2, t3 = shift_tables(length)
    acc = crcs[first]
    if acc is None:
        return None
    for k in range(first + 1, last + 1):
        crc = crcs[k]
        if crc is None:
            return None
        acc = t0[acc & 255] ^ t1[acc >> 8 & 255] ^ t2[acc >> 16 & 255] ^ t3[acc >> 24] ^ crc
    return acc


def shift(crc: int, length: int) -> int:
    """M(crc) for |B| = length (one pass over `length` zero bytes; for a single use)."""
    zeros = bytes(length)
    shifted: int = crc32c_extend(crc, zeros) ^ crc32c_value(zeros)
    return shifted
