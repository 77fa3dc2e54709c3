"""The cluster page, the topic list, a topic's partitions and the ACL list."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import Response

from replog.console import forms
from replog.console.admin_pages import ACL_OPERATIONS, ACL_RESOURCES
from replog.console.cluster import NodeStatus, TopicView
from replog.console.state import console_of

T = TypeVar("T")
LISTED_PARTITIONS_MAX = 200  # under-replicated / offline partitions listed on the cluster page


def page_of(rows: Sequence[T], page: int, size: int) -> tuple[Sequence[T], int, int]:
    """(rows of `page`, the page shown (clamped), number of pages)."""
    pages = max(1, math.ceil(len(rows) / size))
    page = min(page, pages)
    return rows[(page - 1) * size : page * size], page, pages


async def cluster_page(request: Request) -> Response:
    console = console_of(request)
    snap = await console.snapshot()
    under = snap.under_replicated
    offline = snap.offline
    led: dict[int, list[str]] = {}
    for p in snap.partitions:
        if p.leader_id is not None and len(led.setdefault(p.leader_id, [])) < 50:
            led[p.leader_id].append(f"{p.topic}/{p.partition}")
    return console.render(
        request,
        "cluster.html",
        {
            "snap": snap,
            "nodes": snap.nodes,
            "ready": sum(n.state == "ready" for n in snap.nodes),
            "partitions_total": sum(len(t.partitions) for t in snap.topics),
            "under": under[:LISTED_PARTITIONS_MAX],
            "under_total": len(under),
            "offline": offline[:LISTED_PARTITIONS_MAX],
            "offline_total": len(offline),
            "led": led,
        },
    )


def _node_filter(text: str | None, nodes: Sequence[NodeStatus]) -> int | None:
    node = forms.optional_integer(text, "node", 0, 2**31 - 1)
    if node is not None and node not in {n.node_id for n in nodes}:
        raise forms.FormError(f"there is no node {node}")
    return node


async def topics_page(request: Request) -> Response:
    console = console_of(request)
    q = forms.search(request.query_params.get("q"))
    page = forms.integer(request.query_params.get("page"), "page", 1, 10**6, default=1)
    snap = await console.snapshot()
    node = _node_filter(request.query_params.get("node"), snap.nodes)
    problems = request.query_params.get("problems") == "1"
    matching: list[TopicView] = [
        t
        for t in snap.topics
        if q.lower() in t.name.lower()
        and (node is None or node in t.leaders)
        and (not problems or t.under_replicated or t.offline)
    ]
    rows, page, pages = page_of(matching, page, console.config.page_size)
    return console.render(
        request,
        "topics.html",
        {
            "rows": rows,
            "q": q,
            "node": node,
            "problems": problems,
            "page": page,
            "pages": pages,
            "matching": len(matching),
            "total": len(snap.topics),
        },
    )


async def topic_page(request: Request) -> Response:
    console = console_of(request)
    name = forms.name(request.path_params["topic"], "topic")
    client = console.client
    partitions = await console.call(client.describe_topic, name)
    fmt, timestamp_type = await console.call(client.topic_config, name)
    configs = await console.call(client.describe_configs, name)
    snap = await console.snapshot()
    states = {n.node_id: n.state for n in snap.nodes}
    return console.render(
        request,
        "topic.html",
        {
            "topic": name,
            "format": fmt,
            "timestamp_type": timestamp_type,
            "partitions": partitions,
            "states": states,
            "configs": sorted(configs.items()),
            "size_total": sum(p.size_bytes for p in partitions),
            "records_total": sum(p.high_watermark - p.log_start_offset for p in partitions),
        },
    )


async def acls_page(request: Request) -> Response:
    console = console_of(request)
    q = forms.search(request.query_params.get("q")).lower()
    acls = await console.call(console.client.list_acls)
    rows = [a for a in acls if not q or any(q in str(v).lower() for v in a.values())]
    context = {
        "rows": rows,
        "q": q,
        "total": len(acls),
        "acl_operations": (*ACL_OPERATIONS, "all"),
        "acl_resources": ACL_RESOURCES,
    }
    return console.render(request, "acls.html", context)
