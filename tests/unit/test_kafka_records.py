"""Kafka record batches v2: what we write, kafka-python's independent codec (with the
reference lz4, zstandard and python-snappy libraries) reads, and the other way round;
corrupt CRCs, truncations, lying counts and zip bombs fail with the typed decode error."""

from __future__ import annotations

import struct
import zlib

import cramjam
import pytest

from replog.kafka.compression import Compression, compress, decompress
from replog.kafka.errors import (
    CorruptRecordBatchError,
    DecompressedTooLargeError,
    KafkaDecodeError,
    UnsupportedCompressionError,
)
from replog.kafka.records import (
    BATCH_HEADER_BYTES,
    CONTROL,
    TRANSACTIONAL,
    Header,
    batch_of,
    decode_batch,
    decode_batches,
    encode_batch,
)

kafka_records = pytest.importorskip("kafka.record.memory_records")
default_records = pytest.importorskip("kafka.record.default_records")

RECORDS = [
    (b"key-1", b"value-1" * 50, 1_700_000_000_000, [Header("trace", b"abc"), Header("n", None)]),
    (None, b"value-2", 1_700_000_000_005, []),
    (b"key-3", None, 1_699_999_999_990, [Header("\u00e9", b"")]),
]


@pytest.mark.parametrize("codec", list(Compression))
def test_our_batches_read_back_equal_and_kafka_python_reads_them(codec: Compression) -> None:
    batch = batch_of(
        100, RECORDS, compression=codec, producer_id=42, producer_epoch=3, base_sequence=7
    )
    data = encode_batch(batch)
    assert decode_batch(data) == batch
    theirs = kafka_records.MemoryRecords(data).next_batch()
    assert theirs.validate_crc()
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (42, 3, 7)
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in theirs] == [
        (100 + i, k, v, ts, [(h.key, h.value) for h in hs])
        for i, (k, v, ts, hs) in enumerate(RECORDS)
    ]


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_batches_decode_with_every_codec(codec: Compression) -> None:
    builder = default_records.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=True,
        producer_id=9,
        producer_epoch=1,
        base_sequence=20,
        batch_size=1 << 20,
    )
    for i in range(30):
        builder.append(i, timestamp=5000 + i, key=b"k%d" % i, value=b"v" * i, headers=[("h", b"x")])
    batch = decode_batch(bytes(builder.build()))
    assert batch.compression == codec and batch.transactional and not batch.control
    assert (batch.producer_id, batch.base_sequence, batch.last_offset_delta) == (9, 20, 29)
    assert [(r.offset_delta, r.key, r.value) for r in batch.records] == [
        (i, b"k%d" % i, b"v" * i) for i in range(30)
    ]
    assert batch.base_timestamp == 5000 and batch.max_timestamp == 5029


def test_header_fields_and_attribute_bits_survive_a_round_trip() -> None:
    batch = batch_of(
        2**40,
        RECORDS[:1],
        attributes=TRANSACTIONAL | CONTROL | 0x08,
        partition_leader_epoch=12,
        producer_id=2**50,
        producer_epoch=32767,
        base_sequence=2**31 - 1,
    )
    decoded = decode_batch(encode_batch(batch))
    assert decoded == batch
    assert decoded.transactional and decoded.control and decoded.log_append_time
    assert decoded.last_offset == 2**40


def test_a_flipped_bit_anywhere_under_the_crc_is_a_corrupt_batch() -> None:
    data = encode_batch(batch_of(0, RECORDS, compression=Compression.LZ4))
    for pos in range(21, len(data)):
        bad = bytearray(data)
        bad[pos] ^= 0x01
        with pytest.raises(CorruptRecordBatchError):
            decode_batch(bytes(bad))
    bad = bytearray(data)
    bad[17] ^= 0x80  # the CRC itself
    with pytest.raises(CorruptRecordBatchError, match="CRC"):
        decode_batch(bytes(bad))


def test_every_truncation_of_a_batch_is_a_typed_decode_error() -> None:
    data = encode_batch(batch_of(0, RECORDS))
    assert decode_batches(b"") == []
    for cut in range(1, len(data)):
        with pytest.raises(KafkaDecodeError):
            decode_batches(data[:cut])
        assert decode_batches(data[:cut], partial_tail=True) == []
    assert len(decode_batches(data + data)) == 2


