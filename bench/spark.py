"""Spark batch read of a replog topic into the `noop` sink, anchored on Spark's Parquet reader.

    .venv/bin/python bench/spark.py [--quick] [--runs N] [--write-docs]

Setup: one `replog serve` process (flush=never) on 127.0.0.1, a topic with 2 partitions and
1,000,000 records of 100 random bytes (`--quick`: 200,000), a SparkSession on `local[2]`.
The same rows (every column) are written once to Parquet. Each run then times, back to back:

* `batch_read`: `spark.read.format("replog")...load().write.format("noop")` (rows/s), all of
  Kafka's columns (key, timestamp and timestampType are null columns today);
* the anchor: `spark.read.parquet(...)` into the same `noop` sink (the "ceiling" field).

Prints one JSON line per bench (`batch_read`, plus `batch_read_parquet_anchor`); with
`--write-docs`, writes the `## Spark (bench/spark.py)` section of docs/benchmarks.md.
Targets: >= 1,000,000 rows/s and >= 0.5x the Parquet read.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (
    DOCS_FILE,
    DOCS_TITLE,
    Result,
    bench_tmpdir,
    emit,
    log,
    machine_info,
    replace_section,
    summarize,
)

RECORDS_FULL = 1_000_000
RECORDS_QUICK = 200_000
VALUE_BYTES = 100
PARTITIONS = 2
TOPIC = "bench"


def start_server(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    ready = work / "ready"
    cmd = [
        sys.executable, "-m", "replog", "serve",
        "--data-dir", str(work / "data"), "--listen", "127.0.0.1:0",
        "--metrics-listen", "", "--ready-file", str(ready), "--flush", "never",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=(work / "server.log").open("wb"))
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((work / "server.log").read_text())
        time.sleep(0.02)
    return proc, ready.read_text().splitlines()[0]


def produce(address: str, records: int) -> None:
    from replog.client import Client

    per_partition = records // PARTITIONS
    with Client(address) as client:
        client.create_topic(TOPIC, PARTITIONS)
        for p in range(PARTITIONS):
            for start in range(0, per_partition, 10_000):
                n = min(10_000, per_partition - start)
                client.append(TOPIC, p, [os.urandom(VALUE_BYTES) for _ in range(n)], acks="leader")


def timed(action: object) -> float:
    started = time.perf_counter()
    action()  # type: ignore[operator]
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="200k records, 2 runs (< 60 s)")
    parser.add_argument("--runs", type=int, default=0)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    records = RECORDS_QUICK if args.quick else RECORDS_FULL
    runs = args.runs or (2 if args.quick else 5)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # Spark before any gRPC in this process

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("replog-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from replog.spark import register

    register(spark)
    with bench_tmpdir(prefix="bench-spark-") as work:
        info = machine_info(work)
        server, address = start_server(work)
        try:
            log(
                f"producing {records:,} records of {VALUE_BYTES} bytes into {PARTITIONS} partitions"
            )
            produce(address, records)
            replog_df = (
                spark.read.format("replog")
                .option("kafka.bootstrap.servers", address)
                .option("subscribe", TOPIC)
                .load()
            )
            parquet_path = str(work / "parquet")
            replog_df.write.parquet(parquet_path)
            assert spark.read.parquet(parquet_path).count() == records
            replog_rates: list[float] = []
            parquet_rates: list[float] = []
            timed(lambda: replog_df.write.format("noop").mode("overwrite").save())  # warm-up
            for i in range(runs):
                parquet = spark.read.parquet(parquet_path)
                order = [("replog", replog_df), ("parquet", parquet)]
                for name, df in order if i % 2 == 0 else order[::-1]:
                    seconds = timed(lambda df=df: df.write.format("noop").mode("overwrite").save())
                    (replog_rates if name == "replog" else parquet_rates).append(records / seconds)
                log(
                    f"run {i + 1}/{runs}: replog {replog_rates[-1]:,.0f} rows/s, "
                    f"parquet {parquet_rates[-1]:,.0f} rows/s"
                )
        finally:
            server.send_signal(signal.SIGKILL)
            server.wait()
    spark.stop()
    ours, anchor = summarize(replog_rates), summarize(parquet_rates)
    ratios = summarize([a / b for a, b in zip(replog_rates, parquet_rates, strict=True)])
    emit(Result("batch_read", round(ours.median), "rows/s", round(anchor.median)))
    emit(Result("batch_read_parquet_anchor", round(anchor.median), "rows/s", None))
    if args.write_docs:
        verdict = "PASS" if ours.median >= 1_000_000 and ratios.median >= 0.5 else "MISS"
        body = "\n".join(
            [
                f"{runs} runs, median reported; each run reads the topic and the Parquet copy "
                "back to back (alternating order) into the `noop` sink.",
                "",
                *[f"- {k}: {v}" for k, v in info.items()],
                f"- records: {records:,} x {VALUE_BYTES} bytes, {PARTITIONS} partitions, "
                "one replog node (flush=never) on 127.0.0.1, Spark `local[2]`",
                "",
                "Command:",
                "",
                "```sh",
                ".venv/bin/python bench/spark.py --write-docs",
                "```",
                "",
                "| bench | median | min | max | unit | Parquet anchor (median) | ratio median "
                "(min-max) | target | result |",
                "|---|---:|---:|---:|---|---:|---|---|---|",
                f"| `batch_read` | {ours.median:,.0f} | {ours.low:,.0f} | {ours.high:,.0f} "
                f"| rows/s | {anchor.median:,.0f} | {ratios.median:.2f}x "
                f"({ratios.low:.2f}-{ratios.high:.2f}) "
                f"| >= 1,000,000 rows/s and >= 0.5x Parquet | {verdict} |",
            ]
        )
        text = DOCS_FILE.read_text() if DOCS_FILE.exists() else DOCS_TITLE
        DOCS_FILE.write_text(replace_section(text, "## Spark (bench/spark.py)", body))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
