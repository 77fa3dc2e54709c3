"""The record envelope's bytes (`replog.records`, docs/api.md): the golden envelopes never
change, a hand-built envelope decodes, and each kind of damage is named."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from replog import frames, records
from replog.errors import InvalidRecordError

GOLDEN = Path(__file__).parent.parent / "golden" / "records" / "envelopes-v1.json"


def _golden() -> list[dict[str, object]]:
    cases: list[dict[str, object]] = json.loads(GOLDEN.read_text())["envelopes"]
    return cases


@pytest.mark.parametrize("case", _golden(), ids=lambda c: str(c["description"]))
def test_golden_envelopes_encode_and_decode_byte_for_byte(case: dict[str, object]) -> None:
    value = None if case["value_hex"] is None else bytes.fromhex(str(case["value_hex"]))
    key = None if case["key_hex"] is None else bytes.fromhex(str(case["key_hex"]))
    head = [(str(n), bytes.fromhex(v)) for n, v in case["headers"]]  # type: ignore[attr-defined]
    ts = int(case["timestamp_ms"])  # type: ignore[call-overload]
    envelope = bytes.fromhex(str(case["envelope_hex"]))
    assert records.encode(value, key=key, headers=head, timestamp_ms=ts) == envelope
    assert records.decode(envelope, 3) == records.ConsumerRecord(3, value, key, tuple(head), ts)
    records.validate([envelope])


def test_an_envelope_built_from_the_documented_layout_decodes() -> None:
    key, value, name, hvalue = b"customer-42", b"payload", "trace", b"t-1"
    header = struct.pack(">H", len(name)) + name.encode() + struct.pack(">I", len(hvalue)) + hvalue
    envelope = (
        struct.pack(">BBqIHI", 1, 1, 1_764_064_800_000, len(key), 1, len(value))
        + key
        + header
        + value
    )
    got = records.decode(envelope)
    assert (got.key, got.value, got.headers, got.timestamp_ms) == (
        key,
        value,
        (("trace", b"t-1"),),
        1_764_064_800_000,
    )
    # The timestamp is at bytes 2-9 whatever the key and headers.
    assert struct.unpack_from(">q", envelope, records.TIMESTAMP_POSITION)[0] == 1_764_064_800_000


def test_a_null_value_is_not_an_empty_value() -> None:
    tombstone = records.encode(None, key=b"k", timestamp_ms=3)
    assert tombstone[1] == records.ATTR_KEY | records.ATTR_NULL_VALUE
    assert len(tombstone) == records.FIXED_BYTES + 1  # the key, no value bytes
    assert records.decode(tombstone, 9) == records.ConsumerRecord(9, None, b"k", (), 3)
    assert records.decode(records.encode(b"", key=b"k", timestamp_ms=3)).value == b""
    batch = records.encode_batch([records.Record(None, key=b"a"), b"x"], 5)
    assert records.decode_values(batch).values == [None, b"x"]
    assert records.validate(batch) == sum(map(len, batch))


def test_an_empty_key_is_not_an_absent_key() -> None:
    assert records.decode(records.encode(b"v", key=b"", timestamp_ms=0)).key == b""
    assert records.decode(records.encode(b"v", timestamp_ms=0)).key is None


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda e: b"\x02" + e[1:], "envelope version 2"),
        (lambda e: e[:1] + b"\x04" + e[2:], "reserved attribute bits"),
        (lambda e: e[:1] + b"\x02" + e[2:], "a null value with a value length"),
        (lambda e: e[:10] + struct.pack(">I", 1) + e[14:], "without the key attribute"),
        (lambda e: e[:16] + struct.pack(">I", 99) + e[20:], "a value of 99 bytes"),
        (lambda e: e[:5], "shorter than the 20-byte envelope head"),
    ],
)
def test_each_kind_of_damage_is_an_invalid_record_naming_it(damage: object, why: str) -> None:
    envelope = records.encode(b"value", timestamp_ms=5)
    with pytest.raises(InvalidRecordError, match=why) as raised:
        records.decode(damage(envelope), 41)  # type: ignore[operator]
    assert raised.value.reason == "INVALID_RECORD"
    assert raised.value.metadata["offset"] == "41"
    with pytest.raises(InvalidRecordError, match="record 1 of the batch") as batch:
        records.validate([envelope, damage(envelope)])  # type: ignore[operator]
    assert batch.value.metadata["index"] == "1"


@pytest.mark.parametrize("damage", [lambda e: b"\x02" + e[1:], lambda e: e[:5]])
def test_a_batch_of_equal_damaged_envelopes_names_its_first_record(damage: object) -> None:
    damaged = damage(records.encode(b"value", timestamp_ms=5))  # type: ignore[operator]
    with pytest.raises(InvalidRecordError, match="record 0 of the batch") as batch:
        records.validate([damaged] * 3)
    assert batch.value.metadata["index"] == "0"


def test_validate_answers_the_batch_size_equal_envelopes_or_not() -> None:
    equal = [records.encode(b"v" * 100, timestamp_ms=i) for i in range(50)]
    mixed = [*equal, records.encode(b"w", key=b"k", headers=[("h", b"x")], timestamp_ms=0)]
    assert records.validate(equal) == sum(map(len, equal)) == 50 * len(equal[0])
    assert records.validate(mixed) == sum(map(len, mixed))
    assert records.validate([]) == 0


def test_a_header_name_that_is_not_utf8_is_refused() -> None:
    envelope = bytearray(records.encode(b"v", headers=[("ab", b"")], timestamp_ms=0))
    envelope[22:24] = b"\xff\xfe"
    with pytest.raises(InvalidRecordError, match="not UTF-8"):
        records.decode(bytes(envelope))


def test_a_timestamp_outside_i64_is_refused_when_encoding() -> None:
    with pytest.raises(InvalidRecordError):
        records.encode(b"v", timestamp_ms=2**63)
    with pytest.raises(InvalidRecordError):
        records.encode_batch([records.Record(b"v", timestamp_ms=-(2**63) - 1)], 0)


def test_decode_frames_skips_control_records_and_keeps_offsets() -> None:
    envelopes = records.encode_batch([b"a", records.Record(b"b", key=b"k")], 9)
    buf = frames.encode(10, [b"marker"], control=True) + frames.encode(11, envelopes)
    decoded = records.decode_frames(buf)
    assert decoded.offsets == [11, 12]
    assert decoded.keys == [None, b"k"]
    assert decoded.timestamps == [9, 9]


def test_a_broken_envelope_in_frames_names_its_offset() -> None:
    buf = frames.encode(20, [records.encode(b"ok", timestamp_ms=1), b"not an envelope at all"])
    with pytest.raises(InvalidRecordError, match="offset 21"):
        records.decode_frames(buf)
