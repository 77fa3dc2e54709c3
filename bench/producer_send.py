"""Record by record against batches (issues 29 and 32):
`python bench/producer_send.py [--records N] [--repeats R] [--partitions P] [--write-docs]`.

One `replog serve` (flush=never, metrics off) on 127.0.0.1; a new envelope topic (the
default format) of `--partitions` partitions per run. In the same process and the same run:

* `send`: `Producer.send(value)` of `--records` 100-byte values, one call per record (the
  default producer: linger 5 ms, idempotent AppendStream pipeline, acks="all"), then
  `flush()`; records/s = records / wall time from the first `send` to `flush` returning;
* `send_batch`: `Producer.send_batch(values)` of the same records in batches of 1000
  (round-robin over the partitions), then `flush()`: the anchor, no per-record work;
* `send_loop`: the bare Python loop that calls a do-nothing function once per record
  (the floor any per-record API pays in CPython on this machine).

Each of the two is also charged its CPU per record: the bench process's (user + system, all
its threads: `send` calls, the producer's sender, the pipeline, gRPC) and the server's.
On 2 cores the end-to-end rate is at most 1 / (the larger of the two) and 2 / (their sum).

The two alternate within each repeat (median of `--repeats`; min..max). Targets (issue 32
item 4): `send` within 1.5x of `send_batch` and >= 500 k records/s. Prints one JSON object
per result; `--write-docs` rewrites the `## Producer.send against send_batch
(bench/producer_send.py)` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import sys
import time

from _common import (
    Result,
    Summary,
    bench_tmpdir,
    emit,
    log,
    machine_info,
    process_cpu_s,
    summarize,
)
from _common import write_section as write_docs_section
from e2e import Proc

from replog.client import Client

VALUE_BYTES = 100
BATCH_RECORDS = 1000
SECTION = "## Producer.send against send_batch (bench/producer_send.py)"


def run_send(
    client: Client, topic: str, values: list[bytes], partitions: int
) -> tuple[float, float, float]:
    """Records/s to `flush` returning, records/s of the `send` calls alone (queued), and
    the CPU microseconds per `send` call of the calling thread (`time.thread_time`: the
    per-record Python, whatever else the machine runs)."""
    producer = client.producer(topic, partitions=partitions)
    try:
        send = producer.send
        started = time.perf_counter()
        cpu_started = time.thread_time()
        for value in values:
            send(value)
        cpu = time.thread_time() - cpu_started
        queued = time.perf_counter() - started
        producer.flush()
        elapsed = time.perf_counter() - started
    finally:
        producer.close()
    return len(values) / elapsed, len(values) / queued, cpu * 1e6 / len(values)


def run_send_batch(client: Client, topic: str, values: list[bytes], partitions: int) -> float:
    producer = client.producer(topic, partitions=partitions)
    try:
        started = time.perf_counter()
        for i in range(0, len(values), BATCH_RECORDS):
            producer.send_batch(values[i : i + BATCH_RECORDS], (i // BATCH_RECORDS) % partitions)
        producer.flush()
        elapsed = time.perf_counter() - started
    finally:
        producer.close()
    return len(values) / elapsed


def bound(charged: dict[str, Summary]) -> str:
    """What 2 cores allow `send` at the CPU per record this run measured (both processes'
    CPU together; either may use more than one core: gRPC's threads run beside Python's)."""
    own = charged["send_client_cpu_us"].median
    served = charged["send_server_cpu_us"].median
    return (
        f"At {own:.2f} us (bench process) + {served:.2f} us (server) of CPU per record, the "
        f"two processes' CPU allows `send` at most {2e6 / (own + served):,.0f} records/s on "
        "2 cores with nothing else running."
    )


def own_cpu_s() -> float:
    """This process's CPU time so far (all threads, user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_loop(values: list[bytes]) -> float:
    def nothing(value: bytes) -> None:
        return None

    started = time.perf_counter()
    for value in values:
        nothing(value)
    return len(values) / (time.perf_counter() - started)


