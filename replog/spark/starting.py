"""Starting a streaming query: again, when Spark could not start the replog source in time.

Spark runs a Python data source's stream reader in a Python process of its own, started in
the query's thread just after `start()` returns (`PythonStreamingSourceRunner`), and waits a
fixed 10 s for that process to connect back (hard-coded in
`PythonWorkerFactory.createSimpleWorker`, Spark 4.x: no setting changes it). On an
overloaded driver the interpreter and pyspark's imports take longer, and the query fails
with "Python worker failed to connect back" (`SocketTimeoutException: Timed out while
waiting for the Python worker to connect back`) before the source ran any of its code and
before any micro-batch ran: seen on a 2-core machine at load 17-35 in 3 of 10 query
starts, and up to 4 times in a row.

Nothing was read, written or checkpointed past the query's id, so starting the query again
on the same checkpoint is safe; `start_query` does so until `deadline_s`. Any other failure
(or one after a micro-batch ran) is the caller's to see: the query is returned as it is.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("replog.spark")

# Spark's words for its own start-up failure, and how the status of a query reads until its
# sources exist ("Initializing StreamExecution", then "Initializing sources"). A query that
# failed or was stopped stays active while it winds down (status "Terminated with
# exception: ..." or "Stopped"): it is looked at again once it is no longer active, and
# only then started again (Spark refuses a second active query on one checkpoint).
SPARK_CONNECT_BACK = "Python worker failed to connect back"
NOT_STARTED_YET = ("Initializing", "Terminated", "Stopped")
START_DEADLINE_S = 300.0
POLL_S = 0.05


class Step(enum.Enum):
    WAIT = "wait"  # the sources are being created: look again
    RESTART = "restart"  # Spark did not start the source's process in time: start again
    DONE = "done"  # the sources started, or the query ended otherwise: the caller's now


def next_step(
    active: bool, status_message: str, failure: str | None, progressed: bool, time_left_s: float
) -> Step:
    """What `start_query` does with a query in this state (pure: the decision only).
    `failure`: the text of the query's exception (None: none); `progressed`: a micro-batch
    ran (then it is never started again here); `time_left_s`: of the deadline."""
    if progressed or time_left_s <= 0:
        return Step.DONE
    if failure is not None:
        if SPARK_CONNECT_BACK not in failure:
            return Step.DONE
        return Step.WAIT if active else Step.RESTART
    if active and status_message.startswith(NOT_STARTED_YET):
        return Step.WAIT
    return Step.DONE


def start_query(start: Callable[[], Any], deadline_s: float = START_DEADLINE_S) -> Any:
    """`start()` (e.g. `writer.start`), again while the query fails before its sources
    started because Spark's Python process for the replog source did not connect back in
    time (module doc); the query once its sources started, or it ended otherwise, or the
    deadline passed."""
    deadline = time.monotonic() + deadline_s
    restarts = 0
    while True:
        query = start()
        while True:
            active = bool(query.isActive)
            message = str(query.status.get("message", "")) if active else ""
            exc = query.exception()  # set before the query is inactive
            failure = None if exc is None else str(exc)
            progressed = query.lastProgress is not None
            step = next_step(active, message, failure, progressed, deadline - time.monotonic())
            if step is not Step.WAIT:
                break
            time.sleep(POLL_S)
        if step is Step.DONE:
            return query
        restarts += 1
        log.warning(
            "the streaming query failed at start: Spark's Python process for the replog "
            "source did not connect back within Spark's fixed 10 s (an overloaded driver); "
            "starting it again (restart %d): %s",
            restarts,
            SPARK_CONNECT_BACK,
        )
