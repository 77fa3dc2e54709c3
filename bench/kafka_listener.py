"""The Kafka listener against replog's own Python client, on one `replog serve` node.

    .venv/bin/python bench/kafka_listener.py [--records 30000] [--runs 3] [--no-write]

One node (127.0.0.1, flush=always, a data directory under the repository), one partition
per case, records of a 16 B key and a 100 B value, acks=all, idempotent producers:

* `kafka_produce`: librdkafka (confluent-kafka) through `--kafka-listen`, linger 5 ms,
  records/s until `flush()`; `ceiling` = replog's Python client `Producer` (linger 5 ms,
  streaming appends) in the same run on its own topic. On both sides each producer's
  first record (which waits for its connection and producer id) is acknowledged before
  the clock starts;
* `kafka_produce_one_in_flight`: the same `kafka_produce` figure against replog's
  `Producer` kept to one batch in flight per partition (`partition_in_flight_max=1`):
  what librdkafka's idempotent producer does (see below), so a ceiling for the edge;
* `kafka_produce_pipelined`: the same with librdkafka's defaults (acks=all, not idempotent,
  up to `max.in.flight` requests pipelined), against the same anchor;
* `kafka_produce_3_partitions`: idempotent librdkafka as in `kafka_produce`, but record i
  to partition i % 3 of a 3-partition topic (one request in flight per partition: up to
  3 at once), against the `Producer` doing the same;
* `kafka_consume`: librdkafka's consumer (assign, from the beginning) reading them back,
  records/s from its first records on (its connection and first fetch not timed);
  `ceiling` = the Python client's `fetch` loop (1 MiB per fetch);
* `kafka_latency`: one record produced and acknowledged (acks=all), median ms over 50;
  `ceiling` = `Client.append` of one record.

The node's `replog_kafka_produce_in_flight` histogram, scraped around each Kafka produce,
says how many Produce requests of the connection were in flight as each was read (how far
librdkafka pipelined). Runs are interleaved (Kafka, then replog), `--runs` times, medians
reported; prints one JSON line per case (`bench/_common.py`) and writes the
`## Kafka listener` section of docs/benchmarks.md (unless --no-write).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from _common import Result, bench_tmpdir, emit, log, machine_info, write_section

from replog.client import Client, Record
from replog.devcluster import free_port

HEADING = "## Kafka listener (bench/kafka_listener.py)"
KEY = b"k" * 16
VALUE = b"v" * 100
LATENCY_SAMPLES = 50
READY_TIMEOUT_S = 60.0


def start_node(root: Path) -> tuple[subprocess.Popen[bytes], str, str, str]:
    kafka = f"127.0.0.1:{free_port()}"
    metrics = f"127.0.0.1:{free_port()}"
    ready = root / "ready"
    cmd = [
        sys.executable, "-m", "replog", "serve",
        "--data-dir", str(root / "data"),
        "--listen", "127.0.0.1:0",
        "--metrics-listen", metrics,
        "--ready-file", str(ready),
        "--kafka-listen", kafka,
        "--flush", "always",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLOG_")}
    with (root / "server.log").open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=out, env=env)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError((root / "server.log").read_text())
        time.sleep(0.05)
    return proc, ready.read_text().splitlines()[0], kafka, metrics


IN_FLIGHT = "replog_kafka_produce_in_flight_bucket"
PRODUCE_REQUESTS = 'replog_kafka_requests_total{api="PRODUCE"}'


def scrape(metrics: str) -> str:
    """The node's metrics page."""
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=30) as reply:
        return str(reply.read().decode())


def in_flight_buckets(text: str) -> dict[int, float]:
    """The node's produce in-flight histogram: {le: cumulative count}."""
    out = {}
    for line in text.splitlines():
        if line.startswith(IN_FLIGHT) and "+Inf" not in line:
            le = line.split('le="')[1].split('"')[0]
            out[int(float(le))] = float(line.split()[-1])
    return out


