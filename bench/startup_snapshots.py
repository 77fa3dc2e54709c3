"""Start time with producer-state snapshots (issue 27): one large partition on one node.

    python -m bench.startup_snapshots --gib 2 --runs 3

Reuses `bench.scale_data`'s node and readiness probe. What it does (bounded in time and
disk; the data is deleted at the end):

1. Starts a node (`replog serve`, flush=interval, soft RLIMIT_NOFILE 1,024), creates topic
   `big` (1 partition, raw), appends one record, stops it cleanly (SIGTERM); the same start
   of the empty partition is the anchor.
2. Fills that partition offline to `--gib` GiB with the storage API as a leader writes
   idempotent batches: 1 KiB records in batches of 128, each after its producer batch
   header (100 producers in turn), 1 MiB segments; closed cleanly.
3. `--runs` times, before: every `*.snapshot` file deleted, start -> ready (the replica scans
   the whole log for batch headers, as every start did before snapshots), SIGTERM.
   Then `--runs` times, after: start -> ready after a clean stop (the snapshot the previous
   run left), SIGKILL, start -> ready after the crash, SIGTERM.

"Ready" = spawn of the server to the first acknowledged acks=all append (bench.scale_data).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import time
from pathlib import Path

import grpc

from bench._common import Result, bench_tmpdir, emit, log, machine_info, write_section
from bench.scale_data import GIB, NOFILE_SOFT, RECORD, TOPIC, Node, ready_s
from replog.replication.producers import BatchHeader
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.storage.open_files import OpenFiles, files_max_for
from replog.v1 import admin_pb2, admin_pb2_grpc

BATCH = 128
PRODUCERS = 100


async def _create(address: str) -> None:
    async with grpc.aio.insecure_channel(address) as chan:
        admin = admin_pb2_grpc.AdminStub(chan)
        req = admin_pb2.CreateTopicRequest(
            name=TOPIC, partitions=1, format=admin_pb2.TOPIC_FORMAT_RAW
        )
        await admin.CreateTopic(req, timeout=120)


def fill(partition_dir: Path, size_bytes: int) -> tuple[int, int]:
    """Idempotent batches until the partition holds `size_bytes`; returns (LEO, batches)."""
    config = StorageConfig(flush=FlushPolicy.NEVER)
    files = OpenFiles(files_max_for(NOFILE_SOFT))
    plog = PartitionLog(partition_dir, TOPIC, 0, config, files)
    values = [os.urandom(RECORD)] * BATCH
    sequences = [0] * PRODUCERS
    batches = 0
    while plog.size_bytes < size_bytes:
        pieces = []
        for _ in range(8):
            pid = batches % PRODUCERS
            header = BatchHeader(pid + 1, 0, sequences[pid], BATCH, int(time.time() * 1000))
            sequences[pid] += BATCH
            pieces.append((header.encode(), values))
            batches += 1
        plog.append_pieces(pieces)
        if plog.segment_count % 500 == 0:
            plog.flush()
    plog.set_high_watermark(plog.log_end_offset)
    leo = plog.log_end_offset
    plog.close()
    return leo, batches


def one_size(tmp: Path, gib: float, runs: int) -> dict[str, list[float]]:
    node = Node(tmp)
    asyncio.run(_create(node.address()))
    ready_s(node)
    node.stop(signal.SIGTERM)
    out: dict[str, list[float]] = {k: [] for k in ("empty", "scan", "clean", "kill")}
    empty = tmp / "empty"  # the anchor: a node whose partition is empty, started each run
    empty.mkdir()
    anchor = Node(empty)
    asyncio.run(_create(anchor.address()))
    ready_s(anchor)
    anchor.stop(signal.SIGTERM)
    partition_dir = tmp / "data" / TOPIC / "partition_0"
    started = time.monotonic()
    leo, batches = fill(partition_dir, int(gib * GIB))
    out["segments"] = [float(len(list(partition_dir.glob("*.log"))))]
    log(f"filled {gib} GiB ({leo} offsets, {batches} batches) in "
        f"{time.monotonic() - started:.0f} s")  # fmt: skip
    for run in range(runs):
        for snap in partition_dir.glob("*.snapshot"):
            snap.unlink()
        node = Node(tmp)
        out["scan"].append(ready_s(node))
        node.stop(signal.SIGTERM)
        log(f"before, run {run + 1}: ready {out['scan'][-1]:.2f} s")
    for run in range(runs):
        anchor = Node(empty)
        out["empty"].append(ready_s(anchor))
        anchor.stop(signal.SIGTERM)
        node = Node(tmp)
        out["clean"].append(ready_s(node))
        node.stop(signal.SIGKILL)
        node = Node(tmp)
        out["kill"].append(ready_s(node))
        node.stop(signal.SIGTERM)
        log(f"after, run {run + 1}: clean {out['clean'][-1]:.2f} s, kill {out['kill'][-1]:.2f} s")
    out["snapshots"] = [float(len(list(partition_dir.glob("*.snapshot"))))]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gib", type=float, nargs="*", default=[2.0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows: list[str] = []
    info = machine_info(Path(__file__).resolve().parent.parent)
    for gib in args.gib:
        free = shutil.disk_usage(Path(__file__).resolve().parent.parent).free
        if free < gib * GIB * 1.5 + 5 * GIB:
            log(f"skipping {gib} GiB: {free / GIB:.0f} GiB free")
            rows.append(f"| {gib:g} GiB | skipped: {free / GIB:.0f} GiB free | | | |")
            continue
        with bench_tmpdir(prefix="startup-snap-") as tmp:
            info = machine_info(tmp)
            out = one_size(tmp, gib, args.runs)

        def med(key: str, out: dict[str, list[float]] = out) -> float:
            return statistics.median(out[key])

        for key in ("scan", "clean", "kill"):
            emit(Result(f"startup_snapshots_{gib:g}gib_{key}", round(med(key), 3), "s"))
        rows.append(
            f"| {gib:g} GiB ({med('segments'):.0f} segments) | {med('scan'):.2f} s "
            f"({min(out['scan']):.2f}-{max(out['scan']):.2f}) | {med('clean'):.2f} s "
            f"({min(out['clean']):.2f}-{max(out['clean']):.2f}) | {med('kill'):.2f} s "
            f"({min(out['kill']):.2f}-{max(out['kill']):.2f}) | {med('empty'):.2f} s "
            f"({min(out['empty']):.2f}-{max(out['empty']):.2f}) |"
        )
    machine = "\n".join(f"- {k}: {v}" for k, v in info.items())
    body = f"""One partition on one node (`replog serve`, flush=interval, soft RLIMIT_NOFILE
{NOFILE_SOFT}), filled offline to the size as a leader writes idempotent batches (1 KiB
records, {BATCH} per batch, each after its producer batch header, {PRODUCERS} producers in
turn; 1 MiB segments). "Ready" = spawn of the server to the first acknowledged acks=all
append (`bench.scale_data.ready_s`). Medians of {args.runs} runs (range in brackets).

