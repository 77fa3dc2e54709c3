"""How close a throttled partition move copies to `--reassignment-fetch-bytes-per-s`.

A 2-node cluster on 127.0.0.1: a partition with one replica is filled with `--mb` MB, then
moved to both nodes; the leader serves the new replica's catch-up through the throttle.
The new replica's log end is sampled from DescribeTopic every 50 ms; the rate is measured
between 20% and 90% of the log (the steady state: the bucket's first burst left out), in
bytes estimated from the log's average record size. Prints one JSON line per setting::

    {"bench": "reassignment_throttle_<rate>", "value": <achieved / setting>, "unit": "ratio",
     "ceiling": 1.0}

and, on stderr, the achieved rate. Bounded: every wait has a deadline. Writes nothing to
docs/benchmarks.md (run it by hand: `python bench/reassignment_throttle.py`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import Result, bench_tmpdir, emit, log

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import ReplogError

TOPIC = "bench-move"
VALUE_BYTES = 1000
BATCH = 200
SAMPLE_S = 0.05
CATCH_UP_S_MAX = 300.0
PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)


def run(rate: int, answer: int, mb: int, work: Path) -> float:
    """The achieved catch-up rate (bytes/s) of one move throttled at `rate`."""
    args = ["--reassignment-fetch-bytes-per-s", str(rate), "--fetch-bytes-max", str(answer)]
    with (
        DevCluster(work, 2, extra_args=args) as cluster,
        Client(cluster.bootstrap, retry=PATIENT, timeout_s=10) as client,
    ):
        client.create_topic(TOPIC, 1, 1)
        (old,) = client.describe_topic(TOPIC)[0].replicas
        (new,) = set(cluster.members) - {old}
        records = mb * (1 << 20) // VALUE_BYTES
        for _ in range(0, records, BATCH):
            client.append(TOPIC, 0, [b"x" * VALUE_BYTES] * BATCH, acks="all")
        info = client.describe_topic(TOPIC)[0]
        end, size = info.log_end_offset, info.size_bytes
        per_record = size / end
        client.reassign_partition(TOPIC, 0, (old, new))
        samples: list[tuple[float, int]] = []
        deadline = time.monotonic() + CATCH_UP_S_MAX
        while time.monotonic() < deadline:
            try:
                status = client.describe_topic(TOPIC)[0].replica_status
            except ReplogError:
                status = ()
            got = [s.log_end_offset for s in status if s.replica_id == new]
            if got:
                samples.append((time.monotonic(), got[0]))
                if got[0] >= end:
                    break
            time.sleep(SAMPLE_S)
        else:
            raise SystemExit(f"the new replica did not catch up in {CATCH_UP_S_MAX} s")
    low = next(s for s in samples if s[1] >= 0.2 * end)
    high = next(s for s in samples if s[1] >= 0.9 * end)
    achieved = (high[1] - low[1]) * per_record / (high[0] - low[0])
    log(
        f"setting {rate} B/s, answers {answer} B, {size} B log: {achieved:.0f} B/s "
        f"({achieved / rate:.2f} of the setting) between 20% and 90%"
    )
    return achieved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--rates", default="131072,524288", help="settings to try, B/s")
    parser.add_argument("--answer-bytes", type=int, default=65536, help="--fetch-bytes-max")
    parser.add_argument("--mb", type=int, default=2, help="log size to copy, MB")
    opts = parser.parse_args(argv)
    for rate in (int(r) for r in opts.rates.split(",")):
        with bench_tmpdir(prefix="reassignment-throttle-") as work:
            achieved = run(rate, opts.answer_bytes, opts.mb, work / "cluster")
        emit(Result(f"reassignment_throttle_{rate}", round(achieved / rate, 3), "ratio", 1.0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
