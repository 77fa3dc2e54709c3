"""`replog consume`'s default output straight from frames (replog.cli.lines, pure): it
prints what the decoder's path (decode, then render.py's text) prints, or declines."""

from __future__ import annotations

import bisect

from hypothesis import given, settings
from hypothesis import strategies as st

from replog import frames, records
from replog.cli.lines import Lines, text_lines
from replog.cli.render import Rows, renderer
from replog.client.formats import decode
from replog.records import Record

TEXT = renderer("text", "t", None)


def envelopes(base: int, values: list[bytes | Record]) -> bytes:
    return frames.encode(base, records.encode_batch(values, 1_000))


def decoder_text(buf: bytes, envelope: bool, end: int | None) -> bytes:
    batch = decode(buf, envelope)
    values, _ = Rows.split_nulls(batch.values)
    cut = len(batch.offsets) if end is None else bisect.bisect_left(batch.offsets, end)
    return TEXT(Rows(0, batch.offsets[:cut], values[:cut]))


def test_runs_of_plain_envelopes_print_as_the_decoder_prints_them() -> None:
    buf = (
        envelopes(0, [b"%03d" % i for i in range(40)])
        + frames.encode(40, [b"marker"], control=True)
        + envelopes(41, [b"longer %d" % i for i in range(20, 60)])
    )
    lines = text_lines(buf, True, None)
    assert lines is not None
    assert lines.blob == decoder_text(buf, True, None)
    assert lines.runs == ((40, 4), (40, 10))
    assert len(lines) == 80
    assert lines.value_bytes() == 40 * 3 + 40 * 9
    cut = text_lines(buf, True, 50)  # below offset 50: 40 + 9 records
    assert cut is not None and cut.blob == decoder_text(buf, True, 50) and len(cut) == 49
    assert text_lines(buf, True, 0) == Lines(b"", ())


def test_raw_frames_print_their_values() -> None:
    buf = frames.encode(7, [b"%05d" % i for i in range(100)])
    lines = text_lines(buf, False, None)
    assert lines is not None and lines.blob == decoder_text(buf, False, None)


def test_head_keeps_the_first_lines_across_runs() -> None:
    lines = Lines(b"a\nb\nccc\nddd\n", ((2, 2), (2, 4)))
    assert lines.head(3) == Lines(b"a\nb\nccc\n", ((2, 2), (1, 4)))
    assert lines.head(1) == Lines(b"a\n", ((1, 2),))
    assert lines.head(9) is lines
    assert lines.head(0) == Lines(b"", ())


def test_declines_what_only_the_decoder_prints_right() -> None:
    plain = [b"v%02d" % i for i in range(30)]
    keyed: list[bytes | Record] = [Record(v, key=b"k") for v in plain]
    headed: list[bytes | Record] = [Record(v, headers=(("h", b"1"),)) for v in plain]
    tombstone: list[bytes | Record] = [*plain[:29], Record(None)]
    for batch in (keyed, headed, tombstone):
        assert text_lines(envelopes(0, batch), True, None) is None
    assert text_lines(envelopes(0, [b"\xff\xfe"] * 30), True, None) is None  # not UTF-8
    varying = [b"x" * (i % 3) for i in range(60)]  # runs of one: the decoder is quicker
    assert text_lines(envelopes(0, list(varying)), True, None) is None


@settings(max_examples=60, deadline=None)
@given(
    runs=st.lists(
        st.tuples(st.integers(1, 40), st.binary(max_size=6), st.booleans()),
        min_size=1,
        max_size=4,
    ),
    envelope=st.booleans(),
    end=st.none() | st.integers(0, 200),
)
def test_prints_as_the_decoder_or_declines(
    runs: list[tuple[int, bytes, bool]], envelope: bool, end: int | None
) -> None:
    buf = b""
    offset = 0
    for count, value, keyed in runs:
        if envelope:
            batch: list[bytes | Record] = [
                Record(value, key=b"k") if keyed else value for _ in range(count)
            ]
            buf += envelopes(offset, batch)
        else:
            buf += frames.encode(offset, [value] * count)
        offset += count
    lines = text_lines(buf, envelope, end)
    if lines is not None:
        assert lines.blob == decoder_text(buf, envelope, end)
        below = offset if end is None else min(end, offset)
        assert len(lines) == below  # (a value may hold newlines: they are not counted)
