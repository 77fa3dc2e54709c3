"""Record search on one partition: records whose key, value or a header holds a substring,
read from an offset or a time, within a bounded window, as a background job of the browser
session with progress and cancel (search_jobs.py).

    GET  /topics/{topic}/search?partition=&offset=|time=&contains=&where=&scan=&decode=
         starts a search (the form, then its progress; its results once it ends)
    GET  /topics/{topic}/search?job=ID          the page of a search of this session
    GET  /topics/{topic}/search/jobs/{id}       its progress (JSON; `html`: its results)
    POST /topics/{topic}/search/jobs/{id}/cancel   stops it (within one Fetch)

The window starts at an offset (`earliest`, `latest` or a number) or at the first record
whose timestamp is at or after a time (ListOffsets by time, as the record browser does),
and ends at the first of: the high watermark, `scan` records examined, `SCAN_BYTES_MAX`
bytes examined (keys, values and headers), `MATCHES_MAX` matches, `SCAN_TIME_S` spent, or
a cancel. The page says which stopped it and links to the next window (its
`next_offset`). Matching is on bytes: the text typed, UTF-8 encoded (or, written `0x...`,
the bytes of its hex). Searching reads with the console's credentials, like the browser.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from replog.client import Client
from replog.client.formats import ENVELOPE
from replog.console import display, forms
from replog.console.display import Meta, ShownRecord
from replog.console.search_jobs import Job, Progress
from replog.console.state import PARTIAL_HEADER, Console, console_of

WHERE = ("any", "key", "value", "headers")
SCAN_RECORDS_DEFAULT = 10_000
SCAN_RECORDS_MAX = 1_000_000
SCAN_BYTES_MAX = 64 * 1024 * 1024
SCAN_TIME_S = 60.0
MATCHES_MAX = 50
FETCH_BYTES_MAX = 1024 * 1024  # per Fetch by default (ConsoleConfig.search_fetch_bytes)
CHECK_EVERY = 256  # records between two looks at the cancel event (and progress updates)
PAGE_WAIT_S = 1.0  # a new search's page waits this long for it to end (quick ones: no poll)


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
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    fetch_bytes: int = FETCH_BYTES_MAX,
) -> Found:
    """The matches of `needle` in the window from `offset` (see the module's docstring);
    `progress` is kept up to date as it goes, and `cancel` stops it."""
    deadline = time.monotonic() + SCAN_TIME_S
    progress = progress or Progress()
    cancel = cancel or threading.Event()
    rows: list[ShownRecord] = []
    start, records, scanned = offset, 0, 0
    stopped = ""
    while not stopped:
        if cancel.is_set():
            stopped = "cancelled"
        elif offset >= latest:
            stopped = "reached the high watermark"
        elif time.monotonic() > deadline:
            stopped = f"searched for {SCAN_TIME_S:g} s"
        if stopped:
            break
        res = client.fetch(topic, partition, offset, max_bytes=fetch_bytes)
        for at, value, m in display.record_rows(res.records):
            if records >= scan_records_max:
                stopped = f"examined {scan_records_max} records"
            elif scanned >= SCAN_BYTES_MAX:
                stopped = f"examined {display.size(SCAN_BYTES_MAX)}"
            elif len(rows) >= MATCHES_MAX:
                stopped = f"found {MATCHES_MAX} matches"
            elif records % CHECK_EVERY == 0 and cancel.is_set():
                stopped = "cancelled"
            if stopped:
                break
            records += 1
            scanned += _size(value, m)
            if matches(needle, where, value, m):
                rows.append(display.shown_record(int(at), value, m, decoding))
            offset = int(at) + 1
            if records % CHECK_EVERY == 0:
                _report(progress, records, scanned, len(rows), offset)
        else:
            if res.next_offset <= offset and not len(res.records):
                stopped = "the partition returned nothing more"
            offset = max(offset, res.next_offset)
        _report(progress, records, scanned, len(rows), min(offset, latest))
    return Found(rows, start, min(offset, latest), latest, records, scanned, stopped)


def _report(progress: Progress, records: int, scanned: int, found: int, offset: int) -> None:
    progress.records, progress.bytes, progress.matches = records, scanned, found
    progress.next_offset = offset


@dataclass(frozen=True, slots=True)
class Asked:
    """A search form, checked."""

    partition: int
    start: int | str
    at_ms: int | None
    contains: str
    where: str
    scan: int
    decoding: str

    @classmethod
    def of(cls, q: Any) -> Asked:
        return cls(
            forms.integer(q.get("partition"), "partition", 0, 2**31 - 1, default=0),
            forms.start_offset(q.get("offset")),
            forms.time_ms(q.get("time")),
            forms.search(q.get("contains")),
            forms.choice(q.get("where"), "where", WHERE, "any"),
            forms.integer(
                q.get("scan"), "records to examine", 1, SCAN_RECORDS_MAX, SCAN_RECORDS_DEFAULT
            ),
            forms.choice(q.get("decode"), "decode", display.DECODINGS, "text"),
        )


async def _run(console: Console, topic: str, asked: Asked, job: Job) -> Found:
    client = console.client
    first, _earliest, latest = await console.call(
        first_offset, client, topic, asked.partition, asked.start, asked.at_ms
    )
    job.progress.next_offset = first
    return await console.call(
        search,
        client,
        topic,
        asked.partition,
        first,
        latest,
        needle_of(asked.contains),
        asked.where,
        asked.scan,
        asked.decoding,
        job.progress,
        job.cancel,
        console.config.search_fetch_bytes,
    )


async def search_page(request: Request) -> Response:
    console = console_of(request)
    name = forms.name(request.path_params["topic"], "topic")
    q = request.query_params
    session = console.session_of(request)
    job = None
    if q.get("job"):
        job = console.searches.get(None if session is None else session.session_id, q["job"])
        if job is None or job.topic != name:
            raise forms.FormError("no such search of this browser (it ended a while ago?)")
        q = job.params  # type: ignore[assignment]
    asked = Asked.of(q)
    needle_of(asked.contains)  # a bad 0x... is refused before anything runs
    fmt = await console.call(console.client.topic_format, name)
    partitions = await console.call(console.client.partition_count, name)
    if job is None and asked.contains:
        session = session or console.sessions.new()
        params = {k: v for k, v in q.items() if k in FORM_FIELDS}
        job = console.searches.start(
            session.session_id, name, params, lambda j: _run(console, name, asked, j)
        )
        assert job.task is not None
        await asyncio.wait({job.task}, timeout=PAGE_WAIT_S)
    context = {
        "topic": name,
        "envelope": fmt == ENVELOPE,
        "partition": asked.partition,
        "partitions": partitions,
        "offset_text": q.get("offset") or "earliest",
        "time_text": q.get("time") or "",
        "contains": asked.contains,
        "where": asked.where,
        "wheres": WHERE,
        "scan": asked.scan,
        "decode": asked.decoding,
        "decodings": display.DECODINGS,
        "job": job,
        "found": None if job is None else job.result,
    }
    return console.render(request, "search.html", context, session=session)


FORM_FIELDS = ("partition", "offset", "time", "contains", "where", "scan", "decode")


def _job_of(request: Request) -> tuple[Console, Job]:
    console = console_of(request)
    session = console.session_of(request)
    job = console.searches.get(
        None if session is None else session.session_id, request.path_params["job"]
    )
    if job is None or job.topic != request.path_params["topic"]:
        raise forms.FormError("no such search of this browser (it ended a while ago?)")
    return console, job


async def search_job(request: Request) -> Response:
    """A search's progress, as JSON; once it ended, `html`: its results."""
    console, job = _job_of(request)
    p = job.progress
    doc: dict[str, Any] = {
        "state": job.state,
        "records": p.records,
        "bytes": p.bytes,
        "bytes_text": display.size(p.bytes),
        "matches": p.matches,
        "next_offset": p.next_offset,
        "error": job.error,
    }
    if not job.running:
        template = console.templates.get_template("_search_result.html")
        envelope = (await console.call(console.client.topic_format, job.topic)) == ENVELOPE
        asked = Asked.of(job.params)
        doc["html"] = template.render(
            topic=job.topic,
            job=job,
            found=job.result,
            envelope=envelope,
            partition=asked.partition,
            contains=asked.contains,
            where=asked.where,
            scan=asked.scan,
            decode=asked.decoding,
        )
    return JSONResponse(doc)


async def cancel_search(request: Request) -> Response:
    """POST: stop the search (the page's script asks with `x-console-partial`: 204)."""
    console = console_of(request)
    await console.posted_form(request)
    console, job = _job_of(request)
    console.searches.cancel(job)
    if request.headers.get(PARTIAL_HEADER):
        return Response(b"", 204)
    return RedirectResponse(f"/topics/{forms.quoted(job.topic)}/search?job={job.job_id}", 303)
