"""The idempotent append pipeline's rules, sans I/O: one core that both `append_stream.Pipeline`
(threads) and `aio_pipeline.AsyncPipeline` (asyncio) drive. No threads, no event loop, no
gRPC, no clock: the drivers pass the time (`now`, in their own monotonic seconds) and
perform the actions the core returns.

State: per partition (`Partition`), the batches to send (`queue`, in order) and those sent
in the current generation (`in_flight`, in order), the generation (bumped whenever the
partition is to be resent from its first unanswered batch), a pause (`paused_until`), a
pending reroute, and `confirmed` (the identity of its last acknowledged batch); over all
partitions, `in_flight_bytes`.

Rules (events in, actions out):
- `submit` queues a batch after the partition's earlier ones; `withdraw` takes back one
  never sent (its caller gave up before it left).
- `next(now)` says what to do now: `Send`s (each batch numbered, moved in flight, its bytes
  counted), then at most one `Need` (`IDENTITY`: the producer has none, ask InitProducer;
  or a `Reroute` of a partition that failed), and how long to wait otherwise. A partition
  sends up to `partition_in_flight_max` batches (Kafka's 5), one at a time until it has
  acknowledged a batch of the current producer identity (a leader that does not know the
  producer accepts any first sequence: a later batch must not reach it first), and never
  batches of two identities at once. A batch goes while the bytes in flight stay under
  `in_flight_bytes_max` over all partitions (a lone batch always goes). A batch keeps its
  sequence numbers for all its attempts: the leader appends a partition's batches only in
  sequence order, each once.
- `acked(batch)`: the batch is done (also when an older send of it answers: a resend of
  it is then answered as a duplicate); the partition learns its producer.
- `failed(batch, generation, err)`: ignored for a send of an older generation (its resend
  answers) or a batch already done. UNIMPLEMENTED (a node without AppendStream: nothing
  appended): the partition's batches in flight go back to the front of its queue, resent
  at once. A retriable error within the batch's budget: the same, and the partition waits
  for a `Reroute` and its pause (`rerouted`). Otherwise the batch fails for good, and,
  unless DUPLICATE_SEQUENCE (written before: the numbering holds), the producer's identity
  is dropped; the partition's other batches of that identity are renumbered when the
  failed one certainly wrote nothing (`NOTHING_WRITTEN`: the gap means none of them was
  appended), else they fail with the same error (their outcome is as unknown as its).
- `identity_failed(err)`: no identity could be had: every batch waiting for numbers fails.
- `abandon()`: every batch left fails (the driver's close); later answers are ignored.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypedDict, TypeVar, Unpack

from replog.errors import (
    DuplicateSequenceError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ReplogError,
    TransportError,
    UnauthenticatedError,
)

# Errors that say the request was refused before anything was appended.
NOTHING_WRITTEN = (InvalidArgumentError, NotFoundError, PermissionDeniedError, UnauthenticatedError)


def unimplemented(err: ReplogError) -> bool:
    """The node does not know the method (a server from before AppendStream): nothing was
    appended; the client sends that node unary Appends instead."""
    return isinstance(err, TransportError) and err.metadata.get("grpc_code") == "UNIMPLEMENTED"


class Numbering(Protocol):
    """The producer's identity and sequence numbers (`sequences.Sequences`)."""

    @property
    def identity(self) -> Any: ...

    def reserve(self, identity: Any, topic: str, partition: int, count: int) -> int | None: ...

    def abandon(self, identity: Any) -> None: ...


class Budget(Protocol):
    """One batch's retry budget (`retry.Attempts`)."""

    def budget_left(self, err: ReplogError) -> float | None: ...

    def pause_s(self, backoff_s: float, rerouted: bool) -> float: ...


P = TypeVar("P")


class Batch(Generic[P]):
    """One batch: the driver's `payload` (its values, future, ...) and the core's state."""

    __slots__ = (
        "attempts",
        "base_sequence",
        "done",
        "identity",
        "key",
        "payload",
        "records",
        "sent",
        "size_bytes",
    )

    def __init__(self, key: tuple[str, int], payload: P, records: int, size_bytes: int) -> None:
        self.key = key
        self.payload = payload
        self.records = records
        self.size_bytes = size_bytes
        self.identity: Any = None  # None: to be numbered
        self.base_sequence = -1
        self.attempts: Budget | None = None  # made at its first send
        self.sent = False  # sent at least once
        self.done = False  # acknowledged or failed: its outcome is given


class Partition(Generic[P]):
    __slots__ = (
        "confirmed",
        "generation",
        "in_flight",
        "key",
        "paused_until",
        "queue",
        "reroute",
        "rerouting",
    )

    def __init__(self, key: tuple[str, int]) -> None:
        self.key = key
        self.queue: deque[Batch[P]] = deque()  # to send, in order
        self.in_flight: deque[Batch[P]] = deque()  # sent in this generation, in order
        self.generation = 0
        self.paused_until = 0.0
        self.reroute: tuple[ReplogError, float] | None = None  # due before resending
        self.rerouting = False  # a `Reroute` is being performed: nothing goes out
        self.confirmed: Any = None  # the identity of the last acknowledged batch


