"""A flood of large appends keeps the node within its request limits plus a small constant.

A scaled-down node (request pool 16 MiB, acks=none bytes 4 MiB) gets 100 concurrent appends
of 3 MiB (3 records of 1 MiB) over 4 connections, acks=leader and then acks=none, after one
unmeasured flood that warms the node up (thread arenas, grpc's and Python's free lists). The
node's peak RSS over each flood is the kernel's high-water mark (VmHWM, reset with
/proc/PID/clear_refs before the flood), or the largest VmRSS sampled meanwhile if larger.

Before requests were counted before they were read, grpc buffered each call's message whole
(its stream window was sized to 4 MiB by BDP probing) and Python copied it twice: this flood
grew the node by 200+ MiB, and refused acks=none calls (their frames kept alive by reference
cycles until the cycle collector ran) by 330..540 MiB. The bound asserted is the limits
(16 + 4 MiB) plus FLOOD_CONSTANT_BYTES for what they do not count, measured here at 4..27 MiB
above the limits (growth 24..47 MiB over 12 runs):
* each waiting call's HTTP/2 window, 64 KiB, buffered before its handler asks for the
  message: 100 x 64 KiB = 6.25 MiB;
* an acks=none batch's frames while the log writes it (counted once by acks_none_bytes_max);
* grpc's read buffers and per-call state, Python's per-call objects and allocator slack;
with 20 MiB of margin over the worst run, so that the test does not flake; a regression to
whole-message buffering costs 3 MiB per call, 300 MiB here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import grpc
import pytest

from replog.client import Client
from replog.client.errors import from_rpc_error
from replog.errors import LimitExceededError, TooManyBytesInFlightError
from replog.v1 import log_pb2, log_pb2_grpc
from tests.integration.servers import ServerProcess
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration

KIB = 1024
MIB = 1024 * KIB
CALLS = 100
CONNECTIONS = 4
RECORDS_PER_CALL = 3
RECORD_BYTES = 1 * MIB  # record_bytes_max
POOL_BYTES = 16 * MIB
ACKS_NONE_BYTES = 4 * MIB
FLOOD_CONSTANT_BYTES = 48 * MIB
RETURN_SLACK_BYTES = 24 * MIB  # what a warmed-up node keeps after a flood, at most


def status_bytes(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * KIB
    raise AssertionError(key)


def settled_rss(pid: int, deadline_s: float = 30.0) -> int:
    """RSS once it stops moving (two readings 0.5 s apart within 1 MiB)."""
    last = status_bytes(pid, "VmRSS")
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = status_bytes(pid, "VmRSS")
        if abs(now - last) < MIB:
            return now
        last = now
    return last


class PeakRss:
    """The node's peak RSS from now on: VmHWM once reset, and VmRSS sampled every 5 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
            self.hwm_reset = True
        except OSError:
            self.hwm_reset = False
        self.sampled = status_bytes(pid, "VmRSS")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.sampled = max(self.sampled, status_bytes(self.pid, "VmRSS"))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        hwm = status_bytes(self.pid, "VmHWM") if self.hwm_reset else 0
        return max(hwm, self.sampled)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    args = [
        "--flush", "always",
        "--request-bytes-pool-max", str(POOL_BYTES),
        "--acks-none-bytes-max", str(ACKS_NONE_BYTES),
    ]  # fmt: skip
    server = ServerProcess(tmp_path / "data", tmp_path, args).start()
    yield server
    server.kill()


def flood(address: str, acks: int) -> tuple[int, list[grpc.RpcError]]:
    """CALLS concurrent appends; (accepted, the errors of the others)."""
    chans = [
        grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(CONNECTIONS)
    ]
    request = log_pb2.AppendRequest(
        topic="flood", partition=0, values=[bytes(RECORD_BYTES)] * RECORDS_PER_CALL, acks=acks
    )
    try:
        futures: list[Future[Any]] = [
            log_pb2_grpc.LogStub(chans[i % CONNECTIONS]).Append.future(request, timeout=60)
            for i in range(CALLS)
        ]
        accepted, errors = 0, []
        for future in futures:
            try:
                future.result()
                accepted += 1
            except grpc.RpcError as exc:
                errors.append(exc)
        return accepted, errors
    finally:
        for chan in chans:
            chan.close()


def test_a_flood_of_large_appends_stays_within_the_request_limits_plus_a_small_constant(
    server: ServerProcess,
) -> None:
    assert server.proc is not None
    pid = server.proc.pid
    with Client(server.address, timeout_s=30) as client:
        client.create_topic("flood", 1, format="raw")
        client.append("flood", 0, [b"warm"] * 8, acks="all")
        start = client.list_offsets("flood")[0].latest
    bound = POOL_BYTES + ACKS_NONE_BYTES + FLOOD_CONSTANT_BYTES
    # A first flood, not measured: it grows what a node keeps anyway (thread arenas, grpc's
    # and Python's free lists; 30..60 MiB measured), as any node does in its first minutes.
    accepted, _ = flood(server.address, log_pb2.ACKS_LEADER)
    assert accepted == CALLS
    written = accepted * RECORDS_PER_CALL
    for name, acks in (("acks=leader", log_pb2.ACKS_LEADER), ("acks=none", log_pb2.ACKS_NONE)):
        before = settled_rss(pid)
        peak = PeakRss(pid)
        accepted, errors = flood(server.address, acks)
        top = peak.stop()
        growth = top - before
        print(
            f"{name}: {accepted} accepted, {len(errors)} refused; RSS {before >> 20} MiB, "
            f"peak {top >> 20} MiB (+{growth >> 20} MiB, bound {bound >> 20} MiB)"
        )
        assert growth < bound, f"{name}: the node grew by {growth >> 20} MiB"
        for exc in errors:  # refused: typed, retriable, with the limit's name (ErrorInfo)
            assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, exc
            err = from_rpc_error(exc)
            assert isinstance(err, TooManyBytesInFlightError), err
            assert isinstance(err, LimitExceededError) and err.retriable
            assert (err.limit, err.limit_value) == ("acks_none_bytes_max", ACKS_NONE_BYTES)
        if acks == log_pb2.ACKS_LEADER:
            assert accepted == CALLS  # acks=leader waits for room: nothing is refused
        else:
            assert accepted > 0 and errors, (accepted, len(errors))
        written += accepted * RECORDS_PER_CALL
    with Client(server.address, timeout_s=30) as client:
        # Everything accepted is written, nothing else; the node takes new work at once.
        wait_until(
            lambda: client.list_offsets("flood")[0].latest == start + written,
            "the accepted appends are written",
        )
        assert client.append("flood", 0, [b"after"], acks="all").base_offset >= start + written
    after = settled_rss(pid)
    print(f"RSS settled after the floods: {after >> 20} MiB")
    wait_until(
        lambda: status_bytes(pid, "VmRSS") < before + RETURN_SLACK_BYTES,
        f"the flood's memory is given back (RSS {before >> 20} MiB before it)",
    )
