"""Consumer groups: the list, one group (members, assignment, committed offsets, lag) and
resetting a stopped group's offsets, in two steps: a dry run shows the plan (current and
new offset per partition, by the rule of `replog group reset-offsets`), and only its
Confirm button commits it, as the signed-in user (their token: the nodes' ACLs and audit
apply to their principal; an `audit.console` line). A group with members refuses the
commit (GROUP_NOT_EMPTY), which the page says."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from replog.client import Client
from replog.console import admin_pages, forms
from replog.console.pages import page_of
from replog.console.state import console_of, text_field
from replog.errors import ReplogError

TARGETS = ("earliest", "latest", "offset")


async def groups_page(request: Request) -> Response:
    console = console_of(request)
    q = forms.search(request.query_params.get("q"))
    page = forms.integer(request.query_params.get("page"), "page", 1, 10**6, default=1)
    groups = sorted(await console.call(console.client.list_groups), key=lambda g: g.group)
    matching = [g for g in groups if q.lower() in g.group.lower()]
    rows, page, pages = page_of(matching, page, console.config.page_size)
    return console.render(
        request,
        "groups.html",
        {"rows": rows, "q": q, "page": page, "pages": pages, "total": len(groups)},
    )


async def group_page(request: Request) -> Response:
    console = console_of(request)
    group = forms.name(request.path_params["group"], "group")
    described = await console.call(console.client.describe_group, group)
    known = [p for p in described.partitions if p.lag >= 0]
    return console.render(
        request,
        "group.html",
        {
            "group": group,
            "d": described,
            "lag_total": sum(p.lag for p in known),
            "lag_unknown": len(described.partitions) - len(known),
            "topics": sorted({p.topic for p in described.partitions}),
        },
    )


def plan(
    client: Client, group: str, target: str, offset: int | None, topic: str, partitions: list[int]
) -> list[tuple[str, int, int, int]]:
    """(topic, partition, current or -1, new) per partition: the rule of `replog group
    reset-offsets` (every topic the group has offsets for unless one is named; an offset
    is clamped into each partition's [earliest, latest])."""
    current = {(c.topic, c.partition): c.offset for c in client.committed_offsets(group)}
    topics = [topic] if topic else sorted({t for t, _p in current})
    if not topics:
        raise forms.FormError(f"group {group} has no committed offsets: choose a topic")
    rows = []
    for name in topics:
        for o in client.list_offsets(name):
            if partitions and o.partition not in partitions:
                continue
            new = {"earliest": o.earliest, "latest": o.latest}.get(target)
            if new is None:
                assert offset is not None
                new = min(max(offset, o.earliest), o.latest)
            rows.append((name, o.partition, current.get((name, o.partition), -1), new))
    missing = set(partitions) - {p for _t, p, _c, _n in rows}
    if missing:
        raise forms.FormError(f"{topic} has no partition {sorted(missing)}")
    return rows


async def reset(request: Request) -> Response:
    """POST: `step=plan` renders the dry run; `step=apply` commits the plan it showed."""
    console = console_of(request)
    group = forms.name(request.path_params["group"], "group")
    form = await console.posted_form(request)
    step = forms.choice(text_field(form, "step"), "step", ("plan", "apply"), "plan")
    target = forms.choice(text_field(form, "target"), "target", TARGETS, "earliest")
    offset = None
    if target == "offset":
        offset = forms.integer(text_field(form, "offset"), "offset", 0, forms.OFFSET_MAX)
    topic = text_field(form, "topic") or ""
    if topic:
        forms.name(topic, "topic")
    partitions = forms.partitions(text_field(form, "partitions"))
    if partitions and not topic:
        raise forms.FormError("partitions need a topic")
    fields = {
        "target": target,
        "offset": "" if offset is None else str(offset),
        "topic": topic,
        "partitions": ",".join(map(str, partitions)),
    }
    session = admin_pages.signed_in(request) if step == "apply" else console.session_of(request)
    client = console.client if session is None or session.client is None else session.client
    rows = await console.call(plan, client, group, target, offset, topic, partitions)
    done = ""
    error = ""
    if step == "apply":
        assert session is not None
        offsets = {(t, p): new for t, p, _cur, new in rows}
        resource = f"group:{group} {target}" + (f" {topic}" if topic else "")
        try:
            await admin_pages.change(
                request, session, "reset_offsets", resource, client.commit_offsets, group, offsets
            )
            done = f"reset {len(rows)} partition(s) of group {group}"
        except ReplogError as err:
            error = f"{err.reason}: {err.message}"
    return console.render(
        request,
        "reset.html",
        {"group": group, "rows": rows, "fields": fields, "done": done, "error": error},
        400 if error else 200,
    )
