"""Which partition a keyed record goes to: Kafka's default (murmur2) or crc32.

`murmur2` is Kafka's `Utils.murmur2` bit for bit (seed 0x9747b28c, little-endian 4-byte
words, the tail folded in as Java's switch falls through), and a key's partition is
`(murmur2(key) & 0x7fffffff) % partitions`, as Kafka's `BuiltInPartitioner` and
librdkafka's `murmur2_random` compute it: a job moved from Kafka writes each key to the
partition Kafka would. `crc32` (`zlib.crc32(key) % partitions`) is what replog used before
murmur2 became the default; choose it to keep writing keys where existing data has them.

Changing a topic's partition count moves keys between partitions with either function
(Kafka's behaviour too): records of one key keep their order within each partition.
Pure (no I/O), shared by the clients, the Spark sink, the CLI and the console.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final, Literal

Partitioner = Literal["murmur2", "crc32"]
PARTITIONERS: Final[tuple[Partitioner, ...]] = ("murmur2", "crc32")
DEFAULT_PARTITIONER: Final[Partitioner] = "murmur2"

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_MASK: Final = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of `data` as the signed 32-bit int Java returns."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    words = length // 4
    for k in struct.unpack_from(f"<{words}I", data):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        rest = data[length - tail :]
        if tail == 3:
            h ^= rest[2] << 16
        if tail >= 2:
            h ^= rest[1] << 8
        h ^= rest[0]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(
    key: bytes, partitions: int, partitioner: Partitioner = DEFAULT_PARTITIONER
) -> int:
    """The partition of `key` among `partitions` (>= 1) by `partitioner`."""
    if partitions < 1:
        raise ValueError("partitions >= 1")
    if partitioner == "murmur2":
        return (murmur2(bytes(key)) & 0x7FFFFFFF) % partitions
    if partitioner == "crc32":
        return zlib.crc32(key) % partitions
    raise ValueError(f"partitioner is one of {', '.join(PARTITIONERS)}, not {partitioner!r}")


def check_partitioner(name: str) -> Partitioner:
    """`name` as a `Partitioner` (ValueError naming the choices otherwise)."""
    for known in PARTITIONERS:
        if name == known:
            return known
    raise ValueError(f"partitioner is one of {', '.join(PARTITIONERS)}, not {name!r}")
