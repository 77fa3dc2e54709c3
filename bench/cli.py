"""CLI throughput (issue 29): `python bench/cli.py [--lines N] [--repeats R] [--write-docs]`.

One `replog serve` process (flush=never, metrics off) on 127.0.0.1, one partition per topic.
The input is `--lines` lines of `--line-bytes` bytes (newline included), in a file.

* `cli_produce`: `replog produce TOPIC < FILE` as a user runs it (a new process; its start
  counted), lines/s = lines / wall time. The `replog` package is compiled to bytecode
  first (compileall), as `pip install` does: a process started with PYTHONDONTWRITEBYTECODE
  set would otherwise compile every module it imports, each time.
* `cli_consume`: `replog consume TOPIC > FILE` (every record, to a file; the line count is
  checked), lines/s = lines / wall time.
* `cli_consume_format`: the same with a kcat format string `-f '%p %o %k %s\\n'` (one
  `%`-template per record).
* `_per_cpu_s`: lines per CPU second (user + system) of the same runs: the `replog`
  process's (RUSAGE_CHILDREN), or the bench process's for the anchors (RUSAGE_SELF).
* anchors, in the same process as the bench, in the same repeats: `client_produce` the
  Python client's `Producer.send_batch` of the same lines in the batches `produce` makes
  (`batch_slices`: 10,000 records, at most 1 MiB of values), `client_consume` its
  `Consumer.batches()` (StreamFrom + decode) over the same records, without printing.

Each runs `--repeats` times (median, min and max reported); every repeat writes new topics.
Prints one JSON object per line on stdout; `--write-docs` rewrites the
`## CLI throughput (bench/cli.py)` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from _common import Result, bench_tmpdir, emit, log, machine_info, summarize
from _common import write_section as write_docs_section

import replog as replog_package
from replog.cli.produce import BATCH_BYTES, BATCH_RECORDS, batch_slices
from replog.client import Client

HEADING = "## CLI throughput (bench/cli.py)"
READY_WAIT_S = 60.0
CONSUME_FORMAT = "%p %o %k %s\\n"


def write_input(path: Path, lines: int, line_bytes: int) -> None:
    pad = b"x" * max(line_bytes - 11, 0)
    with path.open("wb") as f:
        for start in range(0, lines, 100_000):
            f.write(
                b"".join(
                    b"%010d" % i + pad + b"\n" for i in range(start, min(start + 100_000, lines))
                )
            )


def start_server(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    ready = data / "ready"
    proc = subprocess.Popen(
        [sys.executable, "-m", "replog", "serve", "--data-dir", str(data / "node"),
         "--listen", "127.0.0.1:0", "--ready-file", str(ready), "--flush", "never",
         "--metrics-listen", ""],
        stdout=subprocess.DEVNULL, stderr=(data / "server.log").open("wb"),
    )  # fmt: skip
    deadline = time.monotonic() + READY_WAIT_S
    while not (ready.exists() and ready.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"replog serve did not start: see {data / 'server.log'}")
        time.sleep(0.1)
    return proc, ready.read_text().splitlines()[0].strip()


def compile_package() -> None:
    """Bytecode for every module of the `replog` the commands import, as `pip install`
    writes it: without it (a checkout run with PYTHONDONTWRITEBYTECODE set) each `replog`
    process would compile its modules again, a cost no installed command pays."""
    if not compileall.compile_dir(Path(replog_package.__file__).parent, quiet=1):
        raise SystemExit("compileall failed on the replog package")


def cpu_s(who: int) -> float:
    """User + system CPU seconds of this process (RUSAGE_SELF, every thread) or of its
    waited-for children (RUSAGE_CHILDREN: the `replog` commands, not the running server)."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def replog(
    address: str, *args: str, stdin: Path | None = None, stdout: Path | None = None
) -> float:
    """Run `replog ARGS --address ADDRESS`; its wall time in seconds."""
    started = time.perf_counter()
    with (
        (stdin or Path(os.devnull)).open("rb") as src,
        (stdout or Path(os.devnull)).open("wb") as dst,
    ):
        done = subprocess.run(
            [sys.executable, "-m", "replog", *args, "--address", address],
            stdin=src, stdout=dst, stderr=subprocess.PIPE, check=False, timeout=600,
        )  # fmt: skip
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"replog {' '.join(args)}: exit {done.returncode}: {done.stderr!r}")
    return elapsed


