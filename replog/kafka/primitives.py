"""Kafka's primitive types, read from a bounded buffer and written to a growing one.

Byte by byte (Kafka's protocol guide, "Protocol Primitive Types"):

* int8 / int16 / int32 / int64, uint16 / uint32, float64: big-endian, two's complement.
* boolean: one byte, 0 is false, anything else true.
* unsigned varint: 7 bits a byte, least significant group first, high bit set on every
  byte but the last (at most 5 bytes for 32 bits, 10 for 64).
* varint / varlong: the zigzag of a signed int32 / int64 (`(n << 1) ^ (n >> 31)`), then as
  an unsigned varint.
* uuid: 16 bytes.
* string: int16 length then UTF-8 bytes; nullable string: length -1 is null.
  compact string: unsigned varint length+1 (0 is null) then the bytes.
* bytes: int32 length then the bytes (-1 null); compact bytes: unsigned varint length+1.
* array: int32 count (-1 null) then the elements; compact array: unsigned varint count+1.
* tagged fields (flexible versions): unsigned varint count, then per field an unsigned
  varint tag, an unsigned varint size and that many bytes.

`Reader` checks every length and count against what is left of its window before it reads
or allocates: truncated input and lying lengths raise `KafkaDecodeError`, never
IndexError, struct.error or MemoryError. An array count is also checked against the bytes
left (every element takes at least one byte), so a 2**31 count in a 100-byte frame is
refused at once, and all the arrays of one message together hold at most `elements_max`
elements (`ELEMENTS_MAX_DEFAULT`), which bounds the memory a decoded frame takes.
"""

from __future__ import annotations

import struct
import uuid
from typing import Final

from replog.kafka.errors import KafkaDecodeError

_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_U16: Final = struct.Struct(">H")
_I32: Final = struct.Struct(">i")
_U32: Final = struct.Struct(">I")
_I64: Final = struct.Struct(">q")
_F64: Final = struct.Struct(">d")

# Array elements one message may hold, all arrays together: a decoded element costs
# ~100-200 bytes of Python objects for 1-20 bytes of wire, so the frame limit alone would
# let a 100 MiB frame become gigabytes. 100k is far above any real request's.
ELEMENTS_MAX_DEFAULT: Final = 100_000

INT32_MAX: Final = 2**31 - 1
INT32_MIN: Final = -(2**31)
INT64_MAX: Final = 2**63 - 1
INT64_MIN: Final = -(2**63)


class Reader:
    """Reads Kafka primitives from `data[pos:end]`; never past `end`."""

    __slots__ = ("_data", "elements_left", "end", "pos")

    def __init__(
        self,
        data: bytes | bytearray | memoryview,
        pos: int = 0,
        end: int | None = None,
        elements_max: int = ELEMENTS_MAX_DEFAULT,
    ):
        self.elements_left = elements_max
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        self._data = view
        self.end = len(view) if end is None else end
        assert 0 <= pos <= self.end <= len(view), "reader window outside its buffer"
        self.pos = pos

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int, what: str) -> int:
        if n < 0 or n > self.end - self.pos:
            raise KafkaDecodeError(
                f"truncated {what}: needs {n} bytes, {self.end - self.pos} left",
                position=self.pos,
            )
        pos = self.pos
        self.pos = pos + n
        return pos

    def int8(self) -> int:
        return int(_I8.unpack_from(self._data, self._need(1, "int8"))[0])

    def boolean(self) -> bool:
        return self._data[self._need(1, "boolean")] != 0

    def int16(self) -> int:
        return int(_I16.unpack_from(self._data, self._need(2, "int16"))[0])

    def uint16(self) -> int:
        return int(_U16.unpack_from(self._data, self._need(2, "uint16"))[0])

    def int32(self) -> int:
        return int(_I32.unpack_from(self._data, self._need(4, "int32"))[0])

    def uint32(self) -> int:
        return int(_U32.unpack_from(self._data, self._need(4, "uint32"))[0])

    def int64(self) -> int:
        return int(_I64.unpack_from(self._data, self._need(8, "int64"))[0])

    def float64(self) -> float:
        return float(_F64.unpack_from(self._data, self._need(8, "float64"))[0])

    def uuid(self) -> uuid.UUID:
        pos = self._need(16, "uuid")
        return uuid.UUID(bytes=bytes(self._data[pos : pos + 16]))

    def unsigned_varint(self, max_bytes: int = 5) -> int:
        """An unsigned varint of at most `max_bytes` bytes (5: 32 bits, 10: 64 bits)."""
        data, pos, end = self._data, self.pos, self.end
        if pos < end and data[pos] < 0x80:  # the common one-byte case
            self.pos = pos + 1
            return data[pos]
        value = shift = 0
        for i in range(max_bytes):
            if pos + i >= end:
                raise KafkaDecodeError("truncated varint", position=self.pos)
            byte = data[pos + i]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.pos = pos + i + 1
                limit = 32 if max_bytes == 5 else 64
                if value >> limit:
                    raise KafkaDecodeError("varint out of range", position=pos)
                return value
            shift += 7
        raise KafkaDecodeError(f"varint longer than {max_bytes} bytes", position=pos)

    def varint(self) -> int:
        raw = self.unsigned_varint(5)
        return (raw >> 1) ^ -(raw & 1)

    def varlong(self) -> int:
        raw = self.unsigned_varint(10)
        return (raw >> 1) ^ -(raw & 1)

    def raw(self, n: int, what: str = "bytes") -> bytes:
        pos = self._need(n, what)
        return bytes(self._data[pos : pos + n])

    def view(self, n: int, what: str = "bytes") -> memoryview:
        """`n` bytes without a copy (a slice of the reader's buffer)."""
        pos = self._need(n, what)
        return self._data[pos : pos + n]

    def _text(self, n: int) -> str:
        pos = self._need(n, "string")
        try:
            return str(self._data[pos : pos + n], "utf-8")
        except UnicodeDecodeError as e:
            raise KafkaDecodeError("string is not valid UTF-8", position=pos) from e

    # --- length-prefixed types ----------------------------------------------------------

    def string_length(self, compact: bool) -> int:
        """-1 for null, else the byte length (checked against what is left)."""
        n = self.unsigned_varint() - 1 if compact else self.int16()
        if n < -1:
            raise KafkaDecodeError(f"negative string length {n}", position=self.pos)
        return n

    def nullable_string(self, compact: bool) -> str | None:
        n = self.string_length(compact)
        return None if n == -1 else self._text(n)

    def string(self, compact: bool) -> str:
        n = self.string_length(compact)
        if n == -1:
            raise KafkaDecodeError("null in a non-nullable string", position=self.pos)
        return self._text(n)

    def nullable_bytes(self, compact: bool) -> bytes | None:
        n = self.unsigned_varint() - 1 if compact else self.int32()
        if n < -1:
            raise KafkaDecodeError(f"negative bytes length {n}", position=self.pos)
        return None if n == -1 else self.raw(n)

    def array_count(self, compact: bool) -> int:
        """-1 for null, else the element count; a count larger than the bytes left is a
        lie (each element takes at least one byte) and is refused before any loop."""
        n = self.unsigned_varint() - 1 if compact else self.int32()
        if n < -1:
            raise KafkaDecodeError(f"negative array count {n}", position=self.pos)
        if n > self.end - self.pos:
            raise KafkaDecodeError(
                f"array of {n} elements in {self.end - self.pos} bytes", position=self.pos
            )
        self.elements_left -= n
        if self.elements_left < 0:
            raise KafkaDecodeError("more array elements than the message limit", position=self.pos)
        return n