@dataclass(frozen=True, slots=True)
class Send(Generic[P]):
    """Write `batch` (numbered: `batch.identity`, `batch.base_sequence`) to its partition's
    leader; report its answer with `generation`."""

    batch: Batch[P]
    generation: int


@dataclass(frozen=True, slots=True)
class Reroute(Generic[P]):
    """Update the routing of `partition` after `error`, then call `rerouted`."""

    partition: Partition[P]
    error: ReplogError
    backoff_s: float


IDENTITY = "identity"  # the producer has no identity: ask for one, or `identity_failed`
Need = Reroute[P] | str
Failures = list[tuple[Batch[P], ReplogError]]


class PipelineLimits(TypedDict, total=False):
    """The in-flight limits of a pipeline (`PipelineRules`' keywords, and its drivers'):
    batches in flight per partition (default 5), and bytes of appends sent and not
    answered over all partitions (default 64 MiB; one batch alone always goes)."""

    partition_in_flight_max: int
    in_flight_bytes_max: int


class PipelineRules(Generic[P]):
    """The pipeline's state and decisions (see the module doc). Not thread-safe: the
    threaded driver holds its lock around every call."""

    def __init__(
        self,
        numbering: Numbering,
        budget: Callable[[], Budget],
        *,
        partition_in_flight_max: int = 5,
        in_flight_bytes_max: int = 64 * 1024 * 1024,
    ) -> None:
        if partition_in_flight_max < 1 or in_flight_bytes_max < 1:
            raise InvalidArgumentError("in-flight limits must be >= 1")
        self._numbering = numbering
        self._budget = budget
        self.partition_in_flight_max = partition_in_flight_max
        self.in_flight_bytes_max = in_flight_bytes_max
        self.in_flight_bytes = 0
        self.parts: dict[tuple[str, int], Partition[P]] = {}
        self.abandoned = False

    # -- events ---------------------------------------------------------------------------

    def submit(self, topic: str, partition: int, payload: P, records: int, size: int) -> Batch[P]:
        key = (topic, partition)
        part = self.parts.get(key)
        if part is None:
            part = self.parts[key] = Partition(key)
        batch = Batch(key, payload, records, size)
        part.queue.append(batch)
        return batch

    def withdraw(self, batch: Batch[P]) -> bool:
        """Take back a batch never sent (True); False: it was sent, or is done."""
        part = self.parts[batch.key]
        if batch.sent or batch.done or batch not in part.queue:
            return False
        part.queue.remove(batch)
        batch.done = True
        return True

    def acked(self, batch: Batch[P]) -> bool:
        """`batch` was acknowledged: True when its outcome is to be given now."""
        if batch.done or self.abandoned:
            return False
        part = self.parts[batch.key]
        part.confirmed = batch.identity
        self._forget(part, batch)
        batch.done = True
        return True

    def failed(self, batch: Batch[P], generation: int, err: ReplogError) -> Failures[P]:
        """A send of `batch` failed with `err`: the batches that fail for good (with their
        errors), maybe none."""
        part = self.parts[batch.key]
        if batch.done or self.abandoned or generation != part.generation:
            return []  # acknowledged by another send, failed, or an older send
        if unimplemented(err):
            self._take_back(part)  # nothing was appended: resent at once, as unary Appends
            return []
        assert batch.attempts is not None
        backoff_s = batch.attempts.budget_left(err)
        if backoff_s is not None:
            self._take_back(part)
            part.reroute = (err, backoff_s)
            return []
        return self._give_up(part, batch, err)

    def rerouted(self, reroute: Reroute[P], moved: bool, now: float) -> None:
        """The `Reroute` of `part` is done (`moved`: the routing changed): it resends from
        its first batch after the pause its head batch's budget says."""
        part = reroute.partition
        part.rerouting = False
        pause_s = reroute.backoff_s
        if part.queue and part.queue[0].attempts is not None:
            pause_s = part.queue[0].attempts.pause_s(reroute.backoff_s, moved)
        part.paused_until = now + pause_s

    def identity_failed(self, err: ReplogError) -> Failures[P]:
        """No identity could be had: the batches waiting for numbers fail with `err`."""
        failures: Failures[P] = []
        for part in self.parts.values():
            for b in [b for b in part.queue if b.base_sequence < 0]:
                part.queue.remove(b)
                b.done = True
                failures.append((b, err))
        return failures

    def abandon(self) -> list[Batch[P]]:
        """Every batch not done, to fail (the pipeline closes); answers are ignored after."""
        self.abandoned = True
        left: list[Batch[P]] = []
        for part in self.parts.values():
            left += [b for b in (*part.in_flight, *part.queue) if not b.done]
            part.in_flight.clear()
            part.queue.clear()
        for b in left:
            b.done = True
        self.in_flight_bytes = 0
        return left

    # -- decisions ------------------------------------------------------------------------

    def busy(self) -> bool:
        return any(p.queue or p.in_flight for p in self.parts.values())

    def current(self, send: Send[P]) -> bool:
        """`send` still stands (its partition was not taken back since `next` gave it)."""
        part = self.parts[send.batch.key]
        return send.generation == part.generation and send.batch in part.in_flight

    def next(self, now: float) -> tuple[list[Send[P]], Need[P] | None, float | None]:
        """What may go now, then what must be done first (outside any lock) before more
        can, and how long to wait otherwise (None: until the next event)."""
        sends: list[Send[P]] = []
        wait_s: float | None = None
        for part in self.parts.values():
            if part.rerouting:
                continue
            if part.reroute is not None:
                err, backoff_s = part.reroute
                part.reroute, part.rerouting = None, True
                return sends, Reroute(part, err, backoff_s), None
            if part.paused_until > now:
                due = part.paused_until - now
                wait_s = due if wait_s is None else min(wait_s, due)
                continue
            while part.queue and len(part.in_flight) < self._window(part):
                batch = part.queue[0]
                if self.in_flight_bytes and (
                    self.in_flight_bytes + batch.size_bytes > self.in_flight_bytes_max
                ):
                    break
                if batch.base_sequence < 0 and not self._number(part, batch):
                    if self._numbering.identity is None:
                        return sends, IDENTITY, None
                    break  # the partition's batches of the old identity come first
                part.queue.popleft()
                sends.append(self._sent(part, batch))
        return sends, None, wait_s

    def _window(self, part: Partition[P]) -> int:
        identity = self._numbering.identity
        known = identity is not None and part.confirmed == identity
        return self.partition_in_flight_max if known else 1

    def _number(self, part: Partition[P], batch: Batch[P]) -> bool:
        identity = self._numbering.identity
        if identity is None:
            return False
        if any(b.identity != identity for b in part.in_flight):
            return False
        topic, partition = part.key
        seq = self._numbering.reserve(identity, topic, partition, batch.records)
        if seq is None:
            return False
        batch.identity, batch.base_sequence = identity, seq
        return True

    def _sent(self, part: Partition[P], batch: Batch[P]) -> Send[P]:
        if batch.attempts is None:
            batch.attempts = self._budget()
        batch.sent = True
        part.in_flight.append(batch)
        self.in_flight_bytes += batch.size_bytes
        return Send(batch, part.generation)

    def _forget(self, part: Partition[P], batch: Batch[P]) -> None:
        if batch in part.in_flight:
            part.in_flight.remove(batch)
            self.in_flight_bytes -= batch.size_bytes
        elif batch in part.queue:
            part.queue.remove(batch)

    def _take_back(self, part: Partition[P]) -> None:
        """The partition's batches in flight, back to the front of its queue, in order."""
        back = list(part.in_flight)
        part.in_flight.clear()
        self.in_flight_bytes -= sum(b.size_bytes for b in back)
        part.queue.extendleft(reversed(back))
        part.generation += 1

    def _give_up(self, part: Partition[P], batch: Batch[P], err: ReplogError) -> Failures[P]:
        self._forget(part, batch)
        batch.done = True
        failures: Failures[P] = [(batch, err)]
        if isinstance(err, DuplicateSequenceError):
            return failures  # written before (a resumed writer's resend): the numbering holds
        assert batch.identity is not None
        self._numbering.abandon(batch.identity)
        self._take_back(part)
        later = [b for b in part.queue if b.identity == batch.identity]
        if isinstance(err, NOTHING_WRITTEN):
            for b in later:  # the gap it leaves means none of them was appended
                b.identity, b.base_sequence = None, -1
        else:
            for b in later:
                part.queue.remove(b)
                b.done = True
                failures.append((b, err))
        return failures


class Limits:
    """What both drivers keep: their rules (`_rules`, whose limits and bytes in flight are
    this view's attributes), how they get the producer's identity and how they re-route
    after a retriable error (blocking or awaited)."""

    _rules: PipelineRules[Any]

    def __init__(
        self,
        numbering: Numbering,
        budget: Callable[[], Budget],
        identity: Callable[[], Any],
        reroute: Callable[[ReplogError, str, int], Any],
        **limits: Unpack[PipelineLimits],
    ) -> None:
        self._rules = PipelineRules(numbering, budget, **limits)
        self._identity = identity
        self._reroute = reroute

    @property
    def partition_in_flight_max(self) -> int:
        return self._rules.partition_in_flight_max

    @property
    def in_flight_bytes_max(self) -> int:
        """Bytes of batches written and not answered yet, all partitions together: a batch
        waits while it would pass the cap (one batch alone always passes)."""
        return self._rules.in_flight_bytes_max

    @in_flight_bytes_max.setter
    def in_flight_bytes_max(self, value: int) -> None:
        self._rules.in_flight_bytes_max = value

    @property
    def in_flight_bytes(self) -> int:
        return self._rules.in_flight_bytes
