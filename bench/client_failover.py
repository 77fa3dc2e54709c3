"""Client failover bench: a paused (SIGSTOPped) partition leader, seen from the Python clients.

    .venv/bin/python bench/client_failover.py [--rounds N]

One local 3-node cluster (`replog.devcluster`, plaintext, `--flush always`), one topic of
one partition replicated 3 times. Each round appends once (the client knows the leader),
SIGSTOPs the leader, times the client's next acks=all append (the first ack after the
pause), SIGCONTs the node and waits until it caught up. `N` rounds through a sync
`replog.Client`, then `N` through an `AsyncClient`, default timeouts (attempt deadline 2 s).
Prints one JSON line: every time, and the median and max per client. Target (issue 25):
median <= 3 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from replog.devcluster import DevCluster
from tests.integration.paused_leader import pause_rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cluster = DevCluster(Path(tmp) / "cluster", 3, extra_args=["--flush", "always"])
        cluster.start()
        try:
            sync = pause_rounds(cluster, args.rounds, aio=False)
            aio = pause_rounds(cluster, args.rounds, aio=True)
        finally:
            cluster.kill_all()
    out = {"bench": "client_failover_first_ack_s", "rounds": args.rounds}
    for name, times in (("sync", sync), ("asyncio", aio)):
        out[name] = {
            "median": round(statistics.median(times), 3),
            "max": round(max(times), 3),
            "times": [round(t, 3) for t in times],
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
