"""A log being reset (a replica refetching a corrupt log) still answers lock-free readers."""

from __future__ import annotations

from pathlib import Path

import pytest

from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.storage.segment import Segment

CONFIG = StorageConfig(segment_bytes_max=256, index_interval_bytes=64, flush=FlushPolicy.NEVER)


def test_log_start_offset_is_readable_at_every_step_of_a_reset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog(tmp_path, "t", 0, CONFIG)
    for i in range(20):
        log.append([b"value-%03d" % i] * 5)
    assert log.segment_count > 2
    seen: list[int] = []
    delete = Segment.delete

    def delete_and_read(self: Segment) -> None:
        delete(self)
        seen.append(log.log_start_offset)  # what metrics read from another thread

    monkeypatch.setattr(Segment, "delete", delete_and_read)
    log.reset_to(0)
    assert seen and log.log_start_offset == 0 and log.log_end_offset == 0
    assert log.segment_count == 1
    log.close()
