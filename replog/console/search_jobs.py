"""Record searches as background jobs of a browser session, with progress and cancel.

A search (search.py) runs in the thread pool as one asyncio task per job; the page polls
the job (`GET .../search/jobs/{id}`: JSON of its progress, and its results once it ends)
and may cancel it (`POST .../search/jobs/{id}/cancel`). A job belongs to the session that
started it: another session is answered "not found". Cancelling sets the job's event,
which the search checks before each Fetch and between records, so it stops within one
Fetch (at most `search_fetch_bytes`).

Bounds: at most `PER_SESSION_MAX` jobs running per session and `RUNNING_MAX` per console
(one more is refused: `TooManySearches`); a finished job is kept `KEPT_S` for the page to
show, at most `KEPT_MAX` in all (the oldest finished go first).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from replog.console.forms import FormError

log = logging.getLogger("replog.console")
PER_SESSION_MAX = 2
RUNNING_MAX = 8
KEPT_MAX = 256
KEPT_S = 600.0


class TooManySearches(FormError):
    """A search over the bounds of running jobs (429)."""


@dataclass
class Progress:
    """What a running search has done so far (written by its thread, read by the loop:
    each field is one int, replaced whole)."""

    records: int = 0
    bytes: int = 0
    matches: int = 0
    next_offset: int = 0


@dataclass
class Job:
    job_id: str
    session_id: str
    topic: str
    params: dict[str, str]  # the form, to show it again
    started_at: float
    progress: Progress = field(default_factory=Progress)
    cancel: threading.Event = field(default_factory=threading.Event)
    state: str = "running"  # running | done | cancelled | failed
    result: Any = None  # search.Found once done or cancelled
    error: str = ""  # failed: the cluster's typed error, for people
    ended_at: float = 0.0
    task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self.state == "running"


class SearchJobs:
    """The console's search jobs (touched on the event loop only)."""

    def __init__(
        self,
        per_session_max: int = PER_SESSION_MAX,
        running_max: int = RUNNING_MAX,
        kept_max: int = KEPT_MAX,
        kept_s: float = KEPT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert per_session_max >= 1 and running_max >= per_session_max and kept_max >= 1
        self.per_session_max = per_session_max
        self.running_max = running_max
        self.kept_max = kept_max
        self.kept_s = kept_s
        self.clock = clock
        self._jobs: OrderedDict[str, Job] = OrderedDict()

    def running(self, session_id: str | None = None) -> int:
        return sum(
            1
            for j in self._jobs.values()
            if j.running and (session_id is None or j.session_id == session_id)
        )

    def start(
        self,
        session_id: str,
        topic: str,
        params: dict[str, str],
        run: Callable[[Job], Coroutine[Any, Any, Any]],
    ) -> Job:
        """A new job running `run(job)` (its result: the job's result); TooManySearches
        over the bounds."""
        self._forget_old()
        if self.running(session_id) >= self.per_session_max:
            raise TooManySearches(
                f"this browser already runs {self.per_session_max} searches: cancel one or "
                "wait for it to end"
            )
        if self.running() >= self.running_max:
            raise TooManySearches(
                f"the console already runs {self.running_max} searches: try again shortly"
            )
        job = Job(secrets.token_urlsafe(16), session_id, topic, params, self.clock())
        self._jobs[job.job_id] = job
        job.task = asyncio.create_task(self._run(job, run), name=f"console-search-{job.job_id}")
        return job

    async def _run(self, job: Job, run: Callable[[Job], Coroutine[Any, Any, Any]]) -> None:
        from replog.errors import ReplogError

        try:
            job.result = await run(job)
            job.state = "cancelled" if job.cancel.is_set() else "done"
        except ReplogError as err:
            job.state, job.error = "failed", f"{err.reason}: {err.message}"
        except asyncio.CancelledError:  # the console stops: the thread sees the event
            job.cancel.set()
            job.state, job.error = "cancelled", "the console stopped"
            raise
        except Exception as exc:  # a bug: the page says so, the log has the traceback
            log.error("console: search %s failed", job.job_id, exc_info=exc)
            job.state, job.error = "failed", "internal error (see the console's log)"
        finally:
            job.ended_at = self.clock()

    def get(self, session_id: str | None, job_id: str) -> Job | None:
        """The job `job_id` of the session (None: none, another session's, or forgotten)."""
        job = self._jobs.get(job_id)
        if job is None or session_id is None or job.session_id != session_id:
            return None
        return job

    def cancel(self, job: Job) -> None:
        """Ask the job to stop (it stops at its next check: within one Fetch)."""
        job.cancel.set()

    def _forget_old(self) -> None:
        now = self.clock()
        for job_id, job in list(self._jobs.items()):
            if not job.running and now - job.ended_at > self.kept_s:
                del self._jobs[job_id]
        done = [j for j in self._jobs.values() if not j.running]
        for job in done[: max(0, len(self._jobs) - self.kept_max)]:  # oldest first
            del self._jobs[job.job_id]

    async def close(self) -> None:
        """Cancel every running job and wait for its task."""
        tasks = []
        for job in self._jobs.values():
            job.cancel.set()
            if job.task is not None and not job.task.done():
                job.task.cancel()
                tasks.append(job.task)
        await asyncio.gather(*tasks, return_exceptions=True)
        for job in self._jobs.values():
            if job.running:  # cancelled before its task began
                job.state, job.error, job.ended_at = (
                    "cancelled",
                    "the console stopped",
                    self.clock(),
                )

    def __len__(self) -> int:
        return len(self._jobs)
