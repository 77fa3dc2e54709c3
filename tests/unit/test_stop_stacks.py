"""A stop that does not end writes every thread's stack to stderr (supervisor.py), so that a
node that hangs after SIGTERM says where it waits."""

from __future__ import annotations

import subprocess
import sys
import time

HUNG_STOP = """
import sys, threading
from replog.server.supervisor import dump_stacks_if_stop_lasts
threading.Thread(target=sys.stdin.read, name="a-helper-thread", daemon=True).start()
dump_stacks_if_stop_lasts(0.05)
sys.stdin.read()  # a stop stuck here until the test lets it go
"""


def test_a_stop_that_lasts_dumps_the_stack_of_every_thread_and_keeps_running() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HUNG_STOP],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdin is not None and child.stderr is not None
    try:
        dump = b""
        deadline = time.monotonic() + 60
        while b"<string>" not in dump and time.monotonic() < deadline:
            line = child.stderr.readline()
            if not line:
                break
            dump += line
        assert child.poll() is None  # still running: the dump does not end the process
    finally:
        child.stdin.close()
        child.wait(60)
    text = dump.decode()
    assert "Thread 0x" in text and 'File "<string>", line 6' in text  # the stuck main thread
    assert text.count("Thread 0x") >= 2  # the other threads too
