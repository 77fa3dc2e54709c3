"""Compaction on a running node: the cleaner's throughput and its effect on produce latency.

One `replog serve` process (a cluster of one, flush=always, the default) per run:

1. topic `bulk` (cleanup.policy=delete, 1 MiB segments) is filled with `--mb` MB of keyed
   envelope records (`--keys` keys updated round robin, `--value-bytes` values) through the
   client; a plain client read of all of it is the throughput anchor (MB/s);
2. **without the cleaner**: `--appends` single-record appends (acks=all) to topic `hot`, one
   at a time, each timed (p50, p99);
3. `bulk` is altered to `cleanup.policy=compact` (min.cleanable.dirty.ratio 0.01): the
   node's cleaner starts its pass within `--cleaner-interval-ms`;
4. **with the cleaner running**: the same appends again, from the alter until the pass's
   `cleaner.cleaned` event is logged; those that started and ended inside the pass (its
   start and end from the event: `elapsed_ms` before its `ts`) are the ones counted;
5. the pass's throughput: MB of log it read per second (`bytes_read / elapsed_ms`: the dirty
   part twice, the offset map and the rewrite) and MB of log cleaned per second
   (`bytes_before / elapsed_ms`: the segments it rewrote).

Each cleaner throttle of `--throttle-mb` (MB/s of cleaner I/O, 0: unthrottled) gets `--runs`
runs on a fresh node; medians are reported. Prints JSON lines and, with `--write-docs`,
rewrites its own section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (
    Result,
    bench_tmpdir,
    emit,
    git_commit,
    load_average,
    log,
    machine_info,
    summarize,
    write_section,
)

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.records import Record

MIB = 1 << 20
_HEADER = (
    "| cleaner throttle (MB/s of cleaner I/O) | pass MB/s read (runs) | pass MB/s read "
    "| MB/s of log cleaned | plain read MB/s (anchor) | produce p50 / p99 ms, no cleaner "
    "| produce p50 / p99 ms, cleaner running (p99 runs) | size after / before "
    "| appends inside the pass (runs) |\n"
    "|---|---|---|---|---|---|---|---|---|"
)
_EVENT = re.compile(
    r"ts=(\S+) .*event=cleaner\.cleaned topic=bulk .*bytes_before=(\d+) .*bytes_read=(\d+) "
    r"elapsed_ms=(\d+)"
)


def _epoch_s(ts: str) -> float:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def timed_appends(
    client: Client, n: int, until: Callable[[], bool] = lambda: False
) -> list[tuple[float, float]]:
    """(wall-clock start, latency ms) of up to `n` appends, one at a time, until `until()`
    (asked every 20 appends)."""
    out = []
    for i in range(n):
        if i % 20 == 0 and until():
            break
        at, start = time.time(), time.perf_counter()
        client.append("hot", 0, [Record(b"v%06d" % i, key=b"hot")], acks="all")
        out.append((at, (time.perf_counter() - start) * 1000))
    return out


def pct(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


def one_run(work: Path, args: argparse.Namespace, throttle_mb: int, i: int) -> dict[str, float]:
    cluster = DevCluster(
        work / f"t{throttle_mb}-{i}",
        1,
        extra_args=[
            "--cleaner-interval-ms", str(args.cleaner_interval_ms),
            "--cleaner-bytes-per-s", str(throttle_mb * MIB),
        ],
    )  # fmt: skip
    cluster.start()
    try:
        with Client(cluster.bootstrap, retry=RetryPolicy(attempts_max=20)) as client:
            client.create_topic("bulk", 1, 1, configs={"segment.bytes": str(MIB)})
            client.create_topic("hot", 1, 1)
            value = b"v" * args.value_bytes
            batch = [Record(value, key=b"key-%08d" % k) for k in range(args.keys)]
            written = 0
            while written < args.mb * MIB:
                client.append("bulk", 0, batch, acks="all")
                written += len(batch) * (args.value_bytes + 12 + 20 + 12)
            (offsets,) = client.list_offsets("bulk")
            start = time.perf_counter()
            offset = 0
            while offset < offsets.latest:
                offset = client.fetch("bulk", 0, offset, max_bytes=MIB).next_offset
            read_s = time.perf_counter() - start
            (info,) = client.describe_topic("bulk")
            size_before = info.size_bytes
            timed_appends(client, 50)  # warm-up
            idle = [ms for _, ms in timed_appends(client, args.appends)]
            node = cluster.members[1]

            def pass_ended() -> bool:
                return bool(_EVENT.findall(node.log_tail(10**8)))

            client.alter_configs(
                "bulk",
                set={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"},
            )
            timed = timed_appends(client, 100 * args.appends, pass_ended)
            deadline = time.monotonic() + 300
            while not (found := _EVENT.findall(node.log_tail(10**8))):
                assert time.monotonic() < deadline, "no cleaning pass ended"
                time.sleep(0.2)
            ts, before, bytes_read, elapsed_ms = found[0]
            end_s = _epoch_s(ts)
            begin_s = end_s - int(elapsed_ms) / 1000
            busy = [ms for at, ms in timed if begin_s <= at and at + ms / 1000 <= end_s]
            assert len(busy) >= 2, f"only {len(busy)} appends inside the pass"
            (info,) = client.describe_topic("bulk")
        return {
            "read_mb_s": size_before / MIB / read_s,
            "idle_p50": pct(idle, 50),
            "idle_p99": pct(idle, 99),
            "busy_p50": pct(busy, 50),
            "busy_p99": pct(busy, 99),
            "pass_read_mb_s": int(bytes_read) / MIB / (int(elapsed_ms) / 1000),
            "pass_clean_mb_s": int(before) / MIB / (int(elapsed_ms) / 1000),
            "shrink": info.size_bytes / size_before,
            "covered": float(len(busy)),
        }
    finally:
        cluster.kill_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=48)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--throttle-mb", type=int, nargs="+", default=[16, 0])
    parser.add_argument("--cleaner-interval-ms", type=int, default=200)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    table: dict[int, list[dict[str, float]]] = {}
    with bench_tmpdir(prefix="bench-compaction-") as work:
        info = machine_info(work)
        for throttle in args.throttle_mb:
            rows = table[throttle] = []
            for i in range(args.runs):
                rows.append(one_run(work, args, throttle, i))
                log(f"throttle {throttle} MB/s run {i}: {rows[-1]}")
    lines = []
    for throttle, rows in table.items():
        med = {k: summarize([r[k] for r in rows]).median for k in rows[0]}
        name = f"{throttle}" if throttle else "unthrottled"
        emit(Result(f"compaction_pass_read_mb_s_{name}", med["pass_read_mb_s"], "MB/s",
                    med["read_mb_s"]))  # fmt: skip
        emit(Result(f"compaction_produce_p99_ms_{name}", med["busy_p99"], "ms", med["idle_p99"]))

        def runs(k: str, rows: list[dict[str, float]] = rows) -> str:
            return ", ".join(f"{r[k]:.1f}" for r in rows)

        covered = ", ".join(str(int(r["covered"])) for r in rows)
        lines.append(
            f"| {name} | {runs('pass_read_mb_s')} | **{med['pass_read_mb_s']:.1f}** "
            f"| **{med['pass_clean_mb_s']:.1f}** | **{med['read_mb_s']:.1f}** "
            f"| {med['idle_p50']:.1f} / **{med['idle_p99']:.1f}** "
            f"| {med['busy_p50']:.1f} / **{med['busy_p99']:.1f}** ({runs('busy_p99')}) "
            f"| {med['shrink']:.3f} | {covered} |"
        )
    if not args.write_docs:
        return
    body = f"""\