def sample(text: str, series: str) -> float:
    """One series' value in a metrics page (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def records_per_batch(before: str, after: str, topic: str | None, records: int) -> float:
    """The mean records per batch of a timed produce between two scrapes: Kafka (`topic`
    None) by the Produce requests answered (one partition each; one was the untimed first
    record), replog by its topic's log end (an epoch marker, then per idempotent batch a
    header control record and its records; the untimed first record a batch too)."""
    if topic is None:
        batches = sample(after, PRODUCE_REQUESTS) - sample(before, PRODUCE_REQUESTS) - 1
    else:
        leo = f'replog_log_end_offset{{partition="0",topic="{topic}"}}'
        batches = sample(after, leo) - records - 3
    return records / batches if batches > 0 else 0.0


def in_flight_seen(before: dict[int, float], after: dict[int, float]) -> tuple[int, float]:
    """(the most Produce requests in flight as one was read, the mean) between two
    scrapes of `in_flight_buckets`."""
    counts, below = {}, 0.0
    for le in sorted(after):
        cumulative = after[le] - before.get(le, 0.0)
        counts[le], below = cumulative - below, cumulative
    total = sum(counts.values())
    most = max((le for le, c in counts.items() if c), default=0)
    return most, sum(le * c for le, c in counts.items()) / total if total else 0.0


def server_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kafka_produce(
    kafka: str, topic: str, records: int, idempotent: bool = True, partitions: int = 1
) -> float:
    """librdkafka's producer, idempotent (one request in flight per partition) or with its
    own defaults (acks=all, not idempotent, requests pipelined); record i to partition
    i % `partitions`."""
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {"bootstrap.servers": kafka, "enable.idempotence": idempotent, "linger.ms": 5}
    )
    producer.list_topics(topic, timeout=30)
    # connected, metadata known, its producer id acquired (the process's first idempotent
    # producer waited about 0.5 s for it): one record acknowledged first, not timed
    producer.produce(topic, key=KEY, value=VALUE, partition=0)
    assert producer.flush(60) == 0
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=KEY, value=VALUE, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return records / (time.perf_counter() - start)


def replog_produce(
    client: Client, topic: str, records: int, in_flight: int = 5, partitions: int = 1
) -> float:
    producer = client.producer(topic, linger_ms=5, partition_in_flight_max=in_flight)
    producer.send(VALUE, key=KEY, partition=0)  # as librdkafka's: one record first
    producer.flush(60)
    start = time.perf_counter()
    for i in range(records):
        producer.send(VALUE, key=KEY, partition=i % partitions)
    producer.flush(120)
    return records / (time.perf_counter() - start)


def kafka_consume(kafka: str, topic: str, records: int) -> float:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": kafka, "group.id": "bench", "enable.auto.commit": False}
    )
    try:
        tp = confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)
        consumer.assign([tp])
        got = 0
        deadline = time.perf_counter() + 120
        while got == 0 and time.perf_counter() < deadline:  # connected, first fetch answered
            got = sum(1 for m in consumer.consume(1, 0.5) if m.error() is None)
        first, start = got, time.perf_counter()  # timed from the first records on
        while got < records and time.perf_counter() < deadline:
            # never more than are left: consume(n) waits its timeout out for n messages,
            # which would time that wait, not the consumer
            wanted = min(1000, records - got)
            got += sum(1 for m in consumer.consume(wanted, 0.5) if m.error() is None)
        assert got >= records, got
        return (got - first) / (time.perf_counter() - start)
    finally:
        consumer.close()


def replog_consume(client: Client, topic: str, records: int) -> float:
    got, offset = 0, 0
    start = time.perf_counter()
    while got < records:
        result = client.fetch(topic, 0, offset, max_bytes=1 << 20, max_wait_ms=500)
        got += len(result.records)
        offset = result.next_offset
    return got / (time.perf_counter() - start)


def kafka_latency_ms(kafka: str, topic: str) -> float:
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {"bootstrap.servers": kafka, "enable.idempotence": True, "linger.ms": 0}
    )
    producer.list_topics(topic, timeout=30)
    samples = []
    for _ in range(LATENCY_SAMPLES):
        start = time.perf_counter()
        producer.produce(topic, key=KEY, value=VALUE)
        assert producer.flush(30) == 0
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def replog_latency_ms(client: Client, topic: str) -> float:
    samples = []
    for _ in range(LATENCY_SAMPLES):
        start = time.perf_counter()
        client.append(topic, 0, [Record(VALUE, KEY)])
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


CONVERT_RECORDS = 7000  # about one librdkafka batch of 1 MB
CONVERT_SAMPLES = 11


def conversion_ms() -> dict[str, tuple[float, float]]:
    """The edge's conversions of one batch of CONVERT_RECORDS records (no server): columnar
    against the per-record codec it replaced, median ms of 5 (columnar, per record)."""
    from replog import frames
    from replog.kafka.records import RecordBatch, batch_of, decode_batches, encode_batch
    from replog.server.kafka_edge.convert import batch_of_frames, values_of

    rows = [(KEY, VALUE, 1_700_000_000_000 + i // 10, ()) for i in range(CONVERT_RECORDS)]
    wire = encode_batch(batch_of(0, rows, producer_id=1, producer_epoch=0, base_sequence=0))
    envelopes = values_of(decode_batches(wire)[0], True)
    stored = frames.encode(0, envelopes)

    def produce(columnar: bool) -> None:
        values_of(decode_batches(wire, columnar=columnar)[0], True)

    def fetch_columnar() -> None:
        batch_of_frames(stored, True)

    def fetch_per_record() -> None:  # what batch_of_frames did before: a Record each
        from replog import records
        from replog.kafka.records import Header, Record

        env = records.decode_frames(stored)
        base, times = env.offsets[0], env.timestamps
        out = [
            Record(o - base, 0, k, v, tuple(Header(n, hv) for n, hv in h))
            for o, k, v, h in zip(env.offsets, env.keys, env.values, env.headers, strict=True)
        ]
        base_ts = min(times)
        recs = tuple(
            r._replace(timestamp_delta=t - base_ts) for r, t in zip(out, times, strict=True)
        )
        last = env.offsets[-1] - base
        encode_batch(RecordBatch(base, recs, base_ts, max(times), last_offset_delta=last))

    def medians_ms(a: Callable[[], None], b: Callable[[], None]) -> tuple[float, float]:
        """Interleaved (a, b, a, b, ...): the machine's load moves both alike."""
        samples: tuple[list[float], list[float]] = ([], [])
        for _ in range(CONVERT_SAMPLES):
            for f, into in ((a, samples[0]), (b, samples[1])):
                start = time.perf_counter()
                f()
                into.append((time.perf_counter() - start) * 1000)
        return statistics.median(samples[0]), statistics.median(samples[1])

    return {
        "produce: decode + envelopes": medians_ms(partial(produce, True), partial(produce, False)),
        "fetch: frames -> Kafka batch": medians_ms(fetch_columnar, fetch_per_record),
    }


