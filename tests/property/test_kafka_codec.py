"""The Kafka codec (`replog.kafka`) under generated input: primitives and record batches
round-trip, messages built from the specs round-trip at every version, and arbitrary or
mutated bytes only ever raise `KafkaDecodeError` (never IndexError, struct.error,
MemoryError, UnicodeDecodeError ...)."""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import google_crc32c
from hypothesis import given
from hypothesis import strategies as st

from replog.kafka import codec, protocol
from replog.kafka.compression import Compression
from replog.kafka.errors import KafkaDecodeError
from replog.kafka.primitives import Reader, Writer
from replog.kafka.records import Header, batch_of, decode_batch, decode_batches, encode_batch
from replog.kafka.schema import FieldSpec, api_specs, load_spec

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@given(INT32, INT64, st.integers(0, 2**32 - 1))
def test_varints_round_trip_at_their_bounds(i32: int, i64: int, u32: int) -> None:
    w = Writer()
    w.varint(i32)
    w.varlong(i64)
    w.unsigned_varint(u32)
    r = Reader(bytes(w.buf))
    assert (r.varint(), r.varlong(), r.unsigned_varint()) == (i32, i64, u32)
    assert r.remaining == 0


@given(st.binary(max_size=64))
def test_any_bytes_read_as_any_primitive_are_a_value_or_a_typed_error(data: bytes) -> None:
    for read in (
        lambda r: r.varint(),
        lambda r: r.varlong(),
        lambda r: r.uuid(),
        lambda r: r.nullable_string(True),
        lambda r: r.nullable_string(False),
        lambda r: r.nullable_bytes(True),
        lambda r: r.nullable_bytes(False),
        lambda r: r.array_count(True),
        lambda r: r.float64(),
    ):
        r = Reader(data)
        with contextlib.suppress(KafkaDecodeError):
            read(r)
        assert 0 <= r.pos <= len(data)


def _value(f: FieldSpec, version: int) -> st.SearchStrategy[Any]:
    if f.type == "struct":
        one: st.SearchStrategy[Any] = _struct(f.fields, version)
    else:
        one = _SCALARS[f.type]
        if version in f.nullable and f.type in ("string", "bytes", "records"):
            one = st.none() | one
    if f.array:
        many = st.lists(one, max_size=3)
        return st.none() | many if version in f.nullable else many
    if f.type == "struct" and version in f.nullable:
        return st.none() | one
    return one


def _struct(fields: tuple[FieldSpec, ...], version: int) -> st.SearchStrategy[dict[str, Any]]:
    carried = {f.key: _value(f, version) for f in fields if version in f.versions}
    return st.fixed_dictionaries(carried)


_SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "bool": st.booleans(),
    "int8": st.integers(-128, 127),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "int32": INT32,
    "int64": INT64,
    "float64": st.floats(allow_nan=False),
    "string": st.text(max_size=8),
    "bytes": st.binary(max_size=8),
    "records": st.binary(max_size=8),
    "uuid": st.uuids(),
}

CASES = [
    (spec.name, v)
    for pair in api_specs().values()
    for spec in pair
    for v in range(spec.valid.lo, spec.valid.hi + 1)
]


@st.composite
def messages(draw: st.DrawFn) -> tuple[str, int, dict[str, Any]]:
    name, version = draw(st.sampled_from(CASES))
    return name, version, draw(_struct(load_spec(name).fields, version))


def _project(decoded: Any, message: Any) -> Any:
    if isinstance(message, dict):
        return {k: _project(decoded[k], v) for k, v in message.items()}
    if isinstance(message, list):
        return [_project(d, m) for d, m in zip(decoded, message, strict=True)]
    return decoded


@given(messages())
def test_generated_messages_of_every_api_and_version_round_trip(
    case: tuple[str, int, dict[str, Any]],
) -> None:
    name, version, message = case
    spec = load_spec(name)
    data = codec.encode_bytes(spec, version, message)
    decoded = codec.decode_bytes(spec, version, data)
    assert _project(decoded, message) == message
    assert codec.encode_bytes(spec, version, decoded) == data


@given(messages(), st.data())
def test_mutated_messages_decode_or_raise_the_typed_error(
    case: tuple[str, int, dict[str, Any]], data: st.DataObject
) -> None:
    name, version, message = case
    spec = load_spec(name)
    encoded = bytearray(codec.encode_bytes(spec, version, message))
    for _ in range(data.draw(st.integers(1, 4))):
        if not encoded:
            break
        pos = data.draw(st.integers(0, len(encoded) - 1))
        encoded[pos] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, encoded[pos] ^ 1]))
    with contextlib.suppress(KafkaDecodeError):
        codec.decode_bytes(spec, version, bytes(encoded))


@given(st.binary(max_size=200))
def test_arbitrary_request_frames_decode_or_raise_the_typed_error(payload: bytes) -> None:
    with contextlib.suppress(KafkaDecodeError):
        protocol.decode_request(payload)


headers = st.lists(st.builds(Header, st.text(max_size=6), st.none() | st.binary(max_size=8)))
rows = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=60),
        st.integers(0, 2**41),
        headers,
    ),
    min_size=1,
    max_size=20,
)


@given(rows, st.sampled_from(list(Compression)), st.integers(0, 2**50), INT64)
def test_record_batches_round_trip_with_every_codec(
    records: list[Any], compression: Compression, base_offset: int, producer_id: int
) -> None:
    batch = batch_of(base_offset, records, compression=compression, producer_id=producer_id)
    assert decode_batch(encode_batch(batch)) == batch


@given(rows, st.sampled_from(list(Compression)), st.data())
def test_mutated_batches_decode_or_raise_the_typed_error(
    records: list[Any], compression: Compression, data: st.DataObject
) -> None:
    encoded = bytearray(encode_batch(batch_of(0, records, compression=compression)))
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(21, len(encoded) - 1))
        encoded[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):  # a valid CRC over the mutation: the parser must hold
        encoded[17:21] = struct.pack(">I", google_crc32c.value(bytes(encoded[21:])))
    cut = data.draw(st.integers(0, len(encoded)))
    with contextlib.suppress(KafkaDecodeError):
        decode_batches(bytes(encoded[:cut]), decompressed_bytes_max=1 << 16)
