"""Both pipeline drivers, one core (issue 29): `python bench/pipelines.py [--quick] [--write-docs]`.

The idempotent append pipeline's rules live once (`replog.client.pipeline_rules`); the
threaded `append_stream.Pipeline` and the asyncio `aio_pipeline.AsyncPipeline` drive them.
This bench measures the produce throughput each driver reaches, against a real
`replog serve` (flush=never, metrics off) and against bench/e2e.py's CEILING server (a
do-nothing grpc.aio server with the same service) in the same run:

* `sync`: `Client.producer(topic, acks="leader").send_batch` of 1000 100-byte values, all
  batches of a run queued at once, spread over `--partitions` partitions (the threaded
  pipeline: up to 5 batches in flight per partition);
* `aio`: `AsyncClient.append(topic, p, values, acks="leader")` of the same batches, all
  awaited together (`asyncio.gather`: the asyncio pipeline, same limits).

Each bench runs `--repeats` times (median; min..max), replog and the ceiling alternating.
Prints one JSON object per result on stdout; `--write-docs` rewrites the
`## Pipeline drivers (bench/pipelines.py)` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import time

from _common import Result, bench_tmpdir, emit, log, machine_info, summarize
from _common import write_section as write_docs_section
from e2e import Proc

from replog.client import Client, RetryPolicy
from replog.client.aio import AsyncClient

VALUE_BYTES = 100
BATCH_RECORDS = 1000
SECTION = "## Pipeline drivers (bench/pipelines.py)"


def produce_sync(address: str, topic: str, batches: int, partitions: int) -> float:
    values = [os.urandom(VALUE_BYTES) for _ in range(BATCH_RECORDS)]
    with Client(address, retry=RetryPolicy(attempts_max=1)) as client:
        producer = client.producer(topic, acks="leader", partitions=partitions)
        try:
            started = time.perf_counter()
            futures = [producer.send_batch(values, i % partitions) for i in range(batches)]
            for fut in futures:
                fut.result()
            elapsed = time.perf_counter() - started
        finally:
            producer.close()
    return batches * BATCH_RECORDS / elapsed


async def produce_aio(address: str, topic: str, batches: int, partitions: int) -> float:
    values = [os.urandom(VALUE_BYTES) for _ in range(BATCH_RECORDS)]
    async with AsyncClient(address, retry=RetryPolicy(attempts_max=1)) as client:
        await client.append(topic, 0, values[:1], acks="leader")  # learn the producer
        started = time.perf_counter()
        await asyncio.gather(
            *(client.append(topic, i % partitions, values, acks="leader") for i in range(batches))
        )
        elapsed = time.perf_counter() - started
    return batches * BATCH_RECORDS / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a run of under a minute")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--records", type=int, default=None, help="records per run")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 5)
    batches = (args.records or (200_000 if args.quick else 1_000_000)) // BATCH_RECORDS
    results: dict[str, list[float]] = {}
    bench_dir = os.path.dirname(os.path.abspath(__file__))
    with bench_tmpdir(None, prefix="bench-pipelines-") as tmp:
        info = machine_info(tmp)
        server = Proc(
            [
                sys.executable, "-m", "replog", "serve", "--data-dir", str(tmp / "data"),
                "--listen", "127.0.0.1:0", "--metrics-listen", "", "--flush", "never",
                "--ready-file", str(tmp / "ready"), "--log-level", "WARNING",
            ],
            tmp / "ready",
        )  # fmt: skip
        ceiling = Proc(
            [
                sys.executable, os.path.join(bench_dir, "e2e.py"),
                "--ceiling-server", str(tmp / "ceiling-ready"),
            ],
            tmp / "ceiling-ready",
        )  # fmt: skip
        try:
            with Client(server.address) as admin:
                for rep in range(repeats):
                    targets = [("", server.address), ("_ceiling", ceiling.address)]
                    for suffix, address in targets if rep % 2 == 0 else targets[::-1]:
                        for driver in ("sync", "aio"):
                            topic = f"bench-{rep}-{driver}"
                            if not suffix:
                                admin.create_topic(topic, args.partitions)
                            if driver == "sync":
                                value = produce_sync(address, topic, batches, args.partitions)
                            else:
                                value = asyncio.run(
                                    produce_aio(address, topic, batches, args.partitions)
                                )
                            results.setdefault(driver + suffix, []).append(value)
                            if not suffix:
                                admin.delete_topic(topic)
                    log(
                        f"repeat {rep}: "
                        + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in sorted(results.items()))
                    )
        finally:
            server.stop()
            ceiling.stop()
    rows = []
    for driver in ("sync", "aio"):
        value, ceil = summarize(results[driver]), summarize(results[driver + "_ceiling"])
        emit(Result(f"produce_{driver}", round(value.median, 1), "records/s", ceil.median))
        rows.append(
            f"| produce, {driver} driver | {value.median:,.0f} records/s "
            f"[{value.low:,.0f}..{value.high:,.0f}] | {ceil.median:,.0f} records/s | "
            f"{value.median / ceil.median:.2f} |"
        )
    if args.write_docs:
        command = "python bench/pipelines.py " + shlex.join(argv or sys.argv[1:])
        body = [
            f"Command: `{command.strip()}` ({repeats} repeats, median; min..max in brackets).",
            f"{batches * BATCH_RECORDS:,} records of {VALUE_BYTES} bytes per run, batches of "
            f"{BATCH_RECORDS}, acks=leader, flush=never, {args.partitions} partitions, all "
            "batches queued at once; the ceiling is bench/e2e.py's do-nothing server driven "
            "by the same client code in the same run.",
            "Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()) + ".",
            "",
            "| bench | value | ceiling | value / ceiling |",
            "|---|---|---|---|",
            *rows,
        ]
        write_docs_section(SECTION, "\n".join(body) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
