"""How close produce and fetch quotas hold a principal to their setting (edge/quotas.py).

A one-node cluster on 127.0.0.1 (insecure: every caller is anonymous, held by the default
entry `User:*`). Each run:

1. unthrottled: one client appends batches of `--batch` values of 1 KB for `--seconds`,
   then fetches them back with `--fetch-bytes` answers: the ceiling (what the client gets
   without a quota, which must be well above the setting for the figure to mean anything);
2. `replog quota set --principal User:* --produce-bytes-per-s R`: the same appends;
3. the same quota on fetches (produce unlimited again): the same fetches.

The client retries QUOTA_EXCEEDED after the server's `retry_after_ms`. A bucket holds one
second's worth, so the achieved rate is (bytes - one second's worth) / elapsed: the
long-run rate once the first burst is spent. Bytes are the requests' (produce) or the
replies' frames (fetch), as the server charges them. Prints one JSON line per quota::

    {"bench": "quota_produce" | "quota_fetch", "value": <achieved / setting>,
     "unit": "ratio", "ceiling": 1.0}

and writes its section of docs/benchmarks.md with `--write-docs`. Bounded: every loop runs
for `--seconds`, every call has the client's deadline.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

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

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.server.edge.buckets import BURST_S
from replog.v1 import log_pb2

TOPIC = "bench-quota"
VALUE_BYTES = 1000
PATIENT = RetryPolicy(attempts_max=100_000, deadline_ms=120_000)
HEADING = "## Quotas (bench/quotas.py)"


def produce(client: Client, batch: int, seconds: float) -> tuple[int, float]:
    """Request bytes appended and the seconds it took, appending for `seconds`."""
    values = [b"x" * VALUE_BYTES] * batch
    request_bytes = log_pb2.AppendRequest(topic=TOPIC, values=values).ByteSize()
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        client.append(TOPIC, 0, values, acks="leader")
        sent += request_bytes
    return sent, time.monotonic() - started


def fetch(client: Client, answer_bytes: int, seconds: float) -> tuple[int, float]:
    """Frame bytes fetched from offset 0 and the seconds it took, fetching for `seconds`."""
    offset, got = 0, 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        raw = client.fetch_raw(TOPIC, 0, offset, max_bytes=answer_bytes)
        if not raw.frames:
            raise SystemExit("the log ran out before the time did: produce more (--seconds)")
        got += len(raw.frames)
        offset = raw.next_offset
    return got, time.monotonic() - started


def run(rate: int, batch: int, answer: int, seconds: float, work: Path) -> dict[str, float]:
    with (
        DevCluster(work, 1, extra_args=["--flush", "interval"]) as cluster,
        Client(cluster.bootstrap, retry=PATIENT, timeout_s=30) as client,
    ):
        client.create_topic(TOPIC, 1, 1)
        sent, took = produce(client, batch, seconds)
        out = {"produce_ceiling": sent / took}
        got, took = fetch(client, answer, seconds / 2)
        out["fetch_ceiling"] = got / took
        client.set_quota("User:*", produce_bytes_per_s=rate)
        sent, took = produce(client, batch, seconds)
        out["produce"] = (sent - rate * BURST_S) / took
        client.set_quota("User:*", fetch_bytes_per_s=rate)
        got, took = fetch(client, answer, seconds)
        out["fetch"] = (got - rate * BURST_S) / took
    log(
        f"setting {rate} B/s: produce {out['produce']:.0f} B/s (ceiling "
        f"{out['produce_ceiling']:.0f}), fetch {out['fetch']:.0f} B/s (ceiling "
        f"{out['fetch_ceiling']:.0f})"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--rate", type=int, default=1 << 20, help="the quota, B/s")
    parser.add_argument("--batch", type=int, default=16, help="values of 1 KB per append")
    parser.add_argument("--fetch-bytes", type=int, default=16 * 1024, help="fetch max_bytes")
    parser.add_argument("--seconds", type=float, default=8.0, help="each phase's length")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true")
    opts = parser.parse_args(argv)
    runs = []
    for _ in range(opts.runs):
        with bench_tmpdir(prefix="quotas-") as work:
            runs.append(run(opts.rate, opts.batch, opts.fetch_bytes, opts.seconds, work / "c"))
            info = machine_info(work)
    rows = []
    for quota in ("produce", "fetch"):
        ratios = [r[quota] / opts.rate for r in runs]
        ceilings = [r[quota + "_ceiling"] / opts.rate for r in runs]
        s = summarize(ratios)
        emit(Result(f"quota_{quota}", round(s.median, 3), "ratio", 1.0))
        rows.append(
            f"| {quota} | {', '.join(f'{x:.3f}' for x in ratios)} | **{s.median:.3f}** | "
            f"{summarize(ceilings).median:.1f} |"
        )
    if opts.write_docs:
        machine = ", ".join(f"{k} {v}" for k, v in info.items())
        body = f"""How close a produce and a fetch quota hold a principal to the setting: a one-node
cluster on 127.0.0.1, the default entry `User:*` set to {opts.rate} B/s, one client
appending batches of {opts.batch} x 1 KB (acks=leader) or fetching {opts.fetch_bytes}-byte
answers for {opts.seconds:g} s; the client retries QUOTA_EXCEEDED after `retry_after_ms`.
Achieved = (bytes - one second's worth, the bucket's burst) / elapsed. The ceiling is the
same client without a quota, measured in the same run (as a multiple of the setting).
Command: `python bench/quotas.py --write-docs`. Machine: {machine}.

| quota | achieved / setting, {opts.runs} runs | median | ceiling / setting (median) |
|---|---|---|---|
{chr(10).join(rows)}

Produce stays under the setting by the round trips of refused attempts (a refused append
is re-sent once its hint has passed: the bucket idles during that round trip); fetch is
charged after the reply, so its debt is paid while the next request travels.
"""
        DOCS_FILE.write_text(replace_section(DOCS_FILE.read_text(), HEADING, body))
    return 0


if __name__ == "__main__":
    sys.exit(main())
