"""Kafka messages by Kafka's own specs: every API and version round-trips, and the bytes
are what kafka-python's independent codec (3.0.x, generated from the same specs) reads
back and writes again; hostile frames fail with the one typed decode error."""

from __future__ import annotations

import importlib
import itertools
import pkgutil
import uuid
from functools import cache
from typing import Any

import pytest

from replog.kafka import codec, protocol
from replog.kafka.errors import FrameTooLargeError, KafkaDecodeError, UnsupportedVersionError
from replog.kafka.protocol import ApiKey, RequestHeader
from replog.kafka.schema import FieldSpec, MessageSpec, api_specs, load_spec


def sample(
    fields: tuple[FieldSpec, ...], version: int, seed: itertools.count[int]
) -> dict[str, Any]:
    """A message with a distinct non-default value in every field `version` carries."""
    out: dict[str, Any] = {}
    for f in fields:
        if version in f.versions:
            values = [_value(f, version, seed) for _ in range(2 if f.array else 1)]
            out[f.key] = values if f.array else values[0]
    return out


def _value(f: FieldSpec, version: int, seed: itertools.count[int]) -> Any:
    if f.type == "struct":
        return sample(f.fields, version, seed)
    return _scalar(f.type, next(seed))


def _scalar(type_: str, n: int) -> Any:
    if type_ == "bool":
        return True
    if type_ in ("int8", "int16", "uint16", "int32", "int64"):
        return 1 + n % 100
    if type_ == "float64":
        return n + 0.5
    if type_ == "string":
        return f"s{n}"
    if type_ == "uuid":
        return uuid.UUID(int=n + 1)
    return b"b%d" % n  # bytes, records


def project(decoded: Any, message: Any) -> Any:
    """`decoded` restricted to the keys `message` has, at every depth (decoded messages
    also hold the fields the version does not carry, at their defaults)."""
    if isinstance(message, dict):
        return {k: project(decoded[k], v) for k, v in message.items()}
    if isinstance(message, list):
        return [project(d, m) for d, m in zip(decoded, message, strict=True)]
    return decoded


def all_cases() -> list[tuple[str, int]]:
    cases = []
    for request, response in api_specs().values():
        for v in range(request.valid.lo, request.valid.hi + 1):
            cases += [(request.name, v), (response.name, v)]
    return cases


@cache
def kafka_python_classes() -> dict[str, Any]:
    kp = pytest.importorskip("kafka.protocol")
    from kafka.protocol.api_message import ApiMessage

    found: dict[str, Any] = {}
    for m in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
        if ".old" in m.name or "generate" in m.name:
            continue
        mod = importlib.import_module(m.name)
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage:
                found[obj.name] = obj
    return found


def _their_bytes(theirs: Any, spec: MessageSpec) -> bytes:
    if spec.kind == "request":
        theirs.with_header(correlation_id=0)  # kafka-python re-encodes requests with one
    return bytes(theirs.encode())


@pytest.mark.parametrize(("name", "version"), all_cases())
def test_every_message_version_round_trips_with_every_field_set(name: str, version: int) -> None:
    spec = load_spec(name)
    message = sample(spec.fields, version, itertools.count())
    data = codec.encode_bytes(spec, version, message)
    decoded = codec.decode_bytes(spec, version, data)
    assert project(decoded, message) == message
    assert codec.encode_bytes(spec, version, decoded) == data


@pytest.mark.parametrize(("name", "version"), all_cases())
def test_kafka_python_reads_our_bytes_and_writes_the_same_bytes(name: str, version: int) -> None:
    spec = load_spec(name)
    message = sample(spec.fields, version, itertools.count())
    if name == "ApiVersionsResponse":
        message["error_code"] = 0  # an error makes clients read the body as v0 (below)
    data = codec.encode_bytes(spec, version, message)
    theirs = kafka_python_classes()[name].decode(data, version=version)
    assert _their_bytes(theirs, spec) == data


@pytest.mark.parametrize(("name", "version"), all_cases())
def test_default_messages_match_kafka_python_defaults(name: str, version: int) -> None:
    spec = load_spec(name)
    cls = kafka_python_classes()[name]
    data = codec.encode_bytes(spec, version, {})
    assert codec.encode_bytes(spec, version, codec.decode_bytes(spec, version, data)) == data
    assert _their_bytes(cls.decode(data, version=version), spec) == data


def _request_frame(api_key: int, version: int) -> tuple[bytes, dict[str, Any]]:
    request, _ = api_specs()[api_key]
    body = sample(request.fields, version, itertools.count())
    header = RequestHeader(api_key, version, 12345, "client-1")
    return protocol.encode_request(header, body), body


