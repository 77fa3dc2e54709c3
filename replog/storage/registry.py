"""The partition registry (seed 001's DiskManager): topics on disk, partitions opened lazily.

Layout under `data_dir`::

    {topic}/topic.json              {"name": ..., "partitions": N}; written atomically, last,
                                    so a topic without it is an unfinished create (ignored)
    {topic}/partition_{N}/          one PartitionLog (segments, high-watermark, ...)
    .trash~/                        topics being deleted ('~' never appears in topic names)

One `PartitionLog` per partition, opened on first use and kept; `close_all` flushes and
closes them all. A background thread ("flusher") fsyncs dirty partitions every
`flush_interval_ms` under `flush=interval`, and checkpoints high watermarks.
"""

from __future__ import annotations

import json
import shutil
import threading
import uuid
from pathlib import Path

from replog.errors import (
    InvalidArgumentError,
    ReplogError,
    TopicExistsError,
    TopicNotFoundError,
)
from replog.storage import checkpoint
from replog.storage.config import FlushPolicy, StorageConfig
from replog.storage.integrity import IntegrityIssue
from replog.storage.names import (
    PARTITIONS_MAX,
    partition_dir,
    validate_partition,
    validate_topic_name,
)
from replog.storage.partition_log import PartitionLog

TOPIC_FILE = "topic.json"
TRASH_DIR = ".trash~"
HW_CHECKPOINT_INTERVAL_MS = 1000


class PartitionRegistry:
    def __init__(
        self, data_dir: Path, config: StorageConfig, *, background_flush: bool = True
    ) -> None:
        self.data_dir = Path(data_dir)
        self.config = config
        self.data_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.data_dir / TRASH_DIR, ignore_errors=True)
        self._lock = threading.RLock()
        self._topics: dict[str, int] = self._scan_topics()
        self._open: dict[tuple[str, int], PartitionLog] = {}
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        if background_flush:
            self._flusher = threading.Thread(target=self._flush_loop, name="replog-flusher")
            self._flusher.daemon = True
            self._flusher.start()

    def _scan_topics(self) -> dict[str, int]:
        topics: dict[str, int] = {}
        for path in sorted(self.data_dir.iterdir()):
            raw = checkpoint.read_file(path / TOPIC_FILE) if path.is_dir() else None
            if raw is None:
                continue
            meta = json.loads(raw)
            topics[meta["name"]] = int(meta["partitions"])
        return topics

    # -- topics --------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int) -> None:
        validate_topic_name(name)
        if not isinstance(partitions, int) or not 1 <= partitions <= PARTITIONS_MAX:
            raise InvalidArgumentError(
                f"partitions must be in [1, {PARTITIONS_MAX}], got {partitions!r}"
            )
        with self._lock:
            if name in self._topics:
                raise TopicExistsError(f"topic {name!r} already exists", topic=name)
            topic_dir = self.data_dir / name
            for p in range(partitions):
                partition_dir(self.data_dir, name, p).mkdir(parents=True, exist_ok=True)
            meta = json.dumps({"name": name, "partitions": partitions}).encode()
            checkpoint.write_atomic(topic_dir / TOPIC_FILE, meta)
            self._topics[name] = partitions

    def delete_topic(self, name: str) -> None:
        validate_topic_name(name)
        with self._lock:
            if name not in self._topics:
                raise TopicNotFoundError(f"topic {name!r} does not exist", topic=name)
            for key in [k for k in self._open if k[0] == name]:
                self._open.pop(key).close()
            trash = self.data_dir / TRASH_DIR
            trash.mkdir(exist_ok=True)
            doomed = trash / f"{name}-{uuid.uuid4().hex}"
            (self.data_dir / name).rename(doomed)
            checkpoint.fsync_dir(self.data_dir)
            del self._topics[name]
        shutil.rmtree(doomed, ignore_errors=True)

    def topics(self) -> dict[str, int]:
        with self._lock:
            return dict(self._topics)

    def partition_count(self, topic: str) -> int:
        with self._lock:
            count = self._topics.get(topic)
        if count is None:
            validate_topic_name(topic)
            raise TopicNotFoundError(f"topic {topic!r} does not exist", topic=topic)
        return count

    # -- partitions ----------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log, opened on first use."""
        key = (topic, partition)
        plog = self._open.get(key)
        if plog is not None:
            return plog
        with self._lock:
            validate_partition(partition, self.partition_count(topic))
            plog = self._open.get(key)
            if plog is None:
                directory = partition_dir(self.data_dir, topic, partition)
                plog = PartitionLog(directory, topic, partition, self.config)
                self._open[key] = plog
            return plog

    def open_partitions(self) -> list[PartitionLog]:
        with self._lock:
            return list(self._open.values())

    def corrupt_ranges(self) -> dict[tuple[str, int], list[IntegrityIssue]]:
        """Per open partition with any, the ranges it refuses to serve (metrics, describe)."""
        found = {}
        for plog in self.open_partitions():
            ranges = plog.corrupt_ranges()
            if ranges:
                found[(plog.topic, plog.partition)] = ranges
        return found

    def close_all(self) -> None:
        """Stop the flusher; flush, checkpoint and close every open partition."""
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        with self._lock:
            errors: list[ReplogError] = []
            for plog in self._open.values():
                try:
                    plog.close()
                except ReplogError as exc:
                    errors.append(exc)
            self._open.clear()
        if errors:
            raise errors[0]

    # -- background flush ----------------------------------------------------------------

    def flush_all(self) -> None:
        for plog in self.open_partitions():
            if plog.needs_flush:
                plog.flush()

    def checkpoint_all(self) -> None:
        for plog in self.open_partitions():
            plog.checkpoint_high_watermark()

    def _flush_loop(self) -> None:
        interval_s = self.config.flush_interval_ms / 1000
        if self.config.flush is not FlushPolicy.INTERVAL:
            interval_s = HW_CHECKPOINT_INTERVAL_MS / 1000
        while not self._stop.wait(interval_s):
            try:
                if self.config.flush is FlushPolicy.INTERVAL:
                    self.flush_all()
                self.checkpoint_all()
            except ReplogError:
                continue  # a full disk or a closed partition: the next round tries again
