"""The Charts page: the console samples the cluster itself (no Prometheus) in a background
task of the app, keeps an hour of points in memory (`sampler.Sampler`), and the page's
script polls `/charts/data` and draws them with uPlot (vendored in static/, see
docs/console.md).

One observation (`observe`, in the thread pool) is the cluster snapshot (node states,
leaders), `DescribeTopic` of up to `TOPICS_MAX` topics (HW and size per partition) and
`DescribeGroup` of up to `GROUPS_MAX` groups (committed offset and lag per partition).
A topic or group whose call fails is left out of that observation (a gap), as is a
partition whose leader is down; a failed snapshot (or an unexpected failure, logged with
its traceback) skips the sample, and the next one is tried at the next interval.
"""

from __future__ import annotations

import asyncio
import logging
import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from replog.client import Client
from replog.console.cluster import DOWN, Prober
from replog.console.sampler import Observation, PartitionSample, Sampler
from replog.console.state import console_of
from replog.errors import ReplogError

log = logging.getLogger("replog.console")
TOPICS_MAX = 64  # topics sampled (by name); more are not charted
GROUPS_MAX = 64  # groups sampled (by name)


def observe(client: Client, prober: Prober) -> Observation:
    """The cluster now, as the sampler wants it (blocking: run it in the thread pool)."""
    snap = prober.snapshot(client)
    at = time.time()  # before the counters are read (after, a slow call would skew rates)
    nodes = {n.node_id: n.state != DOWN for n in snap.nodes}  # not ready: up, catching up
    partitions: dict[tuple[str, int], PartitionSample] = {}
    for topic in snap.topics[:TOPICS_MAX]:
        try:
            described = client.describe_topic(topic.name)
        except ReplogError as exc:
            log.warning("charts: DescribeTopic %s: %s", topic.name, exc)
            continue
        leaders = {p.partition: p.leader_id for p in topic.partitions}
        for p in described:
            leader = leaders.get(p.partition, p.leader_id)
            if leader is not None and not nodes.get(leader, False):
                continue  # its leader is down: a gap, not a zero
            partitions[(topic.name, p.partition)] = PartitionSample(
                p.high_watermark, leader, p.size_bytes
            )
    groups: dict[str, dict[tuple[str, int], tuple[int, int]]] = {}
    for summary in sorted(client.list_groups(), key=lambda g: g.group)[:GROUPS_MAX]:
        try:
            described_group = client.describe_group(summary.group)
        except ReplogError as exc:
            log.warning("charts: DescribeGroup %s: %s", summary.group, exc)
            continue
        groups[summary.group] = {
            (p.topic, p.partition): (p.committed_offset, p.lag) for p in described_group.partitions
        }
    return Observation(at, nodes, partitions, groups)


async def sample_forever(
    client: Client, prober: Prober, sampler: Sampler, interval_s: float
) -> None:
    """Add one observation to `sampler` every `interval_s` until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        try:
            obs = await asyncio.to_thread(observe, client, prober)
        except ReplogError as exc:
            log.warning("charts: no sample this time: %s", exc)
        except Exception:  # like a page's unexpected failure: logged, the next sample tried
            log.exception("charts: sampling failed")
        else:
            if sampler.times and obs.at <= sampler.times[-1]:
                log.warning("charts: the clock went back; sample skipped")
            else:
                sampler.add(obs)
                sampler.took_s = loop.time() - started
        await asyncio.sleep(max(0.0, interval_s - (loop.time() - started)))


async def charts_page(request: Request) -> Response:
    console = console_of(request)
    return console.render(
        request,
        "charts.html",
        {
            "interval_s": console.config.chart_interval_s,
            "window_s": console.config.chart_interval_s * console.config.chart_points,
        },
    )


async def charts_data(request: Request) -> Response:
    console = console_of(request)
    body = console.sampler.export()
    body["interval_s"] = console.config.chart_interval_s
    return JSONResponse(body, headers={"cache-control": "no-store"})
