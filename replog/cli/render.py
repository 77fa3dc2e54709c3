"""How `replog consume` prints records: one bytes blob per fetched batch (pure, no I/O).

Printing was the CLI's bottleneck when each record went through `print` and an f-string;
here a batch becomes one `bytes` with a C-level join or one `%`-template per record in a
list comprehension, written to stdout's binary buffer in one call.

Formats (`--format`, `-f`):
    text   each value, a newline after it (invalid UTF-8 replaced by U+FFFD, as before);
           with `-K DELIM`: key, DELIM, value
    hex    each value in hex (with `-K DELIM`: key in hex, DELIM, value in hex)
    json   one JSON object a line: partition, offset, value (or value_base64), and on an
           envelope topic key (key_base64), timestamp_ms, headers [{name, value}]
    a string with `%` letters (kcat's), e.g. '%t %p %o %k %s\\n'; raw bytes, no newline
    added:
        %t topic   %p partition   %o offset   %k key (empty: none)   %K key length (-1: none)
        %s value   %S value length   %T timestamp, ms since the epoch (-1: a raw topic's)
        %h headers as name=value,name=value   %%  a percent sign
        escapes \\n \\t \\r \\\\ and \\0
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from replog.records import Header

NAMED_FORMATS = ("text", "hex", "json")
LETTERS = "tpokKsSTh"
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", "0": b"\0"}


class FormatError(ValueError):
    """A format string that cannot be compiled (an unknown % letter, a dangling \\)."""


@dataclass(frozen=True, slots=True)
class Rows:
    """Columns of one partition's records; keys, headers and timestamps are None on a raw
    topic's records. A null value (a tombstone) is b"" in `values` and its index is in
    `nulls` (so the usual batch, without any, joins its values as they are): text prints an
    empty line, json `"value": null`, `%S` -1 (kcat's NULL length)."""

    partition: int
    offsets: Sequence[int]
    values: Sequence[bytes]
    keys: Sequence[bytes | None] | None = None
    headers: Sequence[tuple[Header, ...]] | None = None
    timestamps: Sequence[int] | None = None
    nulls: tuple[int, ...] = ()

    @staticmethod
    def split_nulls(values: Sequence[bytes | None]) -> tuple[Sequence[bytes], tuple[int, ...]]:
        """(values with b"" for each None, the indices of the Nones)."""
        if None not in values:
            return values, ()  # type: ignore[return-value]
        nulls = tuple(i for i, v in enumerate(values) if v is None)
        return [b"" if v is None else v for v in values], nulls

    def __len__(self) -> int:
        return len(self.offsets)

    def head(self, count: int) -> Rows:
        """The first `count` records."""
        if count >= len(self.offsets):
            return self
        cut = slice(0, count)
        return Rows(
            self.partition,
            self.offsets[cut],
            self.values[cut],
            None if self.keys is None else self.keys[cut],
            None if self.headers is None else self.headers[cut],
            None if self.timestamps is None else self.timestamps[cut],
            tuple(i for i in self.nulls if i < count),
        )


Render = Callable[[Rows], bytes]


def renderer(fmt: str, topic: str, key_delimiter: bytes | None) -> Render:
    """The function that turns a batch into the bytes to print."""
    if fmt == "text":
        return (
            _text
            if key_delimiter is None
            else _template_renderer(b"%b" + _lit(key_delimiter) + b"%b\n", "ks", topic)
        )
    if fmt == "hex":
        return _hex if key_delimiter is None else _keyed_hex(key_delimiter)
    if fmt == "json":
        return _json
    template, fields = compile_format(fmt, topic)
    return _template_renderer(template, fields, topic)


def compile_format(fmt: str, topic: str) -> tuple[bytes, str]:
    """A kcat format string -> (a bytes %-template, the letters of its fields in order).
    The topic is constant, so it is written into the template."""
    out = bytearray()
    fields = []
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c in "%\\":
            if i + 1 == len(fmt):
                raise FormatError(f"format string ends with a lone {c!r}")
            nxt = fmt[i + 1]
            i += 2
            if c == "\\":
                if nxt not in _ESCAPES:
                    raise FormatError(f"unknown escape \\{nxt} (known: \\n \\t \\r \\\\ \\0)")
                out += _lit(_ESCAPES[nxt])
            elif nxt == "%":
                out += b"%%"
            elif nxt == "t":
                out += _lit(topic.encode())
            elif nxt in LETTERS:
                out += b"%d" if nxt in "opKST" else b"%b"
                fields.append(nxt)
            else:
                raise FormatError(f"unknown format letter %{nxt} (known: %{' %'.join(LETTERS)})")
            continue
        out += _lit(c.encode())
        i += 1
    return bytes(out), "".join(fields)


def _lit(data: bytes) -> bytes:
    return data.replace(b"%", b"%%")


def _text(rows: Rows) -> bytes:
    blob = b"\n".join(rows.values) + b"\n" if len(rows) else b""
    return blob if utf8(blob) else blob.decode(errors="replace").encode()


def utf8(blob: bytes) -> bool:
    """Whether `blob` is valid UTF-8 (ASCII, the common case, checked without a str)."""
    if blob.isascii():
        return True
    try:
        blob.decode()
    except UnicodeDecodeError:
        return False
    return True


def _hex(rows: Rows) -> bytes:
    if not len(rows):
        return b""
    return ("\n".join(map(bytes.hex, rows.values)) + "\n").encode()


def _keyed_hex(delimiter: bytes) -> Render:
    delim = delimiter.decode(errors="replace")

    def render(rows: Rows) -> bytes:
        keys = rows.keys if rows.keys is not None else [None] * len(rows)
        lines = [
            (k or b"").hex() + delim + v.hex() + "\n"
            for k, v in zip(keys, rows.values, strict=True)
        ]
        return "".join(lines).encode()

    return render


def _json(rows: Rows) -> bytes:
    lines = []
    envelope = rows.keys is not None
    nulls = set(rows.nulls)
    for i, (offset, value) in enumerate(zip(rows.offsets, rows.values, strict=True)):
        body: dict[str, object] = {"partition": rows.partition, "offset": offset}
        if i in nulls:
            body["value"] = None  # a tombstone
        else:
            _text_or_base64(body, "value", value)
        if envelope:
            assert rows.keys is not None and rows.headers is not None
            assert rows.timestamps is not None
            key = rows.keys[i]
            if key is not None:
                _text_or_base64(body, "key", key)
            body["timestamp_ms"] = rows.timestamps[i]
            shown = []
            for name, hvalue in rows.headers[i]:
                header: dict[str, object] = {"name": name}
                _text_or_base64(header, "value", hvalue)
                shown.append(header)
            if shown:
                body["headers"] = shown
        lines.append(json.dumps(body))
    return ("\n".join(lines) + "\n").encode() if lines else b""


def _text_or_base64(body: dict[str, object], name: str, data: bytes) -> None:
    try:
        body[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        body[f"{name}_base64"] = base64.b64encode(data).decode()


def _headers_text(headers: tuple[Header, ...]) -> bytes:
    return b",".join(name.encode() + b"=" + value for name, value in headers)


def _column(letter: str, rows: Rows) -> Sequence[object]:
    n = len(rows)
    if letter == "p":
        return [rows.partition] * n
    if letter == "o":
        return rows.offsets
    if letter == "s":
        return rows.values
    if letter == "S":
        sizes = list(map(len, rows.values))
        for i in rows.nulls:
            sizes[i] = -1  # kcat's length of a NULL value
        return sizes
    if letter == "k":
        return [b""] * n if rows.keys is None else [k or b"" for k in rows.keys]
    if letter == "K":
        if rows.keys is None:
            return [-1] * n
        return [-1 if k is None else len(k) for k in rows.keys]
    if letter == "T":
        return [-1] * n if rows.timestamps is None else rows.timestamps
    assert letter == "h", letter
    return [b""] * n if rows.headers is None else list(map(_headers_text, rows.headers))


def _template_renderer(template: bytes, fields: str, topic: str) -> Render:
    del topic  # written into the template already

    def render(rows: Rows) -> bytes:
        if not len(rows):
            return b""
        if fields == "s":  # the common '%s\n': one template per value
            return b"".join([template % (v,) for v in rows.values])
        columns = [_column(letter, rows) for letter in fields]
        if not columns:
            return template.replace(b"%%", b"%") * len(rows)
        return b"".join([template % row for row in zip(*columns, strict=True)])

    return render