A cluster of one `replog serve` (flush=always, the default), a topic `bulk` of {args.mb} MB
of keyed envelope records ({args.keys} keys updated round robin, {args.value_bytes}-byte
values, 1 MiB segments) written through the client, then altered to
`cleanup.policy=compact`: the node's cleaner task compacts it while a client appends
single records (acks=all, one at a time, {args.appends} of them) to another topic. The same
appends just before the alter ({args.appends}) are the anchor (without the cleaner), and a
plain client read of `bulk` is the throughput anchor. A pass's figures come from its
`cleaner.cleaned` event (`bytes_read`, `bytes_before`, `elapsed_ms`); the appends timed
"cleaner running" are those that started and ended inside that pass (the client appends
from the alter on until the event is logged). Command: `python bench/compaction.py --write-docs`
({args.runs} runs per throttle, a fresh node each, medians); commit {git_commit()},
{info["cores"]} cores ({info["cpu"]}), {info["data dir filesystem"]}, load average
{load_average()}.

{_HEADER}
{chr(10).join(lines)}

"MB/s read" counts what the pass reads (the dirty part twice: the offset map, then the
rewrite); "MB/s of log cleaned" counts the segments it rewrote. The throttle bounds reads
and writes together, so a throttled pass reads a little under its setting. The cleaner
holds a partition's lock for a chunk read (1 MiB) and for each swap (three directory
fsyncs): an append to another partition never waits for it; what it costs them is CPU and
disk on the same node (`--cleaner-bytes-per-s` bounds it). The plain read anchor goes
through gRPC and the client's decoding; the cleaner reads in process, so an unthrottled
pass may read faster than it.
"""
    write_section("## Compaction on a running node (bench/compaction.py)", body)


if __name__ == "__main__":
    main()
