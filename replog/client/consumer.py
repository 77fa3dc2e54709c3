"""A consumer of one partition: iterates committed records from an offset via `StreamFrom`.

Control records (replication markers) are skipped, so offsets may have gaps. `batches()`
yields columns (`frames.DecodedFrames`) without a Python object per record: use it when
throughput matters; iterating the consumer yields `frames.Record`s.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

from replog import frames
from replog.errors import InvalidArgumentError

if TYPE_CHECKING:
    from replog.client.client import Client


class Consumer:
    def __init__(
        self, client: Client, topic: str, partition: int = 0, offset: int | str = "earliest"
    ) -> None:
        self.client = client
        self.topic = topic
        self.partition = partition
        self._start = offset
        self.position: int | None = None  # the next offset to read, once resolved
        self.high_watermark: int | None = None
        self._stream: Generator[object, None, None] | None = None

    def _resolve(self) -> int:
        if isinstance(self._start, int) and not isinstance(self._start, bool):
            return self._start
        if self._start not in ("earliest", "latest"):
            raise InvalidArgumentError(
                f"offset must be an int, 'earliest' or 'latest', got {self._start!r}"
            )
        (offsets,) = self.client.list_offsets(self.topic, [self.partition])
        return offsets.earliest if self._start == "earliest" else offsets.latest

    def batches(self) -> Iterator[frames.DecodedFrames]:
        """Runs of data records, as the server sends them; follows the tail until closed."""
        offset = self.position if self.position is not None else self._resolve()
        self.position = offset
        stream = self.client.stream(self.topic, self.partition, offset)
        self._stream = stream
        try:
            for batch in stream:
                decoded = frames.decode(batch.frames)
                self.position = batch.next_offset
                self.high_watermark = batch.high_watermark
                if decoded.control is not None:
                    decoded = decoded.data_records()
                if len(decoded):
                    yield decoded
        finally:
            stream.close()

    def __iter__(self) -> Iterator[frames.Record]:
        for batch in self.batches():
            yield from batch.records()

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
