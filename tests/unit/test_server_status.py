"""Server error -> gRPC status -> client error keeps the class, message and metadata."""

from __future__ import annotations

import grpc
import pytest

from replog.client.errors import DeadlineExceededError, from_code, from_rpc_error
from replog.errors import (
    NotLeaderError,
    OffsetOutOfRangeError,
    ReplogError,
    StorageFullError,
    TopicNotFoundError,
    UnavailableError,
)
from replog.server.edge.status import to_status


class FakeCall(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    def __init__(self, status: grpc.Status) -> None:
        self._status = status

    def code(self) -> grpc.StatusCode:
        return self._status.code  # type: ignore[no-any-return]

    def details(self) -> str:
        return self._status.details  # type: ignore[no-any-return]

    def trailing_metadata(self) -> object:
        return self._status.trailing_metadata

    def initial_metadata(self) -> object:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: object) -> bool:
        return False


@pytest.mark.parametrize(
    ("err", "code"),
    [
        (TopicNotFoundError("no topic", topic="t"), grpc.StatusCode.NOT_FOUND),
        (
            OffsetOutOfRangeError("out", offset=9, log_start_offset=0, high_watermark=3),
            grpc.StatusCode.OUT_OF_RANGE,
        ),
        (
            NotLeaderError("not me", leader_id=2, leader_address="10.0.0.2:7070"),
            grpc.StatusCode.FAILED_PRECONDITION,
        ),
        (StorageFullError("full"), grpc.StatusCode.RESOURCE_EXHAUSTED),
    ],
)
def test_errors_round_trip_through_a_grpc_status(err: ReplogError, code: grpc.StatusCode) -> None:
    status = to_status(err)
    assert status.code is code
    back = from_rpc_error(FakeCall(status))
    assert type(back) is type(err)
    assert back.message == err.message
    assert back.metadata == err.metadata


def test_not_leader_keeps_its_leader_hint() -> None:
    err = NotLeaderError("not me", leader_id=2, leader_address="10.0.0.2:7070")
    back = from_rpc_error(FakeCall(to_status(err)))
    assert isinstance(back, NotLeaderError)
    assert (back.leader_id, back.leader_address, back.retriable) == (2, "10.0.0.2:7070", True)


def test_transport_failures_without_details_map_by_code() -> None:
    assert isinstance(from_code(grpc.StatusCode.UNAVAILABLE, "refused"), UnavailableError)
    assert isinstance(from_code(grpc.StatusCode.DEADLINE_EXCEEDED, "late"), DeadlineExceededError)
    other = from_code(grpc.StatusCode.RESOURCE_EXHAUSTED, "message too large")
    assert not other.retriable
    assert other.metadata["grpc_code"] == "RESOURCE_EXHAUSTED"
