"""The inputs callers submit to a replica's owner task (see `driver.py`), and the callers
of appends waiting for their acks. Each input carries the future its caller waits on
(`done`): the owner resolves it once the input is handled (a cancelled caller stops only
waiting; its input is handled all the same).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from replog.replication.messages import Message
from replog.replication.outputs import Acks
from replog.replication.producers import ProducerBatch


def observe(fut: asyncio.Future[Any]) -> None:
    """Done callback: an exception nobody awaits any more is not 'never retrieved'."""
    if not fut.cancelled():
        fut.exception()


@dataclass(slots=True)
class Input:
    done: asyncio.Future[Any] | None = field(default=None, kw_only=True)


@dataclass(slots=True)
class Waiting:
    """The caller of an append, waiting for its acks until `deadline` (loop time)."""

    fut: asyncio.Future[tuple[int, int]]
    deadline: float
    acks: Acks
    timeout_s: float


@dataclass(slots=True)
class Start(Input):
    pass


@dataclass(slots=True)
class Deliver(Input):
    message: Message


@dataclass(slots=True)
class Append(Input):
    request_id: int
    values: tuple[bytes, ...]
    acks: Acks
    producer: ProducerBatch | None = None
    timestamp_ms: int = 0


@dataclass(slots=True)
class Campaign(Input):
    pass


@dataclass(slots=True)
class Retention(Input):
    now_ms: int


@dataclass(slots=True)
class Transfer(Input):
    target: int


@dataclass(slots=True)
class Repair(Input):
    pass


@dataclass(slots=True)
class ChangeMembership(Input):
    request_id: int
    voters: tuple[int, ...]
    observers: tuple[int, ...]
