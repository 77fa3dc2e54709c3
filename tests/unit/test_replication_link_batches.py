"""A peer link's stream of batches (`PeerLinks._batches`): every envelope queued when a
batch leaves goes in it, an idle lane sends a heartbeat (an empty batch) every
`HEARTBEAT_S`, and no task is made per batch (a `wait_for` around the queue's get made one
for every batch: 2-4 per acknowledged append on 3 nodes)."""

from __future__ import annotations

import asyncio
import time

import pytest

from replog.server.peering import replication_transport
from replog.server.peering.replication_transport import _HEARTBEAT, PeerLinks, _Link
from replog.v1 import replication_pb2 as pb


def _envelope(partition: int) -> pb.Envelope:
    return pb.Envelope(topic="t", partition=partition, from_id=1)


def test_queued_envelopes_go_together_and_an_idle_lane_sends_heartbeats(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replication_transport, "HEARTBEAT_S", 0.05)

    async def main() -> None:
        links = PeerLinks(1, {})
        link = _Link(2, "127.0.0.1:1")
        stream = links._batches(link, [])
        loop = asyncio.get_running_loop()
        made = 0
        real = loop.create_task

        def counted(coro, **kw):  # type: ignore[no-untyped-def]
            nonlocal made
            made += getattr(coro, "__qualname__", "") == "Queue.get"  # (the test's: others)
            return real(coro, **kw)

        monkeypatch.setattr(loop, "create_task", counted)
        for p in range(3):
            link.queue.put_nowait(_envelope(p))
        first = await asyncio.wait_for(anext(stream), 5)
        assert [e.partition for e in first.envelopes] == [0, 1, 2]
        started = time.monotonic()
        beat = await asyncio.wait_for(anext(stream), 5)  # nothing queued: a heartbeat
        assert not beat.envelopes and link.heartbeats == 1
        assert time.monotonic() - started >= 0.04
        later = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.01)
        link.queue.put_nowait(_envelope(7))  # comes while the stream waits
        got = await asyncio.wait_for(later, 5)
        assert [e.partition for e in got.envelopes] == [7]
        assert made == 0  # no task around the queue's get
        # a heartbeat marker left behind (its timer fired as an envelope came) is skipped
        link.queue.put_nowait(_envelope(8))
        link.queue.put_nowait(_HEARTBEAT)
        link.queue.put_nowait(_envelope(9))
        got = await asyncio.wait_for(anext(stream), 5)
        assert [e.partition for e in got.envelopes] == [8, 9]
        await stream.aclose()
        await links.close()

    asyncio.run(main())
