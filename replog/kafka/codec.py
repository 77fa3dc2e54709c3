"""Encode and decode Kafka messages by their specs (`replog.kafka.schema`).

A message body is a struct: its fields in spec order, each encoded by its type
(`replog.kafka.primitives`); in a flexible version strings, bytes and arrays are compact
and every struct ends with a tagged-field section (fields whose `taggedVersions` hold the
version, written only when not at their default, in tag order; unknown tags are skipped).
A nullable struct (not an array) is preceded by an int8: -1 null, 1 present.

Decoded messages are plain dicts keyed by snake_case field names; every field of the spec
is present (at its default when the version does not carry it), so code that reads a
message reads it the same way at every version. `encode` takes the same dicts; a missing
key encodes its default, and a non-default value the version cannot carry raises
`UnencodableFieldError` unless the spec marks the field ignorable.

For each (struct, version) the field list is compiled once into closures, so decoding does
no per-field lookups of version ranges.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from replog.kafka.errors import KafkaDecodeError
from replog.kafka.primitives import ELEMENTS_MAX_DEFAULT, Reader, Writer
from replog.kafka.schema import FieldSpec, MessageSpec, default_value

Decoder = Callable[[Reader], Any]
Encoder = Callable[[Writer, Any], None]


class UnencodableFieldError(ValueError):
    """A caller set a field that the chosen version cannot carry (a bug of the caller)."""


class _Plan:
    """One struct at one version: its regular fields and its tagged fields, compiled."""

    __slots__ = ("absent", "decoders", "encoders", "fields", "flexible", "tagged")

    def __init__(self, fields: tuple[FieldSpec, ...], version: int, flexible: bool) -> None:
        self.flexible = flexible
        self.fields = fields
        regular = [
            f for f in fields if version in f.versions and not (flexible and version in f.tagged)
        ]
        self.decoders = [(f.key, _decoder(f, version, flexible)) for f in regular]
        self.encoders = [(f.key, _encoder(f, version, flexible), f) for f in regular]
        tagged = [f for f in fields if flexible and version in f.versions and version in f.tagged]
        self.tagged = {
            f.tag: (f, _decoder(f, version, flexible), _encoder(f, version, flexible))
            for f in sorted(tagged, key=lambda f: f.tag or 0)
        }
        carried = {f.key for f in regular} | {f.key for f in tagged}
        self.absent = [f for f in fields if f.key not in carried]


_plans: dict[tuple[int, int, bool], tuple[tuple[FieldSpec, ...], _Plan]] = {}


def _plan(fields: tuple[FieldSpec, ...], version: int, flexible: bool) -> _Plan:
    key = (id(fields), version, flexible)
    hit = _plans.get(key)
    if hit is not None and hit[0] is fields:
        return hit[1]
    plan = _Plan(fields, version, flexible)
    _plans[key] = (fields, plan)
    return plan


# --- decoding ----------------------------------------------------------------------------


def _scalar_decoder(f: FieldSpec, version: int, compact: bool) -> Decoder:
    nullable = version in f.nullable
    t = f.type
    simple: dict[str, Decoder] = {
        "bool": Reader.boolean,
        "int8": Reader.int8,
        "int16": Reader.int16,
        "uint16": Reader.uint16,
        "int32": Reader.int32,
        "int64": Reader.int64,
        "float64": Reader.float64,
        "uuid": Reader.uuid,
    }
    if t in simple:
        return simple[t]
    if t == "string":
        if nullable:
            return lambda r: r.nullable_string(compact)
        return lambda r: r.string(compact)

    def read_bytes(r: Reader) -> bytes | None:
        value = r.nullable_bytes(compact)
        if value is None and not nullable:
            raise KafkaDecodeError(f"null in non-nullable {f.name}", position=r.pos)
        return value

    return read_bytes


def _decoder(f: FieldSpec, version: int, flexible: bool) -> Decoder:
    if f.type == "struct":
        plan = _plan(f.fields, version, flexible)

        def one(r: Reader) -> Any:
            return decode_struct(plan, r)

        element: Decoder = one
        if not f.array and version in f.nullable:

            def maybe(r: Reader) -> Any:
                return None if r.int8() < 0 else decode_struct(plan, r)

            return maybe
    else:
        element = _scalar_decoder(f, version, flexible)
    if not f.array:
        return element
    nullable = version in f.nullable

    def read_array(r: Reader) -> list[Any] | None:
        n = r.array_count(flexible)
        if n == -1:
            if not nullable:
                raise KafkaDecodeError(f"null in non-nullable array {f.name}", position=r.pos)
            return None
        return [element(r) for _ in range(n)]

    return read_array


def decode_struct(plan: _Plan, r: Reader) -> dict[str, Any]:
    out: dict[str, Any] = {key: decode(r) for key, decode in plan.decoders}
    for f in plan.absent:
        out[f.key] = default_value(f)
    if plan.flexible:
        for f, _, _ in plan.tagged.values():
            out[f.key] = default_value(f)
        _read_tagged(plan, r, out)
    return out


def _read_tagged(plan: _Plan, r: Reader, out: dict[str, Any]) -> None:
    count = r.unsigned_varint()
    if not count:
        return
    if count > r.remaining:
        raise KafkaDecodeError(f"{count} tagged fields in {r.remaining} bytes", position=r.pos)
    last = -1
    for _ in range(count):
        tag = r.unsigned_varint()
        if tag <= last:
            raise KafkaDecodeError("tagged fields out of order", position=r.pos)
        last = tag
        size = r.unsigned_varint()
        known = plan.tagged.get(tag)
        if known is None:
            r.view(size, "tagged field")  # skipped, bounds-checked
            continue
        sub = Reader(r.view(size, "tagged field"), elements_max=r.elements_left)
        out[known[0].key] = known[1](sub)
        r.elements_left = sub.elements_left
        if sub.remaining:
            raise KafkaDecodeError(f"tagged field {tag} has trailing bytes", position=r.pos)


# --- encoding ----------------------------------------------------------------------------


def _scalar_encoder(f: FieldSpec, version: int, compact: bool) -> Encoder:
    t = f.type
    simple: dict[str, Encoder] = {
        "bool": Writer.boolean,
        "int8": Writer.int8,
        "int16": Writer.int16,
        "uint16": Writer.uint16,
        "int32": Writer.int32,
        "int64": Writer.int64,
        "float64": Writer.float64,
        "uuid": Writer.uuid,
    }
    if t in simple:
        return simple[t]
    nullable = version in f.nullable
    if t == "string":

        def write_string(w: Writer, v: Any) -> None:
            if v is None and not nullable:
                raise UnencodableFieldError(f"{f.name} is not nullable at v{version}")
            w.nullable_string(v, compact)

        return write_string

    def write_bytes(w: Writer, v: Any) -> None:
        if v is None and not nullable:
            raise UnencodableFieldError(f"{f.name} is not nullable at v{version}")
        w.nullable_bytes(v, compact)

    return write_bytes


def _encoder(f: FieldSpec, version: int, flexible: bool) -> Encoder:
    nullable = version in f.nullable
    if f.type == "struct":
        plan = _plan(f.fields, version, flexible)

        def one(w: Writer, v: Any) -> None:
            encode_struct(plan, w, v)

        element: Encoder = one
        if not f.array and nullable:

            def maybe(w: Writer, v: Any) -> None:
                if v is None:
                    w.int8(-1)
                else:
                    w.int8(1)
                    encode_struct(plan, w, v)

            return maybe
    else:
        element = _scalar_encoder(f, version, flexible)
    if not f.array:
        return element

    def write_array(w: Writer, v: Any) -> None:
        if v is None:
            if not nullable:
                raise UnencodableFieldError(f"{f.name} is not nullable at v{version}")
            w.array_count(None, flexible)
            return
        w.array_count(len(v), flexible)
        for item in v:
            element(w, item)

    return write_array


def _is_default(f: FieldSpec, v: Any) -> bool:
    if f.array:
        return v is None if f.default is None else v == []
    if f.type == "struct":
        return v is None or bool(v == default_value(f))
    if f.type == "uuid":
        return bool(v == uuid.UUID(int=0))
    return bool(v == f.default)


def encode_struct(plan: _Plan, w: Writer, value: Mapping[str, Any]) -> None:
    for key, encode, f in plan.encoders:
        v = value.get(key, _MISSING)
        encode(w, default_value(f) if v is _MISSING else v)
    for f in plan.absent:
        v = value.get(f.key, _MISSING)
        if v is not _MISSING and not f.ignorable and not _is_default(f, v):
            raise UnencodableFieldError(f"{f.name}={v!r} cannot be sent at this version")
    if plan.flexible:
        _write_tagged(plan, w, value)


def _write_tagged(plan: _Plan, w: Writer, value: Mapping[str, Any]) -> None:
    present: list[tuple[int, bytearray]] = []
    for tag, (f, _, encode) in plan.tagged.items():
        assert tag is not None, f"tagged field {f.name} without a tag"
        v = value.get(f.key, _MISSING)
        if v is not _MISSING and not _is_default(f, v):
            sub = Writer()
            encode(sub, v)
            present.append((tag, sub.buf))
    w.unsigned_varint(len(present))
    for tag, data in present:
        w.unsigned_varint(tag)
        w.unsigned_varint(len(data))
        w.raw(data)


_MISSING: Any = object()


# --- messages ----------------------------------------------------------------------------


def decode(spec: MessageSpec, version: int, r: Reader) -> dict[str, Any]:
    """The body of `spec` at `version` from `r`; the caller checks that `r` is consumed."""
    return decode_struct(_plan(spec.fields, version, version in spec.flexible), r)


def encode(spec: MessageSpec, version: int, value: Mapping[str, Any], w: Writer) -> None:
    encode_struct(_plan(spec.fields, version, version in spec.flexible), w, value)


def carried(spec: MessageSpec, version: int, value: Mapping[str, Any]) -> dict[str, Any]:
    """`value` without the fields `version` does not carry (at every depth): a broker fills
    one response dict for every version and sends what each version holds, as Kafka's own
    handlers do by version checks (`encode` refuses a non-default field a version lacks)."""
    return _carried(spec.fields, version, value)


def _carried(
    fields: tuple[FieldSpec, ...], version: int, value: Mapping[str, Any]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        if version not in f.versions or f.key not in value:
            continue
        v = value[f.key]
        if f.type == "struct" and v is not None:
            if f.array:
                v = [_carried(f.fields, version, item) for item in v]
            else:
                v = _carried(f.fields, version, v)
        out[f.key] = v
    return out


def encode_bytes(spec: MessageSpec, version: int, value: Mapping[str, Any]) -> bytes:
    w = Writer()
    encode(spec, version, value, w)
    return bytes(w.buf)


def decode_bytes(
    spec: MessageSpec,
    version: int,
    data: bytes | memoryview,
    elements_max: int = ELEMENTS_MAX_DEFAULT,
) -> dict[str, Any]:
    """Decode a whole buffer; trailing bytes are an error."""
    r = Reader(data, elements_max=elements_max)
    out = decode(spec, version, r)
    if r.remaining:
        raise KafkaDecodeError(f"{r.remaining} trailing bytes after {spec.name}", position=r.pos)
    return out
