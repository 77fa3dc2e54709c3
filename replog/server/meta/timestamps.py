"""How a topic's records are dated for its time index (`storage/time_index.py`): the
`StorageConfig.timestamps` reader of each replica, chosen by the topic's format.

* envelope topics: each data record's envelope timestamp (`records.frame_timestamps`),
  the producer's or, under log-append time, the leader's; control records have none.
* raw topics: a raw value has no timestamp, so the only dates are those of idempotent
  producer batch headers (`replication/producers.py`: a control record whose `timestamp_ms`
  is the leader's clock when it appended the batch). A header dates itself: asking for a
  time answers the offset of the first header at or after it, and a consumer that starts
  there skips the header and reads its batch. Records appended without a producer id
  carry no date and are never an answer (ListOffsets by time passes over them).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from replog import records
from replog.frames import CONTROL_FLAG, HEADER_BYTES, LENGTH_MASK
from replog.replication.producers import HEADER_BYTES as BATCH_HEADER_BYTES
from replog.replication.producers import HEADER_TYPE, HEADER_VERSION
from replog.server.meta.metadata import ENVELOPE, TopicMeta
from replog.storage import StorageConfig
from replog.storage.config import NO_TIMESTAMP, TimestampReader

_TIMESTAMP_AT = 28  # producers.py: the header's timestamp_ms (u64) at bytes 28-35
_TAG = np.frombuffer(bytes([0, HEADER_TYPE]) + HEADER_VERSION.to_bytes(2, "big"), np.uint8)


def batch_header_timestamps(buf: bytes | memoryview, starts: np.ndarray) -> np.ndarray:
    """The raw-topic reader: `timestamp_ms` of producer batch headers, NO_TIMESTAMP for
    every other frame (vectorized: a gather of the frame headers, then of the few
    candidates' first bytes)."""
    n = len(starts)
    out = np.full(n, NO_TIMESTAMP, dtype=np.int64)
    if n == 0:
        return out
    whole = np.frombuffer(buf, dtype=np.uint8)
    at = np.asarray(starts, dtype=np.int64)
    fields = whole[at[:, None] + np.arange(8, HEADER_BYTES)].view(">u4").ravel()
    candidate = ((fields & CONTROL_FLAG) != 0) & ((fields & LENGTH_MASK) == BATCH_HEADER_BYTES)
    if not candidate.any():
        return out
    values = at[candidate] + HEADER_BYTES
    tags = whole[values[:, None] + np.arange(4)]
    stamps = whole[values[:, None] + _TIMESTAMP_AT + np.arange(8)].copy().view(">u8").ravel()
    ok = (tags == _TAG).all(axis=1) & (stamps <= np.uint64(2**63 - 1))
    picked = np.flatnonzero(candidate)[ok]
    out[picked] = stamps[ok].astype(np.int64)
    return out


def reader_for(meta: TopicMeta) -> TimestampReader:
    return records.frame_timestamps if meta.format == ENVELOPE else batch_header_timestamps


def topic_config(config: StorageConfig, meta: TopicMeta) -> StorageConfig:
    """The node's storage config for a replica of `meta`, with its timestamp reader."""
    return dataclasses.replace(config, timestamps=reader_for(meta))
