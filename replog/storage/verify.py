"""`replog verify DATA_DIR`: an offline check of a stopped node's storage files.

Walks every partition directory (`{data_dir}/{topic}/partition_{N}/`, `__cluster` included,
`.trash~` skipped) and every segment in it, reading files only (nothing is repaired or
rewritten, unlike opening a `PartitionLog`). For each segment it checks:

* frames: the `.log` is whole frames with offsets `base_offset, base_offset + 1, ...`, and
  each segment starts where the previous one ends;
* checksums (`.crc`, see `checksums.py`): the header, every entry's own CRC, the chain of
  entries, every block's effective CRC32C *and* every superseded entry's CRC against the
  log bytes it covers, and the coverage against the log's size;
* index (`.idx`): every entry points at the frame of the offset it names; anything after the
  valid entries must be zero padding.

Findings have a severity. `error`: corruption (bytes that fail their checksum below the
newest flushed position, damaged checksum or index entries, broken frames in flushed data,
gaps between segments); a node would refuse to serve the range, or rebuild its index.
`warning`: what a crash leaves and the next open repairs without losing flushed data (a torn
tail, bytes past the checksums, stale index entries past the end), and segments written
before checksums existed (unverified). `info`: zero padding of a sealed segment's index
after a crash (the active segment's index is pre-sized by design: not a finding).
`main` prints one line per error or warning, one line counting the infos, and a summary,
and exits 1 if there is any error.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from replog.errors import CorruptDataError
from replog.frames import HEADER, HEADER_BYTES, LENGTH_MASK
from replog.storage import checkpoint, checksums, snapshots
from replog.storage.checksums import SidecarHeaderError, crc32c_extend, crc32c_value
from replog.storage.index import ENTRY, ENTRY_BYTES

ERROR = "error"
WARNING = "warning"
INFO = "info"
_LOG_NAME = re.compile(r"(\d{20})\.log")
_SIDE_NAME = re.compile(r"(\d{20})\.(?:idx|crc|timeindex)")
_TRASH_DIR = ".trash~"


@dataclass(frozen=True, slots=True)
class Finding:
    severity: str
    path: Path
    detail: str

    def __str__(self) -> str:
        return f"{self.severity.upper()}: {self.path}: {self.detail}"


@dataclass(slots=True)
class VerifyReport:
    findings: list[Finding] = field(default_factory=list)
    partitions: int = 0
    segments: int = 0
    records: int = 0
    bytes_checked: int = 0

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def ok(self) -> bool:
        return not self.errors

    def add(self, severity: str, path: Path, detail: str) -> None:
        self.findings.append(Finding(severity, path, detail))


def partition_dirs(data_dir: Path) -> list[Path]:
    return sorted(
        p
        for p in data_dir.glob("*/partition_*")
        if p.is_dir() and p.parent.name != _TRASH_DIR and p.name[len("partition_") :].isdigit()
    )


def verify_data_dir(data_dir: Path) -> VerifyReport:
    report = VerifyReport()
    for directory in partition_dirs(Path(data_dir)):
        verify_partition(directory, report)
    return report


def verify_partition(directory: Path, report: VerifyReport) -> None:
    report.partitions += 1
    names = [p.name for p in directory.iterdir()]
    bases = sorted(int(m.group(1)) for n in names if (m := _LOG_NAME.fullmatch(n)))
    for n in names:
        m = _SIDE_NAME.fullmatch(n)
        if m and int(m.group(1)) not in bases:
            report.add(WARNING, directory / n, "left over without its .log (removed on open)")
    expected: int | None = None
    sparse_end = checkpoint.read_int(directory / "cleaner-sparse-end") or 0
    for i, base in enumerate(bases):
        path = directory / f"{base:020d}.log"
        if expected is not None and base != expected:
            report.add(
                ERROR,
                path,
                f"starts at offset {base} but the previous segment ends at {expected}: "
                "a gap (opening would drop this and later segments)",
            )
        last = i == len(bases) - 1
        # A segment the log cleaner rewrote has offset gaps and ends where the next starts.
        end = bases[i + 1] if base < sparse_end and not last else None
        expected = verify_segment(directory, base, last=last, report=report, sparse_end=end)
    _check_snapshots(directory, expected, report)


def _check_snapshots(directory: Path, end: int | None, report: VerifyReport) -> None:
    """Producer-state snapshots (`snapshots.py`): a damaged one is not used (the start falls
    back to an older one or scans the log), one above the log end is deleted on open."""
    for offset in snapshots.offsets(directory):
        path = directory / snapshots.snapshot_name(offset)
        try:
            snapshots.read(directory, offset)
        except CorruptDataError as exc:
            report.add(WARNING, path, f"{exc}: not used (the start scans the log instead)")
            continue
        if end is not None and offset > end:
            report.add(WARNING, path, f"above the log end {end}: deleted on open")


def verify_segment(
    directory: Path, base: int, *, last: bool, report: VerifyReport, sparse_end: int | None = None
) -> int:
    """Check one segment's three files; return the offset after its last whole frame (with
    `sparse_end`, a cleaned segment whose offsets ascend with gaps below it: that offset)."""
    report.segments += 1
    log_path = directory / f"{base:020d}.log"
    log = log_path.read_bytes()
    size = len(log)
    report.bytes_checked += size
    starts, frames_end, next_offset = _scan(log, base, sparse_end)
    report.records += len(starts)
    crc_path = directory / checksums.checksum_file_name(base)
    written = max(size, _covered_end(crc_path))  # the log's size before any torn tail
    index_path = directory / f"{base:020d}.idx"
    index_last = _check_index(index_path, base, starts, size, written, report, last=last)
    threshold = _check_checksums(crc_path, log, index_last, report)
    if frames_end < size:
        severity = ERROR if frames_end < threshold or not last else WARNING
        what = "torn tail: cut on open" if severity == WARNING else "corrupt frames"
        report.add(
            severity,
            log_path,
            f"frames stop at position {frames_end} of {size} (offset {next_offset}): {what}",
        )
    return next_offset if sparse_end is None or frames_end < size else sparse_end


def _scan(log: bytes, base: int, sparse_end: int | None) -> tuple[dict[int, int], int, int]:
    """Frame starts (position -> offset), the end of the last whole frame, the next offset."""
    starts: dict[int, int] = {}
    pos, expected, size = 0, base, len(log)
    unpack = HEADER.unpack_from
    while pos + HEADER_BYTES <= size:
        offset, raw_len = unpack(log, pos)
        end = pos + HEADER_BYTES + (raw_len & LENGTH_MASK)
        gap_ok = sparse_end is not None and expected < offset < sparse_end
        if (offset != expected and not gap_ok) or end > size:
            break
        starts[pos] = offset
        pos, expected = end, offset + 1
    return starts, pos, expected


def _covered_end(path: Path) -> int:
    try:
        return checksums.parse(path.read_bytes()).covered_end
    except (OSError, SidecarHeaderError):
        return 0


def _check_index(
    path: Path,
    base: int,
    starts: dict[int, int],
    size: int,
    written: int,
    report: VerifyReport,
    *,
    last: bool,
) -> int:
    """Check the index; return the position of its last valid entry (0 if none). The
    active (`last`) segment's index is pre-sized and zero padded by design: no finding."""
    if not path.exists():
        if size:
            report.add(WARNING, path, "missing: rebuilt from the log on open")
        return 0
    raw = path.read_bytes()
    whole = raw[: len(raw) - len(raw) % ENTRY_BYTES]
    last_rel = last_pos = -1
    kept = 0
    for i, (rel, pos) in enumerate(ENTRY.iter_unpack(whole)):
        first = pos == 0 and (rel == 0 or starts.get(0) == base + rel)  # cleaned: any rel
        in_order = first if i == 0 else (rel > last_rel and pos > last_pos)
        if not in_order or pos >= size:
            break
        if starts.get(pos) != base + rel:
            report.add(
                ERROR,
                path,
                f"entry {i} ({rel}, {pos}) does not point at the frame of offset {base + rel}",
            )
        last_rel, last_pos, kept = rel, pos, i + 1
    rest = raw[kept * ENTRY_BYTES :]
    if not rest.strip(b"\0"):
        if rest and not last:
            report.add(INFO, path, f"{len(rest)} bytes of zero padding (a crash left it pre-sized)")
    else:
        tail = [rest[i : i + ENTRY_BYTES] for i in range(0, len(rest), ENTRY_BYTES)]
        stale = len(rest) % ENTRY_BYTES == 0 and all(
            not e.strip(b"\0") or size <= ENTRY.unpack(e)[1] < written for e in tail
        )
        if stale and kept:
            report.add(WARNING, path, f"entries past the log's end after entry {kept - 1}")
        else:
            report.add(ERROR, path, f"invalid entries after entry {kept - 1}: rebuilt on open")
    if size and not kept:
        report.add(ERROR if rest.strip(b"\0") else WARNING, path, "no valid first entry")
    return max(last_pos, 0)


