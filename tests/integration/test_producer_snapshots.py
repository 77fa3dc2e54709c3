"""An idempotent producer's retry after a server restart is still recognised as a duplicate:
the restarted replica's producer state comes from its producer-state snapshot (written at
segment rolls and at the clean stop) plus the records after it, not from a scan of the
whole log. One node, 4 KiB segments (many rolls), raw Log API calls so that the test picks
the sequence numbers a retry carries."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from replog.client import Client, RetryPolicy
from replog.storage import checkpoint, snapshots
from replog.storage.partition_log import RECOVERY_POINT_FILE
from replog.v1 import log_pb2, log_pb2_grpc
from tests.integration.servers import ServerProcess
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration

WAIT_S = 30.0
TOPIC = "retried"
RECORDS = 5  # per batch
Factory = Callable[..., ServerProcess]


class Producer:
    def __init__(self, server: ServerProcess, producer_id: int = 0, epoch: int = 0) -> None:
        self.server, self.producer_id, self.epoch = server, producer_id, epoch

    def init(self) -> None:
        with grpc.insecure_channel(self.server.address) as chan:
            ident = log_pb2_grpc.LogStub(chan).InitProducer(
                log_pb2.InitProducerRequest(), timeout=WAIT_S
            )
        self.producer_id, self.epoch = ident.producer_id, ident.producer_epoch

    def send(self, n: int) -> tuple[int, int]:
        """Batch `n` (sequences 5n .. 5n+4), retried while the node has no leader yet."""
        values = [b"batch-%d-record-%d-" % (n, i) + bytes(150) for i in range(RECORDS)]
        req = log_pb2.AppendRequest(
            topic=TOPIC,
            partition=0,
            values=values,
            acks=log_pb2.ACKS_ALL,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=n * RECORDS,
        )
        deadline = time.monotonic() + WAIT_S
        with grpc.insecure_channel(self.server.address) as chan:
            stub = log_pb2_grpc.LogStub(chan)
            while True:
                try:
                    resp = stub.Append(req, timeout=WAIT_S)
                    return resp.base_offset, resp.last_offset
                except grpc.RpcError as exc:
                    code = exc.code()  # type: ignore[attr-defined]
                    waiting = code in (
                        grpc.StatusCode.UNAVAILABLE,
                        grpc.StatusCode.FAILED_PRECONDITION,
                    )
                    if not waiting or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)


def snapshot_offsets(server: ServerProcess) -> list[int]:
    directory: Path = server.data_dir / TOPIC / "partition_0"
    return snapshots.offsets(directory)


def test_an_idempotent_retry_after_a_clean_stop_or_a_crash_is_still_a_duplicate(
    server_factory: Factory,
) -> None:
    server = server_factory("--segment-bytes-max", "4096", "--flush-interval-ms", "100").start()
    with Client(server.address, timeout_s=WAIT_S, retry=RetryPolicy(attempts_max=5)) as client:
        client.create_topic(TOPIC, 1, format="raw")
    producer = Producer(server)
    producer.init()
    first = {n: producer.send(n) for n in range(40)}  # ~40 KiB: about ten segment rolls
    assert server.terminate() == 0
    end = first[39][1] + 1
    # Written at the rolls (the clean stop writes one only past 1,000 records since the
    # newest): the restart scans less than a segment.
    taken = snapshot_offsets(server)
    assert len(taken) >= 2 and end - 4096 // 100 < taken[-1] <= end, (taken, end)

    server.start()
    for n in (39, 37, 35):  # the last five batches are answered with their offsets
        assert producer.send(n) == first[n], n
    after = producer.send(40)
    assert after[0] > end  # a new batch: appended after the new leader's marker

    more = {n: producer.send(n) for n in range(41, 60)}
    # The flusher moves the recovery point (every 100 ms) past the snapshot of a roll: the
    # start after the crash takes that snapshot and scans only the records after it.
    directory = server.data_dir / TOPIC / "partition_0"

    def snapshot_below_recovery_point() -> bool:
        point = checkpoint.read_hint(directory / RECOVERY_POINT_FILE) or 0
        return any(end < o <= point for o in snapshots.offsets(directory))

    wait_until(snapshot_below_recovery_point, "a new snapshot at or below the recovery point")
    server.signal(signal.SIGKILL)
    assert server.proc is not None and server.proc.wait(WAIT_S) == -signal.SIGKILL
    server.start()
    for n in (59, 57, 55):
        assert producer.send(n) == more[n], n
    assert producer.send(60)[0] > more[59][1]
    server.terminate()
