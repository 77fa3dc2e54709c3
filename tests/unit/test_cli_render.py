"""`replog consume`'s printing (replog.cli.render, pure): each format turns a batch into the
bytes a user sees, kcat's format letters included."""

from __future__ import annotations

import json

import pytest

from replog.cli.render import FormatError, Rows, compile_format, renderer

RAW = Rows(2, [10, 11], [b"a", b"bc"])
ENVELOPES = Rows(
    1,
    [5, 6],
    [b"v1", b"v%2"],
    [b"k1", None],
    [(("h", b"1"), ("i", b"2")), ()],
    [1000, 2000],
)


def test_text_prints_each_value_on_its_line_and_replaces_invalid_utf8() -> None:
    render = renderer("text", "t", None)
    assert render(RAW) == b"a\nbc\n"
    assert render(Rows(0, [1], [b"\xff"])) == "\ufffd\n".encode()
    assert render(Rows(0, [], [])) == b""


def test_key_delimiter_prints_the_key_empty_when_there_is_none() -> None:
    assert renderer("text", "t", b"%:")(ENVELOPES) == b"k1%:v1\n%:v%2\n"
    assert renderer("text", "t", b"=")(RAW) == b"=a\n=bc\n"
    assert renderer("hex", "t", b" ")(ENVELOPES) == b"6b31 7631\n 762532\n"


def test_hex_and_json_formats() -> None:
    assert renderer("hex", "t", None)(RAW) == b"61\n6263\n"
    rows = [json.loads(line) for line in renderer("json", "t", None)(ENVELOPES).splitlines()]
    assert rows == [
        {"partition": 1, "offset": 5, "value": "v1", "key": "k1", "timestamp_ms": 1000,
         "headers": [{"name": "h", "value": "1"}, {"name": "i", "value": "2"}]},
        {"partition": 1, "offset": 6, "value": "v%2", "timestamp_ms": 2000},
    ]  # fmt: skip
    raw = [json.loads(line) for line in renderer("json", "t", None)(RAW).splitlines()]
    assert raw[0] == {"partition": 2, "offset": 10, "value": "a"}


def test_format_string_letters_on_envelopes_and_raw_records() -> None:
    fmt = "%t|%p|%o|%k|%K|%s|%S|%T|%h|%%\\n"
    assert renderer(fmt, "top%ic", None)(ENVELOPES) == (
        b"top%ic|1|5|k1|2|v1|2|1000|h=1,i=2|%\ntop%ic|1|6||-1|v%2|3|2000||%\n"
    )
    assert renderer(fmt, "t", None)(RAW) == b"t|2|10||-1|a|1|-1||%\nt|2|11||-1|bc|2|-1||%\n"
    assert renderer("%s\\t\\r\\\\\\0", "t", None)(RAW) == b"a\t\r\\\0bc\t\r\\\0"
    assert renderer("-\\n", "t", None)(RAW) == b"-\n-\n"  # no field: a line per record


@pytest.mark.parametrize(
    ("fmt", "why"),
    [("%z", "unknown format letter %z"), ("%s%", "lone '%'"), ("\\q", "unknown escape")],
)
def test_a_bad_format_string_is_refused_with_the_reason(fmt: str, why: str) -> None:
    with pytest.raises(FormatError, match=why):
        compile_format(fmt, "t")


def test_head_keeps_the_first_records_of_every_column() -> None:
    head = ENVELOPES.head(1)
    assert (head.offsets, head.values, head.keys, head.timestamps) == (
        [5],
        [b"v1"],
        [b"k1"],
        [1000],
    )
    assert RAW.head(5) is RAW
