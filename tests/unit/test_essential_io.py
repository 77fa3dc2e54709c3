"""The metadata log's blocking I/O does not queue behind the data partitions'."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from replog.replication.performing import Performer


def test_the_metadata_logs_io_runs_while_every_default_executor_thread_is_busy() -> None:
    """Every thread of the loop's default executor is held (a storm's quorum-state fsyncs
    of data partitions): a data replica's `_io` waits, the metadata log's (`essential`)
    runs on threads of its own and returns."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=2))
        release = threading.Event()
        held = [loop.run_in_executor(None, release.wait) for _ in range(2)]
        data, meta = Performer.__new__(Performer), Performer.__new__(Performer)
        data.essential, meta.essential = False, True
        waiting = asyncio.ensure_future(data._io(lambda: "data"))
        try:
            assert await asyncio.wait_for(meta._io(lambda: "meta"), 30.0) == "meta"
            assert not waiting.done()  # the data replica's still queues behind the held ones
        finally:
            release.set()
        assert await waiting == "data"
        await asyncio.gather(*held)

    asyncio.run(main())