- before: every `*.snapshot` file deleted first, so the replica scans its whole log for
  batch headers, as every start did before producer-state snapshots (and as a start does
  when its snapshots are missing or corrupt);
- after a clean stop: the replica loads the newest snapshot (written at the last segment
  roll or at the clean stop) and scans only the records after it;
- after SIGKILL: the newest snapshot at or below the recovery point, plus the tail;
- anchor: a node whose partition is empty, started (after a clean stop) before each
  "after" run: the cost of starting the process at all on this machine at that moment.

Command: `python -m bench.startup_snapshots --gib {" ".join(f"{g:g}" for g in args.gib)}
--runs {args.runs}`

{machine}

| partition | ready, before (whole-log scan) | ready after clean stop | ready after SIGKILL | anchor: empty partition |
|---|---|---|---|---|
{chr(10).join(rows)}

Before, the start reads the whole log once for batch headers, so "ready" grows with the
data; after, it reads one snapshot and at most about one segment of records past it (plus
storage's open: a `stat` per segment), so "ready" stays near the empty-partition anchor of
the same runs whatever the size. Compare columns within a row: on a shared, loaded machine
(load average above) the process start alone varies by seconds.
"""  # noqa: E501
    write_section("## Start time with producer-state snapshots (bench/startup_snapshots.py)", body)


if __name__ == "__main__":
    main()
