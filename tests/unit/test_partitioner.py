"""Kafka's murmur2 partitioner, bit for bit (Kafka's published test vectors and kafka-python's
implementation), and crc32 kept for data written before murmur2 became the default."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from replog.client import partition_for_key
from replog.client.partitioner import check_partitioner, murmur2

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS.items())
def test_murmur2_matches_kafkas_published_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@given(st.binary(max_size=64))
def test_murmur2_agrees_with_kafka_python(key: bytes) -> None:
    theirs = kafka_python_murmur2(key)  # unsigned 32-bit
    assert murmur2(key) & 0xFFFFFFFF == theirs


@given(st.binary(max_size=64), st.integers(1, 10_000))
def test_a_key_goes_where_kafkas_producer_puts_it(key: bytes, partitions: int) -> None:
    expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions
    assert partition_for_key(key, partitions) == expected
    assert partition_for_key(key, partitions, "murmur2") == expected


def test_crc32_stays_available_for_existing_data() -> None:
    assert partition_for_key(b"user-42", 7, "crc32") == zlib.crc32(b"user-42") % 7


def test_unknown_partitioners_and_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="murmur2, crc32"):
        check_partitioner("fnv")
    with pytest.raises(ValueError, match="partitions >= 1"):
        partition_for_key(b"k", 0)
