"""Kafka frames and headers, and the requests and responses they carry.

On the wire (Kafka's protocol guide, "Common Request and Response Structure")::

    frame            int32 size, then `size` bytes (the size excludes itself)
    request          request header, then the request body (replog.kafka.codec)
    request header   v1: int16 api_key, int16 api_version, int32 correlation_id,
                         nullable string client_id (int16 length, in every version)
                     v2: v1, then a tagged-field section
    response         response header, then the response body
    response header  v0: int32 correlation_id
                     v1: v0, then a tagged-field section

A request uses header v2 when its API's version is flexible, else v1 (v0, without
client_id, is only ControlledShutdown v0, which replog does not serve). A response uses
header v1 when flexible, else v0, but ApiVersions responses always use v0 so that a client
that does not yet know the broker's versions can read the answer.

A size prefix that is negative or above `frame_bytes_max` raises `FrameTooLargeError` before
any byte of the body is buffered. `FrameDecoder` is the sans-I/O splitter the listener
feeds with what the socket delivers.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

from replog.kafka import codec
from replog.kafka.errors import (
    ErrorCode,
    FrameTooLargeError,
    KafkaDecodeError,
    UnsupportedVersionError,
)
from replog.kafka.primitives import ELEMENTS_MAX_DEFAULT, Reader, Writer
from replog.kafka.schema import MessageSpec, api_specs

FRAME_BYTES_MAX_DEFAULT: Final = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
_SIZE: Final = struct.Struct(">i")
_PEEK: Final = struct.Struct(">hhi")


class ApiKey(IntEnum):
    """The APIs whose specs replog carries (`replog/kafka/specs/`)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    DESCRIBE_CLUSTER = 60


# The versions the listener should advertise first: what librdkafka 2.x, the Java client
# 3.x-4.x, kafka-python and aiokafka negotiate for the classic protocols (a client takes
# min(its max, the broker's max)). The codec handles every version of each spec
# (`spec_versions`); these stop where a version needs a feature replog does not have yet
# (KIP-848 member epochs in OffsetCommit 9+ / OffsetFetch 9+, KIP-890 transactions v2 in
# InitProducerId 5+ and Produce 12+). Each range is cross-checked against kafka-python's
# encoder in tests/unit/test_kafka_messages.py.
RECOMMENDED_VERSIONS: Final[Mapping[ApiKey, tuple[int, int]]] = {
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.METADATA: (0, 12),
    ApiKey.PRODUCE: (3, 9),
    ApiKey.FETCH: (4, 13),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.OFFSET_COMMIT: (2, 8),
    ApiKey.OFFSET_FETCH: (1, 8),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
}


def spec_versions(api_key: int) -> tuple[int, int]:
    """The versions Kafka's spec of `api_key` defines (all of which the codec handles)."""
    request, _ = _specs(api_key, None, None)
    return request.valid.lo, request.valid.hi


def _specs(
    api_key: int, version: int | None, correlation_id: int | None
) -> tuple[MessageSpec, MessageSpec]:
    pair = api_specs().get(api_key)
    if pair is None or (version is not None and version not in pair[0].valid):
        raise UnsupportedVersionError(
            f"api key {api_key} version {version} is not supported",
            api_key=api_key,
            api_version=version,
            correlation_id=correlation_id,
        )
    return pair


def is_flexible(api_key: int, version: int) -> bool:
    request, _ = _specs(api_key, version, None)
    return version in request.flexible


def response_header_version(api_key: int, version: int) -> int:
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, version) else 0


# --- frames ------------------------------------------------------------------------------


def frame_size(prefix: bytes | bytearray | memoryview, frame_bytes_max: int) -> int:
    """The size in a 4-byte frame prefix, refused when negative or above the limit."""
    assert len(prefix) == 4, "a frame prefix is 4 bytes"
    (size,) = _SIZE.unpack_from(prefix)
    if size < 0 or size > frame_bytes_max:
        raise FrameTooLargeError(
            f"frame of {size} bytes (limit {frame_bytes_max})",
            frame_bytes=size,
            frame_bytes_max=frame_bytes_max,
        )
    return int(size)


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    return _SIZE.pack(len(payload)) + bytes(payload)


class FrameDecoder:
    """Splits a byte stream into frames; holds at most one incomplete frame (whose size
    was checked against the limit before its body was kept)."""

    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT) -> None:
        assert frame_bytes_max >= 0
        self.frame_bytes_max = frame_bytes_max
        self._buf = bytearray()
        self._need: int | None = None  # size of the frame being assembled

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Every frame completed by `data`, in order (payloads without their prefix)."""
        self._buf += data
        frames: list[bytes] = []
        buf = self._buf
        start = 0
        while True:
            if self._need is None:
                if len(buf) - start < 4:
                    break
                self._need = frame_size(buf[start : start + 4], self.frame_bytes_max)
                start += 4
            if len(buf) - start < self._need:
                break
            frames.append(bytes(buf[start : start + self._need]))
            start += self._need
            self._need = None
        del buf[:start]
        return frames


# --- headers and messages ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class Request:
    header: RequestHeader
    body: dict[str, Any]


def peek_header(payload: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame, whatever the API: what a
    listener needs to answer UNSUPPORTED_VERSION or close the connection."""
    if len(payload) < 8:
        raise KafkaDecodeError(f"request of {len(payload)} bytes has no header")
    api_key, api_version, correlation_id = _PEEK.unpack_from(payload)
    return int(api_key), int(api_version), int(correlation_id)


