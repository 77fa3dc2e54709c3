"""The supervisor: a task's bug is fatal and logged with its traceback; cancels are not."""

from __future__ import annotations

import asyncio
import logging

import pytest

from replog.server.supervisor import Supervisor


async def _fail() -> None:
    await asyncio.sleep(0)
    raise AssertionError("broken invariant")


async def _forever() -> None:
    await asyncio.Event().wait()


def test_an_assertion_in_a_task_is_fatal_and_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fatal: list[BaseException] = []

    async def scenario() -> None:
        sup = Supervisor(fatal.append)
        task = sup.spawn(_fail(), "tick")
        with pytest.raises(AssertionError):
            await task
        await asyncio.sleep(0)

    with caplog.at_level(logging.CRITICAL, "replog.server.supervisor"):
        asyncio.run(scenario())
    assert [repr(e) for e in fatal] == [repr(AssertionError("broken invariant"))]
    (record,) = [r for r in caplog.records if r.getMessage() == "task.failed"]
    assert record.exc_info is not None and record.exc_info[0] is AssertionError


def test_only_the_first_failure_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    fatal: list[BaseException] = []

    async def scenario() -> None:
        sup = Supervisor(fatal.append)
        tasks = [sup.spawn(_fail(), f"t{i}") for i in range(3)]
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(0)
        assert sup.failure is fatal[0]

    asyncio.run(scenario())
    assert len(fatal) == 1


def test_cancelled_and_finished_tasks_are_not_failures() -> None:
    fatal: list[BaseException] = []

    async def scenario() -> None:
        sup = Supervisor(fatal.append)
        done = sup.spawn(asyncio.sleep(0), "done")
        sup.spawn(_forever(), "forever")
        await done
        await asyncio.sleep(0)
        assert sup.tasks == 1
        await sup.close()
        assert sup.tasks == 0

    asyncio.run(scenario())
    assert fatal == []
