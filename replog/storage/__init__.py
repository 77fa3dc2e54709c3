"""Segment-log storage (seeds 003 + 001): synchronous, no grpc, no asyncio.

Modules, bottom up: `replog.frames` (record frame codec), `index` (mmap'ed sparse index),
`checksums` (the `.crc` CRC32C sidecar), `time_index` (the `.timeindex`: offsets by time),
`segment` (one .log + .idx + .crc + .timeindex, in layers: `segment_base`,
`segment_checksums`, `segment_recovery`, `segment_scrub`, `segment_times`), `segment_log`
(a directory of segments), `partition_log` (LEO, high watermark, flush), `registry`
(topics and partitions under a data dir), `checkpoint` (atomic small files), `names` (topic
names and the directory layout), `integrity` (what was found wrong), `scrub` (the background
scrubber), `verify` (`replog verify`, offline).
"""

from replog.storage.config import FlushPolicy, StorageConfig
from replog.storage.names import partition_dir, validate_topic_name
from replog.storage.partition_log import AppendResult, PartitionLog
from replog.storage.registry import PartitionRegistry

__all__ = [
    "AppendResult",
    "FlushPolicy",
    "PartitionLog",
    "PartitionRegistry",
    "StorageConfig",
    "partition_dir",
    "validate_topic_name",
]
