"""`make run` (storage stage): append, crash, recover and read back, printing what happens."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from replog import frames
from replog.storage import FlushPolicy, PartitionRegistry, StorageConfig


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="replog-demo-") as tmp:
        data_dir = Path(tmp)
        config = StorageConfig(flush=FlushPolicy.ALWAYS, segment_bytes_max=64 * 1024)
        registry = PartitionRegistry(data_dir, config)
        registry.create_topic("demo", 1)
        log = registry.get("demo", 0)
        values = [f"record {i:06d} ".encode() * 4 for i in range(20_000)]
        started = time.perf_counter()
        for i in range(0, len(values), 1000):
            log.append(values[i : i + 1000])
        elapsed = time.perf_counter() - started
        log.set_high_watermark(log.log_end_offset)
        log.checkpoint_high_watermark()
        print(
            f"appended {len(values)} records in batches of 1000 (flush=always): "
            f"{len(values) / elapsed:,.0f} records/s, LEO={log.log_end_offset}, "
            f"{log.segment_count} segments"
        )
        segment = sorted(log.directory.glob("*.log"))[-1]
        log.crash()
        with segment.open("r+b") as f:  # a torn write: half a frame at the tail
            f.seek(0, 2)
            f.write(b"\x00\x00\x00\x00\x00\x00\x4e\x20\x00\x00\x00\x40half")
        print(f"crashed without flushing the index; tore the tail of {segment.name}")
        registry = PartitionRegistry(data_dir, config)
        log = registry.get("demo", 0)
        print(
            f"recovered: LEO={log.log_end_offset} HW={log.high_watermark} "
            f"(the torn frame was cut off)"
        )
        read, offset, started = 0, 0, time.perf_counter()
        while offset < log.high_watermark:
            batch = frames.decode(log.read(offset, 1 << 20))
            assert batch.values == values[offset : offset + len(batch)]
            read += len(batch)
            offset = batch.offsets[-1] + 1
        elapsed = time.perf_counter() - started
        print(
            f"read back {read} records, all equal to what was written: "
            f"{read / elapsed:,.0f} records/s"
        )
        registry.close_all()


if __name__ == "__main__":
    main()
