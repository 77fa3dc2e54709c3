"""The record browser (a page of records from an offset or a time, and "follow live" over
Server-Sent Events) and the form that produces a test record (as the signed-in user).

Live streams: `GET .../records/live` answers `text/event-stream`; each `records` event's
data is JSON `{"html": rows, "next": offset}` and its id is the next offset, so a browser
that reconnects (EventSource does by itself) resumes where it was (`Last-Event-ID`). A
stream holds no thread while it waits: each step is one `Fetch` long poll of at most
`LIVE_WAIT_MS` in the thread pool. At most `follow_streams_max` streams at once (one more
gets a `problem` event) and each ends after `follow_duration_s` (an `end` event).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from replog.client import Client, partition_for_key
from replog.client.formats import ENVELOPE
from replog.console import admin_pages, display, forms
from replog.console.display import ShownRecord
from replog.console.sessions import Session
from replog.console.state import Console, console_of, text_field
from replog.errors import ReplogError
from replog.records import Record

FETCHES_MAX = 20  # Fetch calls for one page of records
FETCH_BYTES_MAX = 1024 * 1024
LIVE_WAIT_MS = 1000
LIVE_RECORDS_MAX = 500  # records per live event (the rest come in the next one)


@dataclass(frozen=True, slots=True)
class Browse:
    rows: list[ShownRecord]
    earliest: int
    latest: int  # HW: the next offset to be committed
    start: int  # the first offset asked
    next_offset: int  # where the next page starts
    note: str


def browse(
    client: Client,
    topic: str,
    partition: int,
    start: int | str,
    at_ms: int | None,
    limit: int,
    decoding: str,
) -> Browse:
    """Up to `limit` committed records of `topic`/`partition` from `start`, or from the
    first one whose timestamp is at or after `at_ms` (ListOffsets by time): a bounded
    number of Fetch calls."""
    (offs,) = client.list_offsets(topic, [partition])
    note = ""
    if at_ms is not None:
        offset = client.offsets_for_times(topic, {partition: at_ms})[partition]
        if offset >= offs.latest:
            note = f"no record at or after {display.timestamp(at_ms)} yet"
    elif start == "earliest":
        offset = offs.earliest
    elif start == "latest":
        offset = max(offs.earliest, offs.latest - limit)
    else:
        assert isinstance(start, int)
        offset = start
        if offset < offs.earliest:
            note = f"offset {offset} is before the log start: showing from {offs.earliest}"
            offset = offs.earliest
        elif offset > offs.latest:
            note = f"offset {offset} is past the high watermark: nothing committed there yet"
            offset = offs.latest
    first = offset
    rows: list[ShownRecord] = []
    for _ in range(FETCHES_MAX):
        if offset >= offs.latest or len(rows) >= limit:
            break
        res = client.fetch(topic, partition, offset, max_bytes=FETCH_BYTES_MAX)
        got = list(display.shown_records(res.records, decoding, limit - len(rows)))
        rows.extend(got)
        full = len(rows) >= limit and len(got) < len(res.records)
        if res.next_offset <= offset:
            break
        offset = got[-1].offset + 1 if full else res.next_offset
    if not rows and not note and first >= offs.latest:
        note = "no records from here yet: follow live to see new ones"
    return Browse(rows, offs.earliest, offs.latest, first, offset, note)


@dataclass(frozen=True, slots=True)
class Position:
    """Where a records page reads (its path's topic; its query's `partition`, `offset`,
    `time` and `decode`): the records browser's and the search's common part."""

    topic: str
    partition: int
    start: int | str  # an offset, "earliest" or "latest"
    at_ms: int | None  # a time instead of `start`
    decoding: str
    context: dict[str, Any]  # what the page shows of it (with the topic's format, partitions)


async def position_of(request: Request, console: Console) -> Position:
    name = forms.name(request.path_params["topic"], "topic")
    q = request.query_params
    partition = forms.integer(q.get("partition"), "partition", 0, 2**31 - 1, default=0)
    start = forms.start_offset(q.get("offset"))
    at_ms = forms.time_ms(q.get("time"))
    decoding = forms.choice(q.get("decode"), "decode", display.DECODINGS, "text")
    fmt = await console.call(console.client.topic_format, name)
    partitions = await console.call(console.client.partition_count, name)
    context = {
        "topic": name,
        "envelope": fmt == ENVELOPE,
        "partition": partition,
        "partitions": partitions,
        "offset_text": q.get("offset") or "earliest",
        "time_text": q.get("time") or "",
        "decode": decoding,
        "decodings": display.DECODINGS,
    }
    return Position(name, partition, start, at_ms, decoding, context)


async def records_page(request: Request) -> Response:
    console = console_of(request)
    at = await position_of(request, console)
    q = request.query_params
    limit = forms.integer(q.get("limit"), "limit", 1, console.config.records_max, default=50)
    result = await console.call(
        browse, console.client, at.topic, at.partition, at.start, at.at_ms, limit, at.decoding
    )
    context = {**at.context, "limit": limit, "result": result}
    return console.render(request, "records.html", context)


def _event(kind: str, data: dict[str, Any], event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data)}\n\n"


async def live_records(request: Request) -> Response:
    console = console_of(request)
    name = forms.name(request.path_params["topic"], "topic")
    q = request.query_params
    partition = forms.integer(q.get("partition"), "partition", 0, 2**31 - 1, default=0)
    resume = request.headers.get("last-event-id")
    offset = forms.integer(resume or q.get("offset"), "offset", 0, forms.OFFSET_MAX, default=0)
    decoding = forms.choice(q.get("decode"), "decode", display.DECODINGS, "text")
    envelope = await console.call(console.client.topic_format, name) == ENVELOPE
    return StreamingResponse(
        _live_events(console, request, name, partition, offset, decoding, envelope),
        media_type="text/event-stream",
    )


async def _live_events(
    console: Console,
    request: Request,
    topic: str,
    partition: int,
    offset: int,
    decoding: str,
    envelope: bool,
) -> AsyncIterator[str]:
    config = console.config
    if console.follow_streams >= config.follow_streams_max:
        yield _event("problem", {"message": "too many live streams open: try again later"})
        return
    console.follow_streams += 1
    try:
        rows_template = console.templates.get_template("_record_rows.html")
        deadline = time.monotonic() + config.follow_duration_s
        yield "retry: 2000\n\n"
        while time.monotonic() < deadline and not await request.is_disconnected():
            res = await console.call(
                console.client.fetch,
                topic,
                partition,
                offset,
                max_bytes=FETCH_BYTES_MAX,
                max_wait_ms=LIVE_WAIT_MS,
            )
            rows = list(display.shown_records(res.records, decoding, LIVE_RECORDS_MAX))
            if rows:
                offset = rows[-1].offset + 1 if len(rows) < len(res.records) else res.next_offset
                html = rows_template.render(rows=rows, envelope=envelope)
                yield _event("records", {"html": html, "next": offset}, offset)
            else:
                offset = max(offset, res.next_offset)
                yield ": waiting\n\n"  # a comment: finds a browser that went away
        yield _event("end", {"message": "the live view stopped after a while: resume it"})
    except ReplogError as err:
        yield _event("problem", {"message": f"{err.reason}: {err.message}"})
    finally:
        console.follow_streams -= 1


async def produce_page(request: Request) -> Response:
    """GET: the form; POST: one record appended by the signed-in user (their token: the
    nodes' ACLs, quotas and audit apply to their principal), with an `audit.console` line."""
    console = console_of(request)
    name = forms.name(request.path_params["topic"], "topic")
    session = None
    if request.method == "POST":
        form = await console.posted_form(request)
        session = admin_pages.signed_in(request)  # before anything is sent
    client = console.client  # the topic's shape, read as every page reads
    fmt = await console.call(client.topic_format, name)
    partitions = await console.call(client.partition_count, name)
    context: dict[str, Any] = {
        "topic": name,
        "envelope": fmt == ENVELOPE,
        "partitions": partitions,
        "fields": {"partition": "", "key": "", "headers": "", "value": "", "acks": "all"},
        "result": None,
        "error": "",
    }
    if session is not None:
        fields = {k: text_field(form, k) or "" for k in context["fields"]}
        context["fields"] = fields
        try:
            context["result"] = await _produce(request, session, name, fields, partitions, fmt)
        except (forms.FormError, ReplogError) as err:
            message = err.message if isinstance(err, forms.FormError) else _said(err)
            context["error"] = message
            return console.render(request, "produce.html", context, 400)
    return console.render(request, "produce.html", context)


def _said(err: ReplogError) -> str:
    return f"{err.reason}: {err.message}"


async def _produce(
    request: Request,
    session: Session,
    topic: str,
    fields: dict[str, str],
    partitions: int,
    fmt: str,
) -> dict[str, int]:
    partition = forms.optional_integer(fields["partition"], "partition", 0, partitions - 1)
    key = fields["key"].encode() if fields["key"] else None
    headers = forms.headers(fields["headers"])
    value = forms.value_bytes(fields["value"])
    acks = forms.choice(fields["acks"], "acks", ("all", "leader"), "all")
    if partition is None:
        partition = partition_for_key(key, partitions) if key is not None else 0
    if fmt == ENVELOPE:
        record: bytes | Record = Record(value, key=key, headers=headers)
    elif headers:
        raise forms.FormError(
            f"topic {topic} is raw: its records hold a value only (headers need an envelope topic)"
        )
    else:
        record = value  # a key only chooses the partition on a raw topic
    assert session.client is not None
    result = await admin_pages.change(
        request,
        session,
        "produce",
        f"topic:{topic}/{partition}",
        session.client.append,
        topic,
        partition,
        [record],
        acks=acks,
    )
    return {"partition": partition, "offset": result.base_offset}