def _rebuilt(data: bytes, count: int | None = None, payload: bytes | None = None) -> bytes:
    """`data` with a new records count and/or records payload, and a valid CRC."""
    import google_crc32c

    head = bytearray(data[:BATCH_HEADER_BYTES])
    if count is not None:
        head[57:61] = struct.pack(">i", count)
    body = bytes(head[21:]) + (data[BATCH_HEADER_BYTES:] if payload is None else payload)
    head[8:12] = struct.pack(">i", len(body) + 9)
    head[17:21] = struct.pack(">I", google_crc32c.value(body))
    return bytes(head[:21]) + body


def test_lying_counts_and_lengths_with_a_valid_crc_are_refused() -> None:
    data = encode_batch(batch_of(0, RECORDS))
    with pytest.raises(CorruptRecordBatchError, match="records in"):
        decode_batch(_rebuilt(data, count=2**31 - 1))
    with pytest.raises(CorruptRecordBatchError, match="bytes after"):
        decode_batch(_rebuilt(data, count=2))
    with pytest.raises(CorruptRecordBatchError):
        decode_batch(_rebuilt(data, count=-1))
    # one record whose length varint claims far more than is there
    huge = bytes([0xFE, 0xFF, 0xFF, 0xFF, 0x0F]) + b"\x00" * 10
    with pytest.raises(KafkaDecodeError, match="record of"):
        decode_batch(_rebuilt(data, count=1, payload=huge))
    with pytest.raises(KafkaDecodeError, match="does not match"):
        decode_batch(data + b"\x00")
    bad_magic = bytearray(data)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordBatchError, match="magic 1"):
        decode_batch(bytes(bad_magic))


def test_an_unknown_compression_codec_is_refused() -> None:
    data = bytearray(encode_batch(batch_of(0, RECORDS)))
    data[22] |= 0x05  # attributes' low byte: codec 5
    with pytest.raises(UnsupportedCompressionError):
        decode_batch(_rebuilt(bytes(data)))


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_a_zip_bomb_is_refused_at_the_decompression_limit(codec: Compression) -> None:
    bomb = compress(codec, bytes(256 * 1024 * 1024))  # 256 MiB of zeros
    assert len(bomb) < 16 * 1024 * 1024
    with pytest.raises(DecompressedTooLargeError):
        decompress(codec, bomb, 1024 * 1024)
    data = _rebuilt(encode_batch(batch_of(0, RECORDS, compression=codec)), payload=bomb)
    with pytest.raises(DecompressedTooLargeError):
        decode_batch(data, decompressed_bytes_max=1024 * 1024)


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_output_exactly_at_the_limit_is_accepted_and_one_byte_more_refused(
    codec: Compression,
) -> None:
    payload = bytes(range(256)) * 1000
    packed = compress(codec, payload)
    assert decompress(codec, packed, len(payload)) == payload
    with pytest.raises(DecompressedTooLargeError):
        decompress(codec, packed, len(payload) - 1)


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_garbage_and_truncated_compressed_payloads_are_corrupt(codec: Compression) -> None:
    packed = compress(codec, b"hello kafka " * 1000)
    for bad in (b"garbage!" * 4, packed[: len(packed) // 2]):
        with pytest.raises(CorruptRecordBatchError):
            decompress(codec, bad, 1 << 20)


def test_raw_snappy_as_librdkafka_writes_it_and_concatenated_gzip_members_decode() -> None:
    payload = b"librdkafka " * 500
    raw = bytes(cramjam.snappy.compress_raw(payload))
    assert decompress(Compression.SNAPPY, raw, len(payload)) == payload
    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    member = z.compress(payload) + z.flush()
    assert decompress(Compression.GZIP, member + member, 2 * len(payload)) == payload * 2
    with pytest.raises(DecompressedTooLargeError):
        decompress(Compression.GZIP, member + member, 2 * len(payload) - 1)


def test_our_lz4_frames_have_independent_blocks_as_kafkas_java_reader_expects() -> None:
    frame = compress(Compression.LZ4, b"x" * 200_000)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flags = frame[4]
    assert flags >> 6 == 1 and flags & 0x20  # version 01, block independence
    import lz4.frame  # the reference implementation (kafka-python's codec uses it)

    assert lz4.frame.decompress(frame) == b"x" * 200_000
