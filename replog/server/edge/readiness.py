"""Readiness: the health name `replog.ready` is SERVING once every replica the node hosts
has caught up with its leader (`Replica.caught_up`), the metadata partition included.

A Kubernetes readiness probe asks for it (deploy/k8s/statefulset.yaml), so a rolling
restart stops the next pod only when the restarted one holds again what its leaders have
committed, and a node that is far behind takes no traffic from the client Service. It
turns NOT_SERVING at once when the node starts its drain (SIGTERM), like every other
health name. `report_readiness` checks every `interval_s` and logs each change.

`write_ready_file`: the `--ready-file` a supervisor or a test waits for once the node
listens (its addresses and pid, replaced atomically).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from replog.replication.driver import ReplicaDriver
from replog.server.logs import log

_log = logging.getLogger("replog.server")

READY_SERVICE = "replog.ready"
INTERVAL_S = 1.0
# Once ready, each check looks at this fraction of the replicas (round robin; a replica found
# behind sends the check over all of them): every replica is looked at within
# READY_SLICES checks, a node cut off from its peers (every replica behind) at the next
# one, and an idle node's checks cost O(partitions / READY_SLICES) a second.
READY_SLICES = 10


def behind(drivers: Sequence[ReplicaDriver]) -> list[ReplicaDriver]:
    """The replicas still catching up with their leader."""
    return [d for d in drivers if not d.caught_up]


async def report_readiness(
    drivers: Callable[[], Sequence[ReplicaDriver]],
    publish: Callable[[bool], Awaitable[None]],
    interval_s: float = INTERVAL_S,
) -> None:
    """Publish readiness now and on every change, checking every `interval_s`."""
    ready: bool | None = None
    cursor = 0
    while True:
        every = drivers()
        lagging = []
        if ready and every:
            step = -(-len(every) // READY_SLICES)
            cursor = cursor % len(every)
            lagging = behind(every[cursor : cursor + step])
            cursor += step
        if lagging or not ready:
            lagging = behind(every)
        now = not lagging
        if now != ready:
            await publish(now)
            if ready is not None or not now:
                log(
                    _log,
                    "readiness.changed",
                    ready=now,
                    behind=[f"{d.log.topic}/{d.log.partition}" for d in lagging[:10]],
                    behind_count=len(lagging),
                )
            ready = now
        await asyncio.sleep(interval_s)


def write_ready_file(
    path: Path, address: str, metrics_address: str | None, peer_address: str | None = None
) -> None:
    lines = [address]
    if metrics_address:
        lines.append(f"metrics={metrics_address}")
    if peer_address:
        lines.append(f"peer={peer_address}")
    lines.append(f"pid={os.getpid()}")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