@pytest.mark.parametrize("api_key", list(ApiKey))
def test_request_frames_match_kafka_python_headers_and_decode_back(api_key: ApiKey) -> None:
    lo, hi = protocol.spec_versions(api_key)
    for version in (lo, hi):
        framed, body = _request_frame(api_key, version)
        request = protocol.decode_request(framed[4:])
        assert request.header == RequestHeader(api_key, version, 12345, "client-1")
        assert project(request.body, body) == body
        theirs = kafka_python_classes()[api_specs()[api_key][0].name].decode(
            framed[4:], version=version, header=True
        )
        theirs.with_header(correlation_id=12345, client_id="client-1")
        assert bytes(theirs.encode(version=version, header=True, framed=True)) == framed


def test_response_headers_are_v0_for_api_versions_and_v1_for_flexible_versions() -> None:
    header = RequestHeader(ApiKey.API_VERSIONS, 3, 9, None)
    framed = protocol.encode_response(header, {"error_code": 42})
    assert framed[4:8] == (9).to_bytes(4, "big") and framed[8:10] == b"\x00\x2a"  # no tags
    corr, body = protocol.decode_response(ApiKey.API_VERSIONS, 3, framed[4:])
    assert (corr, body["error_code"]) == (9, 42)
    meta = protocol.encode_response(RequestHeader(ApiKey.METADATA, 12, 9, None), {})
    assert meta[8] == 0  # the response header's (empty) tagged-field section
    assert protocol.decode_response(ApiKey.METADATA, 12, meta[4:])[0] == 9


def test_versions_outside_the_spec_and_unknown_api_keys_are_unsupported_version() -> None:
    framed, _ = _request_frame(ApiKey.PRODUCE, 9)
    bad = bytearray(framed[4:])
    bad[2:4] = (2).to_bytes(2, "big")  # Produce v2: removed in Kafka 4
    with pytest.raises(UnsupportedVersionError) as err:
        protocol.decode_request(bytes(bad))
    assert err.value.metadata == {"api_key": "0", "api_version": "2", "correlation_id": "12345"}
    bad[0:2] = (999).to_bytes(2, "big")
    with pytest.raises(UnsupportedVersionError):
        protocol.decode_request(bytes(bad))
    assert protocol.peek_header(bytes(bad)) == (999, 2, 12345)


@pytest.mark.parametrize("api_key", list(protocol.RECOMMENDED_VERSIONS))
def test_every_truncation_of_a_request_is_a_typed_decode_error(api_key: ApiKey) -> None:
    lo, hi = protocol.RECOMMENDED_VERSIONS[api_key]
    for version in (lo, hi):
        payload = _request_frame(api_key, version)[0][4:]
        for cut in range(len(payload)):
            with pytest.raises(KafkaDecodeError):
                protocol.decode_request(payload[:cut])
        with pytest.raises(KafkaDecodeError):
            protocol.decode_request(payload + b"\x00")  # trailing bytes


def test_lying_lengths_and_counts_are_refused_before_allocation() -> None:
    spec: MessageSpec = load_spec("MetadataRequest")
    # v4: topics is an int32-counted array; 2**31-1 topics in a 4-byte body
    with pytest.raises(KafkaDecodeError, match="array of 2147483647 elements"):
        codec.decode_bytes(spec, 4, b"\x7f\xff\xff\xff")
    # v12 (flexible): compact array count as a 5-byte unsigned varint
    with pytest.raises(KafkaDecodeError, match="array of"):
        codec.decode_bytes(spec, 12, b"\xff\xff\xff\xff\x07\x00\x00\x00")
    with pytest.raises(KafkaDecodeError, match="varint longer"):
        codec.decode_bytes(spec, 12, b"\xff\xff\xff\xff\xff\xff")
    produce = load_spec("ProduceRequest")
    # acks, timeout, one topic "t", one partition, records of 2**31-1 bytes
    body = b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x00\x10" + b"\x00\x00\x00\x01\x00\x01t"
    body += b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00" + b"\x7f\xff\xff\xff" + b"x" * 16
    with pytest.raises(KafkaDecodeError, match="needs 2147483647 bytes"):
        codec.decode_bytes(produce, 3, body)
    with pytest.raises(KafkaDecodeError, match="negative"):
        codec.decode_bytes(load_spec("HeartbeatRequest"), 0, b"\xff\xfe")


def test_frames_over_the_limit_or_negative_are_refused_before_the_body_arrives() -> None:
    decoder = protocol.FrameDecoder(frame_bytes_max=1024)
    assert decoder.feed(b"\x00\x00\x04\x00" + b"x" * 10) == []
    assert decoder.feed(b"x" * 1014) == [b"x" * 1024]
    with pytest.raises(FrameTooLargeError) as err:
        decoder.feed(b"\x7f\xff\xff\xff")  # a 2 GiB frame: nothing of it is buffered
    assert (err.value.frame_bytes, err.value.frame_bytes_max) == (2**31 - 1, 1024)
    with pytest.raises(FrameTooLargeError):
        protocol.FrameDecoder(1024).feed(b"\xff\xff\xff\xff")


