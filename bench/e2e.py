"""End-to-end benchmark (issue 3): `python bench/e2e.py [--quick] [--write-docs]`.

Prints one JSON object per line on stdout (see `bench/_common.py`); progress goes to stderr.
A real `replog serve` process (flush=never, metrics off) and a CEILING process (a minimal
grpc.aio server with the same `replog.v1.Log` service that does nothing: Append and each
AppendStream request get the next offsets, InitProducer a constant id, StreamFrom repeats
one prebuilt batch of the same frames) run on 127.0.0.1; the same Python client code (the
default idempotent client: appends over AppendStream) drives both, so the ratio isolates
what replog adds.

* `produce`: 100-byte random values, batches of 1000 sent with `Producer.send_batch`,
  acks=leader, to `--partitions` partitions (one batch in flight per partition).
* `consume`: `Consumer.batches()` (StreamFrom + `frames.decode`) from offset 0 over what
  `produce` wrote.
* `produce_latency_p50_ms` / `_p99_ms`: sequential `Client.append` of one record, acks=leader.
* `produce_server_cpu_us_per_record` / `consume_server_cpu_us_per_record`: user+system CPU
  of the replog server process over the phase divided by records (from /proc/PID/stat).

TLS: a third process, the same `replog serve` with TLS on (a throwaway CA, `replog.certs`),
is driven by the same client code over TLS in the same repeats: the `_tls` results and the
"TLS against plaintext" table give the cost of TLS as a ratio.

Each bench runs `--repeats` times (median reported); replog, the ceiling and replog over
TLS rotate which goes first.
`--envelope` adds an envelope topic (`replog.records`: each value wrapped in a record with a
timestamp by the client, checked by the leader, decoded by the consumer) on the same server
with the same idempotent client: the `_envelope_vs_raw` results give its cost as a ratio.
`--write-docs` rewrites the `## End to end (bench/e2e.py)` section of `docs/benchmarks.md`.
`--unary` adds the same idempotent client with `streaming=False` (one unary Append per batch,
one batch per partition in flight) beside the default one (AppendStream, several batches in
flight per partition) on the same server in the same repeats: the `_vs_unary` results;
`--write-unary-docs` rewrites the `## Streaming produce against unary (bench/e2e.py --unary)`
section with them, each beside its own ceiling: the do-nothing server driven by the same
`streaming=False` client (`_unary_ceiling`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path

from _common import Result, bench_tmpdir, emit, log, machine_info, summarize
from _common import write_section as write_docs_section

from replog import certs, frames
from replog.client import Client, ClientTls, RetryPolicy
from replog.v1 import admin_pb2, admin_pb2_grpc, log_pb2, log_pb2_grpc

VALUE_BYTES = 100
BATCH_RECORDS = 1000
STREAM_BATCH_BYTES = 1024 * 1024
SECTION = "## End to end (bench/e2e.py)"
UNARY_SECTION = "## Streaming produce against unary (bench/e2e.py --unary)"
NOTES = [
    "Targets (issue 3): produce >= 1,000,000 records/s, consume >= 2,000,000 records/s, "
    "single-record produce p50 <= 1 ms. Reading the table:",
    "",
    "* produce: the do-nothing ceiling itself stays below 1M records/s here: one Python gRPC "
    "client plus one grpc.aio server share the 2 cores (client: request build + serialize "
    "~0.1 ms per 1000-record batch, plus gRPC call overhead; ceiling server ~0.7 us/record). "
    "replog adds the storage append on the event loop (`PartitionLog.append`, ~0.67 "
    "us/record measured in-process, about half of it in `frames.encode`'s join) and ~0.1 "
    "us/record of its own (request to list, metrics). Sending `repeated bytes` and letting "
    "the server encode frames was kept: a client-encoded frame buffer would need a "
    "per-record offset rewrite on the server (offsets are assigned at append time).",
    "* Raising in-flight batches (more partitions) did not raise either number here: both "
    "processes are CPU-bound on 2 shared cores.",
    "* consume: StreamFrom sends 1 MiB batches of raw frames as read from disk; the server "
    "finds each batch's next offset in C (strided slices), so its CPU per record matches the "
    "ceiling; the client's `frames.decode` dominates.",
    "* The machine is shared with other work (see load average): ranges are wide; compare "
    "value and ceiling within a run.",
]


# -- the ceiling server ----------------------------------------------------------------------


class CeilingLog(log_pb2_grpc.LogServicer):  # type: ignore[misc]
    """Accepts the same messages as replog and does nothing with them."""

    def __init__(self) -> None:
        values = [os.urandom(VALUE_BYTES) for _ in range(STREAM_BATCH_BYTES // 112)]
        self.frames = frames.encode(0, values)
        self.count = len(values)

        self.next_offset = 0

    def _assign(self, request: log_pb2.AppendRequest) -> tuple[int, int, int]:
        base = self.next_offset
        self.next_offset += len(request.values)
        return base, self.next_offset - 1, self.next_offset

    async def Append(self, request: log_pb2.AppendRequest, context: object) -> object:
        base, last, hw = self._assign(request)
        return log_pb2.AppendResponse(base_offset=base, last_offset=last, high_watermark=hw)

    async def AppendStream(
        self, requests: AsyncIterator[log_pb2.AppendRequest], context: object
    ) -> AsyncIterator[log_pb2.AppendStreamResponse]:
        async for request in requests:
            base, last, hw = self._assign(request)
            yield log_pb2.AppendStreamResponse(
                base_offset=base, last_offset=last, high_watermark=hw
            )

    async def InitProducer(self, request: object, context: object) -> object:
        return log_pb2.InitProducerResponse(producer_id=1, producer_epoch=0)

    async def StreamFrom(
        self, request: log_pb2.StreamFromRequest, context: object
    ) -> AsyncIterator[log_pb2.StreamBatch]:
        offset = request.offset
        while True:
            offset += self.count
            yield log_pb2.StreamBatch(frames=self.frames, high_watermark=offset, next_offset=offset)


class CeilingAdmin(admin_pb2_grpc.AdminServicer):  # type: ignore[misc]
    """Metadata naming each topic asked as a raw topic of `PARTITIONS` partitions led by
    this server (the client then asks once per topic, as it does replog)."""

    PARTITIONS = 64

    def __init__(self) -> None:
        self.address = ""

    async def GetMetadata(self, request: admin_pb2.GetMetadataRequest, context: object) -> object:
        partitions = [admin_pb2.PartitionMetadata(partition=p) for p in range(self.PARTITIONS)]
        return admin_pb2.Metadata(
            nodes=[admin_pb2.Node(id=0, address=self.address)],
            topics=[
                admin_pb2.TopicMetadata(
                    name=t, partitions=partitions, format=admin_pb2.TOPIC_FORMAT_RAW
                )
                for t in request.topics
            ],
        )


async def run_ceiling(ready_file: Path) -> None:
    import grpc

    server = grpc.aio.server()
    admin = CeilingAdmin()
    log_pb2_grpc.add_LogServicer_to_server(CeilingLog(), server)
    admin_pb2_grpc.add_AdminServicer_to_server(admin, server)
    port = server.add_insecure_port("127.0.0.1:0")
    admin.address = f"127.0.0.1:{port}"
    await server.start()
    ready_file.write_text(f"127.0.0.1:{port}\npid={os.getpid()}\n")
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(0)


# -- processes -------------------------------------------------------------------------------


class Proc:
    def __init__(self, cmd: list[str], ready: Path) -> None:
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{cmd} did not start")
            time.sleep(0.02)
        self.address = ready.read_text().splitlines()[0]

    def cpu_s(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


# -- measurements ----------------------------------------------------------------------------


def produce(client: Client, topic: str, records: int, partitions: int) -> float:
    values = [os.urandom(VALUE_BYTES) for _ in range(BATCH_RECORDS)]
    producer = client.producer(topic, acks="leader", partitions=partitions, in_flight_max=4)
    try:
        batches = records // BATCH_RECORDS
        started = time.perf_counter()
        futures = [producer.send_batch(values, i % partitions) for i in range(batches)]
        for fut in futures:
            fut.result()
        elapsed = time.perf_counter() - started
    finally:
        producer.close()
    return batches * BATCH_RECORDS / elapsed


def consume(client: Client, topic: str, records: int) -> float:
    consumer = client.consumer(topic, 0, 0)
    got = 0
    started = time.perf_counter()
    for batch in consumer.batches():
        got += len(batch)
        if got >= records:
            break
    elapsed = time.perf_counter() - started
    consumer.close()
    return got / elapsed


def latencies_ms(client: Client, topic: str, count: int) -> tuple[float, float]:
    value = [os.urandom(VALUE_BYTES)]
    for _ in range(min(100, count)):
        client.append(topic, 0, value, acks="leader")
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        client.append(topic, 0, value, acks="leader")
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return samples[len(samples) // 2], samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def measured(proc: Proc, fn: Callable[[], float], records: int) -> tuple[float, float]:
    cpu = proc.cpu_s()
    value = fn()
    return value, (proc.cpu_s() - cpu) / records * 1e6


def run_repeat(
    rep: int,
    targets: list[tuple[str, Proc, Client]],
    records: int,
    partitions: int,
    samples_n: int,
    add: Callable[[str, float], None],
) -> None:
    """One repeat of every bench on every target (suffix, process, client): replog, the
    ceiling, replog over TLS, replog with a plain (non-idempotent) client; which goes first
    rotates from one repeat to the next. Each target has a topic of its own."""
    for suffix, _, client in targets:
        if not suffix.endswith("_ceiling"):
            fmt = "envelope" if suffix == "_envelope" else "raw"
            client.create_topic(f"bench-{rep}{suffix}", partitions, format=fmt)
    order = targets[rep % len(targets) :] + targets[: rep % len(targets)]
    per_partition = records // partitions
    for suffix, proc, client in order:
        topic = f"bench-{rep}{suffix}"
        value, cpu = measured(proc, partial(produce, client, topic, records, partitions), records)
        add("produce" + suffix, value)
        add("produce_server_cpu_us_per_record" + suffix, cpu)
    for suffix, proc, client in order:
        topic = f"bench-{rep}{suffix}"
        value, cpu = measured(proc, partial(consume, client, topic, per_partition), per_partition)
        add("consume" + suffix, value)
        add("consume_server_cpu_us_per_record" + suffix, cpu)
    for suffix, _, client in order:
        p50, p99 = latencies_ms(client, f"bench-{rep}{suffix}", samples_n)
        add("produce_latency_p50_ms" + suffix, p50)
        add("produce_latency_p99_ms" + suffix, p99)
    for suffix, _, client in targets:
        if not suffix.endswith("_ceiling"):
            client.delete_topic(f"bench-{rep}{suffix}")


# -- main ------------------------------------------------------------------------------------


# length: the run in the order it happens (start, cases, write-up); a bench script, not served code
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a run of under 30 s")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--records", type=int, default=None, help="records per produce run")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--latency-samples", type=int, default=None)
    parser.add_argument("--dir", type=Path, default=None, help="parent of the scratch data dir")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument(
        "--envelope",
        action="store_true",
        help="also measure an envelope topic (records with timestamps) beside the raw one",
    )
    parser.add_argument(
        "--unary",
        action="store_true",
        help="also measure the idempotent client with streaming=False (unary Append)",
    )
    parser.add_argument("--write-unary-docs", action="store_true")
    parser.add_argument("--ceiling-server", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ceiling_server is not None:
        asyncio.run(run_ceiling(args.ceiling_server))
        return 0
    repeats = args.repeats or (2 if args.quick else 5)
    records = args.records or (200_000 if args.quick else 2_000_000)
    samples_n = args.latency_samples or (1000 if args.quick else 5000)

    results: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)

    with bench_tmpdir(args.dir, prefix="bench-e2e-") as tmp:
        info = machine_info(tmp)
        replog_cmd = [
            sys.executable, "-m", "replog", "serve", "--data-dir", str(tmp / "data"),
            "--listen", "127.0.0.1:0", "--metrics-listen", "", "--flush", "never",
            "--ready-file", str(tmp / "ready"), "--log-level", "WARNING",
        ]  # fmt: skip
        ceiling_cmd = [sys.executable, __file__, "--ceiling-server", str(tmp / "ceiling-ready")]
        ca = certs.create_ca(tmp / "tls")
        node = certs.issue_node(ca, tmp / "tls", 0)
        tls_cmd = [
            *replog_cmd[: replog_cmd.index("--data-dir")],
            "--data-dir", str(tmp / "data-tls"),
            *replog_cmd[replog_cmd.index("--listen") : replog_cmd.index("--ready-file")],
            "--ready-file", str(tmp / "ready-tls"), "--log-level", "WARNING",
            "--tls-cert-file", str(node.cert_file), "--tls-key-file", str(node.key_file),
            "--tls-ca-file", str(ca.cert_file),
        ]  # fmt: skip
        server = Proc(replog_cmd, tmp / "ready")
        ceiling = Proc(ceiling_cmd, tmp / "ceiling-ready")
        tls_server = Proc(tls_cmd, tmp / "ready-tls")
        retry = RetryPolicy(attempts_max=1)
        try:
            with (
                Client(server.address, retry=retry) as rc,
                Client(server.address, retry=retry, idempotent=False) as pc,
                Client(ceiling.address, retry=retry) as cc,
                Client(ceiling.address, retry=retry, streaming=False) as ucc,
                Client(tls_server.address, retry=retry, tls=ClientTls(ca.cert_file)) as tc,
                Client(server.address, retry=retry, streaming=False) as uc,
            ):
                targets = [
                    ("", server, rc),
                    ("_ceiling", ceiling, cc),
                    ("_tls", tls_server, tc),
                    ("_plain", server, pc),
                ]
                if args.envelope:  # the same idempotent client, an envelope topic
                    targets.append(("_envelope", server, rc))
                if args.unary:  # the same idempotent client without AppendStream
                    targets.append(("_unary", server, uc))
                    targets.append(("_unary_ceiling", ceiling, ucc))
                for rep in range(repeats):
                    run_repeat(rep, targets, records, args.partitions, samples_n, add)
                    log(
                        f"repeat {rep}: produce {results['produce'][-1]:,.0f}/s "
                        f"(ceiling {results['produce_ceiling'][-1]:,.0f}/s, "
                        f"TLS {results['produce_tls'][-1]:,.0f}/s), "
                        f"consume {results['consume'][-1]:,.0f}/s "
                        f"(ceiling {results['consume_ceiling'][-1]:,.0f}/s, "
                        f"TLS {results['consume_tls'][-1]:,.0f}/s), "
                        f"p50 {results['produce_latency_p50_ms'][-1]:.3f} ms "
                        f"(ceiling {results['produce_latency_p50_ms_ceiling'][-1]:.3f} ms, "
                        f"TLS {results['produce_latency_p50_ms_tls'][-1]:.3f} ms)"
                    )
        finally:
            server.stop()
            ceiling.stop()
            tls_server.stop()

    units = {
        "produce": "records/s",
        "consume": "records/s",
        "produce_latency_p50_ms": "ms",
        "produce_latency_p99_ms": "ms",
        "produce_server_cpu_us_per_record": "us/record",
        "consume_server_cpu_us_per_record": "us/record",
    }
    lines = []
    for name, unit in units.items():
        value = summarize(results[name]).median
        ceiling_samples = results.get(name + "_ceiling")
        ceiling = summarize(ceiling_samples).median if ceiling_samples else None
        emit(Result(name, round(value, 4), unit, None if ceiling is None else round(ceiling, 4)))
        lines.append((name, unit, results[name], ceiling_samples))
    tls_lines = []
    for name, unit in units.items():
        # TLS against plaintext: the plaintext replog is the reference ("ceiling") here
        value = summarize(results[name + "_tls"]).median
        plain = summarize(results[name]).median
        emit(Result(name + "_tls", round(value, 4), unit, round(plain, 4)))
        tls_lines.append((name, unit, results[name + "_tls"], results[name]))
    plain_lines = []
    for name, unit in units.items():
        # the default idempotent client against a plain one, same server, same run
        value = summarize(results[name]).median
        plain = summarize(results[name + "_plain"]).median
        emit(Result(name + "_vs_plain", round(value, 4), unit, round(plain, 4)))
        plain_lines.append((name, unit, results[name], results[name + "_plain"]))
    envelope_lines = []
    for name, unit in units.items() if args.envelope else ():
        # envelope topic against raw (idempotent both; and raw non-idempotent), same run
        value = summarize(results[name + "_envelope"]).median
        for against in ("", "_plain"):
            raw = summarize(results[name + against]).median
            emit(Result(f"{name}_envelope_vs_raw{against}", round(value, 4), unit, round(raw, 4)))
        envelope_lines.append(
            (name, unit, results[name + "_envelope"], results[name], results[name + "_plain"])
        )
    unary_lines = []
    for name, unit in units.items() if args.unary else ():
        # streaming (the default) against unary Append, same server, same run
        value = summarize(results[name]).median
        unary = summarize(results[name + "_unary"]).median
        emit(Result(name + "_vs_unary", round(value, 4), unit, round(unary, 4)))
        # unary Append against the do-nothing server driven by the same unary client
        ceiling = summarize(results[name + "_unary_ceiling"]).median
        emit(Result(name + "_unary", round(unary, 4), unit, round(ceiling, 4)))
        unary_lines.append(
            (
                name,
                unit,
                [results[name], results[name + "_ceiling"]],
                [results[name + "_unary"], results[name + "_unary_ceiling"]],
            )
        )
    if args.write_unary_docs and unary_lines:
        write_unary_docs(unary_lines, info, argv, repeats, records, args.partitions, samples_n)
    if args.write_docs:
        write_docs(
            lines,
            tls_lines,
            plain_lines,
            info,
            argv,
            repeats,
            records,
            args.partitions,
            samples_n,
            envelope_lines,
        )
    return 0


# length: the run in the order it happens (start, cases, write-up); a bench script, not served code
def write_docs(
    lines: list[tuple[str, str, list[float], list[float] | None]],
    tls_lines: list[tuple[str, str, list[float], list[float] | None]],
    plain_lines: list[tuple[str, str, list[float], list[float] | None]],
    info: dict[str, str],
    argv: list[str] | None,
    repeats: int,
    records: int,
    partitions: int,
    samples_n: int,
    envelope_lines: list[tuple[str, str, list[float], list[float], list[float]]],
) -> None:
    command = "python bench/e2e.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    body = [
        f"Command: `{command.strip()}` ({repeats} repeats, median; min..max in brackets).",
        f"Produce: {records:,} records of {VALUE_BYTES} bytes per run, batches of "
        f"{BATCH_RECORDS}, acks=leader, flush=never, {partitions} partition(s); consume reads "
        "them back through StreamFrom; latency: "
        f"{samples_n:,} sequential single-record Appends.",
        "Ceiling: a do-nothing grpc.aio server with the same service, driven by the same "
        "client code in the same run.",
        "",
        "| bench | value | ceiling | value / ceiling |",
        "|---|---|---|---|",
    ]
    for name, unit, samples, ceiling_samples in lines:
        s = summarize(samples)
        value = f"{s.median:,.3f} {unit} [{s.low:,.3f}..{s.high:,.3f}]"
        if ceiling_samples:
            c = summarize(ceiling_samples)
            ratio = f"{s.median / c.median:.2f}"
            ceiling = f"{c.median:,.3f} {unit}"
        else:
            ceiling = ratio = "-"
        body.append(f"| {name} | {value} | {ceiling} | {ratio} |")
    body += [
        "",
        "TLS against plaintext: the same replog server with TLS on (TLS 1.3, ECDSA P-256 "
        "certificate, server authentication), same client code, same repeats.",
        "",
        "| bench | TLS | plaintext | TLS / plaintext |",
        "|---|---|---|---|",
    ]
    for name, unit, samples, plain_samples in tls_lines:
        s = summarize(samples)
        p = summarize(plain_samples or [])
        body.append(
            f"| {name} | {s.median:,.3f} {unit} [{s.low:,.3f}..{s.high:,.3f}] | "
            f"{p.median:,.3f} {unit} | {s.median / p.median:.2f} |"
        )
    body += [
        "",
        "Idempotent producer against a plain one: the replog rows above use the default, "
        "idempotent client (producer id, sequence numbers, a batch header per batch); here "
        "the same server with `Client(idempotent=False)`, same repeats. Target: >= 0.8.",
        "",
        "| bench | idempotent | plain | idempotent / plain |",
        "|---|---|---|---|",
    ]
    for name, unit, samples, plain_samples in plain_lines:
        s = summarize(samples)
        p = summarize(plain_samples or [])
        body.append(
            f"| {name} | {s.median:,.3f} {unit} [{s.low:,.3f}..{s.high:,.3f}] | "
            f"{p.median:,.3f} {unit} | {s.median / p.median:.2f} |"
        )
    if envelope_lines:
        body += [
            "",
            "Envelope topic (new topics' default: each value in a 20-byte record head with its "
            "timestamp) against raw topics, same server, same repeats: with the same idempotent "
            "client, and against both off (raw topic, `Client(idempotent=False)`: issue 13's "
            "comparison, target >= 0.8 for produce).",
            "",
            "| bench | envelope + idempotent | raw + idempotent | ratio | raw + plain | ratio |",
            "|---|---|---|---|---|---|",
        ]
        for name, unit, env, raw, plain in envelope_lines:
            e, r, p = summarize(env), summarize(raw), summarize(plain)
            body.append(
                f"| {name} | {e.median:,.3f} {unit} [{e.low:,.3f}..{e.high:,.3f}] | "
                f"{r.median:,.3f} {unit} | {e.median / r.median:.2f} | "
                f"{p.median:,.3f} {unit} | {e.median / p.median:.2f} |"
            )
    body += ["", "Machine: " + "; ".join(f"{k}: {v}" for k, v in info.items()) + "."]
    body += ["", *NOTES]
    write_docs_section(SECTION, "\n".join(body))
    log(f"wrote {SECTION!r} to docs/benchmarks.md")


def write_unary_docs(
    lines: list[tuple[str, str, list[list[float]], list[list[float]]]],
    info: dict[str, str],
    argv: list[str] | None,
    repeats: int,
    records: int,
    partitions: int,
    samples_n: int,
) -> None:
    command = "python bench/e2e.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    body = [
        f"Command: `{command.strip()}` ({repeats} repeats, median; min..max in brackets).",
        "The default idempotent client (appends over AppendStream, up to 5 batches in flight "
        "per partition: the `Producer` and `Client.append`) against the same client with "
        "`streaming=False` (one unary Append per batch, one batch per partition in flight), "
        f"same server (flush=never), same repeats. Produce: {records:,} records of "
        f"{VALUE_BYTES} bytes per run, `Producer.send_batch` of {BATCH_RECORDS}, acks=leader, "
        f"{partitions} partition(s); latency: {samples_n:,} sequential single-record "
        "`Client.append`s, acks=leader. Each has its ceiling: the do-nothing server (its "
        "AppendStream answers each request with the next offsets) driven by the same client in "
        "the same run.",
        "",
        "| bench | streaming | / its ceiling | unary | / its ceiling | streaming / unary |",
        "|---|---|---|---|---|---|",
    ]
    for name, unit, (stream, stream_ceiling), (unary, unary_ceiling) in lines:
        s, sc = summarize(stream), summarize(stream_ceiling)
        u, uc = summarize(unary), summarize(unary_ceiling)
        body.append(
            f"| {name} | {s.median:,.3f} {unit} [{s.low:,.3f}..{s.high:,.3f}] | "
            f"{s.median / sc.median:.2f} (ceiling {sc.median:,.3f}) | "
            f"{u.median:,.3f} {unit} [{u.low:,.3f}..{u.high:,.3f}] | "
            f"{u.median / uc.median:.2f} (ceiling {uc.median:,.3f}) | "
            f"{s.median / u.median:.2f} |"
        )
    body += ["", "Machine: " + "; ".join(f"{k}: {v}" for k, v in info.items()) + "."]
    write_docs_section(UNARY_SECTION, "\n".join(body))
    log(f"wrote {UNARY_SECTION!r} to docs/benchmarks.md")


if __name__ == "__main__":
    sys.exit(main())
