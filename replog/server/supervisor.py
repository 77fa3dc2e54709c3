"""The one place background tasks start: an unexpected exception ends the process.

Every long-lived or fire-and-forget task of a node (replica ticks, the metadata apply loop,
the reconciler, peer links, retention, the interval flusher, acks=none appends) is started
with `Supervisor.spawn(coro, name)`. Expected, typed conditions are handled inside the task
where they arise; whatever escapes a task is a bug (an `AssertionError` included): the
supervisor logs it with its traceback (event `task.failed`) and calls `on_fatal`, which in
`replog serve` stops the node and exits non-zero so that an orchestrator restarts it. A bug
is never retried in place, and a task never dies silently while the node keeps serving.

A task that is cancelled (shutdown, a replica being stopped) or returns is simply forgotten.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from replog.server.logs import log

_log = logging.getLogger("replog.server.supervisor")

T = TypeVar("T")
P = ParamSpec("P")

EXIT_TASK_FAILED = 70  # EX_SOFTWARE: an internal error, the process should be restarted
# A stop (SIGTERM, or after a bug) still running this long after it began writes every
# thread's Python stack to stderr (the node's log), once: a stop that never ends (a CI run
# saw one, not reproduced since) then says where it waits. Past the grace, hand-over and
# close of a loaded node; the process is not ended by it.
STOP_STACKS_S = 30.0


def dump_stacks_if_stop_lasts(after_s: float = STOP_STACKS_S) -> None:
    """Arm the dump of every thread's stack to stderr `after_s` from now (faulthandler's
    watchdog thread: it fires even while the event loop or interpreter exit is stuck)."""
    faulthandler.dump_traceback_later(after_s, repeat=False, exit=False)


class Supervisor:
    def __init__(self, on_fatal: Callable[[BaseException], None]) -> None:
        self._on_fatal = on_fatal
        self._tasks: set[asyncio.Task[Any]] = set()
        self.failure: BaseException | None = None

    def spawn(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Start `coro` as a supervised task named `name`."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    @property
    def tasks(self) -> int:
        """Supervised tasks still running."""
        return len(self._tasks)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        self.fail(exc, task.get_name())

    def fail(self, exc: BaseException, what: str) -> None:
        """`what` (a task, a timer callback) failed with `exc`: a bug; the process stops."""
        log(
            _log,
            "task.failed",
            logging.CRITICAL,
            task=what,
            error=repr(exc),
            exc_info=(type(exc), exc, exc.__traceback__),
        )
        if self.failure is None:
            self.failure = exc
            self._on_fatal(exc)

    async def close(self) -> None:
        """Cancel every task still running and wait for them to end."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def run_thread(
    stop: threading.Event, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """`work(*args, **kwargs)` in a worker thread, which checks `stop` between two steps. A
    thread cannot be cancelled: cancelling the caller sets `stop` and waits for the thread
    to end before the cancellation goes on, so the work never outlives its task."""
    thread = asyncio.ensure_future(asyncio.to_thread(work, *args, **kwargs))
    try:
        return await asyncio.shield(thread)
    except asyncio.CancelledError:
        stop.set()
        await asyncio.wait([thread])
        raise
