"""The asyncio twin of the client against a real server."""

from __future__ import annotations

import asyncio

import pytest

from replog.client import AsyncClient
from replog.errors import OffsetOutOfRangeError, TopicNotFoundError
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration


def test_the_async_client_appends_fetches_and_streams(shared_server: ServerProcess) -> None:
    async def scenario() -> None:
        async with AsyncClient(shared_server.address) as client:
            await client.create_topic("async-topic", 1)
            res = await client.append("async-topic", 0, [b"a", b"b", b"c"])
            # Offset 0 is the epoch marker of the topic's first leader (a cluster of one),
            # offset 1 the idempotent batch's header (both control records).
            assert (res.base_offset, res.last_offset, res.high_watermark) == (2, 4, 5)
            fetched = await client.fetch("async-topic", 0, 3)
            assert fetched.records.values == [b"b", b"c"]
            seen: list[bytes] = []
            stream = client.batches("async-topic", 0, 0)
            async for batch in stream:
                seen.extend(batch.values)
                if len(seen) == 3:
                    await client.append("async-topic", 0, [b"d"])
                if len(seen) == 4:
                    break
            await stream.aclose()  # type: ignore[attr-defined]
            assert seen == [b"a", b"b", b"c", b"d"]
            with pytest.raises(OffsetOutOfRangeError):
                await client.fetch("async-topic", 0, 99)
            with pytest.raises(TopicNotFoundError):
                await client.append("async-missing", 0, [b"x"])
            (offsets,) = await client.list_offsets("async-topic")
            assert offsets.latest == 7

    asyncio.run(asyncio.wait_for(scenario(), 60))
