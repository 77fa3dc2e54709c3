"""The records of `__consumer_offsets`: what a group coordinator writes, and reads back.

Only coordinators write this topic (clients' Appends to it are refused); a coordinator
rebuilds its groups' committed offsets by applying the records in offset order. Record
value, JSON (UTF-8), version 1::

    {"kind": "commit", "version": 1, "group": "billing", "time_ms": 1700000000000,
     "offsets": [{"topic": "orders", "topic_id": 12, "partition": 0, "offset": 42,
                  "metadata": "", "commit_time_ms": 1700000000000}]}
    {"kind": "delete_group", "version": 1, "group": "billing", "time_ms": 1700000000000,
     "reason": "deleted"}

* `commit`: one CommitOffsets, atomically (one record); `time_ms` is when it was written
  (wall clock of the coordinator). `offset` is the next offset to
  consume; `topic_id` is the topic's incarnation (`metadata.TopicMeta.topic_id`): an offset
  committed for a topic that was deleted and created again under the same name is not the
  new topic's. `commit_time_ms` is when the offset was committed: a coordinator that rewrites
  a group's live offsets so that log retention never drops them (a refresh) writes a new
  record (new `time_ms`) that keeps each offset's original `commit_time_ms`.
* `delete_group`: every committed offset of the group is gone (`reason`: "deleted" by
  DeleteGroup, or "expired" by offset retention).
* `snapshot_end`: the records from offset `begin` up to this one restate every live offset
  of the partition's groups (a snapshot, written with no other record in between); what
  came before `begin` is superseded. Every other record carries `"snapshot": B`, the
  `begin` of the latest complete snapshot when it was written (absent: none), so that a new
  coordinator reads the partition's last record and starts its load at `B`
  (`load_pointer`) instead of at the log start:

    {"kind": "snapshot_end", "version": 1, "group": "", "time_ms": 1700000000000,
     "begin": 4242}

A record that does not decode (not JSON, an unknown kind or version, a field out of shape)
raises `UnknownRecordError`: the coordinator logs it, counts it and skips it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from replog.server.meta.command_codec import json_object

VERSION = 1
INT64_MAX = (1 << 63) - 1


class UnknownRecordError(ValueError):
    """A record of `__consumer_offsets` this node cannot apply."""


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    topic: str
    topic_id: int
    partition: int
    offset: int
    metadata: str
    commit_time_ms: int


@dataclass(frozen=True, slots=True)
class Commit:
    group: str
    time_ms: int
    offsets: tuple[OffsetEntry, ...]

    KIND = "commit"


@dataclass(frozen=True, slots=True)
class DeleteGroup:
    group: str
    time_ms: int
    reason: str  # "deleted" | "expired"

    KIND = "delete_group"


@dataclass(frozen=True, slots=True)
class SnapshotEnd:
    begin: int  # the offset of the snapshot's first record
    time_ms: int
    group: str = ""

    KIND = "snapshot_end"


Record = Commit | DeleteGroup | SnapshotEnd


def encode(record: Record, snapshot: int | None = None) -> bytes:
    """The record's value; `snapshot`: the begin of the latest complete snapshot."""
    body: dict[str, Any] = {"kind": record.KIND, "version": VERSION, "group": record.group}
    body["time_ms"] = record.time_ms
    if snapshot is not None:
        body["snapshot"] = snapshot
    if isinstance(record, SnapshotEnd):
        body["begin"] = record.begin
    elif isinstance(record, Commit):
        body["offsets"] = [
            {
                "topic": o.topic,
                "topic_id": o.topic_id,
                "partition": o.partition,
                "offset": o.offset,
                "metadata": o.metadata,
                "commit_time_ms": o.commit_time_ms,
            }
            for o in record.offsets
        ]
    else:
        body["reason"] = record.reason
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def decode(value: bytes) -> Record:
    body = json_object(value, UnknownRecordError, "group record")
    kind, version = body.get("kind"), body.get("version")
    if version != VERSION or isinstance(version, bool):
        raise UnknownRecordError(f"group record version {version!r} (kind {kind!r}) unknown")
    try:
        group = _str(body["group"])
        if kind == Commit.KIND:
            offsets = body["offsets"]
            if not isinstance(offsets, list):
                raise TypeError("offsets must be a list")
            return Commit(group, _int(body["time_ms"]), tuple(_entry(o) for o in offsets))
        if kind == DeleteGroup.KIND:
            return DeleteGroup(group, _int(body["time_ms"]), _str(body["reason"]))
        if kind == SnapshotEnd.KIND:
            return SnapshotEnd(_int(body["begin"]), _int(body["time_ms"]), group)
    except (KeyError, TypeError, ValueError) as exc:
        raise UnknownRecordError(f"malformed {kind!r} group record: {exc!r}") from None
    raise UnknownRecordError(f"unknown group record kind {kind!r}")


def _entry(value: object) -> OffsetEntry:
    if not isinstance(value, dict):
        raise TypeError("an offset must be an object")
    return OffsetEntry(
        _str(value["topic"]),
        _int(value["topic_id"]),
        _int(value["partition"]),
        _int(value["offset"]),
        _str(value["metadata"]),
        _int(value["commit_time_ms"]),
    )


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= INT64_MAX:
        raise TypeError(f"expected an integer in [0, 2^63), got {value!r}")
    return value


def load_pointer(value: bytes) -> int | None:
    """Where a load may start, from the log's last record: the begin of the latest complete
    snapshot it names (None: it names none, or it does not decode)."""
    try:
        body = json.loads(value)
        pointer = body["begin"] if body.get("kind") == SnapshotEnd.KIND else body.get("snapshot")
        return None if pointer is None else _int(pointer)
    except (UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError):
        return None
