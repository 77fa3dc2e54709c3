"""A segment's CRC32C sidecar (`.crc`, format in `checksums.py`) in use: opening it, verified
reads and cutting it back with the log.

Reads verify: every block of `chunk_bytes` that the returned range touches is checked
against its CRC32C as a whole (the bytes of the first and last block outside the range are
read too), with one C call per block, none per record. A mismatch marks the block corrupt
and raises `CorruptDataError`; a corrupt block is never served again by this process.

A segment without a `.crc` (written before checksums existed) opens and reads unverified
and is reported (`unverified`); the log rolls to a new, checksummed segment before
appending to it. A segment whose `.crc` header is damaged is corrupt as a whole: its reads
raise. A truncation rewrites the sidecar first (`checksums.rewrite`), so that a crash in
between leaves log bytes uncovered rather than covered by stale checksums.
"""

from __future__ import annotations

import os
from bisect import bisect_left

from replog.frames import HEADER_BYTES
from replog.storage import integrity
from replog.storage.checksums import (
    Coverage,
    Sidecar,
    SidecarHeaderError,
    combine,
    crc32c_extend,
    crc32c_value,
    shift,
)
from replog.storage.config import StorageConfig
from replog.storage.segment_base import SegmentBase


class ChecksummedSegment(SegmentBase):
    """The sidecar part of `Segment` (see the module doc)."""

    def _open_sidecar(
        self, config: StorageConfig, log_size: int, *, create: bool
    ) -> Coverage | None:
        if create or (log_size == 0 and not self._sidecar_usable()):
            self.sidecar = Sidecar.create(self.checksum_path, config.checksum_chunk_bytes)
            return None
        if not self.checksum_path.exists():
            self._note(integrity.UNVERIFIED, 0, log_size, "no .crc: written before checksums")
            return None
        try:
            self.sidecar, coverage = Sidecar.open(self.checksum_path)
        except SidecarHeaderError as exc:
            self._unreadable = True
            self._note(integrity.CORRUPT, 0, log_size, f"{self.checksum_path.name}: {exc}")
            return None
        return coverage

    def _sidecar_usable(self) -> bool:
        try:
            Sidecar.open(self.checksum_path)[0].close()
        except (OSError, SidecarHeaderError):
            return False
        return True

    def _read_verified(self, start: int, stop: int) -> tuple[bytes, bytes]:
        """`pread` of `[start, stop)`, every block it touches verified as a whole; also
        returns the verified bytes read past `stop` (up to 12, possibly none)."""
        sidecar = self.sidecar
        if sidecar is None or stop <= start:
            if self._unreadable:
                raise self._corrupt(self.base_offset, 0, self.size, "its .crc header is damaged")
            return os.pread(self._fd, stop - start, start), b""
        c = sidecar.chunk_bytes
        if stop - start < 4 * c:  # small: one pread of the covering blocks, then a slice
            lo, hi = start // c * c, min(((stop - 1) // c + 1) * c, sidecar.covered_end)
            buf = os.pread(self._fd, hi - lo, lo)
            self._verify_buffer(lo, buf)
            return buf[start - lo : stop - lo], buf[stop - lo : stop - lo + HEADER_BYTES]
        data = os.pread(self._fd, stop - start, start)
        self._verify_buffer(start, data)
        return data, b""

    def _verify_buffer(self, at: int, buf: bytes) -> None:
        """Verify every block touched by `buf` (log bytes from `at`): the bytes of the first
        and last block outside it are read separately, so `buf` is never copied."""
        sidecar = self.sidecar
        if sidecar is None or not buf:
            if self._unreadable:
                raise self._corrupt(self.base_offset, 0, self.size, "its .crc header is damaged")
            return
        c = sidecar.chunk_bytes
        stop = at + len(buf)
        k0, k1 = at // c, (stop - 1) // c
        lo, hi = k0 * c, min((k1 + 1) * c, sidecar.covered_end)
        whole_block = k0 == k1 and at == lo and stop == hi and k0 < len(sidecar.crcs)
        if whole_block and crc32c_value(buf) == sidecar.crcs[k0] and k0 not in self._bad:
            return  # the common small read: one block, read whole
        head = os.pread(self._fd, at - lo, lo) if at > lo else b""
        tail = os.pread(self._fd, hi - stop, stop) if hi > stop else b""
        if len(head) != at - lo or len(tail) != max(hi - stop, 0):
            self._check_blocks(k0, [-1] * (k1 - k0 + 1))
        value, extend = crc32c_value, crc32c_extend
        crcs = sidecar.crcs
        if k1 - k0 >= 2 and k1 < len(crcs):
            # One pass over the bytes, no copy; the expected CRC combines the stored ones.
            computed_all = extend(extend(value(head), buf), tail)
            last = hi - k1 * c
            if last == c:
                expected = combine(crcs, c, k0, k1)
            else:
                prefix, last_crc = combine(crcs, c, k0, k1 - 1), crcs[k1]
                expected = None
                if prefix is not None and last_crc is not None:
                    expected = shift(prefix, last) ^ last_crc
            if expected == computed_all and not (
                self._bad and self._bad.intersection(range(k0, k1 + 1))
            ):
                return
        # Block by block (google-crc32c takes bytes only: slices copy, ~1 us per 16 KiB).
        mv = buf
        if k0 == k1:
            computed = [extend(extend(value(head), mv), tail)]
        else:
            first_end = lo + c - at
            last_start = k1 * c - at
            computed = [extend(value(head), mv[:first_end])]
            starts = range(first_end, last_start, c)
            cuts = map(slice, starts, range(first_end + c, last_start + 1, c))
            computed += map(value, map(mv.__getitem__, cuts))
            computed.append(extend(value(mv[last_start:]), tail))
        self._check_blocks(k0, computed)

    def _check_blocks(self, first: int, computed: list[int]) -> None:
        sidecar = self.sidecar
        assert sidecar is not None
        stored = sidecar.crcs[first : first + len(computed)]
        if computed == stored and not (
            self._bad and self._bad.intersection(range(first, first + len(computed)))
        ):
            return
        c = sidecar.chunk_bytes
        for k, (got, want) in enumerate(zip(computed, stored, strict=False), first):
            if k in self._bad:
                continue
            if want is None:
                self._mark_bad(k, "checksum lost (sidecar entry damaged)")
            elif got != want:
                got &= 0xFFFF_FFFF
                self._mark_bad(k, f"CRC32C mismatch: stored {want:08x}, computed {got:08x}")
        for k in range(first + len(stored), first + len(computed)):
            self._mark_bad(k, "no checksum for these bytes")
        bad = sorted(self._bad.intersection(range(first, first + len(computed))))
        lo, hi = bad[0] * c, min((bad[-1] + 1) * c, self.size)
        offset = self.offsets_between(lo, hi)[0]
        raise self._corrupt(offset, lo, hi, "checksum mismatch")

    def _verify_range(self, lo: int, hi: int) -> None:
        if self.sidecar is not None and hi > lo:
            self._verify_buffer(lo, os.pread(self._fd, hi - lo, lo))

    def _truncate_sidecar(self, pos: int, coverage: Coverage | None) -> None:
        """Rewrite the sidecar to cover `[0, pos)`; the CRC of the block cut at `pos` is
        recomputed from the log after its known-good bytes are verified."""
        sidecar = self.sidecar
        assert sidecar is not None
        c = sidecar.chunk_bytes
        crcs = list(sidecar.crcs)
        k, inside = divmod(pos, c)
        if inside and k not in self._bad:
            ref_end, ref_crc = min((k + 1) * c, sidecar.covered_end), crcs[k]
            if coverage is not None:  # recovery: the newest history entry at or past `pos`
                i = bisect_left([e for e, _ in coverage.history], pos)
                if i < len(coverage.history) and (coverage.history[i][0] - 1) // c == k:
                    ref_end, ref_crc = coverage.history[i]
            data = os.pread(self._fd, ref_end - k * c, k * c)
            if ref_crc is not None and crc32c_value(data) == ref_crc:
                crcs[k] = crc32c_value(data[:inside])
            else:
                self._mark_bad(k, "checksum mismatch in a block cut by truncation")
                crcs[k] = None
        sidecar.reset(pos, crcs, sidecar.flushed_position)
