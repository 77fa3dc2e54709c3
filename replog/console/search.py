"""Record search on one partition: records whose key, value or a header holds a substring,
read from an offset or a time, within a bounded window.

    GET /topics/{topic}/search?partition=&offset=|time=&contains=&where=&scan=&decode=

The window starts at an offset (`earliest`, `latest` or a number) or at the first record
whose timestamp is at or after a time (ListOffsets by time, as the record browser does),
and ends at the first of: the high watermark, `scan` records examined, `SCAN_BYTES_MAX`
bytes examined (keys, values and headers), `MATCHES_MAX` matches, or `SCAN_TIME_S` spent.
The page says which stopped it and links to the next window (its `next_offset`). Matching
is on bytes: the text typed, UTF-8 encoded (or, written `0x...`, the bytes of its hex).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from replog.client import Client
from replog.console import display, forms
from replog.console.display import Meta, ShownRecord
from replog.console.records_pages import position_of
from replog.console.state import console_of

WHERE = ("any", "key", "value", "headers")
SCAN_RECORDS_DEFAULT = 10_000
SCAN_RECORDS_MAX = 100_000
SCAN_BYTES_MAX = 64 * 1024 * 1024
SCAN_TIME_S = 10.0
MATCHES_MAX = 50
FETCH_BYTES_MAX = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Found:
    rows: list[ShownRecord]
    start: int  # the window's first offset
    next_offset: int  # the first offset not examined
    latest: int  # the high watermark when the search began
    scanned_records: int
    scanned_bytes: int
    stopped: str  # why the search stopped, for people


def needle_of(text: str) -> bytes:
    """What to look for: the text's UTF-8 bytes, or the bytes of `0x<hex>`."""
    if text.startswith("0x") and len(text) > 2:
        try:
            return bytes.fromhex(text[2:])
        except ValueError:
            raise forms.FormError("0x... must be followed by hex digits") from None
    return text.encode()


def matches(needle: bytes, where: str, value: bytes | None, m: Meta) -> bool:
    """Whether the record holds `needle` where asked (an empty needle matches every one)."""
    if where in ("any", "value") and value is not None and needle in value:
        return True
    if m is None:
        return False
    key, headers, _ts = m
    if where in ("any", "key") and key is not None and needle in key:
        return True
    return where in ("any", "headers") and any(
        needle in name.encode() or needle in v for name, v in headers
    )


def _size(value: bytes | None, m: Meta) -> int:
    n = 0 if value is None else len(value)
    if m is not None:
        key, headers, _ts = m
        n += (0 if key is None else len(key)) + sum(len(k) + len(v) for k, v in headers)
    return n


def first_offset(
    client: Client, topic: str, partition: int, start: int | str, at_ms: int | None
) -> tuple[int, int, int]:
    """(the window's first offset, log start, high watermark)."""
    (offs,) = client.list_offsets(topic, [partition])
    if at_ms is not None:
        offset = client.offsets_for_times(topic, {partition: at_ms})[partition]
    elif start == "earliest":
        offset = offs.earliest
    elif start == "latest":
        offset = offs.latest
    else:
        assert isinstance(start, int)
        offset = start
    return min(max(offset, offs.earliest), offs.latest), offs.earliest, offs.latest


def search(
    client: Client,
    topic: str,
    partition: int,
    offset: int,
    latest: int,
    needle: bytes,
    where: str,
    scan_records_max: int,
    decoding: str,
) -> Found:
    """The matches of `needle` in the window from `offset` (see the module's docstring)."""
    deadline = time.monotonic() + SCAN_TIME_S
    rows: list[ShownRecord] = []
    start, records, scanned = offset, 0, 0
    stopped = ""
    while not stopped:
        if offset >= latest:
            stopped = "reached the high watermark"
            break
        if time.monotonic() > deadline:
            stopped = f"searched for {SCAN_TIME_S:g} s"
            break
        res = client.fetch(topic, partition, offset, max_bytes=FETCH_BYTES_MAX)
        for at, value, m in display.record_rows(res.records):
            if records >= scan_records_max:
                stopped = f"examined {scan_records_max} records"
            elif scanned >= SCAN_BYTES_MAX:
                stopped = f"examined {display.size(SCAN_BYTES_MAX)}"
            elif len(rows) >= MATCHES_MAX:
                stopped = f"found {MATCHES_MAX} matches"
            if stopped:
                break
            records += 1
            scanned += _size(value, m)
            if matches(needle, where, value, m):
                rows.append(display.shown_record(int(at), value, m, decoding))
            offset = int(at) + 1
        else:
            if res.next_offset <= offset and not len(res.records):
                stopped = "the partition returned nothing more"
            offset = max(offset, res.next_offset)
    return Found(rows, start, min(offset, latest), latest, records, scanned, stopped)


async def search_page(request: Request) -> Response:
    console = console_of(request)
    q = request.query_params
    contains = forms.search(q.get("contains"))
    where = forms.choice(q.get("where"), "where", WHERE, "any")
    scan = forms.integer(
        q.get("scan"), "records to examine", 1, SCAN_RECORDS_MAX, SCAN_RECORDS_DEFAULT
    )
    needle = needle_of(contains)
    at = await position_of(request, console)
    client = console.client
    found: Found | None = None
    if contains:
        first, _earliest, latest = await console.call(
            first_offset, client, at.topic, at.partition, at.start, at.at_ms
        )
        found = await console.call(
            search, client, at.topic, at.partition, first, latest, needle, where, scan, at.decoding
        )
    context = {
        **at.context,
        "contains": contains,
        "where": where,
        "wheres": WHERE,
        "scan": scan,
        "found": found,
    }
    return console.render(request, "search.html", context)
