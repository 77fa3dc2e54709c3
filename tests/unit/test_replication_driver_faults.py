"""Faults of the environment at the driver (issue 25): a full disk, no descriptors left, an
I/O error, a vote that cannot be made durable. None of them ends the owner task."""

from __future__ import annotations

import asyncio
import errno
import random
from pathlib import Path
from typing import Any

import pytest

from replog.errors import (
    PartitionOfflineError,
    StorageError,
    StorageFullError,
    TooManyOpenFilesError,
)
from replog.replication import Acks, Message, ReplicaConfig, Role
from replog.replication.driver import QUORUM_STATE_FILE, ReplicaDriver, load_quorum_state
from replog.replication.messages import FetchResponse, Records, VoteRequest, VoteResponse
from replog.storage import FlushPolicy, PartitionLog, StorageConfig, checkpoint
from replog.storage.segment import Segment
from replog.storage.segment_log import ERRORS
from tests.unit.test_replication_driver import DEADLINE_S, _leading, data_values, wait_for

STORAGE = StorageConfig(segment_bytes_max=4096, index_interval_bytes=256)


def test_a_full_disk_refuses_appends_up_front_and_the_leader_keeps_leading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        async with _leading(tmp_path, FlushPolicy.INTERVAL, b"before") as (log, driver):
            epoch = driver.epoch
            monkeypatch.setattr(driver.space, "room_for", lambda nbytes: False)
            for _ in range(5):
                with pytest.raises(StorageFullError) as info:
                    await driver.append([b"refused"], Acks.ALL, DEADLINE_S)
                assert info.value.retriable and info.value.code == "RESOURCE_EXHAUSTED"
            assert driver.refused_writes == 5 and driver.rebuilds == 0
            assert driver.role is Role.LEADER and driver.epoch == epoch
            monkeypatch.undo()  # space is freed
            base, _ = await driver.append([b"after"], Acks.ALL, DEADLINE_S)
            assert data_values(log, base + 1) == [b"before", b"after"]
            assert driver.epoch == epoch

    asyncio.run(main())


def test_no_descriptor_for_a_parked_log_is_a_typed_refusal_without_a_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        async with _leading(tmp_path, FlushPolicy.INTERVAL, b"before") as (log, driver):
            epoch = driver.epoch
            await wait_for(lambda: driver.idle and log.park())  # its files closed (LRU)
            counted = ERRORS["TOO_MANY_OPEN_FILES"]

            def no_descriptor(*args: Any) -> Any:
                raise OSError(errno.EMFILE, "Too many open files")

            monkeypatch.setattr(Segment, "open_files", no_descriptor)
            with pytest.raises(TooManyOpenFilesError) as info:
                await driver.append([b"refused"], Acks.ALL, DEADLINE_S)
            assert info.value.retriable and info.value.code == "RESOURCE_EXHAUSTED"
            assert ERRORS["TOO_MANY_OPEN_FILES"] == counted + 1
            assert driver.rebuilds == 0 and driver.role is Role.LEADER
            monkeypatch.undo()  # descriptors are free again
            base, _ = await driver.append([b"after"], Acks.ALL, DEADLINE_S)
            assert data_values(log, base + 1) == [b"before", b"after"]
            assert driver.epoch == epoch and driver.rebuilds == 0

    asyncio.run(main())


def test_an_io_error_takes_the_replica_offline_and_the_owner_ends_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        async with _leading(tmp_path, FlushPolicy.INTERVAL, b"before") as (log, driver):

            def eio(values: object, **kwargs: object) -> object:
                raise StorageError("append: [Errno 5] Input/output error")

            monkeypatch.setattr(log, "append", eio)
            with pytest.raises(StorageError):
                await driver.append([b"lost"], Acks.ALL, DEADLINE_S)
            await wait_for(lambda: driver.offline is not None)
            with pytest.raises(PartitionOfflineError) as info:
                await driver.append([b"refused"], Acks.ALL, DEADLINE_S)
            assert info.value.code == "UNAVAILABLE" and info.value.retriable
            task = driver._task
            assert task is not None
            await wait_for(task.done)
            assert task.exception() is None  # not a failure for the supervisor
            assert driver.stopped

    asyncio.run(main())


class Sent:
    def __init__(self) -> None:
        self.messages: list[tuple[int, Message]] = []

    def send(self, to: int, message: Message) -> None:
        self.messages.append((to, message))


def test_a_vote_that_cannot_be_persisted_is_not_granted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        log = PartitionLog(tmp_path / "voter", "t", 0, STORAGE)
        config = ReplicaConfig(
            1, (1, 2, 3), election_timeout_ms_min=60_000, election_timeout_ms_max=120_000
        )
        sent = Sent()
        driver = ReplicaDriver(log, config, sent, rng=random.Random(1))
        await driver.start()
        try:
            real = checkpoint.write_text_state

            def full(path: Path, data: bytes) -> None:
                raise OSError(errno.ENOSPC, "No space left on device")

            monkeypatch.setattr(checkpoint, "write_text_state", full)
            await driver.deliver(VoteRequest(1, 2, 0, 0))
            granted = [m for _, m in sent.messages if isinstance(m, VoteResponse) and m.granted]
            assert granted == []
            assert load_quorum_state(log.directory).voted_for is None  # nothing on disk
            assert not driver.stopped
            monkeypatch.setattr(checkpoint, "write_text_state", real)  # space returns
            await wait_for(lambda: driver.idle)
            await driver.deliver(VoteRequest(2, 2, 0, 0))
            granted = [m for _, m in sent.messages if isinstance(m, VoteResponse) and m.granted]
            assert granted == [VoteResponse(2, 1, True)]
            assert load_quorum_state(log.directory).voted_for == 2
            assert (log.directory / QUORUM_STATE_FILE).exists()
        finally:
            await driver.close()
            log.close()

    asyncio.run(main())


def test_a_follower_on_a_full_disk_takes_fetched_records_as_word_from_the_leader_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog(tmp_path / "follower", "t", 0, STORAGE)
    try:
        driver = ReplicaDriver(log, ReplicaConfig(1, (1, 2, 3)), Sent(), rng=random.Random(1))
        answer = FetchResponse(3, 2, 0, 0, Records(0, 2, (), 2, b"\0" * 40))
        assert driver._writable(answer) is answer  # room: taken whole
        monkeypatch.setattr(type(driver.space), "full", property(lambda self: True))
        held = driver._writable(answer)
        assert isinstance(held, FetchResponse) and isinstance(held.result, Records)
        assert (held.result.start_offset, held.result.end_offset) == (0, 0)
        assert held.result.high_watermark == 2 and held.epoch == 3 and held.leader_id == 2
        assert driver.held_fetches == 1
    finally:
        log.close()