class Writer:
    """Appends Kafka primitives to a bytearray (`buf`)."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def int8(self, v: int) -> None:
        self.buf += _I8.pack(v)

    def boolean(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def int16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def uint16(self, v: int) -> None:
        self.buf += _U16.pack(v)

    def int32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def uint32(self, v: int) -> None:
        self.buf += _U32.pack(v)

    def int64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def float64(self, v: float) -> None:
        self.buf += _F64.pack(v)

    def uuid(self, v: uuid.UUID) -> None:
        self.buf += v.bytes

    def unsigned_varint(self, v: int) -> None:
        assert v >= 0, f"unsigned varint of {v}"
        buf = self.buf
        while v >= 0x80:
            buf.append((v & 0x7F) | 0x80)
            v >>= 7
        buf.append(v)

    def varint(self, v: int) -> None:
        assert INT32_MIN <= v <= INT32_MAX, f"varint {v} outside int32"
        self.unsigned_varint(((v << 1) ^ (v >> 31)) & 0xFFFF_FFFF)

    def varlong(self, v: int) -> None:
        assert INT64_MIN <= v <= INT64_MAX, f"varlong {v} outside int64"
        self.unsigned_varint(((v << 1) ^ (v >> 63)) & 0xFFFF_FFFF_FFFF_FFFF)

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        self.buf += data

    def nullable_string(self, v: str | None, compact: bool) -> None:
        if v is None:
            if compact:
                self.unsigned_varint(0)
            else:
                self.int16(-1)
            return
        data = v.encode()
        if compact:
            self.unsigned_varint(len(data) + 1)
        else:
            assert len(data) <= 0x7FFF, "string longer than 32767 bytes"
            self.int16(len(data))
        self.buf += data

    def nullable_bytes(self, v: bytes | bytearray | memoryview | None, compact: bool) -> None:
        if v is None:
            if compact:
                self.unsigned_varint(0)
            else:
                self.int32(-1)
            return
        if compact:
            self.unsigned_varint(len(v) + 1)
        else:
            self.int32(len(v))
        self.buf += v

    def array_count(self, n: int | None, compact: bool) -> None:
        if n is None:
            if compact:
                self.unsigned_varint(0)
            else:
                self.int32(-1)
        elif compact:
            self.unsigned_varint(n + 1)
        else:
            self.int32(n)


def unsigned_varint_bytes(v: int) -> bytes:
    w = Writer()
    w.unsigned_varint(v)
    return bytes(w.buf)