def client_produce(client: Client, topic: str, source: Path) -> float:
    values = source.read_bytes().split(b"\n")[:-1]
    started = time.perf_counter()
    producer = client.producer(
        topic,
        acks="all",
        partitions=1,
        batch_records_max=BATCH_RECORDS,
        batch_bytes_max=BATCH_BYTES,
    )
    try:
        for cut in batch_slices(list(map(len, values)), BATCH_RECORDS, BATCH_BYTES):
            producer.send_batch(values[cut], 0)
        producer.flush()
    finally:
        producer.close()
    return time.perf_counter() - started


def client_consume(client: Client, topic: str, lines: int) -> float:
    started = time.perf_counter()
    consumer = client.consumer(topic, 0, "earliest")
    seen = 0
    try:
        for batch in consumer.batches():
            seen += len(batch)
            if seen >= lines:
                break
    finally:
        consumer.close()
    return time.perf_counter() - started


def count_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def one_repeat(address: str, client: Client, work: Path, r: int, lines: int) -> dict[str, float]:
    source = work / "input.txt"
    out = work / "output.txt"
    rates: dict[str, float] = {}

    def timed(name: str, run: Callable[[], float]) -> None:
        who = resource.RUSAGE_SELF if name.startswith("client") else resource.RUSAGE_CHILDREN
        cpu_before = cpu_s(who)
        rates[name] = lines / run()
        rates[name + "_per_cpu_s"] = lines / max(cpu_s(who) - cpu_before, 1e-9)
        log(
            f"  repeat {r}: {name} {rates[name]:,.0f} lines/s, "
            f"{rates[name + '_per_cpu_s']:,.0f} lines per CPU second"
        )

    for topic in (f"cli-{r}", f"client-{r}"):
        client.create_topic(topic, 1, 1)
    timed("cli_produce", lambda: replog(address, "produce", f"cli-{r}", stdin=source))
    timed("client_produce", lambda: client_produce(client, f"client-{r}", source))
    timed("cli_consume", lambda: replog(address, "consume", f"cli-{r}", stdout=out))
    if count_lines(out) != lines:
        raise SystemExit(f"consume printed {count_lines(out)} lines, not {lines}")
    fmt = ("-f", CONSUME_FORMAT.replace("\\\\", "\\"))
    timed("cli_consume_format", lambda: replog(address, "consume", f"cli-{r}", *fmt, stdout=out))
    if count_lines(out) != lines:
        raise SystemExit(f"consume -f printed {count_lines(out)} lines, not {lines}")
    timed("client_consume", lambda: client_consume(client, f"client-{r}", lines))
    # A command's fixed cost: `replog consume T -c 1` (start-up, connect, one record).
    cpu_before = cpu_s(resource.RUSAGE_CHILDREN)
    rates["cli_start_s"] = replog(address, "consume", f"cli-{r}", "-c", "1", stdout=out)
    rates["cli_start_cpu_s"] = cpu_s(resource.RUSAGE_CHILDREN) - cpu_before
    start, start_cpu = rates["cli_start_s"], rates["cli_start_cpu_s"]
    log(f"  repeat {r}: consume -c 1 {start:.2f} s, CPU {start_cpu:.2f} s")
    return rates


