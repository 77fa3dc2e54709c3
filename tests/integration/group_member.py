"""A consumer group member as its own process, for tests that SIGKILL, SIGSTOP or SIGTERM it.

    python -m tests.integration.group_member BOOTSTRAP TOPIC GROUP LEDGER [SESSION_MS]

Consumes with `client.consumer(TOPIC, group=GROUP)` and `poll()`; each record is written to
LEDGER (`partition offset value-hex`, one line each) and flushed BEFORE the batch's offsets
are committed, so the ledger holds at least every record the group's commits skip past.
Commit refusals are written as `# refused REASON` lines. SIGTERM: close (commit, leave).
Bounded: it exits after RUN_S_MAX seconds or RECORDS_MAX records.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from replog.client import Client, RetryPolicy
from replog.errors import ReplogError

RUN_S_MAX = 600.0
RECORDS_MAX = 2_000_000


def main(argv: list[str]) -> int:
    bootstrap, topic, group, ledger = argv[:4]
    session_ms = int(argv[4]) if len(argv) > 4 else 2000
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    patient = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=60_000)
    deadline = time.monotonic() + RUN_S_MAX
    seen = 0
    with Client(bootstrap, retry=patient, timeout_s=10) as client, Path(ledger).open("a") as out:
        consumer = client.consumer(
            topic,
            group=group,
            session_timeout_ms=session_ms,
            auto_commit_interval_ms=300,
            client_id=Path(ledger).stem,
            fetch_wait_ms=200,
        )
        try:
            while not stop and time.monotonic() < deadline and seen < RECORDS_MAX:
                try:
                    batch = consumer.poll(0.2)
                except ReplogError as err:  # e.g. a coordinator move outlasting the policy
                    out.write(f"# poll failed {err.reason}\n")
                    out.flush()
                    continue
                for r in batch:
                    out.write(f"{r.partition} {r.offset} {r.value.hex()}\n")
                seen += len(batch)
                out.flush()
                if batch:
                    try:
                        consumer.commit()
                    except ReplogError as err:
                        out.write(f"# refused {err.reason}\n")
                        out.flush()
        finally:
            consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
