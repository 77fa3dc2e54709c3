"""Frames -> Arrow record batches with Spark's exact schema, control records dropped."""

from __future__ import annotations

import pyarrow as pa
import pytest

from replog import frames
from replog.spark.arrow import ARROW_SCHEMA, frames_to_record_batch


def test_equal_sized_records_become_one_batch_with_sparks_schema() -> None:
    values = [bytes([i % 256]) * 100 for i in range(500)]
    batch = frames_to_record_batch(frames.encode(1000, values), "orders", 3)
    assert batch.schema == ARROW_SCHEMA
    assert batch.schema.field("partition").type == pa.int32()
    assert batch.schema.field("value").type == pa.binary()
    assert batch.column(0).to_pylist() == values
    assert batch.column(1).to_pylist() == ["orders"] * 500
    assert batch.column(2).to_pylist() == [3] * 500
    assert batch.column(3).to_pylist() == list(range(1000, 1500))


@pytest.mark.parametrize("topic", ["t", "a-much-longer.topic_name", "ü"])
def test_mixed_sizes_and_empty_values_decode_exactly(topic: str) -> None:
    values = [bytes([i % 256]) * (i % 37) for i in range(300)]
    batch = frames_to_record_batch(frames.encode(0, values), topic, 0)
    assert batch.column(0).to_pylist() == values
    assert batch.column(1).to_pylist() == [topic] * 300


def test_control_records_are_skipped_and_leave_an_offset_gap() -> None:
    buf = frames.encode(0, [b"a", b"b"]) + frames.encode(2, [b"marker"], control=True)
    buf += frames.encode(3, [b"c"])
    batch = frames_to_record_batch(buf, "t", 0)
    assert batch.column(0).to_pylist() == [b"a", b"b", b"c"]
    assert batch.column(3).to_pylist() == [0, 1, 3]


def test_no_frames_is_an_empty_batch() -> None:
    batch = frames_to_record_batch(b"", "t", 0)
    assert batch.num_rows == 0 and batch.schema == ARROW_SCHEMA
