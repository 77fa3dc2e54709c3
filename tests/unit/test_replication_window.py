"""An incoming replication stream reads on while a replica is slow to handle its message:
only a full window (`PENDING_DELIVERIES_MAX`) holds the stream; a failed delivery ends it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from replog.server.peering import replication_transport
from replog.server.peering.replication_transport import _Window


def test_a_slow_delivery_holds_only_a_full_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replication_transport, "PENDING_DELIVERIES_MAX", 2)

    async def main() -> None:
        gate = asyncio.Event()
        handled: list[str] = []

        async def deliver(name: Any) -> None:
            handled.append(name)  # (a replica's inbox takes it in the task's first step)
            if name.startswith("slow"):
                await gate.wait()

        w = _Window()
        w.start([(deliver, "slow", 10)])
        await asyncio.wait_for(w.room(), 5)  # one pending: room for more
        w.start([(deliver, "quick", 10), (deliver, "slow2", 10)])
        room = asyncio.ensure_future(w.room())
        await asyncio.sleep(0.05)
        assert handled == ["slow", "quick", "slow2"]  # in the stream's order
        assert not room.done()  # two pending: full
        gate.set()
        await asyncio.wait_for(room, 5)
        await asyncio.wait_for(w.drain(), 5)
        assert not w.pending and w.bytes == 0

    asyncio.run(main())


def test_a_failed_delivery_ends_the_stream() -> None:
    async def main() -> None:
        async def broken(message: Any) -> None:
            raise RuntimeError("a bug")

        w = _Window()
        w.start([(broken, "m", 1)])
        await asyncio.sleep(0.05)  # (the task fails, then its done callback runs)
        with pytest.raises(RuntimeError, match="a bug"):
            await w.room()

    asyncio.run(main())
