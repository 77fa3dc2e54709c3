"""The client's Pipeline (replog.client.append_stream) against fake nodes that check
sequence numbers as a leader does: a partition resent from its first unacknowledged batch
after NOT_LEADER lands whole and in order, and a batch refused for good leaves the later
ones renumbered, not lost."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pytest

from replog.client.append_stream import AppendStreams, Pipeline
from replog.client.retry import RetryPolicy
from replog.client.routing import Routing
from replog.client.sequences import Identity, Sequences
from replog.errors import InvalidArgumentError
from replog.v1 import log_pb2

DEADLINE_S = 30.0


class Leader:
    """A partition leader's idempotence checks, for any number of partitions."""

    def __init__(self) -> None:
        self.log: dict[int, list[bytes]] = {}
        self.next_seq: dict[tuple[int, int], int] = {}  # (pid, partition) -> expected
        self.batches: dict[tuple[int, int, int], tuple[int, int]] = {}
        self.lock = threading.Lock()

    def answer(self, r: log_pb2.AppendRequest) -> log_pb2.AppendStreamResponse:
        with self.lock:
            key = (r.producer_id, r.partition, r.base_sequence)
            if key in self.batches:
                base, last = self.batches[key]
                return log_pb2.AppendStreamResponse(base_offset=base, last_offset=last)
            if b"bad" in r.values:
                return error("INVALID_ARGUMENT", 3)
            expected = self.next_seq.get((r.producer_id, r.partition), 0)
            if r.base_sequence != expected:
                return error("OUT_OF_ORDER_SEQUENCE", 9, expected_sequence=str(expected))
            log = self.log.setdefault(r.partition, [])
            base = len(log)
            log.extend(r.values)
            self.next_seq[(r.producer_id, r.partition)] = expected + len(r.values)
            self.batches[key] = (base, len(log) - 1)
            return log_pb2.AppendStreamResponse(base_offset=base, last_offset=len(log) - 1)


def error(reason: str, code: int, **metadata: str) -> log_pb2.AppendStreamResponse:
    return log_pb2.AppendStreamResponse(
        error=log_pb2.AppendError(code=code, reason=reason, message=reason, metadata=metadata)
    )


class FakeCall:
    """A bidirectional call: answers each request in order, in a thread of its own."""

    def __init__(self, requests: Iterator[log_pb2.AppendRequest], node: Leader | str) -> None:
        self.answers: queue.SimpleQueue[log_pb2.AppendStreamResponse | None] = queue.SimpleQueue()
        threading.Thread(target=self._serve, args=(requests, node), daemon=True).start()

    def _serve(self, requests: Iterator[log_pb2.AppendRequest], node: Leader | str) -> None:
        for r in requests:
            if isinstance(node, str):  # a follower naming its leader
                self.answers.put(error("NOT_LEADER", 9, leader_address=node))
            else:
                self.answers.put(node.answer(r))
        self.answers.put(None)

    def __iter__(self) -> Iterator[log_pb2.AppendStreamResponse]:
        while (answer := self.answers.get()) is not None:
            yield answer

    def cancel(self) -> None:
        pass


class FakeStub:
    def __init__(self, node: Leader | str) -> None:
        self.node = node

    def AppendStream(self, requests: Iterator[log_pb2.AppendRequest]) -> FakeCall:
        return FakeCall(requests, self.node)


def pipeline(nodes: dict[str, Leader | str], bootstrap: str) -> tuple[Pipeline, AppendStreams]:
    routing = Routing([bootstrap])
    sequences = Sequences()
    ids = iter(range(1, 1000))

    def identity() -> Identity:
        if sequences.identity is None:
            sequences.adopt(Identity(next(ids), 0))
        assert sequences.identity is not None
        return sequences.identity

    streams = AppendStreams(lambda address: FakeStub(nodes[address]), routing, timeout_s=30)
    made = Pipeline(
        streams,
        routing,
        sequences,
        identity,
        lambda err, topic, p: routing.reroute(err, topic, p),
        RetryPolicy(attempts_max=50, backoff_initial_ms=1, backoff_max_ms=5),
    )
    return made, streams


def test_batches_sent_to_a_follower_land_once_and_in_order_at_the_leader_it_names() -> None:
    leader = Leader()
    pipe, streams = pipeline({"follower": "leader", "leader": leader}, "follower")
    futures = [
        pipe.submit("t", i % 2, [b"%d-%d" % (i, j) for j in range(3)], log_pb2.ACKS_ALL)
        for i in range(40)
    ]
    results = [f.result(DEADLINE_S) for f in futures]
    pipe.close()
    streams.close()
    for p in (0, 1):
        sent = [b"%d-%d" % (i, j) for i in range(p, 40, 2) for j in range(3)]
        assert leader.log[p] == sent  # each once, in the order submitted
    assert [r.base_offset for r in results[0::2]] == list(range(0, 60, 3))


def test_a_batch_refused_for_good_fails_alone_and_the_later_ones_are_renumbered() -> None:
    leader = Leader()
    pipe, streams = pipeline({"leader": leader}, "leader")
    values = [[b"bad"] if i == 3 else [b"v%d" % i] for i in range(12)]
    futures = [pipe.submit("t", 0, v, log_pb2.ACKS_ALL) for v in values]
    with pytest.raises(InvalidArgumentError):
        futures[3].result(DEADLINE_S)
    ok = [f.result(DEADLINE_S) for i, f in enumerate(futures) if i != 3]
    pipe.close()
    streams.close()
    assert leader.log[0] == [b"v%d" % i for i in range(12) if i != 3]
    assert [r.base_offset for r in ok] == list(range(11))
