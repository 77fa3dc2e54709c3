"""An idempotent producer's client side: its id and epoch, and the next sequence number per
partition. Pure bookkeeping shared by `Client` and `AsyncClient` (thread-safe).

Each append reserves `len(values)` sequence numbers of its partition before it is sent; its
retries (after a timeout, a lost connection, a leader change) resend the same numbers, so
the leader appends the batch once. When an append finally fails, its outcome may be
unknown and the partition's numbering has a hole: the identity is dropped and the next
append gets a fresh producer id (`InitProducer`), whose numbering starts again at 0.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Identity:
    producer_id: int
    producer_epoch: int

    def stamp(self, request: Any, base_sequence: int) -> None:
        """Set an `AppendRequest`'s producer fields: this identity, `base_sequence`."""
        request.producer_id = self.producer_id
        request.producer_epoch = self.producer_epoch
        request.base_sequence = base_sequence


class Sequences:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.identity: Identity | None = None
        self._next: dict[tuple[str, int], int] = {}

    def adopt(self, identity: Identity) -> None:
        """A new identity from InitProducer: every partition's numbering starts at 0."""
        with self._lock:
            self.identity = identity
            self._next.clear()

    def reserve(self, identity: Identity, topic: str, partition: int, count: int) -> int | None:
        """The base sequence of the next `count` records to (`topic`, `partition`); None when
        `identity` is no longer the current one (get the current one and try again)."""
        with self._lock:
            if identity != self.identity:
                return None
            key = (topic, partition)
            base = self._next.get(key, 0)
            self._next[key] = base + count
            return base

    def abandon(self, identity: Identity) -> None:
        """An append of `identity` failed for good: the next append needs a new identity."""
        with self._lock:
            if self.identity == identity:
                self.identity = None
                self._next.clear()
