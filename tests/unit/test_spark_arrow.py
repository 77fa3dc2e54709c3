"""Frames -> Arrow record batches with Spark's exact schema, control records dropped."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from replog import frames, records
from replog.errors import InvalidRecordError
from replog.spark.arrow import (
    ARROW_SCHEMA,
    LOG_APPEND_TIME,
    RecordFormat,
    arrow_schema,
    frames_to_record_batch,
    spark_schema_ddl,
)

ENVELOPE = RecordFormat(envelope=True)

KAFKA_COLUMNS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
HEADERS = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)


@pytest.mark.parametrize("include_headers", [False, True])
def test_the_arrow_schema_is_exactly_what_spark_expects_for_kafkas_columns(
    include_headers: bool,
) -> None:
    spark_schema = StructType(KAFKA_COLUMNS + ([HEADERS] if include_headers else []))
    # Spark compares a Python source's batches with this conversion (timezone UTC).
    assert to_arrow_schema(spark_schema, timezone="UTC").equals(arrow_schema(include_headers))
    ddl = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in spark_schema.fields)
    assert spark_schema_ddl(include_headers) == ddl


def test_key_timestamp_and_headers_are_null_until_records_carry_them() -> None:
    batch = frames_to_record_batch(frames.encode(7, [b"a", b"bc"]), "t", 1, include_headers=True)
    for column in ("key", "timestamp", "timestampType", "headers"):
        assert batch.column(column).null_count == 2, column
    assert batch.column("value").to_pylist() == [b"a", b"bc"]


def test_equal_sized_records_become_one_batch_with_sparks_schema() -> None:
    values = [bytes([i % 256]) * 100 for i in range(500)]
    batch = frames_to_record_batch(frames.encode(1000, values), "orders", 3)
    assert batch.schema == ARROW_SCHEMA
    assert batch.schema.field("partition").type == pa.int32()
    assert batch.schema.field("value").type == pa.binary()
    assert batch.column("value").to_pylist() == values
    assert batch.column("topic").to_pylist() == ["orders"] * 500
    assert batch.column("partition").to_pylist() == [3] * 500
    assert batch.column("offset").to_pylist() == list(range(1000, 1500))


@pytest.mark.parametrize("topic", ["t", "a-much-longer.topic_name", "ü"])
def test_mixed_sizes_and_empty_values_decode_exactly(topic: str) -> None:
    values = [bytes([i % 256]) * (i % 37) for i in range(300)]
    batch = frames_to_record_batch(frames.encode(0, values), topic, 0)
    assert batch.column("value").to_pylist() == values
    assert batch.column("topic").to_pylist() == [topic] * 300


def test_control_records_are_skipped_and_leave_an_offset_gap() -> None:
    buf = frames.encode(0, [b"a", b"b"]) + frames.encode(2, [b"marker"], control=True)
    buf += frames.encode(3, [b"c"])
    batch = frames_to_record_batch(buf, "t", 0)
    assert batch.column("value").to_pylist() == [b"a", b"b", b"c"]
    assert batch.column("offset").to_pylist() == [0, 1, 3]


def test_no_frames_is_an_empty_batch() -> None:
    batch = frames_to_record_batch(b"", "t", 0)
    assert batch.num_rows == 0 and batch.schema == ARROW_SCHEMA
    with_headers = frames_to_record_batch(b"", "t", 0, include_headers=True)
    assert with_headers.num_rows == 0 and with_headers.schema == arrow_schema(True)


def test_control_records_between_runs_of_equal_records_leave_exactly_the_data() -> None:
    # A producer's batch header before each batch, and a leader's marker at the start.
    values = [bytes([i % 256]) * 100 for i in range(3000)]
    buf = frames.encode(0, [b"epoch"], control=True)
    offset = 1
    expected: list[int] = []
    for i in range(0, 3000, 1000):
        buf += frames.encode(offset, [b"h" * 100], control=True)  # as long as a record
        buf += frames.encode(offset + 1, values[i : i + 1000])
        expected += range(offset + 1, offset + 1001)
        offset += 1001
    batch = frames_to_record_batch(buf, "t", 0)
    assert batch.column("value").to_pylist() == values
    assert batch.column("offset").to_pylist() == expected


def test_only_control_records_is_an_empty_batch() -> None:
    batch = frames_to_record_batch(frames.encode(5, [b"a", b"b"], control=True), "t", 0)
    assert batch.num_rows == 0 and batch.schema == ARROW_SCHEMA


def test_a_torn_last_frame_is_refused() -> None:
    buf = frames.encode(0, [b"x" * 10] * 3)
    with pytest.raises(frames.FrameError):
        frames_to_record_batch(buf[:-1], "t", 0)


runs = st.lists(
    st.tuples(st.integers(0, 40), st.integers(1, 60), st.booleans()),  # (size, count, control)
    min_size=1,
    max_size=40,
)


@given(runs)
def test_any_mix_of_frames_decodes_like_the_reference_decoder(spec: list) -> None:  # type: ignore[type-arg]
    buf = b""
    offset = 7
    for size, count, control in spec:
        values = [bytes([(offset + i) % 256]) * size for i in range(count)]
        buf += frames.encode(offset, values, control=control)
        offset += count
    reference = frames.decode(buf).data_records()
    batch = frames_to_record_batch(buf, "t", 0)
    assert batch.column("offset").to_pylist() == list(reference.offsets)
    assert batch.column("value").to_pylist() == list(reference.values)


# -- envelope topics ---------------------------------------------------------------------------


def envelope_rows(batch: pa.RecordBatch) -> list[tuple]:  # type: ignore[type-arg]
    micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
    return list(
        zip(
            batch.column("offset").to_pylist(),
            batch.column("key").to_pylist(),
            batch.column("value").to_pylist(),
            [None if us is None else us // 1000 for us in micros],
            batch.column("headers").to_pylist(),
            strict=True,
        )
    )


def reference(buf: bytes) -> list[tuple]:  # type: ignore[type-arg]
    d = records.decode_frames(buf)
    headers = [[{"key": n, "value": v} for n, v in h] or None for h in d.headers]
    return list(zip(d.offsets, d.keys, d.values, d.timestamps, headers, strict=True))


def test_an_envelope_topics_plain_batch_fills_value_and_timestamp_with_numpy_alone() -> None:
    values = [b"v%04d" % i for i in range(500)]
    buf = frames.encode(0, [b"marker"], control=True)
    buf += frames.encode(1, records.encode_batch(values, 1_700_000_000_123))
    batch = frames_to_record_batch(buf, "t", 2, include_headers=True, fmt=ENVELOPE)
    assert envelope_rows(batch) == reference(buf)
    assert batch.column("value").to_pylist() == values
    assert batch.column("key").null_count == 500 and batch.column("headers").null_count == 500
    assert set(batch.column("timestampType").to_pylist()) == {0}
    log_append = RecordFormat(envelope=True, timestamp_type=LOG_APPEND_TIME)
    batch = frames_to_record_batch(buf, "t", 2, fmt=log_append)
    assert set(batch.column("timestampType").to_pylist()) == {1}
    assert batch.schema == ARROW_SCHEMA


def test_keys_headers_and_timestamps_of_envelopes_become_kafkas_columns() -> None:
    items = [
        records.Record(b"a", key=b"k1", headers=[("trace", b"1"), ("x", b"")], timestamp_ms=5),
        records.Record(b"", key=b"", timestamp_ms=6),  # an empty key is not a missing key
        records.Record(b"c"),
        b"d",
    ]
    buf = frames.encode(10, records.encode_batch(items, 1_000))
    batch = frames_to_record_batch(buf, "t", 0, include_headers=True, fmt=ENVELOPE)
    assert envelope_rows(batch) == reference(buf)
    assert batch.column("key").to_pylist() == [b"k1", b"", None, None]
    assert batch.column("headers").to_pylist()[0] == [
        {"key": "trace", "value": b"1"},
        {"key": "x", "value": b""},
    ]
    assert batch.column("headers").to_pylist()[1:] == [None, None, None]
    assert batch.schema == arrow_schema(True)


@pytest.mark.parametrize("tail", [0, 500])
def test_envelopes_of_ever_changing_sizes_decode_whichever_way_they_are_walked(
    tail: int,
) -> None:
    # 40 keyed records of 40 sizes (too varied for runs: walked frame by frame), then
    # `tail` equal ones.
    items = [records.Record(b"v" * i, key=b"k" * (i % 7), timestamp_ms=i) for i in range(40)]
    items += [records.Record(b"w" * 50, key=b"key", timestamp_ms=1) for _ in range(tail)]
    buf = frames.encode(0, records.encode_batch(items, 0))
    batch = frames_to_record_batch(buf, "t", 0, include_headers=True, fmt=ENVELOPE)
    assert envelope_rows(batch) == reference(buf)
    assert batch.num_rows == 40 + tail


def test_a_timestamp_outside_sparks_range_is_null() -> None:
    far, near = records.encode(b"far", timestamp_ms=2**62), records.encode(b"n", timestamp_ms=0)
    buf = frames.encode(0, [far, near])
    batch = frames_to_record_batch(buf, "t", 0, fmt=ENVELOPE)
    assert batch.column("timestamp").to_pylist()[0] is None
    assert batch.column("timestamp").to_pylist()[1].timestamp() == 0


def test_a_malformed_envelope_is_refused_not_guessed() -> None:
    with pytest.raises(InvalidRecordError):
        frames_to_record_batch(frames.encode(0, [b"not an envelope"]), "t", 0, fmt=ENVELOPE)
    with pytest.raises(InvalidRecordError):
        frames_to_record_batch(frames.encode(0, [b"x" * 40] * 20), "t", 0, fmt=ENVELOPE)


envelope_runs = st.lists(
    st.tuples(
        st.integers(0, 30), st.integers(1, 40) | st.just(1), st.booleans(), st.integers(0, 2)
    ),
    min_size=1,
    max_size=60,
)  # (value size, count, control, 0: plain / 1: key / 2: key and a header)


@given(envelope_runs)
def test_any_mix_of_envelopes_decodes_like_the_reference_decoder(spec: list) -> None:  # type: ignore[type-arg]
    buf = b""
    offset = 3
    for size, count, control, kind in spec:
        if control:
            buf += frames.encode(offset, [b"c" * size] * count, control=True)
        else:
            key = None if kind == 0 else b"k%d" % offset
            headers = [("h", b"v")] if kind == 2 else []
            items = [records.Record(b"x" * size, key, headers, offset + i) for i in range(count)]
            buf += frames.encode(offset, records.encode_batch(items, 0))
        offset += count
    batch = frames_to_record_batch(buf, "t", 0, include_headers=True, fmt=ENVELOPE)
    assert envelope_rows(batch) == reference(buf)
