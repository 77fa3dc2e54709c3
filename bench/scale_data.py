"""Scale with the data: one large partition on one node (issue 27, storage side).

    python -m bench.scale_data --gib 2 --storage-only-gib 20 --runs 3

What it does (bounded in time and disk; the data is deleted at the end):

1. Starts a node (`replog serve`, soft RLIMIT_NOFILE 1,024, flush=interval), creates topic
   `big` (1 partition), appends one record, stops it cleanly (SIGTERM).
2. Fills that partition offline to `--gib` GiB with the storage API (1 KiB records, the
   node's segment size of 1 MiB: ~2,000 segments per 2 GiB), HW at the end, closed cleanly.
3. `--runs` times: start -> ready after a clean stop; reads of 20 offsets spread over the log
   (old segments open on demand) and 200 appends of 100 records under the 1,024 soft limit;
   open descriptors of the server; SIGKILL; start -> ready after the crash; SIGTERM ->
   exited (clean-stop time).

"Ready" is the first acknowledged acks=all append to the partition, timed from the spawn of
the server process. Anchor (same run): start -> ready of a node whose partition is empty.
Targets (issue 27, for 20 GB): ready <= 2 s after a clean stop, <= 5 s after SIGKILL, clean
stop <= 1 s, open descriptors within the budget (half the soft limit: 512 storage files).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import grpc

from bench._common import Result, bench_tmpdir, emit, log, machine_info, write_section
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.storage.open_files import OpenFiles, files_max_for
from replog.v1 import admin_pb2, admin_pb2_grpc, log_pb2, log_pb2_grpc

GIB = 1 << 30
NOFILE_SOFT = 1024
TOPIC = "big"
RECORD = 1024
DEADLINE_S = 120.0
READY_TIMEOUT_S = 300.0


def _soft_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE_SOFT, hard))


class Node:
    """One `replog serve` process on 127.0.0.1 with port 0."""

    def __init__(self, tmp: Path) -> None:
        self.ready = tmp / "ready"
        self.ready.unlink(missing_ok=True)
        cmd = [
            sys.executable, "-m", "replog", "serve", "--data-dir", str(tmp / "data"),
            "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
            "--ready-file", str(self.ready), "--log-level", "WARNING", "--flush", "interval",
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("REPLOG_")}
        self.log = (tmp / "server.log").open("ab")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=self.log, env=env, preexec_fn=_soft_limit
        )
        self.tmp = tmp

    def address(self) -> str:
        end = time.monotonic() + READY_TIMEOUT_S
        while not self.ready.exists() or not self.ready.read_text().strip():
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError((self.tmp / "server.log").read_text()[-4000:])
            time.sleep(0.01)
        return self.ready.read_text().splitlines()[0]

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def stop(self, sig: int) -> float:
        """Send `sig`; seconds until the process exited."""
        start = time.monotonic()
        self.proc.send_signal(sig)
        self.proc.wait(DEADLINE_S)
        self.log.close()
        return time.monotonic() - start


async def _append_until_ok(address: str, values: list[bytes]) -> None:
    async with grpc.aio.insecure_channel(address) as chan:
        stub = log_pb2_grpc.LogStub(chan)
        req = log_pb2.AppendRequest(topic=TOPIC, partition=0, values=values, acks=log_pb2.ACKS_ALL)
        end = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                await stub.Append(req, timeout=10)
                return
            except grpc.aio.AioRpcError as exc:
                retry = exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND)
                if not retry and exc.code() is not grpc.StatusCode.FAILED_PRECONDITION:
                    raise
                if time.monotonic() > end:
                    raise
                await asyncio.sleep(0.01)


def ready_s(node: Node) -> float:
    """Spawn -> first acknowledged append."""
    asyncio.run(_append_until_ok(node.address(), [b"ready"]))
    return time.monotonic() - node.started


async def _work(address: str, end_offset: int) -> tuple[float, int]:
    """Reads of 20 offsets over the whole log, then 200 appends of 100 records: returns
    (appends' records/s, records read)."""
    async with grpc.aio.insecure_channel(address) as chan:
        stub = log_pb2_grpc.LogStub(chan)
        read = 0
        for k in range(20):
            offset = end_offset * k // 20
            req = log_pb2.FetchRequest(topic=TOPIC, partition=0, offset=offset, max_bytes=4096)
            resp = await stub.Fetch(req, timeout=DEADLINE_S)
            assert resp.frames, f"no record at offset {offset}"
            read += 1
        values = [bytes(RECORD)] * 100
        start = time.monotonic()
        for _ in range(200):
            req = log_pb2.AppendRequest(
                topic=TOPIC, partition=0, values=values, acks=log_pb2.ACKS_ALL
            )
            await stub.Append(req, timeout=DEADLINE_S)
        return 200 * 100 / (time.monotonic() - start), read


async def _create(address: str) -> None:
    async with grpc.aio.insecure_channel(address) as chan:
        admin = admin_pb2_grpc.AdminStub(chan)
        req = admin_pb2.CreateTopicRequest(
            name=TOPIC, partitions=1, format=admin_pb2.TOPIC_FORMAT_RAW
        )
        await admin.CreateTopic(req, timeout=DEADLINE_S)


def fill(partition_dir: Path, size_bytes: int) -> int:
    """Append 1 KiB records offline until the partition holds `size_bytes`; returns LEO."""
    config = StorageConfig(flush=FlushPolicy.NEVER)
    files = OpenFiles(files_max_for(NOFILE_SOFT))  # without a budget every segment stays open
    plog = PartitionLog(partition_dir, TOPIC, 0, config, files)
    batch = [os.urandom(RECORD)] * 1024
    while plog.size_bytes < size_bytes:
        plog.append(batch)
        if plog.segment_count % 500 == 0:
            plog.flush()  # keep the page cache's dirty bytes bounded
    plog.set_high_watermark(plog.log_end_offset)
    leo = plog.log_end_offset
    plog.close()
    return leo


def storage_only(partition_dir: Path, runs: int) -> dict[str, list[float]]:
    """The storage layer alone, in this process (no server): open after a clean close,
    open after a crash past the recovery point, close; segments recovered; files open."""
    out: dict[str, list[float]] = {k: [] for k in ("open_clean", "open_crash", "close")}
    out.update({"recovered_clean": [], "recovered_crash": [], "files": []})
    files = OpenFiles(files_max_for(NOFILE_SOFT))
    config = StorageConfig()
    for _ in range(runs):
        start = time.monotonic()
        plog = PartitionLog(partition_dir, TOPIC, 0, config, files)
        out["open_clean"].append(time.monotonic() - start)
        out["recovered_clean"].append(plog.segments_recovered)
        plog.append([bytes(RECORD)] * 10)
        plog.flush()
        plog.checkpoint_high_watermark()  # as the flusher does every second
        plog.append([bytes(RECORD)] * 10)
        plog.crash()
        start = time.monotonic()
        plog = PartitionLog(partition_dir, TOPIC, 0, config, files)
        out["open_crash"].append(time.monotonic() - start)
        out["recovered_crash"].append(plog.segments_recovered)
        for k in range(20):  # reads spread over the whole log: old segments open on demand
            offset = plog.log_start_offset + plog.high_watermark * k // 20
            assert plog.read(offset, 4096)
        out["files"].append(files.total)
        start = time.monotonic()
        plog.close()
        out["close"].append(time.monotonic() - start)
    return out


def one_size(tmp: Path, gib: float, runs: int) -> dict[str, list[float]]:
    node = Node(tmp)
    asyncio.run(_create(node.address()))
    asyncio.run(_append_until_ok(node.address(), [b"first"]))
    node.stop(signal.SIGTERM)
    anchor = Node(tmp)
    empty_ready = ready_s(anchor)
    empty_fds = anchor.fds()
    empty_stop = anchor.stop(signal.SIGTERM)
    partition_dir = tmp / "data" / TOPIC / "partition_0"
    started = time.monotonic()
    leo = fill(partition_dir, int(gib * GIB))
    segments = len(list(partition_dir.glob("*.log")))
    log(f"filled {gib} GiB ({segments} segments, {leo} records) in "
        f"{time.monotonic() - started:.0f} s")  # fmt: skip
    out: dict[str, list[float]] = {
        k: [] for k in ("clean", "kill", "stop", "fds", "fds_after", "append", "empty")
    }
    out["empty"].append(empty_ready)
    out["empty_fds"] = [float(empty_fds)]
    out["empty_stop"] = [empty_stop]
    out["segments"] = [float(segments)]
    out.update(storage_only(partition_dir, runs))
    # The offline fill wrote no producer-state snapshot (a node writes one at each segment
    # roll): the first start scans the whole log once and its clean stop writes one, the
    # state of every partition a node wrote itself. Reported apart, not in the medians.
    node = Node(tmp)
    out["first"] = [ready_s(node)]
    node.stop(signal.SIGTERM)
    for run in range(runs):
        node = Node(tmp)
        out["clean"].append(ready_s(node))
        out["fds"].append(node.fds())
        rate, _read = asyncio.run(_work(node.address(), leo))
        out["append"].append(rate)
        out["fds_after"].append(node.fds())
        node.stop(signal.SIGKILL)
        node = Node(tmp)
        out["kill"].append(ready_s(node))
        out["stop"].append(node.stop(signal.SIGTERM))
        log(f"run {run + 1}: " + ", ".join(f"{k}={v[-1]:.2f}" for k, v in out.items()))
    return out


def storage_row(name: str, out: dict[str, list[float]]) -> str:
    def med(key: str) -> float:
        return statistics.median(out[key])

    return (
        f"| {name} | {med('open_clean') * 1000:.0f} ms ({med('recovered_clean'):.0f} "
        f"segments scanned) | {med('open_crash') * 1000:.0f} ms "
        f"({med('recovered_crash'):.0f} scanned) | {med('close') * 1000:.0f} ms "
        f"| {med('files'):.0f} of {files_max_for(NOFILE_SOFT)} |"
    )


# length: the run in the order it happens (start, cases, write-up); a bench script, not served code
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gib", type=float, nargs="*", default=[2.0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--storage-only-gib", type=float, nargs="*", default=[],
        help="sizes measured on the storage layer alone (no server: its start scans the log)",
    )  # fmt: skip
    args = parser.parse_args()
    rows: list[str] = []
    storage_rows: list[str] = []
    info = machine_info(Path(__file__).resolve().parent.parent)
    for gib in args.gib:
        free = shutil.disk_usage(Path(__file__).resolve().parent.parent).free
        if free < gib * GIB * 1.5 + 5 * GIB:
            log(f"skipping {gib} GiB: {free / GIB:.0f} GiB free")
            rows.append(f"| {gib:g} GiB | skipped: {free / GIB:.0f} GiB free | | | | | | |")
            continue
        with bench_tmpdir(prefix="scale-data-") as tmp:
            info = machine_info(tmp)
            info["data size"] = f"{gib:g} GiB"
            out = one_size(tmp, gib, args.runs)

        def med(key: str, out: dict[str, list[float]] = out) -> float:
            return statistics.median(out[key])

        for key, unit in (("clean", "s"), ("kill", "s"), ("stop", "s"), ("fds_after", "fds")):
            emit(Result(f"scale_data_{gib:g}gib_{key}", round(med(key), 3), unit))
        rows.append(
            f"| {gib:g} GiB ({med('segments'):.0f} segments) | {med('clean'):.2f} s "
            f"(anchor, empty: {med('empty'):.2f} s) | {med('kill'):.2f} s | {med('stop'):.2f} s "
            f"(empty: {med('empty_stop'):.2f} s) "
            f"| {med('fds'):.0f} / {med('fds_after'):.0f} (empty: {med('empty_fds'):.0f}) "
            f"| {med('append'):,.0f} records/s |"
            f" {min(out['clean']):.2f}-{max(out['clean']):.2f} / "
            f"{min(out['kill']):.2f}-{max(out['kill']):.2f} / "
            f"{min(out['stop']):.2f}-{max(out['stop']):.2f} s | {med('first'):.2f} s |"
        )
        storage_rows.append(storage_row(f"{gib:g} GiB", out))
    for gib in args.storage_only_gib:
        free = shutil.disk_usage(Path(__file__).resolve().parent.parent).free
        if free < gib * GIB * 1.5 + 5 * GIB:
            log(f"skipping {gib} GiB: {free / GIB:.0f} GiB free")
            storage_rows.append(f"| {gib:g} GiB | skipped: {free / GIB:.0f} GiB free | | | |")
            continue
        with bench_tmpdir(prefix="scale-data-") as tmp:
            started = time.monotonic()
            fill(tmp / "p", int(gib * GIB))
            log(f"filled {gib} GiB in {time.monotonic() - started:.0f} s")
            out = storage_only(tmp / "p", args.runs)
        storage_rows.append(storage_row(f"{gib:g} GiB (storage only)", out))
    machine = "\n".join(f"- {k}: {v}" for k, v in info.items())
    sizes = " ".join(f"{g:g}" for g in args.storage_only_gib)
    storage_only_flag = f"--storage-only-gib {sizes} " if sizes else ""
    body = f"""One partition on one node (`replog serve`, flush=interval, soft RLIMIT_NOFILE
{NOFILE_SOFT}, so a budget of 512 storage files), filled offline to the size with 1 KiB
records in 1 MiB segments. Medians of {args.runs} runs. "Ready" = spawn of the server to the
first acknowledged acks=all append (the anchor: the same for an empty partition, same run);
fds = the server's open descriptors when ready / after 20 reads spread over the whole log
and 200 appends of 100 x 1 KiB; stop = SIGTERM to exit.

Targets (issue 27, for 20 GB): ready <= 2 s after a clean stop, <= 5 s after SIGKILL, clean
stop <= 1 s, open descriptors within the budget.

Command: `python -m bench.scale_data --gib {" ".join(f"{g:g}" for g in args.gib)}
{storage_only_flag}--runs {args.runs}`

{machine}

| partition | ready after clean stop | ready after SIGKILL | clean stop | fds ready / after work | appends (fds soft limit 1,024) | range clean / kill / stop | first start after the offline fill |
|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

The storage layer alone (`PartitionLog` in the bench process, same data, the node's default
storage config, a budget of 512 files; medians of {args.runs}): open after a clean close,
open after a crash with 10 records past the recovery point, close after 20 reads spread over
the log, and the storage files open then.

| partition | open after clean close | open after crash | close | storage files open |
|---|---|---|---|---|
{chr(10).join(storage_rows)}

Each run: start after a clean stop (ready, fds), the reads and appends (20 MiB: about 20
segment rolls, each writing a producer-state snapshot), SIGKILL, start again (ready after
SIGKILL), SIGTERM (clean stop). A replica starts from its newest producer-state snapshot at
or below the recovery point and scans only the records after it; the last column is the one
start that had no snapshot (the offline fill writes none), which scans the whole log. Storage
keeps the newest snapshot at or below the checkpointed recovery point besides the three
newest: before it did, the 20 rolls of a run left no snapshot a start after a crash could
use, and "ready after SIGKILL" scanned the whole log (16.5-20.0 s at 20 GiB, 2026-12-07).
"""  # noqa: E501
    write_section("## Scale: one large partition", body)


if __name__ == "__main__":
    main()
