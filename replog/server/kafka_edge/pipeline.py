"""Pipelined Produce requests on one Kafka connection, answered in request order.

A Kafka client may send several requests before the first is answered (librdkafka's
idempotent producer keeps up to 5 Produce requests in flight). Kafka's brokers read the
next request only once the previous one is answered; a replog node would then wait out
each request's replication and fsync in turn. So the listener reads on past a Produce:
each one is answered by its own task (at most `PRODUCE_IN_FLIGHT_MAX` per connection),
and one writer task (`Answers`) writes the answers in the order the requests came. Any
other request waits until every answer before it is written, and is answered before the
next request is read, as Kafka's brokers serve it.

Order of appends: each Produce of a connection gets a turn (`PRODUCE_TURN`, a context
variable: the previous Produce's "submitted" future and its own). The handler prepares
its partitions' appends (decode, checks, leadership), waits for the previous Produce's
appends to have reached their partitions, then starts its own appends as tasks (each
reaches its partition's owner before its first suspension: `ReplicationDriver.append`) and
sets its own future. So a connection's batches reach each partition in the order they
were sent, and an idempotent producer's pipelined batches arrive in sequence order.
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextvars import ContextVar
from typing import Final

from replog.server.edge.limits import RequestPool

PRODUCE_IN_FLIGHT_MAX: Final = 5  # librdkafka's max.in.flight with idempotence
# (the previous Produce's appends submitted, this one's): set for a pipelined Produce
PRODUCE_TURN: ContextVar[tuple[asyncio.Future[None], asyncio.Future[None]] | None] = ContextVar(
    "produce_turn", default=None
)


class Answers:
    """The answers of one connection, written in request order by one task."""

    def __init__(self, writer: asyncio.StreamWriter, pool: RequestPool) -> None:
        self.writer = writer
        self.pool = pool
        self.queue: deque[tuple[asyncio.Task[bytes | None], int]] = deque()
        self._wake = asyncio.Event()
        self._popped = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._previous: asyncio.Future[None] | None = None
        self.task = asyncio.get_running_loop().create_task(self._run())

    def produce(self, answer: asyncio.Task[bytes | None] | None, size: int) -> None:
        """Queue a pipelined request's answer (`size`: its bytes held in the pool)."""
        assert answer is not None
        self.queue.append((answer, size))
        self._idle.clear()
        self._wake.set()

    def turn(self) -> tuple[asyncio.Future[None], asyncio.Future[None]]:
        """The next Produce's turn (see the module doc); its own future is set when its
        task ends, whatever happened, so that no later Produce waits forever."""
        loop = asyncio.get_running_loop()
        previous = self._previous
        if previous is None:
            previous = loop.create_future()
            previous.set_result(None)
        mine: asyncio.Future[None] = loop.create_future()
        self._previous = mine
        return previous, mine

    async def room(self) -> None:
        """Until fewer than PRODUCE_IN_FLIGHT_MAX answers are queued."""
        while len(self.queue) >= PRODUCE_IN_FLIGHT_MAX and not self.task.done():
            self._popped.clear()
            await self._popped.wait()
        if self.task.done():
            self.task.result()

    async def written(self) -> None:
        """Until every queued answer is written (the writer's failure raised here)."""
        await self._idle.wait()
        if self.task.done():
            self.task.result()

    async def _run(self) -> None:
        try:
            while True:
                while not self.queue:
                    self._idle.set()
                    self._wake.clear()
                    await self._wake.wait()
                answer, size = self.queue[0]
                try:
                    response = await answer
                finally:
                    self.queue.popleft()
                    self.pool.release(size, read=True)
                    self._popped.set()
                if response is not None:
                    self.writer.write(response)
                    await self.writer.drain()
        except BaseException:
            self.writer.close()  # the reader's read ends too: the connection is over
            raise
        finally:
            self._idle.set()
            self._popped.set()

    async def close(self) -> None:
        """Stop: the answers not written are cancelled (their waits only: each append
        belongs to its partition's owner) and their pool bytes released."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        left = list(self.queue)
        self.queue.clear()
        for answer, _ in left:
            answer.cancel()
        try:
            await asyncio.gather(*(a for a, _ in left), return_exceptions=True)
        finally:
            for _, size in left:
                self.pool.release(size, read=True)

    def failure(self) -> BaseException | None:
        """What ended the writer, if something did (not a cancellation)."""
        if not self.task.done() or self.task.cancelled():
            return None
        return self.task.exception()


def settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def settle_after(future: asyncio.Future[None], _task: asyncio.Task[bytes | None]) -> None:
    """A done callback: a Produce's task ended, however: its turn is over."""
    settle(future)
