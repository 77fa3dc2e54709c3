"""Storage engine benchmark (issue 2, "Benchmark"): `python bench/storage.py [--quick]`.

Prints one JSON object per line on stdout (see `bench/_common.py`); progress goes to stderr.
Each bench runs `--repeats` times (median reported). Within one repeat the engine and its
ceiling are interleaved: the work is cut into `SLICES` slices and the two sides take turns
(alternating which goes first), each accumulating only its own time, so that load from other
jobs on the shared box hits both sides alike and the ratio compares like with like.
`--write-docs` rewrites the `## Storage (bench/storage.py)` section of `docs/benchmarks.md`
and nothing else.

What is measured (values are 100 random bytes; frames are `[offset u64][length u32][value]`,
i.e. 112 bytes; data lives in a scratch dir on the repository's filesystem unless `--dir`):

* `append_batch`: `PartitionLog.append(batch)` with 1000 records per batch, `flush=never`,
  default config (1 MiB segments, 4 KiB index interval). Ceiling: a plain Python loop that
  encodes the same frames (`struct.pack(">QI", offset, len(v)) + v`), joins each 1000 and
  `os.write`s them to one file in the same directory.
* `append_single`: `PartitionLog.append([value])`, one record per call, `flush=never`.
* `read_sequential`: committed records (HW = LEO) read from offset 0 to HW with
  `PartitionLog.read(offset, 1 MiB)` in a loop, each reply decoded with
  `replog.frames.decode`. Ceiling: the same segment files `os.pread` in 1 MiB chunks (whole
  frames) and scanned with `list(struct.iter_unpack(">QI100s", chunk))`. Page cache warm.
* `read_random`: `PartitionLog.read(offset, 4096, end_offset=offset + 1)` + decode (exactly
  one record) at uniformly random committed offsets; throughput and per-read p50/p99.
* `append_flush_always_1thread`: `flush=always`, one thread calling `append([value])` in a
  loop, each append fsynced before the next. The storage has one writer, the replica
  driver, which groups concurrent requests itself: `bench/group_commit.py` measures that.

Timers exclude opening the log and the final fsync/close; each append measurement is
followed by an untimed fsync so dirty-page writeback does not leak into the next one.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shlex
import struct
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    REPO_ROOT,
    Result,
    bench_tmpdir,
    emit,
    load_average,
    log,
    machine_info,
    summarize,
    write_section,
)

from replog import frames
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.storage.open_files import OpenFiles, files_max_for, nofile_soft_limit

SECTION = "## Storage (bench/storage.py)"
VALUE_BYTES = 100
FRAME_BYTES = frames.HEADER_BYTES + VALUE_BYTES
BATCH_RECORDS = 1000
READ_BYTES_MAX = 1024 * 1024  # per sequential read call (a consumer's fetch budget)
RANDOM_READ_BYTES_MAX = 4096
SLICES = 20  # engine and ceiling alternate this many times per repeat (the box is shared)
SEED = 20261122

TARGET_APPEND_BATCH = 3_000_000  # records/s
TARGET_APPEND_BATCH_RATIO = 0.55  # of the plain-loop ceiling
TARGET_READ_SEQUENTIAL = 4_000_000  # records/s


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work one repeat does."""

    batch_records: int  # append_batch / read_sequential (rounded up to whole batches)
    single_records: int  # append_single
    random_reads: int  # read_random
    always_records: int  # append_flush_always_1thread

    @classmethod
    def scaled(cls, records: int) -> Sizes:
        return cls(
            batch_records=records,
            single_records=max(records // 10, 10),
            random_reads=max(records // 10, 10),
            always_records=max(records // 2000, 5),
        )


FULL = Sizes(1_000_000, 100_000, 100_000, 1000)
QUICK = Sizes(200_000, 20_000, 20_000, 200)


@dataclass(slots=True)
class Samples:
    """Per-repeat measurements of one bench (value, and the same-run ceiling if any)."""

    unit: str
    values: list[float] = field(default_factory=list)
    ceilings: list[float] = field(default_factory=list)

    def add(self, value: float, ceiling: float | None = None) -> None:
        self.values.append(value)
        if ceiling is not None:
            self.ceilings.append(ceiling)

    @property
    def ratios(self) -> list[float]:
        return [v / c for v, c in zip(self.values, self.ceilings, strict=True) if c > 0]


# -- data --------------------------------------------------------------------------------------


def make_values(count: int = BATCH_RECORDS, seed: int = SEED) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(VALUE_BYTES) for _ in range(count)]


def open_log(directory: Path, flush: FlushPolicy) -> PartitionLog:
    # Counted in an open-files budget as the server's logs are: every operation pays the
    # budget's cache hit (`replog.storage.open_files`).
    files = OpenFiles(files_max_for(nofile_soft_limit()))
    return PartitionLog(directory, "bench", 0, StorageConfig(flush=flush), files)


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _batches(records: int) -> int:
    return max(1, -(-records // BATCH_RECORDS))


# -- append ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pair:
    """Engine and ceiling rates (records/s) measured in interleaved slices of one repeat."""

    engine: float
    ceiling: float


def append_batch_pair(
    directory: Path, values: list[bytes], records: int, engine_first: bool
) -> tuple[Pair, PartitionLog]:
    """Batched appends through the engine vs the plain loop, alternating in `SLICES` slices.

    Returns the rates and the engine's log (open, flushed) for the read benches.
    """
    plog = open_log(directory / "engine", FlushPolicy.NEVER)
    fd = os.open(directory / "ceiling.log", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    batches = _batches(records)
    step = -(-batches // SLICES)
    append, clock = plog.append, time.perf_counter
    engine_s = ceiling_s = 0.0
    offset = done = 0
    try:
        gc.collect()
        while done < batches:
            k = min(step, batches - done)
            for engine_turn in (engine_first, not engine_first):
                start = clock()
                if engine_turn:
                    for _ in range(k):
                        append(values)
                    engine_s += clock() - start
                else:
                    offset = ceiling_append_batches(fd, values, offset, k)
                    ceiling_s += clock() - start
            done += k
            engine_first = not engine_first
        os.fsync(fd)  # untimed, as plog.flush(): keep writeback out of the next measurement
    finally:
        os.close(fd)
    plog.flush()
    count = batches * len(values)
    return Pair(count / engine_s, count / ceiling_s), plog


def ceiling_append_batches(fd: int, values: list[bytes], offset: int, batches: int) -> int:
    """The plain loop: struct.pack + value per record, join, one os.write per batch.

    Writes `batches` batches of `values` from `offset`; returns the next offset.
    """
    pack = struct.pack
    for _ in range(batches):
        parts = []
        for value in values:
            parts.append(pack(">QI", offset, len(value)) + value)
            offset += 1
        buf = b"".join(parts)
        written = 0
        while written < len(buf):
            written += os.write(fd, buf[written:])
    return offset


def engine_append_single(directory: Path, values: list[bytes], records: int) -> float:
    plog = open_log(directory, FlushPolicy.NEVER)
    try:
        append = plog.append
        singles = [[v] for v in values]
        rounds, rest = divmod(records, len(singles))
        work = singles * rounds + singles[:rest]
        gc.collect()
        start = time.perf_counter()
        for one in work:
            append(one)
        elapsed = time.perf_counter() - start
        plog.flush()
    finally:
        plog.close()
    return len(work) / elapsed


def engine_append_flush_always(directory: Path, values: list[bytes], count: int) -> float:
    """One writer (as the replica driver is) appending single records under flush=always:
    records/s, each append fsynced before the next."""
    plog = open_log(directory, FlushPolicy.ALWAYS)
    work = [[values[i % len(values)]] for i in range(count)]
    append = plog.append
    try:
        gc.collect()
        start = time.perf_counter()
        for one in work:
            append(one)
        elapsed = time.perf_counter() - start
        assert plog.log_end_offset == count, "every append must have landed"
    finally:
        plog.close()
    return count / elapsed


# -- read --------------------------------------------------------------------------------------


def read_sequential_pair(plog: PartitionLog, paths: Sequence[Path], engine_first: bool) -> Pair:
    """Committed records through `read` + `decode` vs `pread` + `iter_unpack` of the same
    segment files, alternating in up to `SLICES` slices (each a run of whole segments)."""
    read, decode = plog.read, frames.decode
    chunk_bytes = READ_BYTES_MAX // FRAME_BYTES * FRAME_BYTES
    fmt = f">QI{VALUE_BYTES}s"
    hw = plog.high_watermark
    n = min(SLICES, len(paths))
    groups = [paths[i * len(paths) // n : (i + 1) * len(paths) // n] for i in range(n)]
    targets = [int(g[0].stem) for g in groups[1:]] + [hw]  # segment names are base offsets
    fds = [[(os.open(p, os.O_RDONLY), p.stat().st_size) for p in g] for g in groups]
    clock = time.perf_counter
    engine_s = ceiling_s = 0.0
    offset, engine_count, ceiling_count = plog.log_start_offset, 0, 0
    try:
        gc.collect()
        for target, files in zip(targets, fds, strict=True):
            for engine_turn in (engine_first, not engine_first):
                start = clock()
                if engine_turn:
                    while offset < target:
                        batch = decode(read(offset, READ_BYTES_MAX))
                        engine_count += len(batch)
                        offset = batch.offsets[-1] + 1
                    engine_s += clock() - start
                else:
                    for fd, size in files:
                        pos = 0
                        while pos < size:
                            chunk = os.pread(fd, chunk_bytes, pos)
                            ceiling_count += len(list(struct.iter_unpack(fmt, chunk)))
                            pos += len(chunk)
                    ceiling_s += clock() - start
            engine_first = not engine_first
    finally:
        for files in fds:
            for fd, _ in files:
                os.close(fd)
    expected = hw - plog.log_start_offset
    assert engine_count == ceiling_count == expected, "both sides must see every record"
    return Pair(engine_count / engine_s, ceiling_count / ceiling_s)


def engine_read_random(
    plog: PartitionLog, reads: int, seed: int = SEED
) -> tuple[float, float, float]:
    """(records/s, p50 ms, p99 ms) of one-record reads at random committed offsets."""
    rng = random.Random(seed)
    lo, hw = plog.log_start_offset, plog.high_watermark
    offsets = [rng.randrange(lo, hw) for _ in range(reads)]
    read, decode = plog.read, frames.decode
    clock = time.perf_counter_ns
    latencies = [0] * reads
    gc.collect()
    start = clock()
    for i, offset in enumerate(offsets):
        t = clock()
        batch = decode(read(offset, RANDOM_READ_BYTES_MAX, end_offset=offset + 1))
        latencies[i] = clock() - t
        if batch.offsets[0] != offset:
            raise AssertionError(f"read at {offset} returned {batch.offsets[0]}")
    elapsed_ns = clock() - start
    latencies.sort()
    p50 = latencies[len(latencies) // 2] / 1e6
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] / 1e6
    return reads / (elapsed_ns / 1e9), p50, p99


# -- one repeat, many repeats ------------------------------------------------------------------


def new_samples() -> dict[str, Samples]:
    return {
        "append_batch": Samples("records/s"),
        "append_single": Samples("records/s"),
        "read_sequential": Samples("records/s"),
        "read_random": Samples("records/s"),
        "read_random_p50_ms": Samples("ms"),
        "read_random_p99_ms": Samples("ms"),
        "append_flush_always_1thread": Samples("records/s"),
    }


def run_once(work_dir: Path, sizes: Sizes, repeat: int, samples: dict[str, Samples]) -> None:
    """One repeat of every bench in a fresh subdirectory of `work_dir`."""
    base = work_dir / f"run-{repeat}"
    base.mkdir()
    values = make_values()
    engine_first = repeat % 2 == 0

    # append_batch vs its ceiling, then the reads over the log just written (HW = LEO)
    pair, plog = append_batch_pair(base, values, sizes.batch_records, engine_first)
    samples["append_batch"].add(pair.engine, pair.ceiling)
    try:
        segs = segment_files(base / "engine")
        engine_bytes = sum(p.stat().st_size for p in segs)
        ceiling = base / "ceiling.log"
        assert engine_bytes == ceiling.stat().st_size, "engine and ceiling wrote the same bytes"
        ceiling.unlink()
        plog.set_high_watermark(plog.log_end_offset)
        pair = read_sequential_pair(plog, segs, engine_first)
        samples["read_sequential"].add(pair.engine, pair.ceiling)
        rate, p50, p99 = engine_read_random(plog, sizes.random_reads, SEED + repeat)
        samples["read_random"].add(rate)
        samples["read_random_p50_ms"].add(p50)
        samples["read_random_p99_ms"].add(p99)
    finally:
        plog.close()

    samples["append_single"].add(
        engine_append_single(base / "single", values, sizes.single_records)
    )
    samples["append_flush_always_1thread"].add(
        engine_append_flush_always(base / "always1", values, sizes.always_records)
    )


def run_all(
    work_dir: Path, sizes: Sizes, repeats: int, progress: Callable[[str], None] = log
) -> dict[str, Samples]:
    samples = new_samples()
    for repeat in range(repeats):
        started = time.perf_counter()
        run_once(work_dir, sizes, repeat, samples)
        progress(
            f"repeat {repeat + 1}/{repeats} ({time.perf_counter() - started:.1f} s): "
            + ", ".join(f"{name}={s.values[-1]:,.3g}" for name, s in samples.items())
            + "; vs ceiling: "
            + ", ".join(f"{name}={s.ratios[-1]:.0%}" for name, s in samples.items() if s.ceilings)
        )
    return samples


def results(samples: dict[str, Samples]) -> list[Result]:
    """The median of each bench, with the median same-run ceiling where there is one."""
    out = []
    for name, s in samples.items():
        ceiling = summarize(s.ceilings).median if s.ceilings else None
        out.append(Result(name, summarize(s.values).median, s.unit, ceiling))
    return out


# -- docs --------------------------------------------------------------------------------------


def _num(x: float, unit: str) -> str:
    if unit == "records/s":
        return f"{x:,.0f}"
    return f"{x:.3g}"


def _pass(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def verdicts(samples: dict[str, Samples]) -> dict[str, tuple[str, str]]:
    """Target text and PASS/MISS of the medians, per bench that has a target."""
    batch = summarize(samples["append_batch"].values).median
    ratio = summarize(samples["append_batch"].ratios).median
    seq = summarize(samples["read_sequential"].values).median
    return {
        "append_batch": (
            f">= {TARGET_APPEND_BATCH:,} records/s; >= {TARGET_APPEND_BATCH_RATIO:.0%} of ceiling",
            f"{_pass(batch >= TARGET_APPEND_BATCH)}; {_pass(ratio >= TARGET_APPEND_BATCH_RATIO)}",
        ),
        "read_sequential": (
            f">= {TARGET_READ_SEQUENTIAL:,} records/s",
            _pass(seq >= TARGET_READ_SEQUENTIAL),
        ),
    }


def ceiling_notes(samples: dict[str, Samples]) -> list[str]:
    """Say so when a ceiling itself is below an absolute target on this machine."""
    notes = []
    for name, target in (
        ("append_batch", TARGET_APPEND_BATCH),
        ("read_sequential", TARGET_READ_SEQUENTIAL),
    ):
        ceiling = summarize(samples[name].ceilings).median
        if ceiling < target:
            notes.append(
                f"- On this machine the `{name}` ceiling itself ({ceiling:,.0f} records/s) is "
                f"below the absolute target ({target:,}): the target is out of reach here even "
                "at 100% of the ceiling."
            )
    return notes


def docs_section(
    samples: dict[str, Samples], machine: dict[str, str], command: str, sizes: Sizes
) -> str:
    verdict = verdicts(samples)
    rows = [
        "| bench | median | min | max | unit | ceiling (median) | ratio median (min-max) "
        "| target | result |",
        "|---|---:|---:|---:|---|---:|---|---|---|",
    ]
    for name, s in samples.items():
        v = summarize(s.values)
        if s.ceilings:
            c = summarize(s.ceilings)
            r = summarize(s.ratios)
            ceiling = _num(c.median, s.unit)
            ratio = f"{r.median:.0%} ({r.low:.0%}-{r.high:.0%})"
        else:
            ceiling = ratio = "-"
        target, result = verdict.get(name, ("report", "-"))
        rows.append(
            f"| `{name}` | {_num(v.median, s.unit)} | {_num(v.low, s.unit)} "
            f"| {_num(v.high, s.unit)} | {s.unit} | {ceiling} | {ratio} | {target} | {result} |"
        )
    runs = len(next(iter(samples.values())).values)
    machine_lines = [f"- {k}: {v}" for k, v in machine.items()]
    return "\n".join(
        [
            f"Full run, {runs} repeats, median reported. Ceilings are measured in the same "
            f"repeat as the engine, interleaved with it ({SLICES} alternating slices, each side "
            "timing only its own slices); the ratio is engine / ceiling per repeat.",
            "",
            "Machine (a shared 2-core VM: other jobs may run at the same time, see the load "
            "average; the per-repeat ratio against the same-run ceiling is the steadier "
            "number):",
            "",
            *machine_lines,
            f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
            "",
            "Command:",
            "",
            "```sh",
            command,
            "```",
            "",
            *rows,
            "",
            *([*notes, ""] if (notes := ceiling_notes(samples)) else []),
            "What each line measures (100-byte random values, 112-byte frames, default "
            "`StorageConfig`: 1 MiB segments, 4 KiB index interval; page cache warm for reads):",
            "",
            f"- `append_batch`: {sizes.batch_records:,} records as `PartitionLog.append` of "
            f"{BATCH_RECORDS} values, `flush=never`. Ceiling: a plain Python loop writing the "
            'same frames (`struct.pack(">QI", offset, len(v)) + v`, `b"".join`, one '
            "`os.write` per 1000 records) to one file in the same directory.",
            f"- `append_single`: {sizes.single_records:,} calls of `append([value])`, "
            "`flush=never`.",
            "- `read_sequential`: the `append_batch` log with HW = LEO, read from offset 0 with "
            "`PartitionLog.read(offset, 1 MiB)` + `replog.frames.decode` until HW. Ceiling: "
            'the same segment files, `os.pread` in 1 MiB chunks + `struct.iter_unpack(">QI100s")`.',
            f"- `read_random*`: {sizes.random_reads:,} reads of one record each, "
            "`read(offset, 4096, end_offset=offset + 1)` + decode, uniform random committed "
            "offsets; p50/p99 are per-read latencies.",
            f"- `append_flush_always_1thread`: `flush=always`, one thread x "
            f"{sizes.always_records:,} `append([value])` (the storage's one writer; group "
            "commit happens in the replica driver, see `bench/group_commit.py`).",
        ]
    )


# -- main --------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, 3 repeats (< 30 s)")
    parser.add_argument("--repeats", type=int, help="repeats per bench (default 5; quick 3)")
    parser.add_argument("--records", type=int, help="scale every size from this record count")
    parser.add_argument("--dir", type=Path, help="parent of the scratch dir (default <repo>/tmp)")
    parser.add_argument(
        "--write-docs", action="store_true", help=f"rewrite '{SECTION}' in docs/benchmarks.md"
    )
    parser.add_argument("--docs", type=Path, default=None, help="the Markdown file to write")
    args = parser.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if args.records is not None and args.records < 1:
        parser.error("--records must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.records is not None:
        sizes = Sizes.scaled(args.records)
    else:
        sizes = QUICK if args.quick else FULL
    repeats = args.repeats or (3 if args.quick else 5)
    with bench_tmpdir(args.dir, prefix="storage-") as work_dir:
        machine = machine_info(work_dir)
        log(f"bench/storage.py: {repeats} repeats in {work_dir} ({machine['data dir filesystem']})")
        samples = run_all(work_dir, sizes, repeats)
    machine["load average (1/5/15 min) at end"] = load_average()
    for result in results(samples):
        emit(result)
    if args.write_docs:
        shown = sys.argv[1:] if argv is None else list(argv)
        command = shlex.join([".venv/bin/python", "bench/storage.py", *shown])
        section = docs_section(samples, machine, command, sizes)
        if args.docs is None:
            write_section(SECTION, section)
        else:
            write_section(SECTION, section, args.docs)
        log(f"wrote {SECTION!r} to {args.docs or REPO_ROOT / 'docs' / 'benchmarks.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
