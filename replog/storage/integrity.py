"""What storage found wrong with its files: one record per finding, for metrics and describe.

Kinds (stable strings):

* `corrupt`: bytes that fail their CRC32C (or whose checksum is lost) in data that was
  flushed, or found by a read or the scrubber. The range is never served: reads that touch
  it raise `CorruptDataError` (DATA_LOSS, reason `CORRUPT_DATA`). Repair (truncate and
  re-fetch from a healthy replica) is replication's job.
* `torn-tail`: recovery cut an unflushed tail that failed its checksum or was cut short
  (what a crash or power loss leaves; not corruption).
* `index-rebuilt`: the sparse index disagreed with the log and was rebuilt from it.
* `sidecar-damaged`: entries of the `.crc` file were invalid (a damaged torn-tail entry is
  dropped; others make the blocks they covered `corrupt` if their checksum is lost).
* `unverified`: a segment written before checksums existed (no `.crc`): read unverified.
"""

from __future__ import annotations

from dataclasses import dataclass

CORRUPT = "corrupt"
TORN_TAIL = "torn-tail"
INDEX_REBUILT = "index-rebuilt"
SIDECAR_DAMAGED = "sidecar-damaged"
UNVERIFIED = "unverified"


@dataclass(frozen=True, slots=True)
class IntegrityIssue:
    """One finding in one segment. Positions are `.log` byte positions; offsets
    `[first_offset, end_offset)` are the records that may be affected."""

    kind: str
    segment: str  # the `.log` file name
    start_position: int
    end_position: int
    first_offset: int
    end_offset: int
    detail: str

    def __str__(self) -> str:
        return (
            f"{self.kind}: {self.segment} bytes [{self.start_position}, {self.end_position}) "
            f"offsets [{self.first_offset}, {self.end_offset}): {self.detail}"
        )
