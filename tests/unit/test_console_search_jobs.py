"""The console's record searches as background jobs: bounded per session and per console,
owned by the session that started them, cancelled through their event, forgotten a while
after they end, and all stopped when the console stops."""

from __future__ import annotations

import asyncio
import threading

import pytest

from replog.console.search_jobs import Job, SearchJobs, TooManySearches


async def until_cancelled(job: Job) -> str:
    """A search's stand-in: runs in a thread until its job is cancelled (as search.search
    looks at the event between fetches)."""
    assert await asyncio.to_thread(job.cancel.wait, 30.0)
    return "stopped"


async def at_once(job: Job) -> str:
    job.progress.records = 7
    return "found"


def test_jobs_are_bounded_per_session_and_per_console_and_owned_by_their_session() -> None:
    async def main() -> None:
        jobs = SearchJobs(per_session_max=2, running_max=3)
        a1 = jobs.start("a", "t", {}, until_cancelled)
        jobs.start("a", "t", {}, until_cancelled)
        with pytest.raises(TooManySearches, match="this browser already runs 2"):
            jobs.start("a", "t", {}, until_cancelled)
        b1 = jobs.start("b", "t", {}, until_cancelled)
        with pytest.raises(TooManySearches, match="the console already runs 3"):
            jobs.start("c", "t", {}, until_cancelled)
        assert jobs.get("a", a1.job_id) is a1
        assert jobs.get("b", a1.job_id) is None and jobs.get(None, a1.job_id) is None
        jobs.cancel(b1)
        assert b1.task is not None
        await asyncio.wait_for(b1.task, 30)
        assert (b1.state, b1.result) == ("cancelled", "stopped")
        jobs.start("c", "t", {}, until_cancelled)  # room again
        await jobs.close()
        assert jobs.running() == 0
        assert all(j.cancel.is_set() for j in (a1, b1))

    asyncio.run(main())


def test_a_finished_job_keeps_its_result_then_is_forgotten() -> None:
    now = [0.0]

    async def main() -> None:
        jobs = SearchJobs(kept_s=60.0, kept_max=2, clock=lambda: now[0])
        first = jobs.start("a", "t", {}, at_once)
        assert first.task is not None
        await first.task
        assert (first.state, first.result, first.progress.records) == ("done", "found", 7)
        assert jobs.get("a", first.job_id) is first
        now[0] = 61.0
        jobs.start("a", "t", {}, at_once)  # starting one forgets the old ones
        assert jobs.get("a", first.job_id) is None
        for _ in range(3):
            task = jobs.start("a", "t", {}, at_once).task
            assert task is not None
            await task
        assert len(jobs) <= 3  # kept_max finished, plus the one being started
        await jobs.close()

    asyncio.run(main())


def test_a_failing_search_is_a_failed_job_with_its_message() -> None:
    from replog.errors import UnavailableError

    async def refused(job: Job) -> str:
        raise UnavailableError("no node answers")

    async def main() -> None:
        jobs = SearchJobs()
        job = jobs.start("a", "t", {}, refused)
        assert job.task is not None
        await job.task
        assert job.state == "failed" and "no node answers" in job.error
        assert isinstance(job.cancel, threading.Event)

    asyncio.run(main())