def _check_checksums(path: Path, log: bytes, index_last: int, report: VerifyReport) -> int:
    """Check the sidecar against the log; return the torn-tail threshold (the newest flushed
    position, else the last index entry), below which damage is corruption."""
    size = len(log)
    if not path.exists():
        if size:
            report.add(WARNING, path, "missing: a segment written before checksums (unverified)")
        return size
    try:
        cov = checksums.parse(path.read_bytes())
    except SidecarHeaderError as exc:
        report.add(ERROR, path, f"{exc}: the segment cannot be verified")
        return size
    c = cov.chunk_bytes
    threshold = cov.flushed_position or index_last
    if cov.damaged:
        if cov.torn_tail:
            report.add(WARNING, path, f"torn tail entries {cov.damaged} (dropped on open)")
        else:
            report.add(ERROR, path, f"damaged entries {cov.damaged[:16]}")
    if cov.lost_blocks:
        report.add(ERROR, path, f"checksums lost for blocks {cov.lost_blocks[:16]} (C={c})")
    end = cov.covered_end
    if cov.flushed_position > end:
        report.add(
            ERROR,
            path,
            f"flushed to {cov.flushed_position} but checksums end at {end}: entries lost",
        )
    if size > end:
        report.add(WARNING, path, f"{size - end} log bytes past the checksums: cut on open")
    bad: set[int] = set()
    for k, crc in enumerate(cov.crcs):
        lo, hi = k * c, min((k + 1) * c, end)
        if crc is None:
            continue
        if hi > size or crc32c_value(log[lo:hi]) != crc:
            bad.add(k)
            severity = ERROR if hi <= threshold else WARNING
            why = "the log is shorter" if hi > size else "CRC32C mismatch"
            what = "corrupt" if severity == ERROR else "torn tail: cut on open"
            report.add(severity, path, f"block {k} [{lo}, {hi}): {why}: {what}")
    # Superseded entries too: every byte of the sidecar is checked against the log.
    prev_end, prev_crc = 0, 0
    for i, (e, crc) in enumerate(cov.history):
        k = (e - 1) // c
        lo = k * c
        if k in bad or e > size:
            prev_end, prev_crc = e, crc
            continue
        computed = (
            crc32c_extend(prev_crc, log[prev_end:e]) if prev_end > lo else crc32c_value(log[lo:e])
        )
        if computed != crc:
            severity = ERROR if e <= threshold else WARNING
            report.add(severity, path, f"entry for [{lo}, {e}) (chunk entry {i}) does not match")
        prev_end, prev_crc = e, computed if computed == crc else crc
    return threshold


def main(argv: Sequence[str], out: TextIO = sys.stdout) -> int:
    """`replog verify DATA_DIR [...]`: print findings and a summary; 0 clean, 1 errors,
    2 not a directory."""
    exit_code = 0
    for arg in argv:
        data_dir = Path(arg)
        if not data_dir.is_dir():
            print(f"replog: {data_dir} is not a directory", file=sys.stderr)
            return 2
        report = verify_data_dir(data_dir)
        infos = [f for f in report.findings if f.severity == INFO]
        for finding in report.findings:
            if finding.severity != INFO:
                print(finding, file=out)
        if infos:  # one line, not one per index: a crash (or a live node) leaves them padded
            print(
                f"{data_dir}: {len(infos)} sealed segment index(es) zero padded (pre-sized: a "
                "crash, or a running node; trimmed on a clean close; --output json lists them)",
                file=out,
            )
        verdict = "OK" if report.ok else f"CORRUPT ({len(report.errors)} errors)"
        print(
            f"{data_dir}: {report.partitions} partitions, {report.segments} segments, "
            f"{report.records} records, {report.bytes_checked} bytes: {verdict}",
            file=out,
        )
        if not report.ok:
            exit_code = 1
    return exit_code
