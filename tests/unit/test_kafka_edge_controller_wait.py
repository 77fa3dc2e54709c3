"""CreateTopics/DeleteTopics/CreatePartitions and the config alters through the Kafka
listener wait a while for a metadata leader (`admin.once_elected`): librdkafka does not
retry NOT_CONTROLLER for them. Tried again: no leader yet, or a forward that could not
connect (nothing was sent). Anything else, including an UNAVAILABLE that may have reached
the leader, is answered at once."""

from __future__ import annotations

import asyncio

import pytest

from replog.errors import LeaderUnknownError, ReplogError, UnavailableError
from replog.server.kafka_edge import admin


def _calls(failures: list[ReplogError]) -> tuple[list[int], object]:
    seen: list[int] = []

    async def call() -> None:
        seen.append(len(seen))
        if failures:
            raise failures.pop(0)

    return seen, call


def test_no_leader_and_a_refused_forward_are_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin, "BACKOFF_S_MIN", 0.001)
    refused = UnavailableError(
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
        "Failed to connect to remote host: Connection refused"
    )
    seen, call = _calls([LeaderUnknownError("no leader"), refused])
    asyncio.run(admin.once_elected(call))  # type: ignore[arg-type]
    assert seen == [0, 1, 2]


def test_an_unavailable_that_may_have_been_sent_is_answered_at_once() -> None:
    seen, call = _calls([UnavailableError("stream reset by the leader")])
    with pytest.raises(UnavailableError):
        asyncio.run(admin.once_elected(call))  # type: ignore[arg-type]
    assert seen == [0]