# length: the run in the order it happens (start, cases, write-up); a bench script, not served code
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--format", choices=("envelope", "raw"), default="envelope")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    values = [os.urandom(VALUE_BYTES) for _ in range(args.records)]
    results: dict[str, list[float]] = {}
    with bench_tmpdir(None, prefix="bench-send-") as tmp:
        info = machine_info(tmp)
        server = Proc(
            [
                sys.executable, "-m", "replog", "serve", "--data-dir", str(tmp / "data"),
                "--listen", "127.0.0.1:0", "--metrics-listen", "", "--flush", "never",
                "--ready-file", str(tmp / "ready"), "--log-level", "WARNING",
            ],
            tmp / "ready",
        )  # fmt: skip
        try:
            with Client(server.address) as client:
                for rep in range(args.repeats):
                    order = ["send", "send_batch"] if rep % 2 == 0 else ["send_batch", "send"]
                    for name in order:
                        topic = f"bench-{rep}-{name}"
                        client.create_topic(topic, args.partitions, format=args.format)
                        cpu_before = own_cpu_s(), process_cpu_s(server.proc.pid)
                        if name == "send":
                            rate, queued, cpu_us = run_send(client, topic, values, args.partitions)
                            results.setdefault("send_queued", []).append(queued)
                            results.setdefault("send_cpu_us", []).append(cpu_us)
                        else:
                            rate = run_send_batch(client, topic, values, args.partitions)
                        results.setdefault(name, []).append(rate)
                        own, served = own_cpu_s(), process_cpu_s(server.proc.pid)
                        per_record = 1e6 / args.records
                        results.setdefault(f"{name}_client_cpu_us", []).append(
                            (own - cpu_before[0]) * per_record
                        )
                        results.setdefault(f"{name}_server_cpu_us", []).append(
                            (served - cpu_before[1]) * per_record
                        )
                        client.delete_topic(topic)
                    results.setdefault("send_loop", []).append(run_loop(values))
                    log(
                        f"repeat {rep}: "
                        + ", ".join(
                            f"{k} {v[-1]:.2f} us" if k.endswith("_us") else f"{k} {v[-1]:,.0f}/s"
                            for k, v in sorted(results.items())
                        )
                    )
        finally:
            server.stop()
    send, batch, loop, queued = (
        summarize(results[k]) for k in ("send", "send_batch", "send_loop", "send_queued")
    )
    emit(Result("producer_send", round(send.median, 1), "records/s", batch.median))
    emit(Result("producer_send_queued", round(queued.median, 1), "records/s"))
    cpu = summarize(results["send_cpu_us"])
    emit(Result("producer_send_cpu", round(cpu.median, 3), "us/record"))
    emit(Result("producer_send_batch", round(batch.median, 1), "records/s"))
    emit(Result("python_call_loop", round(loop.median, 1), "calls/s"))
    charged = {
        k: summarize(results[k])
        for k in (
            "send_client_cpu_us",
            "send_server_cpu_us",
            "send_batch_client_cpu_us",
            "send_batch_server_cpu_us",
        )
    }
    for k, v in charged.items():
        emit(Result(f"producer_{k.removesuffix('_us')}", round(v.median, 3), "us/record"))
    if args.write_docs:
        ratio = batch.median / send.median
        verdict = (
            f"send_batch / send = {ratio:.2f} (target <= 1.5: "
            f"{'met' if ratio <= 1.5 else 'NOT met'}); send {send.median:,.0f} records/s "
            f"(target >= 500,000: {'met' if send.median >= 500_000 else 'NOT met'})."
        )
        command = "python bench/producer_send.py " + shlex.join(argv or sys.argv[1:])
        body = [
            f"Command: `{command.strip()}` ({args.repeats} repeats, median; min..max in "
            "brackets; the two alternate within each repeat).",
            f"{args.records:,} records of {VALUE_BYTES} bytes per run, one node, flush=never, "
            f"a new {args.format} topic of {args.partitions} partition(s) per run, the default "
            "producer (linger 5 ms, idempotent pipeline, acks=all); `send_batch` in batches "
            f"of {BATCH_RECORDS}. The loop row is a do-nothing Python call per record: the "
            "floor of any per-record API in this interpreter on this machine. The queued row "
            "is the rate of the `send` calls themselves (the per-record Python), the send row "
            "the rate to every record acknowledged.",
            "Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()) + ".",
            "",
            "| bench | records/s (median) | min..max |",
            "|---|---:|---:|",
            f"| `Producer.send`, one call per record | {send.median:,.0f} | "
            f"{send.low:,.0f}..{send.high:,.0f} |",
            f"| `Producer.send` calls alone (queued, before `flush`) | {queued.median:,.0f} | "
            f"{queued.low:,.0f}..{queued.high:,.0f} |",
            f"| `send` CPU per call, calling thread (us; lower is better) | {cpu.median:.2f} | "
            f"{cpu.low:.2f}..{cpu.high:.2f} |",
            f"| `Producer.send_batch`, 1000 a call (anchor) | {batch.median:,.0f} | "
            f"{batch.low:,.0f}..{batch.high:,.0f} |",
            f"| bare Python call loop (floor) | {loop.median:,.0f} | "
            f"{loop.low:,.0f}..{loop.high:,.0f} |",
            "",
            "| CPU per record (us; lower is better) | bench process | server |",
            "|---|---:|---:|",
            *(
                f"| `{name}` | {charged[name + '_client_cpu_us'].median:.2f} "
                f"[{charged[name + '_client_cpu_us'].low:.2f}.."
                f"{charged[name + '_client_cpu_us'].high:.2f}] | "
                f"{charged[name + '_server_cpu_us'].median:.2f} "
                f"[{charged[name + '_server_cpu_us'].low:.2f}.."
                f"{charged[name + '_server_cpu_us'].high:.2f}] |"
                for name in ("send", "send_batch")
            ),
            "",
            f"In this run: {verdict} {bound(charged)}",
        ]
        write_docs_section(SECTION, "\n".join(body) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
