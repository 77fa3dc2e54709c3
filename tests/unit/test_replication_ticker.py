"""The node's one ticker: replicas are woken only when their time comes, and its heap stays
bounded however often their wake-ups move."""

from __future__ import annotations

import asyncio

from replog.replication.ticker import COMPACT_SLACK, Ticker, Wakeup


def test_only_the_replicas_that_are_due_are_woken_in_the_order_of_their_times() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ticker = Ticker.of(loop)
        assert Ticker.of(loop) is ticker, "one ticker per event loop"
        woken: list[int] = []
        wakeups = [Wakeup(lambda i=i: woken.append(i)) for i in range(1000)]
        now = loop.time()
        for i, wakeup in enumerate(wakeups[:3]):
            ticker.schedule(wakeup, now + 0.05 * (3 - i))  # 2 first, then 1, then 0
        # the other 997 replicas have nothing to do: no wake-up at all
        await asyncio.sleep(0.3)
        assert woken == [2, 1, 0]
        assert ticker.fired == 3 and len(ticker) == 0

    asyncio.run(main())


def test_a_later_time_keeps_the_earlier_wake_up_and_a_cancelled_one_never_comes() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ticker = Ticker.of(loop)
        woken: list[str] = []
        early, cancelled = Wakeup(lambda: woken.append("early")), Wakeup(lambda: woken.append("x"))
        now = loop.time()
        ticker.schedule(early, now + 0.02)
        ticker.schedule(early, now + 10)  # later: ignored, the replica re-checks when woken
        ticker.schedule(cancelled, now + 0.01)
        ticker.cancel(cancelled)
        await asyncio.sleep(0.1)
        assert woken == ["early"] and early.at is None

    asyncio.run(main())


def test_the_heap_stays_bounded_when_wake_ups_keep_moving_earlier() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ticker = Ticker.of(loop)
        wakeups = [Wakeup(lambda: None) for _ in range(100)]
        far = loop.time() + 3600
        for step in range(200):  # each replica's deadline moves earlier 200 times
            for wakeup in wakeups:
                ticker.schedule(wakeup, far - step)
        assert len(ticker) <= 2 * len(wakeups) + COMPACT_SLACK + 1
        for wakeup in wakeups:
            ticker.cancel(wakeup)

    asyncio.run(main())