def _skip_tagged(r: Reader) -> None:
    count = r.unsigned_varint()
    if count > r.remaining:
        raise KafkaDecodeError(f"{count} tagged fields in {r.remaining} bytes", position=r.pos)
    for _ in range(count):
        r.unsigned_varint()
        r.view(r.unsigned_varint(), "tagged field")


def decode_request(
    payload: bytes | bytearray | memoryview,
    elements_max: int = ELEMENTS_MAX_DEFAULT,
    *,
    trailing_ok: bool = False,
) -> Request:
    """A request frame's header and body. An unknown API key or a version outside its spec
    raises `UnsupportedVersionError` (with the header's fields in its metadata); more than
    `elements_max` array elements in all is a `KafkaDecodeError`. Bytes after the body are
    refused unless `trailing_ok`: Kafka's brokers ignore them, and librdkafka 2.x relies on
    it (its flexible Metadata request for all topics leaves the 4-byte placeholder of the
    topics array: a varint 0, null, then 3 zero bytes that shift its last fields)."""
    api_key, api_version, correlation_id = peek_header(payload)
    request_spec, _ = _specs(api_key, api_version, correlation_id)
    r = Reader(payload, 8, elements_max=elements_max)
    client_id = r.nullable_string(compact=False)
    flexible = api_version in request_spec.flexible
    if flexible:
        _skip_tagged(r)
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    body = codec.decode(request_spec, api_version, r)
    if r.remaining and not trailing_ok:
        raise KafkaDecodeError(
            f"{r.remaining} trailing bytes after {request_spec.name} v{api_version}",
            position=r.pos,
        )
    return Request(header, body)


def encode_request(header: RequestHeader, body: Mapping[str, Any]) -> bytes:
    """A request frame, size prefix included (clients' side; the tests' too)."""
    request_spec, _ = _specs(header.api_key, header.api_version, header.correlation_id)
    w = Writer()
    w.int16(header.api_key)
    w.int16(header.api_version)
    w.int32(header.correlation_id)
    w.nullable_string(header.client_id, compact=False)
    if header.api_version in request_spec.flexible:
        w.unsigned_varint(0)
    codec.encode(request_spec, header.api_version, body, w)
    return frame(w.buf)


def encode_response(
    header: RequestHeader, body: Mapping[str, Any], *, any_version: bool = False
) -> bytes:
    """The response frame to `header`'s request, size prefix included. `any_version`:
    `body` may hold fields of other versions, which are left out (`codec.carried`)."""
    _, response_spec = _specs(header.api_key, header.api_version, header.correlation_id)
    if any_version:
        body = codec.carried(response_spec, header.api_version, body)
    w = Writer()
    w.int32(header.correlation_id)
    if response_header_version(header.api_key, header.api_version) == 1:
        w.unsigned_varint(0)
    codec.encode(response_spec, header.api_version, body, w)
    return frame(w.buf)


def encode_api_versions_unsupported(
    correlation_id: int, api_keys: Mapping[int, tuple[int, int]]
) -> bytes:
    """The answer to an ApiVersions request of a version the broker does not serve: a v0
    body (header v0) with UNSUPPORTED_VERSION and the broker's ranges, which every client
    reads whatever version it asked for, then asks again at a version in the range."""
    _, response_spec = api_specs()[ApiKey.API_VERSIONS]
    w = Writer()
    w.int32(correlation_id)
    body = {
        "error_code": int(ErrorCode.UNSUPPORTED_VERSION),
        "api_keys": [
            {"api_key": k, "min_version": lo, "max_version": hi}
            for k, (lo, hi) in sorted(api_keys.items())
        ],
    }
    codec.encode(response_spec, 0, body, w)
    return frame(w.buf)


def decode_response(
    api_key: int, api_version: int, payload: bytes | bytearray | memoryview
) -> tuple[int, dict[str, Any]]:
    """(correlation_id, body) of a response frame to a request of `api_key` v`api_version`."""
    _, response_spec = _specs(api_key, api_version, None)
    r = Reader(payload)
    correlation_id = r.int32()
    if response_header_version(api_key, api_version) == 1:
        _skip_tagged(r)
    if api_key == ApiKey.API_VERSIONS and r.remaining >= 2:
        error_code = int.from_bytes(r.view(2), "big", signed=True)
        r.pos -= 2
        if error_code == ErrorCode.UNSUPPORTED_VERSION:
            api_version = 0  # the broker answered with its v0 body (above)
    body = codec.decode(response_spec, api_version, r)
    if r.remaining:
        raise KafkaDecodeError(f"{r.remaining} trailing bytes after {response_spec.name}")
    return correlation_id, body
