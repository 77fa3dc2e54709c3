"""A ready pipeline: stream a replog topic into Parquet files, exactly once.

    python -m replog.spark.pipeline --bootstrap 127.0.0.1:7070 --topic orders \
        --output /data/orders-parquet --checkpoint /data/orders-checkpoint [--available-now]

Exactly once, end to end: the source replays any offset range `[start, end)` identically
(only committed records, which never change), Spark records each micro-batch's range in the
checkpoint's offset log before running it, and the Parquet file sink commits a batch's files
atomically in its `_spark_metadata` log. A query killed at any moment (even the driver, with
SIGKILL) and restarted with the same checkpoint writes every record exactly once. Readers
must read the output with Spark (which honours `_spark_metadata`), not by listing files.

Use it as the template for your own jobs: everything replog-specific is the `readStream`
block in `build_query`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def spark_duration(seconds_or_duration: str | None) -> str | None:
    """`--attempt-timeout` as Spark's option takes it: plain numbers are seconds, as for the
    CLI's flag and REPLOG_ATTEMPT_TIMEOUT ("2.5" -> "2500ms"); "2s", "1500ms" pass as they are."""
    if not seconds_or_duration:
        return None
    try:
        return f"{round(float(seconds_or_duration) * 1000)}ms"
    except ValueError:
        return seconds_or_duration


def build_query(spark: Any, args: argparse.Namespace) -> Any:
    from replog.spark import register
    from replog.spark.starting import start_query

    register(spark)
    stream = (
        spark.readStream.format("replog")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", args.starting_offsets)
    )
    for key, value in (
        ("tls.ca", args.tls_ca),
        ("tls.cert", args.tls_cert),
        ("tls.key", args.tls_key),
        ("attemptTimeout", spark_duration(args.attempt_timeout)),
    ):
        if value:
            stream = stream.option(key, value)
    if args.max_records_per_trigger:
        stream = stream.option("maxOffsetsPerTrigger", str(args.max_records_per_trigger))
    writer = (
        stream.load()
        .writeStream.format("parquet")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{args.interval_ms} milliseconds")
    # Started again if Spark could not start the source's Python process in time (an
    # overloaded driver; replog.spark.starting): nothing ran yet, so that is safe.
    return start_query(writer.start)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m replog.spark.pipeline",
        description="Stream a replog topic into Parquet files with a checkpoint, exactly once.",
    )
    parser.add_argument(
        "--bootstrap", required=True, help="node addresses, comma-separated, or a Service name"
    )
    parser.add_argument("--topic", required=True, help="topics, comma-separated")
    parser.add_argument("--output", required=True, help="Parquet output directory")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    parser.add_argument("--starting-offsets", default="earliest", help="earliest|latest|JSON")
    parser.add_argument("--max-records-per-trigger", type=int, default=0)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument(
        "--available-now", action="store_true", help="process what is committed now, then stop"
    )
    parser.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[2]"))
    env = os.environ.get
    parser.add_argument("--tls-ca", default=env("REPLOG_TLS_CA"), help="CA bundle: TLS on")
    parser.add_argument("--tls-cert", default=env("REPLOG_TLS_CERT"), help="client certificate")
    parser.add_argument("--tls-key", default=env("REPLOG_TLS_KEY"), help="its key")
    parser.add_argument(
        "--attempt-timeout",
        default=env("REPLOG_ATTEMPT_TIMEOUT"),
        help="the client's deadline for one attempt of a call: seconds, or a duration such "
        "as 1500ms (option attemptTimeout; env REPLOG_ATTEMPT_TIMEOUT; default 2 s)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master(args.master).appName("replog-pipeline").getOrCreate()
    query = build_query(spark, args)
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