def docs_body(
    args: argparse.Namespace, info: dict[str, str], medians: dict[str, tuple[float, float, float]]
) -> str:
    rows = [
        ("`replog produce T < file`", "cli_produce", "client_produce"),
        ("`replog consume T > file`", "cli_consume", "client_consume"),
        (
            f"`replog consume T -f '{CONSUME_FORMAT}' > file`",
            "cli_consume_format",
            "client_consume",
        ),
    ]
    lines = [
        f"Command: `python bench/cli.py --lines {args.lines} --line-bytes {args.line_bytes} "
        f"--repeats {args.repeats} --write-docs`. One `replog serve` (flush=never), one "
        "partition per topic; each CLI figure is a new `replog` process, its start-up "
        "included (lines / wall time), from bytecode compiled beforehand as `pip install` "
        "does. The anchor is the Python client under the CLI, "
        "driven in the same run: `Producer.send_batch` of the same lines in the batches "
        f"`produce` makes ({BATCH_RECORDS:,} records, at most {BATCH_BYTES >> 20} MiB of "
        "values), `Consumer.batches()` over the same records without printing.",
        "",
        "| machine | |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in info.items()),
        "",
        "| command | lines/s (median) | min - max | Python client (anchor) | CLI / client "
        "| lines per CPU s: CLI | client |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, name, anchor in rows:
        med, low, high = medians[name]
        a = medians[anchor][0]
        cpu, cpu_anchor = medians[name + "_per_cpu_s"][0], medians[anchor + "_per_cpu_s"][0]
        lines.append(
            f"| {label} | {med:,.0f} | {low:,.0f} - {high:,.0f} | {a:,.0f} | {med / a:.2f} "
            f"| {cpu:,.0f} | {cpu_anchor:,.0f} |"
        )
    verdicts = [
        f"{what} {medians[name][0]:,.0f} lines/s against {target:,}: "
        + ("met" if medians[name][0] >= target else "NOT met")
        for what, name, target in (
            ("consume", "cli_consume", 500_000),
            ("produce", "cli_produce", 300_000),
        )
    ]
    per_cpu = [
        f"{what} {medians[name + '_per_cpu_s'][0]:,.0f} lines per CPU second: "
        + ("at or above" if medians[name + "_per_cpu_s"][0] >= target else "below")
        + f" {target:,}"
        for what, name, target in (
            ("consume", "cli_consume", 500_000),
            ("produce", "cli_produce", 300_000),
        )
    ]
    start, start_cpu = medians["cli_start_s"][0], medians["cli_start_cpu_s"][0]
    lines += [
        "",
        f"A command's fixed cost in this run (`replog consume T -c 1`: start-up, connect, one "
        f"record; medians): {start:.2f} s wall, {start_cpu:.2f} s CPU. It is in every CLI "
        f"figure above: {args.lines:,} lines at 500 k lines/s leave "
        f"{args.lines / 500_000 - start:.2f} s for the lines themselves at this start-up.",
        "",
        f"In this run (wall time, medians): {'; '.join(verdicts)}. "
        "Targets (issue 29): consume to stdout >= 500 k lines/s, produce >= 300 k lines/s. "
        "The machine is shared (2 cores, other jobs running: see the load average), so "
        "compare the CLI with its anchor of the same run rather than across runs. Lines per "
        "CPU second (user + system, of the `replog` process; of the bench process for the "
        "client, its gRPC threads included; the server's not counted) is what each costs: "
        "the wall-time rate an idle core would give, less the server's share. By that "
        f"measure, in this run: {'; '.join(per_cpu)}.",
    ]
    return "\n".join(textwrap.fill(x, 95) if x and x[0] not in "|" else x for x in lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--line-bytes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    with bench_tmpdir(prefix="bench-cli-") as work:
        info = machine_info(work)
        write_input(work / "input.txt", args.lines, args.line_bytes)
        compile_package()
        proc, address = start_server(work)
        samples: dict[str, list[float]] = {}
        try:
            with Client(address) as client:
                for r in range(args.repeats):
                    for name, rate in one_repeat(address, client, work, r, args.lines).items():
                        samples.setdefault(name, []).append(rate)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    medians = {}
    for name, values in samples.items():
        s = summarize(values)
        medians[name] = (s.median, s.low, s.high)
        unit = "s" if name.startswith("cli_start") else "lines/s"
        emit(Result(name, s.median, "lines/cpu_s" if name.endswith("_per_cpu_s") else unit))
    if args.write_docs:
        write_docs_section(HEADING, docs_body(args, info, medians))


if __name__ == "__main__":
    main()
