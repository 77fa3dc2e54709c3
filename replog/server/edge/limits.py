"""What clients may hold on a node at once: calls, streams, acks=none bytes.

Each limit is a counter taken when the work starts and given back when it ends, in the
event loop's one thread (no lock). At its limit, the new work is refused at once with a
typed, retriable RESOURCE_EXHAUSTED (`replog.errors.LimitExceededError` and subclasses,
metadata `limit` = the setting's name, `limit_value` = its value); nothing has been done,
so the client may retry with backoff.

    rpcs_max                    Log and Admin calls in progress, streams included
    streams_max                 StreamFrom calls open on the node
    streams_per_connection_max  StreamFrom calls open on one client connection
    acks_none_bytes_max         record bytes of acks=none appends accepted, not yet written
    request_bytes_pool_max      bytes Append requests hold while they are received, decoded
                                and handled, and Fetch replies while they are built, all
                                calls together (`RequestPool`): counted before gRPC reads
                                the message (before the frames are read), so they are never
                                allocated past it; past it calls wait, first come first served
    stream_bytes_pool_max       bytes that StreamFrom replies may hold above their floor,
                                all streams together (`StreamWindow`)
    append_stream_requests_max  requests one AppendStream holds read and not yet answered
    append_stream_bytes_max     bytes of those requests (serialized), per AppendStream
    append_stream_bytes_pool_max  the same bytes, all AppendStreams of the node together

The AppendStream limits are not refusals but flow control (`AppendWindow`): past them the
stream stops reading requests until answers free room (a lone request always fits), and
HTTP/2 flow control holds the client. AppendStream calls count as streams (`streams_max`,
`streams_per_connection_max`) like StreamFrom.

When open streams fall to half their peak (or none), the memory they used is given back to
the system (`memory.MemoryReleaser`).

Replication, Health and Reflection calls are not counted: a flood of client calls must not
starve the replicas' own traffic or the probes that tell an orchestrator the node lives.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from replog.errors import (
    LimitExceededError,
    TooManyBytesInFlightError,
    TooManyRequestsError,
    TooManyStreamsError,
)
from replog.server.edge.memory import MemoryReleaser


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    rpcs_max: int = 2000  # twice streams_max: open streams never starve other calls
    streams_max: int = 1000
    streams_per_connection_max: int = 100
    acks_none_bytes_max: int = 64 * 1024 * 1024
    stream_bytes_pool_max: int = 64 * 1024 * 1024
    append_stream_requests_max: int = 64
    append_stream_bytes_max: int = 16 * 1024 * 1024
    append_stream_bytes_pool_max: int = 256 * 1024 * 1024
    request_bytes_pool_max: int = 64 * 1024 * 1024
    message_bytes_max: int = 4 * 1024 * 1024  # the gRPC message limit: the largest request

    def __post_init__(self) -> None:
        assert self.request_bytes_pool_max >= 1 and self.message_bytes_max >= 1
        assert self.rpcs_max >= 1 and self.streams_max >= 1
        assert self.append_stream_requests_max >= 1 and self.append_stream_bytes_max >= 1
        assert self.append_stream_bytes_pool_max >= 1
        assert self.streams_per_connection_max >= 1 and self.acks_none_bytes_max >= 1
        assert self.stream_bytes_pool_max >= 0


class Limits:
    def __init__(self, config: LimitsConfig) -> None:
        self.config = config
        self.rpcs = 0
        self.streams = 0
        self.streams_by_connection: dict[str, int] = {}
        self.acks_none_bytes = 0
        self.stream_pool_bytes = 0  # borrowed by StreamWindows above their floor
        self.append_pool_bytes = 0  # held by AppendWindows (requests read, not answered)
        self.append_released = asyncio.Event()  # replaced at each release (AppendWindow)
        self.memory = MemoryReleaser()
        self.requests = RequestPool(
            config.request_bytes_pool_max,
            lambda peak: self.memory.drained(peak, config.request_bytes_pool_max),
        )
        self._acks_none_peak_bytes = 0
        self.memory = MemoryReleaser()
        self.refused: dict[str, int] = {}  # setting name -> calls refused by it (metrics)
        self.malformed = 0  # request bodies that did not decode (counted by the guard)

    def _refuse(
        self, setting: str, value: int, error: type[LimitExceededError], message: str
    ) -> LimitExceededError:
        """Count a refusal by `setting` (= `value`) and build its typed error (to raise)."""
        self.refused[setting] = self.refused.get(setting, 0) + 1
        return error(message, limit=setting, limit_value=value)

    def _below(
        self,
        setting: str,
        in_use: int,
        error: type[LimitExceededError],
        what: str,
        advice: str = "retry later",
    ) -> None:
        """Refuse (`_refuse`) when `in_use` has reached the config's `setting`; `what` names
        what is in use with `{}` for the limit."""
        limit: int = getattr(self.config, setting)
        if in_use >= limit:
            raise self._refuse(setting, limit, error, f"{what.format(limit)} ({setting}); {advice}")

    def snapshot(self) -> list[tuple[str, int, int, int]]:
        """(setting, in use, limit, refused so far) for each limit (metrics)."""
        c = self.config
        return [
            ("rpcs_max", self.rpcs, c.rpcs_max, self.refused.get("rpcs_max", 0)),
            ("streams_max", self.streams, c.streams_max, self.refused.get("streams_max", 0)),
            (
                "streams_per_connection_max",
                max(self.streams_by_connection.values(), default=0),
                c.streams_per_connection_max,
                self.refused.get("streams_per_connection_max", 0),
            ),
            (
                "acks_none_bytes_max",
                self.acks_none_bytes,
                c.acks_none_bytes_max,
                self.refused.get("acks_none_bytes_max", 0),
            ),
            ("stream_bytes_pool_max", self.stream_pool_bytes, c.stream_bytes_pool_max, 0),
            ("request_bytes_pool_max", self.requests.held_bytes, c.request_bytes_pool_max, 0),
            (
                "append_stream_bytes_pool_max",
                self.append_pool_bytes,
                c.append_stream_bytes_pool_max,
                0,
            ),
        ]

    @contextlib.contextmanager
    def rpc(self) -> Iterator[None]:
        """Hold one of `rpcs_max` for the duration of a call."""
        self.take_rpc()
        try:
            yield
        finally:
            self.rpcs -= 1

    def take_rpc(self) -> None:
        """Take one of `rpcs_max` (TOO_MANY_REQUESTS when none is left); the caller gives it
        back with `give_rpc` (`rpc()` pairs the two; the guard's unary path, per call)."""
        self._below("rpcs_max", self.rpcs, TooManyRequestsError, "the node is serving {} calls")
        self.rpcs += 1

    def give_rpc(self) -> None:
        self.rpcs -= 1

    @contextlib.contextmanager
    def stream(self, connection: str) -> Iterator[None]:
        """Hold one of `streams_max`, and one of `streams_per_connection_max` of `connection`."""
        self._below(
            "streams_max", self.streams, TooManyStreamsError, "the node has {} streams open"
        )
        held = self.streams_by_connection.get(connection, 0)
        self._below(
            "streams_per_connection_max",
            held,
            TooManyStreamsError,
            "this connection has {} streams open",
            "end one, use another connection, or retry later",
        )
        self.streams += 1
        self.streams_by_connection[connection] = held + 1
        self.memory.streams_opened(self.streams)
        try:
            yield
        finally:
            self.streams -= 1
            self.memory.streams_ended(self.streams)
            left = self.streams_by_connection[connection] - 1
            if left:
                self.streams_by_connection[connection] = left
            else:
                del self.streams_by_connection[connection]

    def take_acks_none(self, size_bytes: int) -> None:
        """Count `size_bytes` of an acks=none batch until `release_acks_none`; refuses it
        when the node already holds `acks_none_bytes_max` (a lone batch always fits)."""
        limit = self.config.acks_none_bytes_max
        if self.acks_none_bytes and self.acks_none_bytes + size_bytes > limit:
            raise self._refuse(
                "acks_none_bytes_max",
                limit,
                TooManyBytesInFlightError,
                f"acks=none appends hold {self.acks_none_bytes} bytes not yet written "
                f"(acks_none_bytes_max={limit}); retry later or use acks=leader/all",
            )
        self.acks_none_bytes += size_bytes
        self._acks_none_peak_bytes = max(self._acks_none_peak_bytes, self.acks_none_bytes)

    def release_acks_none(self, size_bytes: int) -> None:
        self.acks_none_bytes -= size_bytes
        assert self.acks_none_bytes >= 0, self.acks_none_bytes
        if self.acks_none_bytes == 0:  # all written: give a flood's memory back
            self.memory.drained(self._acks_none_peak_bytes, self.config.acks_none_bytes_max)
            self._acks_none_peak_bytes = 0

    def append_window(self) -> AppendWindow:
        """The flow-control window of one AppendStream; `close()` it when the stream ends."""
        return AppendWindow(self)

    def stream_window(self, floor_bytes: int, ceiling_bytes: int) -> StreamWindow:
        """A reply-size window for one stream, between `floor_bytes` and `ceiling_bytes`
        (what the reader asked for), borrowing from `stream_bytes_pool_max`; `close()` it
        when the stream ends."""
        return StreamWindow(self, floor_bytes, max(floor_bytes, ceiling_bytes))


class StreamWindow:
    """How many bytes a stream's next reply may carry.

    A stream starts at `floor_bytes` (small: an idle or stuck reader costs the node one
    small reply). A reader that asked for larger replies (StreamFrom `max_bytes`, up to
    `ceiling_bytes`) gets them while it is behind the HW (`widen`): fewer messages and thread
    hops per byte while it catches up. The bytes above the floor are borrowed from the
    node's pool (`stream_bytes_pool_max`, all streams together); when the pool is spent a
    stream gets what is left, at least its floor. A reader that has caught up gives its
    borrowed bytes back (`shrink`), as does a stream that ends (`close`). So what streams
    hold is at most `streams_max` x floor + the pool, whatever the readers do.
    """

    __slots__ = ("_limits", "ceiling_bytes", "floor_bytes", "size_bytes")

    def __init__(self, limits: Limits, floor_bytes: int, ceiling_bytes: int) -> None:
        self._limits = limits
        self.floor_bytes = floor_bytes
        self.ceiling_bytes = ceiling_bytes
        self.size_bytes = floor_bytes

    def widen(self) -> int:
        """Borrow up to the ceiling (as the pool allows); the size to read now."""
        pool = self._limits
        free = pool.config.stream_bytes_pool_max - pool.stream_pool_bytes
        extra = min(self.ceiling_bytes - self.size_bytes, free)
        if extra > 0:
            pool.stream_pool_bytes += extra
            self.size_bytes += extra
        return self.size_bytes

    def shrink(self) -> None:
        borrowed = self.size_bytes - self.floor_bytes
        self._limits.stream_pool_bytes -= borrowed
        assert self._limits.stream_pool_bytes >= 0, self._limits.stream_pool_bytes
        self.size_bytes = self.floor_bytes

    close = shrink


class AppendWindow:
    """What one AppendStream holds: requests read and not yet answered, and their bytes
    (each request's serialized size, `ByteSize`), at most `append_stream_requests_max` and
    `append_stream_bytes_max` per stream and `append_stream_bytes_pool_max` for all streams
    of the node. `take` waits (the stream
    reads no further request meanwhile) until the request fits; a stream that holds nothing
    may always take one request, so every stream progresses and what all of them hold is
    at most the pool + `streams_max` requests. `release` when the request is answered;
    `close` when the stream ends (gives back what it still holds).
    """

    __slots__ = ("_limits", "held_bytes", "held_requests")

    def __init__(self, limits: Limits) -> None:
        self._limits = limits
        self.held_requests = 0
        self.held_bytes = 0

    def fits(self, size_bytes: int) -> bool:
        if self.held_requests == 0:
            return True
        c = self._limits.config
        return (
            self.held_requests < c.append_stream_requests_max
            and self.held_bytes + size_bytes <= c.append_stream_bytes_max
            and self._limits.append_pool_bytes + size_bytes <= c.append_stream_bytes_pool_max
        )

    async def take(self, size_bytes: int) -> None:
        limits = self._limits
        while not self.fits(size_bytes):
            await limits.append_released.wait()
        self.held_requests += 1
        self.held_bytes += size_bytes
        limits.append_pool_bytes += size_bytes

    def release(self, size_bytes: int) -> None:
        limits = self._limits
        self.held_requests -= 1
        self.held_bytes -= size_bytes
        limits.append_pool_bytes -= size_bytes
        assert self.held_requests >= 0 and self.held_bytes >= 0, self.held_requests
        assert limits.append_pool_bytes >= 0, limits.append_pool_bytes
        event, limits.append_released = limits.append_released, asyncio.Event()
        event.set()

    def close(self) -> None:
        if self.held_requests:
            self._limits.append_pool_bytes -= self.held_bytes
            self.held_requests = self.held_bytes = 0
            event = self._limits.append_released
            self._limits.append_released = asyncio.Event()
            event.set()


class RequestPool:
    """Bytes that Append requests hold, counted before they are allocated.

    grpc.aio receives a unary request whole (in the C core) before any Python code runs, then
    copies it into a Python `bytes`, and protobuf parses that into a second copy; the values
    taken out of it (`list(request.values)`) are a third, and the log encodes them into
    frames and joins the frames of the batches it writes at once (`PartitionLog`): at most
    `COPIES` copies of a request live at once. So the guard serves Append as a
    call that reads its one message itself (`guard`): it first `reserve`s the worst case
    (`COPIES` x `message_bytes_max`), waiting while the pool is spent; only then does gRPC
    read the message. Once read, the reservation shrinks to `COPIES` x its real size
    (`resize`), and is given back when the call's handler returns (`release`); an acks=none
    batch is then counted by `acks_none_bytes_max` until it is written.

    A call waiting here has not asked gRPC for its message: HTTP/2 flow control holds the
    client after the stream's initial window (64 KiB; the client listener probes no
    bandwidth-delay product, `guard.server_options`). A reservation always fits an empty
    pool, so one request of any size is always served. Waiting is first come, first
    served: a large request is not overtaken forever by small ones.
    """

    # Copies of a request alive at once, at most: gRPC's buffer + the raw `bytes` while it is
    # read; then the parsed message, its values, the encoded frames and the joined write.
    COPIES = 4

    __slots__ = ("_drained", "_waiters", "held_bytes", "peak_bytes", "pool_bytes_max", "read_bytes")

    def __init__(
        self, pool_bytes_max: int, drained: Callable[[int], None] = lambda _peak: None
    ) -> None:
        self.pool_bytes_max = pool_bytes_max
        self.held_bytes = 0  # reservations and requests read
        self.read_bytes = 0  # requests read (`resize`d to their real size)
        self.peak_bytes = 0  # of `read_bytes`, since the pool was last empty
        self._drained = drained  # called with the peak when the pool empties
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _fits(self, size_bytes: int) -> bool:
        return self.held_bytes == 0 or self.held_bytes + size_bytes <= self.pool_bytes_max

    async def reserve(self, size_bytes: int) -> None:
        """Take `size_bytes` of the pool, waiting (first come, first served) until it fits.
        Cancelled while waiting: nothing is taken."""
        if not self._waiters and self._fits(size_bytes):
            self._take(size_bytes)
            return
        waiter = asyncio.get_running_loop().create_future()
        entry = (size_bytes, waiter)
        self._waiters.append(entry)
        try:
            await waiter  # `_wake` took the bytes for us
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release(size_bytes)  # woken and cancelled at once: give it back
            else:
                with contextlib.suppress(ValueError):  # `_wake` may have dropped it
                    self._waiters.remove(entry)
                self._wake()  # those behind us may fit now
            raise

    def _take(self, size_bytes: int) -> None:
        self.held_bytes += size_bytes

    def resize(self, reserved_bytes: int, size_bytes: int) -> None:
        """What a call holds goes from `reserved_bytes` to `size_bytes` (its real size, read);
        it gives that back with `release(size_bytes, read=True)`."""
        self.held_bytes += size_bytes - reserved_bytes
        self.read_bytes += size_bytes
        self.peak_bytes = max(self.peak_bytes, self.read_bytes)
        if size_bytes < reserved_bytes:
            self._wake()

    def release(self, size_bytes: int, *, read: bool = False) -> None:
        self.held_bytes -= size_bytes
        if read:
            self.read_bytes -= size_bytes
        assert self.held_bytes >= self.read_bytes >= 0, (self.held_bytes, self.read_bytes)
        self._wake()
        if self.held_bytes == 0:
            peak, self.peak_bytes = self.peak_bytes, 0
            self._drained(peak)

    def _wake(self) -> None:
        while self._waiters:
            size_bytes, waiter = self._waiters[0]
            if waiter.done():  # cancelled: its `reserve` removes it
                self._waiters.popleft()
                continue
            if not self._fits(size_bytes):
                return
            self._waiters.popleft()
            self._take(size_bytes)
            waiter.set_result(None)