@dataclass
class Figures:
    """Every run's figures, per case: (Kafka's, replog's)."""

    rows: dict[str, tuple[list[float], list[float]]] = field(
        default_factory=lambda: {name: ([], []) for name in UNITS}
    )
    # the node's CPU per record in each throughput case (user + system, from /proc): what
    # the load average does not move much, unlike the records/s
    cpu: dict[str, tuple[list[float], list[float]]] = field(
        default_factory=lambda: {name: ([], []) for name in CPU_CASES}
    )
    # Produce requests in flight as each was read, per Kafka produce case: (most, mean)
    in_flight: dict[str, list[tuple[int, float]]] = field(
        default_factory=lambda: {name: [] for name in KAFKA_PRODUCE_CASES}
    )
    # records per batch (Kafka: per Produce request; replog: per append)
    batch: dict[str, tuple[list[float], list[float]]] = field(
        default_factory=lambda: {name: ([], []) for name in BATCH_CASES}
    )


UNITS = {
    "kafka_produce": "records/s",
    "kafka_produce_one_in_flight": "records/s",
    "kafka_produce_pipelined": "records/s",
    "kafka_produce_3_partitions": "records/s",
    "kafka_consume": "records/s",
    "kafka_latency": "ms",
}
CPU_CASES = (
    "kafka_produce",
    "kafka_produce_pipelined",
    "kafka_produce_3_partitions",
    "kafka_consume",
)
KAFKA_PRODUCE_CASES = ("kafka_produce", "kafka_produce_pipelined", "kafka_produce_3_partitions")
BATCH_CASES = ("kafka_produce", "kafka_produce_one_in_flight", "kafka_produce_pipelined")


