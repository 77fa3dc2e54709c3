"""Memory under floods: a node's peak RSS while clients flood it with large appends.

    .venv/bin/python bench/memory_flood.py [--calls 150] [--call-mib 3] [--runs 3] [--write]
        [-- extra `replog serve` flags]

Starts one `replog serve` (127.0.0.1, port 0, flush interval, defaults otherwise), creates a
raw topic, warms the append path up with one unreported acks=leader flood of the same shape
(thread arenas, grpc's and Python's free lists), lets RSS settle, resets the kernel's
peak-RSS mark (`/proc/PID/clear_refs` 5: VmHWM := VmRSS), then sends `--calls` concurrent
appends of `--call-mib` MiB each (records of 1 MiB, record_bytes_max) over `--connections`
connections (grpc.aio raw stubs), once with acks=none and once with acks=leader. Each flood
is bounded: every call has a 60 s deadline. Reported per flood: calls OK /
RESOURCE_EXHAUSTED / other, the node's RSS before, its peak (VmHWM) during the flood, its RSS
once settled afterwards. The median of `--runs` runs (a fresh node each) goes to the
"Memory under floods" section of docs/benchmarks.md with `--write`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import bench_tmpdir, machine_info, write_section
from replog.v1 import admin_pb2, admin_pb2_grpc, log_pb2, log_pb2_grpc

MIB = 1024 * 1024
DEADLINE_S = 60.0
HEADING = "## Memory under floods"


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(key)


def settled_rss_mib(pid: int, deadline_s: float = 20.0) -> float:
    last = status_kib(pid, "VmRSS")
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        time.sleep(0.5)
        now = status_kib(pid, "VmRSS")
        if abs(now - last) < 1024:
            return now / 1024
        last = now
    return last / 1024


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


class Node:
    def __init__(self, tmp: Path, args: list[str]) -> None:
        ready = tmp / "ready"
        cmd = [
            sys.executable, "-m", "replog", "serve", "--data-dir", str(tmp / "data"),
            "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
            "--ready-file", str(ready), "--log-level", "WARNING", "--flush", "interval", *args,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("REPLOG_")}
        self.log = (tmp / "server.log").open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, env=env)
        end = time.monotonic() + 30
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError((tmp / "server.log").read_text())
            time.sleep(0.05)
        self.address = ready.read_text().splitlines()[0]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(30)
        self.log.close()


async def flood(
    address: str, calls: int, connections: int, record: bytes, records: int, acks: int
) -> Any:
    chans = [
        grpc.aio.insecure_channel(
            address,
            options=[
                ("grpc.use_local_subchannel_pool", 1),
                ("grpc.max_send_message_length", 64 * MIB),
            ],
        )
        for _ in range(connections)
    ]
    values = [record] * records
    request = log_pb2.AppendRequest(topic="flood", partition=0, values=values, acks=acks)
    counts = {"ok": 0, "exhausted": 0, "other": 0}

    async def one(i: int) -> None:
        stub = log_pb2_grpc.LogStub(chans[i % connections])
        try:
            await stub.Append(request, timeout=DEADLINE_S)
            counts["ok"] += 1
        except grpc.aio.AioRpcError as exc:
            key = "exhausted" if exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED else "other"
            counts[key] += 1
            if key == "other" and counts["other"] <= 3:
                print(f"  other error: {exc.code()} {exc.details()}", file=sys.stderr)

    try:
        await asyncio.gather(*(one(i) for i in range(calls)))
    finally:
        for chan in chans:
            await chan.close()
    return counts


async def setup(address: str) -> None:
    async with grpc.aio.insecure_channel(address) as chan:
        admin = admin_pb2_grpc.AdminStub(chan)
        await admin.CreateTopic(
            admin_pb2.CreateTopicRequest(
                name="flood", partitions=1, format=admin_pb2.TOPIC_FORMAT_RAW
            ),
            timeout=30,
        )
        log = log_pb2_grpc.LogStub(chan)
        for _ in range(20):  # warm the append path up
            req = log_pb2.AppendRequest(topic="flood", partition=0, values=[bytes(64 * 1024)])
            while True:
                try:
                    await log.Append(req, timeout=30)
                    break
                except grpc.aio.AioRpcError as exc:
                    if exc.code() is not grpc.StatusCode.UNAVAILABLE:
                        raise
                    await asyncio.sleep(0.1)


def one_run(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    record = bytes(MIB)  # record_bytes_max: 1 MiB
    records = round(args.call_mib)
    out: dict[str, dict[str, float]] = {}
    with bench_tmpdir(prefix="bench-memflood-") as tmp:
        node = Node(tmp, args.server_args)
        try:
            asyncio.run(setup(node.address))
            # One flood first, not reported: thread arenas, grpc's and Python's free lists.
            asyncio.run(
                flood(
                    node.address, args.calls, args.connections, record, records, log_pb2.ACKS_LEADER
                )
            )
            for name, acks in (
                ("acks=none", log_pb2.ACKS_NONE),
                ("acks=leader", log_pb2.ACKS_LEADER),
            ):
                before = settled_rss_mib(node.proc.pid)
                reset_peak(node.proc.pid)
                began = time.monotonic()
                counts = asyncio.run(
                    flood(node.address, args.calls, args.connections, record, records, acks)
                )
                took = time.monotonic() - began
                peak = status_kib(node.proc.pid, "VmHWM") / 1024
                after = settled_rss_mib(node.proc.pid)
                out[name] = {
                    "before": before, "peak": peak, "after": after, "growth": peak - before,
                    "ok": counts["ok"], "exhausted": counts["exhausted"],
                    "other": counts["other"], "seconds": took,
                }  # fmt: skip
                print(f"{name}: {out[name]}", flush=True)
        finally:
            node.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=150)
    parser.add_argument("--call-mib", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks.md")
    parser.add_argument("server_args", nargs="*", help="extra `replog serve` flags (after --)")
    args = parser.parse_args()
    runs = [one_run(args) for _ in range(args.runs)]
    lines = []
    for name in runs[0]:
        med = {k: statistics.median(r[name][k] for r in runs) for k in runs[0][name]}
        lines.append(
            f"| {name} | {med['ok']:.0f} / {med['exhausted']:.0f} / {med['other']:.0f} | "
            f"{med['before']:.0f} | {med['peak']:.0f} | {med['growth']:.0f} | "
            f"{med['after']:.0f} | {med['seconds']:.1f} |"
        )
        print(f"median {name}: {med}")
    if args.write:
        info = machine_info(Path.cwd())
        body = "\n".join(
            [
                "Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()) + ".",
                "",
                f"Command: `.venv/bin/python bench/memory_flood.py --calls {args.calls} "
                f"--call-mib {args.call_mib:g} --connections {args.connections} "
                f"--runs {args.runs} --write`"
                + (f" -- {' '.join(args.server_args)}" if args.server_args else ""),
                "",
                f"{args.calls} concurrent appends of {args.call_mib:g} MiB each (1 MiB records) "
                f"over {args.connections} connections, node defaults otherwise "
                "(acks_none_bytes_max and request_bytes_pool_max 64 MiB, message_bytes_max "
                "4 MiB). RSS in MiB; "
                f"median of {args.runs} runs, a fresh node each.",
                "",
                "| flood | OK / RESOURCE_EXHAUSTED / other | RSS before | peak (VmHWM) | "
                "peak growth | RSS after | s |",
                "| --- | --- | --- | --- | --- | --- | --- |",
                *lines,
            ]
        )
        write_section(HEADING, body)


if __name__ == "__main__":
    main()
