"""A consumer of one partition: iterates committed records from an offset via `StreamFrom`.

Control records (replication markers) are skipped, so offsets may have gaps. `batches()`
yields columns (`frames.DecodedFrames`; on an envelope topic `records.DecodedRecords`)
without a Python object per record: use it when throughput matters; iterating the consumer
yields `frames.Record`s (on an envelope topic `records.ConsumerRecord`s: offset, value,
key, headers, timestamp_ms).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from replog import frames, records
from replog.client import formats
from replog.errors import InvalidArgumentError

# StreamFrom batch size a consumer asks for: granted while it is behind (catching up costs
# few messages), the server's small default once it follows the tail.
STREAM_REPLY_BYTES = 1024 * 1024

if TYPE_CHECKING:
    from replog.client.results import Offsets
    from replog.v1 import log_pb2


class ConsumerClient(Protocol):
    """What a `Consumer` needs from its client; `replog.client.Client` is one.

    Declared here, not imported from `client.py`, because `Client.consumer()` builds
    consumers: `client.py` imports this module, never the other way round.
    """

    def list_offsets(self, topic: str, partitions: Sequence[int] = ()) -> list[Offsets]: ...

    def offsets_for_times(self, topic: str, times: Mapping[int, int]) -> dict[int, int]: ...

    def topic_format(self, topic: str) -> str: ...

    def stream(
        self, topic: str, partition: int, offset: int, *, max_bytes: int = 0
    ) -> Generator[log_pb2.StreamBatch, None, None]: ...


class Consumer:
    """One partition's committed records from an offset (see the module doc): iterate it
    for records, or `batches()` for columns; `close()` ends its stream."""

    def __init__(
        self,
        client: ConsumerClient,
        topic: str,
        partition: int = 0,
        offset: int | str = "earliest",
        *,
        from_time_ms: int | None = None,
    ) -> None:
        """`from_time_ms`: start at the first record whose timestamp is >= it (replaces
        `offset`; the end of the partition when no record is that new yet)."""
        self.client = client
        self.topic = topic
        self.partition = partition
        self._start = offset
        self._from_time_ms = from_time_ms
        self.position: int | None = None  # the next offset to read, once resolved
        self.high_watermark: int | None = None
        self._stream: Generator[log_pb2.StreamBatch, None, None] | None = None

    def _resolve(self) -> int:
        if self._from_time_ms is not None:
            times = {self.partition: self._from_time_ms}
            return self.client.offsets_for_times(self.topic, times)[self.partition]
        if isinstance(self._start, int) and not isinstance(self._start, bool):
            return self._start
        if self._start not in ("earliest", "latest"):
            raise InvalidArgumentError(
                f"offset must be an int, 'earliest' or 'latest', got {self._start!r}"
            )
        (offsets,) = self.client.list_offsets(self.topic, [self.partition])
        return offsets.earliest if self._start == "earliest" else offsets.latest

    def batches(self) -> Iterator[formats.Decoded]:
        """Runs of data records, as the server sends them; follows the tail until closed."""
        envelope = self.client.topic_format(self.topic) == formats.ENVELOPE
        offset = self.position if self.position is not None else self._resolve()
        self.position = offset
        stream = self.client.stream(
            self.topic, self.partition, offset, max_bytes=STREAM_REPLY_BYTES
        )
        self._stream = stream
        try:
            for batch in stream:
                decoded = formats.decode(batch.frames, envelope)
                self.position = batch.next_offset
                self.high_watermark = batch.high_watermark
                if len(decoded):
                    yield decoded
        finally:
            stream.close()

    def __iter__(self) -> Iterator[frames.Record | records.ConsumerRecord]:
        for batch in self.batches():
            yield from batch.records()

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