def one_run(
    run: int, records: int, client: Client, node: tuple[int, str, str], figures: Figures
) -> None:
    """Every case once, Kafka then replog, on new topics. `node`: (pid, Kafka address,
    metrics address)."""
    pid, kafka, metrics = node
    k, r, r1 = f"k{run}", f"r{run}", f"r1{run}"
    kp, rp = f"kp{run}", f"rp{run}"
    for name in (k, r, r1, kp, rp):
        client.create_topic(name, 1)
    k3, r3 = f"k3{run}", f"r3{run}"
    for name in (k3, r3):
        client.create_topic(name, 3)
    rows = figures.rows
    cases: list[tuple[str, Callable[[], float], Callable[[], float], str]] = [
        (
            "kafka_produce",
            partial(kafka_produce, kafka, k, records),
            partial(replog_produce, client, r, records),
            r,
        ),
        (  # the kafka_produce figure of this run, not measured again
            "kafka_produce_one_in_flight",
            lambda: rows["kafka_produce"][0][-1],
            partial(replog_produce, client, r1, records, in_flight=1),
            r1,
        ),
        (
            "kafka_produce_pipelined",
            partial(kafka_produce, kafka, kp, records, idempotent=False),
            partial(replog_produce, client, rp, records),
            rp,
        ),
        (
            "kafka_produce_3_partitions",
            partial(kafka_produce, kafka, k3, records, partitions=3),
            partial(replog_produce, client, r3, records, partitions=3),
            r3,
        ),
        (
            "kafka_consume",
            partial(kafka_consume, kafka, k, records),
            partial(replog_consume, client, r, records),
            r,
        ),
        (
            "kafka_latency",
            partial(kafka_latency_ms, kafka, k),
            partial(replog_latency_ms, client, r),
            r,
        ),
    ]
    for name, ours, theirs, replog_topic in cases:
        for side, case in enumerate((ours, theirs)):
            measured = not (name == "kafka_produce_one_in_flight" and side == 0)
            cpu_before, before = server_cpu_s(pid), scrape(metrics)
            rows[name][side].append(case())
            after = scrape(metrics)
            if name in figures.cpu:
                used = server_cpu_s(pid) - cpu_before
                figures.cpu[name][side].append(used * 1e6 / records)
            if name in figures.in_flight and side == 0:
                seen = in_flight_seen(in_flight_buckets(before), in_flight_buckets(after))
                figures.in_flight[name].append(seen)
            if name in figures.batch and measured:
                topic = None if side == 0 else replog_topic
                per = records_per_batch(before, after, topic, records)
                figures.batch[name][side].append(per)
        log(f"run {run}: {name} kafka {rows[name][0][-1]:.1f} replog {rows[name][1][-1]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    figures = Figures()
    convert = conversion_ms()
    for name, (ours, before) in convert.items():
        log(f"{name}: columnar {ours:.1f} ms, per record {before:.1f} ms")
    with bench_tmpdir(prefix="bench-kafka-") as root:
        info = machine_info(root)
        proc, address, kafka, metrics = start_node(root)
        try:
            with Client(address, timeout_s=60) as client:
                for run in range(args.runs):
                    one_run(run, args.records, client, (proc.pid, kafka, metrics), figures)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    info["load average (1/5/15 min) at the end"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    results = [
        Result(name, statistics.median(k), UNITS[name], statistics.median(r))
        for name, (k, r) in figures.rows.items()
    ]
    for result in results:
        emit(result)
    if not args.no_write:
        write_section(HEADING, _section(args, info, results, figures, convert))


BOUNDS = (  # the section's note on what bounds each case
    "What bounds each case. Produce: librdkafka's idempotent producer sends a",
    "partition's next ProduceRequest only once the previous one is answered, whatever",
    "`max.in.flight` says (librdkafka PR #4989, open; the histogram above: 1), so its",
    "throughput is one batch per round trip, and the records that arrive meanwhile fill",
    "the next one to librdkafka's 1 MB: the edge's decode and envelopes, then the append",
    "(write, a roll of the default 1 MiB segment, fsync), then the answer and",
    "librdkafka's next batch, one after the other. replog's `Producer` streams up to 5",
    "batches at once, their writes and fsyncs overlapping; `kafka_produce_one_in_flight`",
    "holds it to one batch in flight as librdkafka's: it then sends smaller batches",
    "(linger 5 ms closes them; the batch line above), one in 2 or 3 of which rolls a",
    "segment: not the same round trip either. With its defaults (not",
    "idempotent) librdkafka pipelines, and the listener overlaps its requests (the",
    "histogram: up to 5 in flight); so it does for the idempotent producer writing to",
    "several partitions (`kafka_produce_3_partitions`: a request per partition at once).",
    "Consume: both read",
    "1 MiB per request, one request at a time; the edge adds the conversion below and",
    "the Kafka framing. On a loaded machine every wake-up waits for a core, which",
    "costs the one-in-flight produce most: compare ratios only within a run, and mind",
    "the load average below.",
    "",
)


def table_rows(results: list[Result], rows: dict[str, Any]) -> list[str]:
    """The table's row of each case: medians, their ratio, each run's ratio, the runs."""
    lines = []
    for r in results:
        assert r.ceiling is not None
        k, p = rows[r.bench]
        fmt = "{:.2f}" if r.unit == "ms" else "{:.0f}"
        runs = " ".join(map(fmt.format, k)) + " / " + " ".join(map(fmt.format, p))
        ratio = r.value / r.ceiling if r.unit != "ms" else r.ceiling / r.value
        per_run = [a / b if r.unit != "ms" else b / a for a, b in zip(k, p, strict=True)]
        each = " ".join(f"{x:.2f}" for x in per_run)
        lines.append(
            f"| {r.bench} ({r.unit}) | {r.value:.1f} | {r.ceiling:.1f} | {ratio:.2f}x "
            f"| {each} (median {statistics.median(per_run):.2f}x) | {runs} |"
        )
    return lines


def _section(
    args: Any,
    info: dict[str, str],
    results: list[Result],
    figures: Figures,
    convert: dict[str, tuple[float, float]],
) -> str:
    rows, cpu, in_flight = figures.rows, figures.cpu, figures.in_flight
    lines = [
        f"`.venv/bin/python bench/kafka_listener.py --records {args.records} --runs {args.runs}`",
        "",
        "One node, flush=always, one partition per case (three in `kafka_produce_3_partitions`,",
        "record i to partition i % 3 on both sides), 16 B keys and 100 B values, acks=all,",
        "idempotent producers but in `kafka_produce_pipelined` (librdkafka's own defaults:",
        "not idempotent, requests pipelined; replog's `Producer` is the same anchor). Both",
        "sides batch alike: librdkafka 1,000,000 bytes or 10,000 records, linger 5 ms;",
        "replog's `Producer` 1 MiB or 10,000 records, linger 5 ms, 5 batches in flight.",
        "Kafka = librdkafka (confluent-kafka) through `--kafka-listen`;",
        "replog = replog's Python client in the same run (the anchor). Medians of the runs.",
        "",
        "| case | Kafka listener | replog client | ratio | ratio per run | runs (Kafka / replog) |",
        "|---|---|---|---|---|---|",
    ]
    lines += table_rows(results, rows)
    lines += [
        "",
        "Ratio: Kafka over replog (for latency, replog over Kafka: higher is better), of the",
        "medians, and in each run (its two sides measured one after the other: the load",
        "moves them alike more than it moves runs apart).",
        "",
        "The node's CPU per record (user + system, median of the runs), Kafka / replog:",
        *(
            f"{name} {statistics.median(k):.2f} / {statistics.median(r):.2f} us"
            + (";" if name != "kafka_consume" else ".")
            for name, (k, r) in cpu.items()
        ),
        "",
        "Produce requests of the connection in flight as each was read (the node's",
        "`replog_kafka_produce_in_flight` histogram, most / mean, per run):",
        *(
            f"{name} " + ", ".join(f"{most} / {mean:.2f}" for most, mean in seen) + ";"
            for name, seen in in_flight.items()
        ),
        "the listener serves up to 5 at once, their appends in order per partition.",
        "",
        "Records per batch (median of the runs; Kafka: per Produce request, replog: per",
        "append), Kafka / replog:",
        *(
            f"{name} "
            + (f"{statistics.median(k):.0f}" if k else "-")
            + f" / {statistics.median(r):.0f}"
            + (";" if name != BATCH_CASES[-1] else ".")
            for name, (k, r) in figures.batch.items()
        ),
        "",
        *BOUNDS,
        f"The edge's conversions of one batch of {CONVERT_RECORDS} such records, in the bench's",
        "process (no server; median ms of 11, the two codecs interleaved): the columnar",
        "codec (`replog/kafka/columns.py`) against the per-record one it replaced for",
        "batches without headers. Fetch: the envelopes are located as numpy spans of the",
        "fetched frames (`records.envelope_spans`) and the Kafka records assembled from",
        "them with no Python object per record (`columns.assemble`: runs of equal records",
        "as 2-D block copies, other records by one numpy gather). Produce: the records'",
        "length prefixes are walked by runs of equally long records (galloping numpy",
        "compares), their fields decoded as columns, and the envelopes assembled the same",
        "way, one `bytes` per record (what the append takes).",
        "",
        "| conversion | columnar (ms) | per record (ms) |",
        "|---|---|---|",
        *(f"| {name} | {a:.1f} | {b:.1f} |" for name, (a, b) in convert.items()),
        "",
    ]
    lines += [f"- {k}: {v}" for k, v in info.items()]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
