"""`make run`: a node on a temporary data dir, driven end to end through the `replog` CLI.

Starts `replog serve` (port 0, a ready-file), creates a topic, produces a few thousand
records through `replog produce`, consumes them back with `replog consume`, prints offsets
and throughput, then stops the node with SIGTERM and checks that it exited cleanly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECORDS = 5000
TOPIC = "demo"


def replog(*args: str, stdin: bytes | None = None) -> bytes:
    cmd = [sys.executable, "-m", "replog", *args]
    result = subprocess.run(cmd, input=stdin, capture_output=True, timeout=120, check=False)
    if result.returncode != 0:
        sys.stderr.write(result.stderr.decode(errors="replace"))
        raise SystemExit(f"`replog {' '.join(args)}` failed with exit code {result.returncode}")
    return result.stdout


def wait_ready(proc: subprocess.Popen[bytes], ready: Path) -> str:
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the node did not start")
        time.sleep(0.02)
    return ready.read_text().splitlines()[0]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="replog-demo-") as tmp:
        work = Path(tmp)
        ready = work / "ready"
        serve = [
            sys.executable, "-m", "replog", "serve", "--data-dir", str(work / "data"),
            "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
            "--ready-file", str(ready), "--flush", "always",
        ]  # fmt: skip
        log_file = (work / "server.log").open("wb")
        proc = subprocess.Popen(serve, stdout=log_file, stderr=log_file)
        try:
            address = wait_ready(proc, ready)
            metrics = ready.read_text().splitlines()[1].removeprefix("metrics=")
            print(f"node serving on {address} (metrics http://{metrics}/metrics), flush=always")
            a = ("--address", address)
            print(replog("topic", "create", TOPIC, "--partitions", "2", *a).decode().strip())

            lines = b"".join(b"record %06d from the demo\n" % i for i in range(RECORDS))
            started = time.perf_counter()
            out = replog("produce", TOPIC, *a, stdin=lines)
            elapsed = time.perf_counter() - started
            print(out.decode().strip())
            print(f"  CLI round trip incl. process start: {RECORDS / elapsed:,.0f} records/s")

            consumed = 0
            started = time.perf_counter()
            for p in (0, 1):
                out = replog("consume", TOPIC, "--partition", str(p), *a)
                consumed += len(out.splitlines())
            elapsed = time.perf_counter() - started
            print(f"consumed {consumed} records back ({consumed / elapsed:,.0f} records/s)")
            assert consumed == RECORDS, f"expected {RECORDS} records, consumed {consumed}"
            print(replog("offsets", TOPIC, *a).decode().rstrip())
            print(replog("topic", "describe", TOPIC, *a).decode().rstrip())
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
            code = proc.wait(60)
            log_file.close()
        print(f"node stopped with SIGTERM, exit code {code}")
        if code != 0:
            sys.stderr.write((work / "server.log").read_text())
            raise SystemExit(1)


if __name__ == "__main__":
    main()