def test_frame_decoder_splits_a_stream_fed_one_byte_at_a_time() -> None:
    frames = [protocol.frame(b"a" * n) for n in (0, 1, 300)]
    decoder = protocol.FrameDecoder(1024)
    out: list[bytes] = []
    for byte in b"".join(frames):
        out += decoder.feed(bytes([byte]))
    assert out == [b"", b"a", b"a" * 300] and decoder.buffered_bytes == 0


def test_a_field_the_version_cannot_carry_is_refused_on_encode() -> None:
    spec = load_spec("HeartbeatRequest")
    with pytest.raises(codec.UnencodableFieldError):
        codec.encode_bytes(spec, 2, {"group_instance_id": "x"})  # v3+
    assert codec.encode_bytes(spec, 2, {"group_instance_id": None}) == codec.encode_bytes(
        spec, 2, {}
    )


def test_tagged_fields_are_written_when_set_and_unknown_tags_are_skipped() -> None:
    spec = load_spec("ApiVersionsResponse")
    plain = codec.encode_bytes(spec, 3, {"error_code": 0, "api_keys": []})
    # error_code, compact array of 0 api keys, throttle_time_ms, no tagged fields
    assert plain == b"\x00\x00" + b"\x01" + b"\x00\x00\x00\x00" + b"\x00"
    epoch = codec.encode_bytes(spec, 3, {"finalized_features_epoch": 7})
    # one tagged field: tag 1 (FinalizedFeaturesEpoch), 8 bytes, int64 7
    assert epoch == plain[:-1] + b"\x01" + b"\x01\x08" + (7).to_bytes(8, "big")
    assert codec.decode_bytes(spec, 3, epoch)["finalized_features_epoch"] == 7
    assert codec.decode_bytes(spec, 3, plain)["finalized_features_epoch"] == -1  # default
    unknown = plain[:-1] + b"\x02" + b"\x01\x08" + (7).to_bytes(8, "big") + b"\x09\x01\xaa"
    assert codec.decode_bytes(spec, 3, unknown)["finalized_features_epoch"] == 7
    with pytest.raises(KafkaDecodeError, match="out of order"):
        codec.decode_bytes(spec, 3, plain[:-1] + b"\x02\x09\x00\x01\x00")
    with pytest.raises(KafkaDecodeError, match="trailing bytes"):
        codec.decode_bytes(spec, 3, plain[:-1] + b"\x01\x01\x09" + bytes(9))
    with pytest.raises(KafkaDecodeError, match="tagged fields in"):
        codec.decode_bytes(spec, 3, plain[:-1] + b"\x7f")


def test_an_unsupported_api_versions_request_is_answered_with_a_v0_body() -> None:
    framed = protocol.encode_api_versions_unsupported(5, {18: (0, 3), 3: (0, 12)})
    corr, body = protocol.decode_response(ApiKey.API_VERSIONS, 4, framed[4:])
    assert corr == 5 and body["error_code"] == 35
    assert [(k["api_key"], k["max_version"]) for k in body["api_keys"]] == [(3, 12), (18, 3)]
    theirs = kafka_python_classes()["ApiVersionsResponse"].decode(framed[8:], version=4)
    assert theirs.error_code == 35 and len(theirs.api_keys) == 2


def test_all_arrays_of_one_message_together_are_bounded_in_elements() -> None:
    spec = load_spec("FetchRequest")
    topics = [
        {"topic": f"t{t}", "partitions": [{"partition": p} for p in range(50)]} for t in range(4)
    ]
    data = codec.encode_bytes(spec, 12, {"topics": topics})
    assert len(codec.decode_bytes(spec, 12, data, elements_max=204)["topics"]) == 4
    with pytest.raises(KafkaDecodeError, match="message limit"):
        codec.decode_bytes(spec, 12, data, elements_max=203)
    framed, _ = _request_frame(ApiKey.FETCH, 12)
    with pytest.raises(KafkaDecodeError, match="message limit"):
        protocol.decode_request(framed[4:], elements_max=1)
    # the tagged fields' arrays count too (ApiVersionsResponse v3: SupportedFeatures, tag 0)
    api = load_spec("ApiVersionsResponse")
    features = [{"name": "f", "min_version": 0, "max_version": 1}] * 3
    data = codec.encode_bytes(api, 3, {"supported_features": features})
    assert len(codec.decode_bytes(api, 3, data, elements_max=3)["supported_features"]) == 3
    with pytest.raises(KafkaDecodeError, match="message limit"):
        codec.decode_bytes(api, 3, data, elements_max=2)
