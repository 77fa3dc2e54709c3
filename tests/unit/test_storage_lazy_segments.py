"""Costs that grow with the work, not with the data (issue 27): a log opens only the
segments it uses, within the node's open-file budget, and a reopen recovers only what
follows the recovery point (nothing after a clean stop)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from replog import frames
from replog.storage import PartitionLog
from replog.storage.integrity import TORN_TAIL
from replog.storage.open_files import FILES_MAX_MIN, FILES_PER_SEGMENT, OpenFiles
from replog.storage.partition_log import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE
from replog.storage.segment_log import RECOVERIES
from tests.storage_helpers import TINY, read_all, segment_files

VALUES = [b"record-%04d" % i for i in range(600)]  # about 30 segments of TINY's 256 bytes


def filled(directory: Path, files: OpenFiles | None = None) -> PartitionLog:
    log = PartitionLog(directory, "t", 0, TINY, files)
    for i in range(0, len(VALUES), 10):
        log.append(VALUES[i : i + 10])
    log.set_high_watermark(log.log_end_offset)
    return log


def test_a_reopen_after_a_clean_close_recovers_no_segment_and_opens_only_the_active_one(
    tmp_path: Path,
) -> None:
    filled(tmp_path).close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_text() == f"{len(VALUES)}\n"
    before = RECOVERIES["segments"]
    log = PartitionLog(tmp_path, "t", 0, TINY)
    assert log.segments_recovered == 0 and RECOVERIES["segments"] == before
    assert log.segment_count > 20 and log._log.open_segments == 1
    assert read_all(log) == VALUES  # old segments open on demand
    log.append([b"after"])  # the first change takes the marker away, durably
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    log.close()


def test_after_a_crash_only_the_segments_past_the_recovery_point_are_recovered(
    tmp_path: Path,
) -> None:
    log = filled(tmp_path)
    log.flush()
    log.checkpoint_high_watermark()  # as the flusher does: the recovery point moves to LEO
    assert int((tmp_path / RECOVERY_POINT_FILE).read_text()) == len(VALUES)
    segments_before = log.segment_count
    more = [b"late-%03d" % i for i in range(60)]  # a few segments past the recovery point
    log.append(more)
    past = log.segment_count - segments_before + 1  # and the one that was active
    log.crash()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    again = PartitionLog(tmp_path, "t", 0, TINY)
    assert again.segments_recovered == past < again.segment_count // 4
    assert read_all(again) == VALUES + more
    again.close()


def test_a_torn_tail_past_the_recovery_point_is_still_cut(tmp_path: Path) -> None:
    log = filled(tmp_path)
    log.flush()
    log.checkpoint_high_watermark()
    log.append([b"torn-away"])
    log.crash()
    last = segment_files(tmp_path)[-1]
    with last.open("r+b") as f:
        f.truncate(last.stat().st_size - 3)  # the last frame lost its tail in the crash
    again = PartitionLog(tmp_path, "t", 0, TINY)
    assert again.segments_recovered == 1
    assert again.log_end_offset == len(VALUES)
    assert TORN_TAIL in {issue.kind for issue in again.integrity_issues()}
    assert read_all(again) == VALUES
    again.close()


def test_a_truncation_below_the_recovery_point_lowers_it_before_anything_is_cut(
    tmp_path: Path,
) -> None:
    log = filled(tmp_path)
    log.flush()
    log.checkpoint_high_watermark()
    log.truncate_to(100)
    assert int((tmp_path / RECOVERY_POINT_FILE).read_text()) == 100
    log.append([b"new-%03d" % i for i in range(200)])  # unflushed, over the cut segments
    log.crash()
    again = PartitionLog(tmp_path, "t", 0, TINY)
    assert read_all(again) == VALUES[:100] + [b"new-%03d" % i for i in range(200)]
    assert again.segments_recovered > 1  # every segment past offset 100
    again.close()


def test_one_log_larger_than_the_budget_keeps_appending_and_reading_within_it(
    tmp_path: Path,
) -> None:
    files = OpenFiles(FILES_MAX_MIN)
    log = filled(tmp_path, files)
    assert log.segment_count * FILES_PER_SEGMENT > 3 * files.files_max
    assert files.total <= files.files_max
    for offset in (0, 250, 17, 599, 300):  # old segments, out of order
        assert frames.decode(log.read(offset, 1)).values == [VALUES[offset]]
        assert files.total <= files.files_max
    assert read_all(log) == VALUES and files.parked > log.segment_count
    log.apply_retention(now_ms=0)  # no limits: nothing deleted
    log.truncate_to(10)  # through closed segments
    assert read_all(log) == VALUES[:10] and files.total <= files.files_max
    log.close()
    assert files.total == 0 and len(files) == 0


_LOW_NOFILE = """
import json, resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_NOFILE, (_LIMIT_, _LIMIT_))
from replog import frames
from replog.storage import PartitionLog
from replog.storage.open_files import OpenFiles, files_max_for
from tests.storage_helpers import TINY, read_all

files = OpenFiles(files_max_for(_LIMIT_))
directory = Path(sys.argv[1])
values = [b"v%05d" % i for i in range(4000)]
log = PartitionLog(directory, "t", 0, TINY, files)
for i in range(0, len(values), 20):
    log.append(values[i : i + 20])
log.set_high_watermark(log.log_end_offset)
ok = read_all(log, uncommitted=False, chunk=2000) == values
ok = ok and frames.decode(log.read(7, 1)).values == [values[7]]
segments = log.segment_count
log.close()
again = PartitionLog(directory, "t", 0, TINY, files)
again.append([b"after"])
ok = ok and read_all(again, chunk=2000) == values + [b"after"]
print(json.dumps({"ok": ok, "segments": segments, "files_max": files.files_max}))
again.close()
"""


def test_a_partition_of_many_segments_works_under_a_tiny_descriptor_limit(
    tmp_path: Path,
) -> None:
    limit = 64  # 16 segments' worth of descriptors; the log has hundreds of segments
    script = textwrap.dedent(_LOW_NOFILE).replace("_LIMIT_", str(limit))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["ok"] and result["segments"] * FILES_PER_SEGMENT > 4 * limit, result


def test_a_torn_clean_shutdown_marker_is_not_trusted(tmp_path: Path) -> None:
    filled(tmp_path).close()
    marker = tmp_path / CLEAN_SHUTDOWN_FILE
    marker.write_text(marker.read_text()[:2])  # "60" of "600\n": a torn write, no newline
    log = PartitionLog(tmp_path, "t", 0, TINY)
    assert log.segments_recovered >= 1 and log.log_end_offset == len(VALUES)
    assert read_all(log) == VALUES
    log.close()


def test_readers_in_other_threads_never_lose_a_segment_under_them(tmp_path: Path) -> None:
    files = OpenFiles(FILES_MAX_MIN)  # three segments for four logs of ~30 segments each
    logs = [filled(tmp_path / f"p{i}", files) for i in range(4)]
    errors: list[BaseException] = []

    def reader(log: PartitionLog) -> None:
        try:
            for _ in range(3):
                assert read_all(log, uncommitted=False, chunk=40) == VALUES
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(log,)) for log in logs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads) and errors == []
    assert files.total <= files.files_max + FILES_PER_SEGMENT * len(logs)
    for log in logs:
        log.close()
    assert files.total == 0
