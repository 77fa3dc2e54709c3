"""The compression codecs of Kafka record batches, with bounded decompression.

A batch's attributes (bits 0-2) name its codec; the records section after the batch header
is compressed as one block:

* 1 gzip: an RFC 1952 gzip stream (members may be concatenated). Python's zlib, which
  stops at a byte budget (`max_length`).
* 2 snappy: either raw snappy or the xerial framing the Java client writes: the 16-byte
  header `82 'SNAPPY' 00`, int32 version, int32 compatible version, then blocks of
  int32 compressed length + raw snappy. Both are read; xerial is written (32 KiB blocks),
  which every client reads. A raw snappy block states its decompressed length first, so
  the budget is checked before it is decompressed.
* 3 lz4: the LZ4 frame format (magic 04 22 4D 18), written with independent 64 KiB blocks.
* 4 zstd: a zstd frame.

lz4 and zstd are decompressed into a buffer of bounded size (doubling from a guess up to
the budget): a payload that would exceed `decompressed_bytes_max` raises
`DecompressedTooLargeError` with no more than the budget allocated, so a zip bomb costs
at most the budget. cramjam (Rust bindings of snappy, lz4_flex/lz4 and zstd) does the work.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum
from typing import Final

import cramjam

from replog.kafka.errors import (
    CorruptRecordBatchError,
    DecompressedTooLargeError,
    UnsupportedCompressionError,
)


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_BYTES: Final = 32 * 1024
_I32: Final = struct.Struct(">i")
_FIRST_GUESS_BYTES: Final = 64 * 1024


def compression_of(attributes: int) -> Compression:
    codec = attributes & 0x07
    try:
        return Compression(codec)
    except ValueError:
        raise UnsupportedCompressionError(f"compression codec {codec}", codec=codec) from None


def compress(codec: Compression, data: bytes | bytearray | memoryview) -> bytes:
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        z = zlib.compressobj(6, zlib.DEFLATED, 31)
        return z.compress(data) + z.flush()
    if codec == Compression.SNAPPY:
        out = bytearray(_XERIAL_HEADER)
        view = memoryview(data)
        for start in range(0, len(view), _XERIAL_BLOCK_BYTES):
            block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_BYTES]))
            out += _I32.pack(len(block))
            out += block
        return bytes(out)
    if codec == Compression.LZ4:
        c = cramjam.lz4.Compressor(block_linked=False, content_checksum=False)
        c.compress(bytes(data))
        return bytes(c.finish())
    assert codec == Compression.ZSTD, f"unknown codec {codec}"
    return bytes(cramjam.zstd.compress(bytes(data)))


def decompress(codec: Compression, data: bytes | memoryview, decompressed_bytes_max: int) -> bytes:
    """`data` decompressed, refused past `decompressed_bytes_max` bytes."""
    if codec == Compression.NONE:
        if len(data) > decompressed_bytes_max:
            raise _too_large(decompressed_bytes_max)
        return bytes(data)
    if codec == Compression.GZIP:
        return _gunzip(data, decompressed_bytes_max)
    if codec == Compression.SNAPPY:
        return _unsnappy(data, decompressed_bytes_max)
    module = cramjam.lz4 if codec == Compression.LZ4 else cramjam.zstd
    return _into_bounded(module, data, decompressed_bytes_max)


def _too_large(limit: int) -> DecompressedTooLargeError:
    return DecompressedTooLargeError(
        f"batch decompresses past {limit} bytes", decompressed_bytes_max=limit
    )


def _gunzip(data: bytes | memoryview, limit: int) -> bytes:
    out = bytearray()
    rest = bytes(data)
    while True:
        d = zlib.decompressobj(31)
        try:
            out += d.decompress(rest, limit - len(out) + 1)
        except zlib.error as e:
            raise CorruptRecordBatchError(f"gzip: {e}") from None
        if len(out) > limit:
            raise _too_large(limit)
        if not d.eof:
            if d.unconsumed_tail:
                raise _too_large(limit)  # stopped at the budget with input left
            raise CorruptRecordBatchError("gzip stream is truncated")
        rest = d.unused_data
        if not rest:
            return bytes(out)


def _snappy_block(block: bytes | memoryview, budget: int) -> bytes:
    try:
        size = int(cramjam.snappy.decompress_raw_len(block))
        if size > budget:
            raise _too_large(budget)
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as e:
        raise CorruptRecordBatchError(f"snappy: {e}") from None


def _unsnappy(data: bytes | memoryview, limit: int) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return _snappy_block(view, limit)
    if len(view) < 16:
        raise CorruptRecordBatchError("xerial snappy header is truncated")
    out = bytearray()
    pos = 16
    while pos < len(view):
        if len(view) - pos < 4:
            raise CorruptRecordBatchError("xerial snappy block length is truncated")
        (n,) = _I32.unpack_from(view, pos)
        pos += 4
        if n < 0 or n > len(view) - pos:
            raise CorruptRecordBatchError(f"xerial snappy block of {n} bytes is truncated")
        out += _snappy_block(view[pos : pos + n], limit - len(out))
        pos += n
    return bytes(out)


def _into_bounded(module: object, data: bytes | memoryview, limit: int) -> bytes:
    """Decompress into a buffer that doubles from a guess to `limit` + 1 bytes: output that
    does not fit `limit` + 1 is a payload over the limit."""
    into = module.decompress_into  # type: ignore[attr-defined]
    size = min(limit + 1, max(_FIRST_GUESS_BYTES, 8 * len(data)))
    while True:
        buffer = bytearray(size)
        try:
            n = int(into(bytes(data), buffer))
        except cramjam.DecompressionError as e:
            if "whole buffer" not in str(e):
                raise CorruptRecordBatchError(f"{module.__name__}: {e}") from None  # type: ignore[attr-defined]
            if size > limit:
                raise _too_large(limit) from None
            size = min(limit + 1, size * 2)
            continue
        if n > limit:
            raise _too_large(limit)
        return bytes(memoryview(buffer)[:n])
