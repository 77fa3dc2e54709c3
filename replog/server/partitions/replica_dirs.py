"""The directories of the replicas a node hosts (local state, as the reconciler sees it).

Layout under `data_dir` (the storage layout of seed 001, plus the topic's identity)::

    {topic}/topic.json          {"name": ..., "partitions": N, "topic_id": T}; written
                                atomically, last: a directory without it is an unfinished
                                create. `topic_id` (the __cluster offset of the create) is
                                absent in data dirs of earlier releases: such a directory is
                                adopted by the topic of that name, then stamped.
    {topic}/partition_{N}/      one PartitionLog (segments, high-watermark, quorum-state, ...)
    .trash~/{32 hex digits}/    topics being deleted; emptied at start. The name is short
                                whatever the topic's length ('~' never appears in a topic
                                name), so a 249-character topic can be deleted too.
    __cluster/partition_0/      the metadata log (see `metadata_log`), never listed here

All functions block (file system): call them in a thread; `check_space` (one statvfs)
may run in the event loop.

Space for a create (`check_space`): before a topic is proposed, the metadata leader checks
that its data directory's file system has room for the partitions it will host, each
`PARTITION_CREATE_BYTES` + `index_bytes_initial` (its directory, empty segment, checkpoints
and the pre-sized index), plus `CREATE_RESERVE_BYTES`; otherwise the create is refused
with STORAGE_FULL and nothing is proposed or written. Another node that runs out of space
while it makes its replicas reports and retries that locally (`replica_manager`).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from replog.errors import StorageFullError
from replog.server.meta.metadata import METADATA_TOPIC
from replog.storage import StorageConfig, checkpoint
from replog.storage.names import partition_dir

TOPIC_FILE = "topic.json"
TRASH_DIR = ".trash~"
PARTITION_CREATE_BYTES = 64 * 1024
CREATE_RESERVE_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LocalTopic:
    name: str
    partitions: int
    topic_id: int | None  # None: written by an earlier release


def scan(data_dir: Path) -> dict[str, LocalTopic]:
    """The finished topic directories under `data_dir` (the metadata log excluded)."""
    out: dict[str, LocalTopic] = {}
    if not data_dir.is_dir():
        return out
    for path in sorted(data_dir.iterdir()):
        if path.name in (METADATA_TOPIC, TRASH_DIR) or not path.is_dir():
            continue
        raw = checkpoint.read_file(path / TOPIC_FILE)
        if raw is None:
            continue
        meta = json.loads(raw)
        topic_id = meta.get("topic_id")
        out[meta["name"]] = LocalTopic(
            meta["name"], int(meta["partitions"]), None if topic_id is None else int(topic_id)
        )
    return out


def create(data_dir: Path, name: str, partitions: int, topic_id: int) -> LocalTopic:
    """Make (or finish, or stamp) `name`'s directory for topic `topic_id`."""
    for p in range(partitions):
        partition_dir(data_dir, name, p).mkdir(parents=True, exist_ok=True)
    body = {"name": name, "partitions": partitions, "topic_id": topic_id}
    checkpoint.write_atomic(data_dir / name / TOPIC_FILE, json.dumps(body).encode())
    return LocalTopic(name, partitions, topic_id)


def remove(data_dir: Path, name: str) -> None:
    """Move `name`'s directory to the trash (one rename, made durable), then empty it."""
    _discard(data_dir, data_dir / name)


def remove_partition(data_dir: Path, name: str, partition: int) -> None:
    """The same for one partition's directory (a reassignment moved it to other nodes);
    the topic's other partitions stay."""
    _discard(data_dir, partition_dir(data_dir, name, partition))


def _discard(data_dir: Path, source: Path) -> None:
    if not source.exists():
        return
    trash = data_dir / TRASH_DIR
    trash.mkdir(exist_ok=True)
    doomed = trash / uuid.uuid4().hex
    source.rename(doomed)
    checkpoint.fsync_dir(source.parent)
    shutil.rmtree(doomed, ignore_errors=True)


def empty_trash(data_dir: Path) -> None:
    shutil.rmtree(data_dir / TRASH_DIR, ignore_errors=True)


def free_bytes(data_dir: Path) -> int:
    """Bytes an unprivileged writer may still use on `data_dir`'s file system."""
    st = os.statvfs(data_dir)
    return st.f_bavail * st.f_frsize


def check_space(data_dir: Path, partitions: int, config: StorageConfig) -> None:
    """STORAGE_FULL unless there is room to create `partitions` replicas here."""
    need_bytes = partitions * (PARTITION_CREATE_BYTES + config.index_bytes_initial)
    need_bytes += CREATE_RESERVE_BYTES
    free = free_bytes(data_dir)
    if free < need_bytes:
        raise StorageFullError(
            f"the disk is full: {free} bytes free, creating {partitions} partition(s) here "
            f"needs {need_bytes}",
            free_bytes=free,
            need_bytes=need_bytes,
        )
