"""Kafka's message specs, loaded as data: which fields a message has at which version.

The files in `specs/` are Apache Kafka's own message definitions, unmodified
(`clients/src/main/resources/common/message/*.json` of apache/kafka, Apache-2.0, as shipped
in kafka-python 3.0.12's `kafka/protocol/schemas/resources`; Kafka 4.x). Kafka generates
its Java codecs from them; replog interprets them (`replog.kafka.codec`). Each file is JSON
with `//` comment lines and describes one message::

    {"apiKey": 0, "type": "request", "name": "ProduceRequest",
     "validVersions": "3-13", "flexibleVersions": "9+",
     "fields": [{"name": "Acks", "type": "int16", "versions": "0+"}, ...],
     "commonStructs": [...]}

A field has a `type` (int8/16/32/64, uint16, float64, bool, string, bytes, records, uuid, a
struct name, or `[]` + one of these for an array), the `versions` it exists in,
`nullableVersions`, optionally `taggedVersions` + `tag` (sent in the tagged-field section of
flexible versions), `ignorable` (may be dropped when the version cannot carry it) and a
`default`. Version ranges are written `"3+"`, `"0-8"`, `"5"` or `"none"`.

Field names are exposed in snake_case (`PartitionIndex` -> `partition_index`).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Final

VERSION_MAX: Final = 0x7FFF

_COMMENT_LINE: Final = re.compile(r"^\s*//.*$", re.MULTILINE)
_CAMEL: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SCALARS: Final = frozenset(
    {"bool", "int8", "int16", "uint16", "int32", "int64", "float64", "string", "bytes", "records"}
    | {"uuid"}
)


@dataclass(frozen=True, slots=True)
class VersionRange:
    """Versions `lo..hi` inclusive; empty when lo > hi."""

    lo: int
    hi: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version <= self.hi

    @classmethod
    def parse(cls, text: str | None) -> VersionRange:
        if text is None or text == "none":
            return _EMPTY
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), VERSION_MAX)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))


_EMPTY: Final = VersionRange(1, 0)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str  # as in the spec: "PartitionIndex"
    key: str  # as decoded: "partition_index"
    type: str  # a scalar name of _SCALARS, or "struct"
    array: bool
    versions: VersionRange
    nullable: VersionRange
    tagged: VersionRange
    tag: int | None
    ignorable: bool
    default: Any  # the decoded value of a field a version does not carry
    fields: tuple[FieldSpec, ...]  # a struct's (or struct array's) fields


@dataclass(frozen=True, slots=True)
class MessageSpec:
    name: str  # "ProduceRequest"
    api_key: int | None  # None for data schemas (ConsumerProtocolSubscription ...)
    kind: str  # "request", "response", "data"
    valid: VersionRange
    flexible: VersionRange
    fields: tuple[FieldSpec, ...]


def snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


def _scalar_default(type_: str, text: str | None, nullable: bool) -> Any:
    if text == "null":
        assert nullable, "null default of a non-nullable field"
        return None
    if type_ == "bool":
        return text == "true"
    if type_ in ("int8", "int16", "uint16", "int32", "int64"):
        return int(text, 0) if text else 0
    if type_ == "float64":
        return float(text) if text else 0.0
    if type_ == "string":
        return text or ""
    if type_ == "uuid":
        return uuid.UUID(int=0)
    if type_ == "records":
        return None
    return b""  # bytes


def default_value(field: FieldSpec) -> Any:
    """A fresh default (lists and structs are new objects each call)."""
    if field.array:
        return None if field.default is None else []
    if field.type == "struct":
        return {f.key: default_value(f) for f in field.fields}
    return field.default


def _default_text(raw: dict[str, Any]) -> str | None:
    value = raw.get("default")
    if isinstance(value, bool):
        return "true" if value else "false"
    return None if value is None else str(value)


def _field(raw: dict[str, Any], structs: dict[str, list[dict[str, Any]]]) -> FieldSpec:
    type_text: str = raw["type"]
    array = type_text.startswith("[]")
    inner = type_text[2:] if array else type_text
    nullable = VersionRange.parse(raw.get("nullableVersions"))
    sub: tuple[FieldSpec, ...] = ()
    if inner in _SCALARS:
        type_ = inner
        default = (
            None
            if array and _default_text(raw) == "null"
            else _scalar_default(inner, _default_text(raw), nullable.lo <= nullable.hi)
        )
    else:
        type_ = "struct"
        fields_raw = raw.get("fields", structs.get(inner))
        assert fields_raw is not None, f"struct {inner} has no definition"
        sub = tuple(_field(f, structs) for f in fields_raw)
        default = None if _default_text(raw) == "null" else ()
    tag = raw.get("tag")
    return FieldSpec(
        name=raw["name"],
        key=snake(raw["name"]),
        type=type_,
        array=array,
        versions=VersionRange.parse(raw.get("versions")),
        nullable=nullable,
        tagged=VersionRange.parse(raw.get("taggedVersions")),
        tag=None if tag is None else int(tag),
        ignorable=bool(raw.get("ignorable", False)),
        default=default,
        fields=sub,
    )


def parse_spec(text: str) -> MessageSpec:
    """A message spec from the text of one of Kafka's JSON files (with // comments)."""
    raw = json.loads(_COMMENT_LINE.sub("", text))
    structs = {s["name"]: s["fields"] for s in raw.get("commonStructs", [])}
    return MessageSpec(
        name=raw["name"],
        api_key=raw.get("apiKey"),
        kind=raw["type"],
        valid=VersionRange.parse(raw.get("validVersions")),
        flexible=VersionRange.parse(raw.get("flexibleVersions")),
        fields=tuple(_field(f, structs) for f in raw["fields"]),
    )


@cache
def load_spec(name: str) -> MessageSpec:
    """The spec `specs/<name>.json` (e.g. "FetchRequest"), parsed once."""
    text = (
        resources.files("replog.kafka")
        .joinpath("specs")
        .joinpath(f"{name}.json")
        .read_text("utf-8")
    )
    return parse_spec(text)


@cache
def spec_names() -> tuple[str, ...]:
    folder = resources.files("replog.kafka").joinpath("specs")
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json")))


@cache
def api_specs() -> dict[int, tuple[MessageSpec, MessageSpec]]:
    """api key -> (request spec, response spec), for every API with specs in `specs/`."""
    out: dict[int, tuple[MessageSpec, MessageSpec]] = {}
    for name in spec_names():
        if name.endswith("Request"):
            request = load_spec(name)
            response = load_spec(name[: -len("Request")] + "Response")
            assert request.api_key is not None and request.api_key == response.api_key
            out[request.api_key] = (request, response)
    return out
