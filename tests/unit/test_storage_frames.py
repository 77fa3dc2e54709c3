"""The record frame codec: `[offset u64 BE][length u32 BE, bit 31 = control][value]`."""

from __future__ import annotations

import struct

import pytest

from replog import frames


def seed_frame(offset: int, value: bytes, control: bool = False) -> bytes:
    length = len(value) | (0x8000_0000 if control else 0)
    return struct.pack(">QI", offset, length) + value


def test_encode_writes_the_seed_layout_byte_for_byte() -> None:
    values = [b"a", b"", b"hello"]
    assert frames.encode(7, values) == b"".join(seed_frame(7 + i, v) for i, v in enumerate(values))


def test_control_records_set_the_top_bit_of_the_length() -> None:
    assert frames.encode(3, [b"xy"], control=True) == seed_frame(3, b"xy", control=True)
    decoded = frames.decode(frames.encode(3, [b"xy"], control=True))
    assert decoded.control == [True]
    assert decoded.values == [b"xy"]


@pytest.mark.parametrize(
    "values",
    [[b"x" * 10] * 50, [bytes([i]) * i for i in range(40)], [b""] * 5, [b"v"]],
    ids=["uniform", "mixed", "empty-values", "single"],
)
def test_decode_returns_what_encode_was_given(values: list[bytes]) -> None:
    buf = frames.encode(100, values)
    decoded = frames.decode(buf)
    assert decoded.offsets == list(range(100, 100 + len(values)))
    assert decoded.values == values
    assert decoded.control is None
    assert frames.scan(buf, 100) == frames.frame_ends(values)


def test_data_records_drop_control_records_and_keep_offsets() -> None:
    buf = frames.encode(0, [b"a"]) + frames.encode(1, [b"ctl"], control=True)
    buf += frames.encode(2, [b"b"])
    decoded = frames.decode(buf)
    assert [r.offset for r in decoded.records()] == [0, 2]
    assert decoded.data_records().values == [b"a", b"b"]
    assert len(decoded.records(include_control=True)) == 3


def test_scan_rejects_a_run_that_does_not_start_where_expected() -> None:
    with pytest.raises(frames.FrameError, match="expected 5"):
        frames.scan(frames.encode(4, [b"a", b"b"]), 5)


def test_scan_rejects_a_gap_in_offsets_even_for_equal_sizes() -> None:
    buf = frames.encode(0, [b"aa"]) + frames.encode(2, [b"bb"])
    with pytest.raises(frames.FrameError) as err:
        frames.scan(buf, 0)
    assert err.value.position == 14


@pytest.mark.parametrize("cut", [1, 11, 12, 13])
def test_scan_and_decode_reject_a_cut_frame(cut: int) -> None:
    buf = frames.encode(0, [b"abc", b"def"])
    with pytest.raises(frames.FrameError):
        frames.scan(buf[:-cut], 0)
    with pytest.raises(frames.FrameError):
        frames.decode(buf[:-cut])


def test_empty_input_is_an_empty_run() -> None:
    assert frames.scan(b"") == []
    assert len(frames.decode(b"")) == 0
