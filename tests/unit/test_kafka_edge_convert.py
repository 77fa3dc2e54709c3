"""The Kafka edge's record translation (`replog.server.kafka_edge.convert`) and its error
table (`kafka_edge.errors`): Kafka batches become envelopes or raw values with nothing
lost, replog frames become one Kafka batch whose offsets (gaps for control records
included) and records are replog's, and every reason of replog's error tree that a
request can meet maps to the Kafka code clients retry on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog import errors, frames, records
from replog.kafka.compression import Compression
from replog.kafka.errors import CorruptRecordBatchError, ErrorCode
from replog.kafka.records import (
    Header,
    RecordBatch,
    batch_of,
    decode_batch,
    decode_batches,
    encode_batch,
)
from replog.replication.producers import BatchHeader
from replog.server.kafka_edge.convert import batch_of_frames, cut, values_of
from replog.server.kafka_edge.errors import REASON_CODES, code_of

T0 = 1_700_000_000_000


def test_a_kafka_batch_becomes_envelopes_with_key_value_headers_and_timestamps() -> None:
    batch = batch_of(
        0,
        [
            (b"k1", b"v1", T0, [Header("a", b"1")]),
            (None, b"v2", T0 + 5, []),
            (b"", None, T0 + 9, [Header("n", None)]),
        ],
        compression=Compression.ZSTD,
    )
    got = [records.decode(v) for v in values_of(batch, envelope=True)]
    assert [(r.key, r.value, r.timestamp_ms) for r in got] == [
        (b"k1", b"v1", T0),
        (None, b"v2", T0 + 5),
        (b"", None, T0 + 9),  # a null value is a tombstone; an empty key stays a key
    ]
    assert [r.headers for r in got] == [(("a", b"1"),), (), (("n", b""),)]


def test_a_raw_topic_takes_values_and_refuses_keys_or_headers() -> None:
    plain = batch_of(0, [(None, b"x", T0, []), (None, b"y", T0, [])])
    assert values_of(plain, envelope=False) == [b"x", b"y"]
    for keyed in ([(b"k", b"x", T0, [])], [(None, b"x", T0, [Header("h", b"")])]):
        with pytest.raises(errors.InvalidRecordError):
            values_of(batch_of(0, keyed), envelope=False)
    for null in (batch_of(0, [(None, None, T0, [])]), _columnar([(None, None, T0, [])])):
        with pytest.raises(errors.InvalidRecordError, match="tombstone"):
            values_of(null, envelope=False)


def _columnar(recs: list[tuple[bytes | None, bytes | None, int, list[Header]]]) -> RecordBatch:
    """A batch as the listener decodes it off the wire (no headers: as columns)."""
    batch = decode_batch(encode_batch(batch_of(0, recs)), columnar=True)
    assert batch.columns is not None
    return batch


def test_null_values_are_tombstones_both_ways_on_envelope_topics() -> None:
    """Kafka's delete of a key on a compacted topic: a null value is stored as replog's
    tombstone (distinct from an empty value) and read back null, through both codecs."""
    recs = [(b"k", None, T0, []), (b"k2", b"", T0 + 1, []), (b"k3", b"v", T0 + 2, [])]
    for batch in (batch_of(0, recs), _columnar(recs)):
        got = [records.decode(v) for v in values_of(batch, envelope=True)]
        assert [(r.key, r.value) for r in got] == [(b"k", None), (b"k2", b""), (b"k3", b"v")]
        data = b"".join(frames.encode(20 + i, [v]) for i, v in enumerate(values_of(batch, True)))
        fetched = decode_batch(batch_of_frames(data, envelope=True))
        assert [(r.key, r.value) for r in fetched.records] == [
            (b"k", None),
            (b"k2", b""),
            (b"k3", b"v"),
        ]


@given(
    st.lists(  # runs of equally long values (trailing NUL bytes kept), or many shapes
        st.tuples(st.integers(1, 40), st.integers(0, 80)), min_size=0, max_size=6
    ),
    st.booleans(),
)
def test_cut_gives_back_each_value_whole_by_runs_or_by_slices(
    runs: list[tuple[int, int]], jagged: bool
) -> None:
    values = [
        bytes([i % 7, 0]) * size + b"\0"  # never empty; NUL last: numpy must not strip it
        for r, (size, count) in enumerate(runs)
        for i in range(count)
        for size in [size + (i % 3 if jagged else 0) + r % 2]
    ]
    sizes = np.array([len(v) for v in values], dtype=np.int64)
    assert cut(b"".join(values), sizes) == values


def test_frames_become_one_batch_with_replog_offsets_and_gaps_for_control_records() -> None:
    marker = frames.encode(10, [b"\x08\x01"], control=True)  # an epoch marker at 10
    header = BatchHeader(7, 0, 0, 2, T0 + 42).encode()
    data = (
        marker
        + frames.encode(11, [header], control=True)
        + frames.encode(12, [records.encode(b"a", key=b"k", timestamp_ms=T0)])
        + frames.encode(13, [records.encode(b"b", headers=[("h", b"1")], timestamp_ms=T0 + 3)])
        + frames.encode(14, [b"\x08\x02"], control=True)
    )
    batch = decode_batch(batch_of_frames(data, envelope=True))
    assert batch.base_offset == 10 and batch.last_offset == 14  # clients fetch from 15 next
    assert [batch.base_offset + r.offset_delta for r in batch.records] == [12, 13]
    assert [(r.key, r.value) for r in batch.records] == [(b"k", b"a"), (None, b"b")]
    assert [batch.base_timestamp + r.timestamp_delta for r in batch.records] == [T0, T0 + 3]
    assert batch.records[1].headers == (Header("h", b"1"),)


def test_raw_frames_carry_null_keys_and_their_batch_append_time() -> None:
    header = BatchHeader(7, 0, 0, 1, T0 + 42).encode()
    data = frames.encode(0, [b"plain"]) + frames.encode(1, [header], control=True)
    data += frames.encode(2, [b"idempotent"])
    batch = decode_batch(batch_of_frames(data, envelope=False))
    times = [batch.base_timestamp + r.timestamp_delta for r in batch.records]
    assert [(r.key, r.value) for r in batch.records] == [(None, b"plain"), (None, b"idempotent")]
    assert times == [-1, T0 + 42]


def test_control_records_only_make_an_empty_batch_that_moves_the_reader_past_them() -> None:
    data = frames.encode(5, [b"\x08\x01"], control=True)
    (batch,) = decode_batches(batch_of_frames(data, envelope=True))
    assert batch.records == () and batch.last_offset == 5
    assert batch_of_frames(b"", envelope=True) == b""


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.NotLeaderError("x"), ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (errors.LeaderUnknownError("x"), ErrorCode.LEADER_NOT_AVAILABLE),
        (errors.TopicNotFoundError("x"), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (errors.OffsetOutOfRangeError("x"), ErrorCode.OFFSET_OUT_OF_RANGE),
        (errors.AckTimeoutError("x"), ErrorCode.REQUEST_TIMED_OUT),
        (errors.OutOfOrderSequenceError("x"), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
        (errors.PermissionDeniedError("x"), ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        (CorruptRecordBatchError("x"), ErrorCode.CORRUPT_MESSAGE),
        (errors.InternalError("x"), ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
def test_replog_errors_map_to_the_kafka_codes_clients_retry_on(
    error: errors.ReplogError, code: ErrorCode
) -> None:
    assert code_of(error) == code


def test_controller_apis_answer_not_controller_when_the_metadata_leader_is_unknown() -> None:
    assert code_of(errors.LeaderUnknownError("x"), controller=True) == ErrorCode.NOT_CONTROLLER
    assert code_of(errors.TopicExistsError("x"), controller=True) == (
        ErrorCode.TOPIC_ALREADY_EXISTS
    )


def test_the_table_names_only_reasons_of_the_error_tree() -> None:
    reasons = {c.reason for c in _subclasses(errors.ReplogError) if isinstance(c.reason, str)}
    assert set(REASON_CODES) <= reasons


def _subclasses(cls: type) -> list[type]:
    out = [cls]
    for sub in cls.__subclasses__():
        out += _subclasses(sub)
    return out
