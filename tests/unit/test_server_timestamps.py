"""How raw topics' records are dated (`server/meta/timestamps.py`): by their idempotent batch
headers only; epoch markers, data records and look-alikes have no timestamp."""

from __future__ import annotations

import numpy as np

from replog import frames, records
from replog.replication.producers import BatchHeader
from replog.server.meta.metadata import TopicMeta
from replog.server.meta.timestamps import batch_header_timestamps, reader_for
from replog.storage.config import NO_TIMESTAMP


def test_only_batch_headers_date_a_raw_topic() -> None:
    header = BatchHeader(7, 0, 0, 2, 1_764_064_800_000).encode()
    other_version = b"\x00\x01\x00\x02" + header[4:]
    parts = [
        frames.encode(0, [b"\x08\x01"], control=True),  # an epoch marker
        frames.encode(1, [header], control=True),
        frames.encode(2, [b"a" * 36, b"b"]),  # data: one as long as a header
        frames.encode(4, [other_version], control=True),  # a header version it does not know
        frames.encode(5, [header[:-1] + b"\x01"], control=True),
    ]
    buf = b"".join(parts)
    starts = np.cumsum([0] + [len(p) for p in parts[:-1]])
    starts = np.insert(starts, 3, starts[2] + frames.HEADER_BYTES + 36)  # the second data frame
    got = batch_header_timestamps(buf, starts).tolist()
    assert got == [
        NO_TIMESTAMP,
        1_764_064_800_000,
        NO_TIMESTAMP,
        NO_TIMESTAMP,
        NO_TIMESTAMP,
        1_764_064_800_001,
    ]


def test_each_format_gets_its_reader() -> None:
    envelope = TopicMeta("e", 1, ((1,),), 0, "envelope", "create_time")
    raw = TopicMeta("r", 1, ((1,),), 1)
    assert reader_for(envelope) is records.frame_timestamps
    assert reader_for(raw) is batch_header_timestamps
