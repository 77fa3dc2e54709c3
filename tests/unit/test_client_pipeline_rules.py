"""The idempotent pipeline's rules (`replog.client.pipeline_rules`), once for both clients:
each case is a script of events (submit, next, ack, fail, reroute, ...) and what the core
answers to each, with no threads, loop or network. Batches are named by letters; a send
is written `name@pid:seq`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from replog.client.pipeline_rules import IDENTITY, Batch, PipelineRules, Reroute
from replog.client.sequences import Identity, Sequences
from replog.errors import (
    DuplicateSequenceError,
    InvalidArgumentError,
    LeaderUnknownError,
    NotFoundError,
    OutOfOrderSequenceError,
    ReplogError,
    TransportError,
)

BACKOFF_S = 0.5


class Budget:
    """A batch's retry budget: `left` failures retried (each after BACKOFF_S, none after a
    reroute that moved the partition), then final."""

    def __init__(self, left: int) -> None:
        self.left = left

    def budget_left(self, err: ReplogError) -> float | None:
        self.left -= 1
        return BACKOFF_S if err.retriable and self.left >= 0 else None

    def pause_s(self, backoff_s: float, rerouted: bool) -> float:
        return 0.0 if rerouted else backoff_s


@dataclass
class Case:
    name: str
    steps: list[tuple[Any, ...]]
    retries: int = 10
    bytes_max: int = 1 << 20


# Steps:
#   ("submit", names, partition=0, size=10)   queue batches (1 record each)
#   ("next", [sends], need)                   next(now): the sends, and IDENTITY/"reroute"/None
#   ("adopt",)                                InitProducer answered: a new producer id
#   ("ack", name, given)                      an answer; `given`: its outcome is to be given now
#   ("fail", name, error, [failed names])     a failed send (of the generation it was sent in)
#   ("stale", name, error)                    a failed send of an older generation: ignored
#   ("rerouted", moved)                       the pending reroute done
#   ("time", now)                             the driver's clock
#   ("withdraw", name, taken)                 the caller gave up on a batch
#   ("abandon", [names])                      close: the batches failed
#   ("identity_failed", [names])              InitProducer failed: the batches failed
#   ("bytes", n)                              in_flight_bytes now
CASES = [
    Case(
        "one batch at a time until the partition knows the producer, then five",
        [
            ("submit", "abcdefg"),
            ("next", [], IDENTITY),
            ("adopt",),
            ("next", ["a@1:0"], None),
            ("next", [], None),
            ("ack", "a", True),
            ("next", ["b@1:1", "c@1:2", "d@1:3", "e@1:4", "f@1:5"], None),
            ("next", [], None),
            ("ack", "b", True),
            ("next", ["g@1:6"], None),
        ],
    ),
    Case(
        "partitions are numbered each from 0 and have windows of their own",
        [
            ("submit", "ab", 0),
            ("submit", "cd", 1),
            ("adopt",),
            ("next", ["a@1:0", "c@1:0"], None),
            ("ack", "c", True),
            ("next", ["d@1:1"], None),
        ],
    ),
    Case(
        "bytes in flight over all partitions stay under the cap; a lone batch always goes",
        [
            ("adopt",),
            ("submit", "a", 0, 30),
            ("submit", "b", 1, 30),
            ("submit", "c", 2, 100),
            ("next", ["a@1:0"], None),
            ("bytes", 30),
            ("ack", "a", True),
            ("bytes", 0),
            ("next", ["b@1:0"], None),
            ("ack", "b", True),
            ("next", ["c@1:0"], None),
            ("bytes", 100),
        ],
        bytes_max=50,
    ),
    Case(
        "a retriable failure resends the partition from that batch, in order, after a reroute",
        [
            ("adopt",),
            ("submit", "a"),
            ("next", ["a@1:0"], None),
            ("ack", "a", True),
            ("submit", "bcd"),
            ("next", ["b@1:1", "c@1:2", "d@1:3"], None),
            ("fail", "b", LeaderUnknownError("election"), []),
            ("bytes", 0),
            ("stale", "c", OutOfOrderSequenceError("gap")),
            ("next", [], "reroute"),
            ("next", [], None),  # held while the reroute is performed
            ("rerouted", False),
            ("next", [], None),  # the backoff
            ("time", BACKOFF_S),
            ("next", ["b@1:1", "c@1:2", "d@1:3"], None),  # the same numbers
            ("ack", "b", True),
        ],
    ),
    Case(
        "a reroute that moved the partition resends at once",
        [
            ("adopt",),
            ("submit", "a"),
            ("next", ["a@1:0"], None),
            ("fail", "a", LeaderUnknownError("election"), []),
            ("next", [], "reroute"),
            ("rerouted", True),
            ("next", ["a@1:0"], None),
        ],
    ),
    Case(
        "an older send that acknowledges a batch taken back settles it: it is not resent",
        [
            ("adopt",),
            ("submit", "a"),
            ("next", ["a@1:0"], None),
            ("ack", "a", True),
            ("submit", "bc"),
            ("next", ["b@1:1", "c@1:2"], None),
            ("fail", "c", LeaderUnknownError("election"), []),
            ("ack", "b", True),
            ("next", [], "reroute"),
            ("rerouted", True),
            ("next", ["c@1:2"], None),
            ("ack", "b", False),  # a second answer gives nothing twice
        ],
    ),
    Case(
        "a node without AppendStream gets the partition again at once, with no reroute",
        [
            ("adopt",),
            ("submit", "a"),
            ("next", ["a@1:0"], None),
            ("fail", "a", TransportError("no", grpc_code="UNIMPLEMENTED"), []),
            ("next", ["a@1:0"], None),
        ],
    ),
    Case(
        "a batch refused with nothing written fails alone; the later ones are renumbered",
        [
            ("adopt",),
            ("submit", "a"),
            ("next", ["a@1:0"], None),
            ("ack", "a", True),
            ("submit", "bcd"),
            ("next", ["b@1:1", "c@1:2", "d@1:3"], None),
            ("fail", "b", InvalidArgumentError("bad"), ["b"]),
            ("stale", "c", OutOfOrderSequenceError("gap")),
            ("next", [], IDENTITY),
            ("adopt",),
            ("next", ["c@2:0"], None),  # one at a time: the leader does not know pid 2
            ("ack", "c", True),
            ("next", ["d@2:1"], None),
        ],
    ),
    Case(
        "a batch whose outcome is unknown fails the later ones of its producer too",
        [
            ("adopt",),
            ("submit", "a"),
            ("next", ["a@1:0"], None),
            ("ack", "a", True),
            ("submit", "bc"),
            ("next", ["b@1:1", "c@1:2"], None),
            ("fail", "b", LeaderUnknownError("election"), ["b", "c"]),
            ("submit", "d"),
            ("next", [], IDENTITY),
            ("adopt",),
            ("next", ["d@2:0"], None),
        ],
        retries=0,
    ),
    Case(
        "a duplicate sequence fails its batch alone and keeps the numbering",
        [
            ("adopt",),
            ("submit", "a"),
            ("next", ["a@1:0"], None),
            ("ack", "a", True),
            ("submit", "bc"),
            ("next", ["b@1:1", "c@1:2"], None),
            ("fail", "b", DuplicateSequenceError("seen"), ["b"]),
            ("ack", "c", True),
            ("submit", "d"),
            ("next", ["d@1:3"], None),
        ],
    ),
    Case(
        "a partition never has batches of two producers in flight",
        [
            ("adopt",),
            ("submit", "a", 0),
            ("submit", "x", 1),
            ("next", ["a@1:0", "x@1:0"], None),
            ("fail", "x", NotFoundError("gone"), ["x"]),  # drops pid 1
            ("submit", "b", 0),
            ("submit", "y", 1),
            ("next", [], IDENTITY),
            ("adopt",),
            ("next", ["y@2:0"], None),  # a (pid 1) is still in flight on partition 0
            ("ack", "a", True),
            ("next", ["b@2:0"], None),
        ],
    ),
    Case(
        "a caller takes back only a batch never sent",
        [
            ("adopt",),
            ("submit", "ab"),
            ("next", ["a@1:0"], None),
            ("withdraw", "a", False),
            ("withdraw", "b", True),
            ("ack", "a", True),
            ("next", [], None),
        ],
    ),
    Case(
        "no identity to be had fails the batches waiting for numbers only",
        [
            ("adopt",),
            ("submit", "a"),
            ("next", ["a@1:0"], None),
            ("fail", "a", NotFoundError("gone"), ["a"]),
            ("submit", "bc"),
            ("next", [], IDENTITY),
            ("identity_failed", ["b", "c"]),
            ("next", [], None),
        ],
    ),
    Case(
        "close fails what is left; answers after it give nothing",
        [
            ("adopt",),
            ("submit", "abc"),
            ("next", ["a@1:0"], None),
            ("abandon", ["a", "b", "c"]),
            ("bytes", 0),
            ("ack", "a", False),
            ("stale", "a", LeaderUnknownError("late")),
        ],
    ),
]


def sent(batch: Batch[str]) -> str:
    return f"{batch.payload}@{batch.identity.producer_id}:{batch.base_sequence}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_pipeline_rules(case: Case) -> None:
    sequences = Sequences()
    rules: PipelineRules[str] = PipelineRules(
        sequences, lambda: Budget(case.retries), in_flight_bytes_max=case.bytes_max
    )
    batches: dict[str, Batch[str]] = {}
    generation: dict[str, int] = {}  # the generation each batch was last sent in
    pids = iter(range(1, 100))
    now = 0.0
    reroute: Reroute[str] | None = None
    for step in case.steps:
        op, *args = step
        where = f"step {step!r}"
        if op == "submit":
            partition = args[1] if len(args) > 1 else 0
            size = args[2] if len(args) > 2 else 10
            for name in args[0]:
                batches[name] = rules.submit("t", partition, name, 1, size)
        elif op == "next":
            sends, need, _ = rules.next(now)
            assert [sent(s.batch) for s in sends] == args[0], where
            for s in sends:
                generation[s.batch.payload] = s.generation
            if isinstance(need, Reroute):
                reroute = need
                need = "reroute"
            assert need == args[1], where
        elif op == "adopt":
            sequences.adopt(Identity(next(pids), 0))
        elif op == "ack":
            assert rules.acked(batches[args[0]]) is args[1], where
        elif op in ("fail", "stale"):
            batch = batches[args[0]]
            gen = generation[args[0]]
            failures = rules.failed(batch, gen, args[1])
            expected = args[2] if op == "fail" else []
            assert [b.payload for b, _ in failures] == list(expected), where
            assert all(err is args[1] for _, err in failures), where
        elif op == "rerouted":
            assert reroute is not None, where
            rules.rerouted(reroute, args[0], now)
            reroute = None
        elif op == "time":
            now = args[0]
        elif op == "withdraw":
            assert rules.withdraw(batches[args[0]]) is args[1], where
        elif op == "abandon":
            assert sorted(b.payload for b in rules.abandon()) == args[0], where
        elif op == "identity_failed":
            failures = rules.identity_failed(NotFoundError("no node"))
            assert [b.payload for b, _ in failures] == args[0], where
        elif op == "bytes":
            assert rules.in_flight_bytes == args[0], where
        else:
            raise AssertionError(f"unknown step {op}")


def test_in_flight_limits_below_one_are_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        PipelineRules(Sequences(), lambda: Budget(1), partition_in_flight_max=0)
    with pytest.raises(InvalidArgumentError):
        PipelineRules(Sequences(), lambda: Budget(1), in_flight_bytes_max=0)
