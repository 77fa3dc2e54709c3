"""How close produce and fetch quotas hold a Kafka client to their setting
(kafka_edge/security.py: the gRPC buckets, Kafka's throttle_time_ms and a muted connection).

One node on 127.0.0.1 with `--kafka-listen` (loopback, no TLS: every Kafka client is
ANONYMOUS, held by the default entry `User:*`). Each run:

1. unthrottled: librdkafka's producer (acks=1, linger 5 ms, no compression) sends values
   of 1 KB for `--seconds`, then its consumer (assign, from the beginning) reads for
   `--seconds` / 2: the ceilings;
2. `User:*` produce quota `--rate` B/s: the same production;
3. `User:*` fetch quota `--rate` B/s (produce unlimited): the same consumption, from the
   beginning again.

Bytes are the values acknowledged (produce) or received (fetch); the node charges the
record batches, a few per cent more (record and batch headers), so the figure is the
client's view. A bucket holds one second's worth, so achieved = (bytes - one second's
worth) / elapsed. Prints one JSON line per quota::

    {"bench": "kafka_quota_produce" | "kafka_quota_fetch", "value": <achieved / setting>,
     "unit": "ratio", "ceiling": 1.0}

and writes its section of docs/benchmarks.md with `--write-docs`. Bounded: each phase runs
`--seconds`; the node is killed at the end of each run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (
    DOCS_FILE,
    Result,
    bench_tmpdir,
    emit,
    log,
    machine_info,
    replace_section,
    summarize,
)
from kafka_listener import start_node

from replog.client import Client, RetryPolicy

TOPIC = "bench-kafka-quota"
VALUE = b"q" * 1000
HEADING = "## Kafka quotas (bench/kafka_quotas.py)"
PATIENT = RetryPolicy(attempts_max=100, deadline_ms=60_000)
QUEUE_MAX = 2000  # values queued in librdkafka at once


def produce(kafka: str, seconds: float) -> tuple[int, float]:
    """Value bytes acknowledged, and the seconds from the first send to the last ack."""
    import confluent_kafka

    acked = [0]

    def delivered(err: Any, _msg: Any) -> None:
        if err is None:
            acked[0] += len(VALUE)

    producer = confluent_kafka.Producer(
        {"bootstrap.servers": kafka, "acks": 1, "linger.ms": 5, "enable.idempotence": False}
    )
    started = time.monotonic()
    sent = 0
    while time.monotonic() - started < seconds:
        if sent * len(VALUE) - acked[0] >= QUEUE_MAX * len(VALUE):
            producer.poll(0.01)
            continue
        producer.produce(TOPIC, value=VALUE, on_delivery=delivered)
        sent += 1
        producer.poll(0)
    producer.flush(120)
    return acked[0], time.monotonic() - started


def consume(kafka: str, seconds: float) -> tuple[int, float]:
    """Value bytes received from the beginning within `seconds`."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": kafka, "group.id": "bench", "enable.auto.commit": False}
    )
    got = 0
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(TOPIC, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            for msg in consumer.consume(500, 0.2):
                if msg.error() is None:
                    got += len(msg.value())
        return got, time.monotonic() - started
    finally:
        consumer.close()


def run(rate: int, seconds: float, work: Path) -> dict[str, float]:
    work.mkdir(parents=True)
    proc, address, kafka = start_node(work)
    try:
        with Client(address, retry=PATIENT, timeout_s=30) as client:
            client.create_topic(TOPIC, 1, 1)
            sent, took = produce(kafka, seconds)
            out = {"produce_ceiling": sent / took}
            got, took = consume(kafka, seconds / 2)
            out["fetch_ceiling"] = got / took
            client.set_quota("User:*", produce_bytes_per_s=rate)
            sent, took = produce(kafka, seconds)
            out["produce"] = (sent - rate) / took
            client.set_quota("User:*", fetch_bytes_per_s=rate)
            got, took = consume(kafka, seconds)
            out["fetch"] = (got - rate) / took
    finally:
        proc.kill()
        proc.wait(30)
    log(
        f"setting {rate} B/s: produce {out['produce']:.0f} B/s (ceiling "
        f"{out['produce_ceiling']:.0f}), fetch {out['fetch']:.0f} B/s (ceiling "
        f"{out['fetch_ceiling']:.0f})"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--rate", type=int, default=1 << 20, help="the quota, B/s")
    parser.add_argument("--seconds", type=float, default=8.0, help="each phase's length")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true")
    opts = parser.parse_args(argv)
    runs = []
    for _ in range(opts.runs):
        with bench_tmpdir(prefix="kafka-quotas-") as work:
            runs.append(run(opts.rate, opts.seconds, work / "node"))
            info = machine_info(work)
    rows = []
    for quota in ("produce", "fetch"):
        ratios = [r[quota] / opts.rate for r in runs]
        ceilings = [r[quota + "_ceiling"] / opts.rate for r in runs]
        s = summarize(ratios)
        emit(Result(f"kafka_quota_{quota}", round(s.median, 3), "ratio", 1.0))
        rows.append(
            f"| {quota} | {', '.join(f'{x:.3f}' for x in ratios)} | **{s.median:.3f}** | "
            f"{summarize(ceilings).median:.1f} |"
        )
    if opts.write_docs:
        machine = ", ".join(f"{k} {v}" for k, v in info.items())
        body = f"""How close a produce and a fetch quota hold a Kafka client (librdkafka through
`--kafka-listen`) to the setting: one node on 127.0.0.1, the default entry `User:*` set to
{opts.rate} B/s, values of 1 KB produced (acks=1, linger 5 ms) or consumed from the beginning
for {opts.seconds:g} s. The node answers a principal in debt with Kafka's `throttle_time_ms`
and does not read its connection for that long. Achieved = (value bytes - one second's
worth, the bucket's burst) / elapsed; the node charges record batches, a few per cent more
than the values. The ceiling is the same client without a quota, measured in the same run
(as a multiple of the setting). Command: `python bench/kafka_quotas.py --write-docs`.
Machine: {machine}.

| quota | achieved / setting, {opts.runs} runs | median | ceiling / setting (median) |
|---|---|---|---|
{chr(10).join(rows)}

A Kafka request is charged after it ran (Kafka's way: the response says how long to wait),
so the window ends with one request's debt unpaid: librdkafka's produce requests reach
`batch.size` (1 MB by default), up to one second's worth here, which puts produce above the
setting by up to 1 / {opts.seconds:g} s in this measure while the long-run rate is the
setting. A consume's window ends likewise inside a mute, under the setting.
"""
        DOCS_FILE.write_text(replace_section(DOCS_FILE.read_text(), HEADING, body))
    return 0


if __name__ == "__main__":
    sys.exit(main())
