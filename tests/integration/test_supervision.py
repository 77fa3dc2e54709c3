"""A background task that dies of a bug ends the `replog serve` process, non-zero."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.errors import ReplogError
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration

EXIT_WAIT_S = 30.0


@pytest.mark.parametrize(
    ("fault", "task"),
    [("retention", "retention"), ("replica", "replica-"), ("metadata", "metadata-apply")],
)
def test_a_bug_in_a_background_task_logs_its_traceback_and_exits_non_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str, task: str
) -> None:
    monkeypatch.setenv("FAULTY_SERVE_TASK", fault)
    server = ServerProcess(
        tmp_path / "data",
        tmp_path,
        ["--retention-check-interval-ms", "1000"],
        module="tests.integration.faulty_serve",
    )
    try:
        server.start()
        with Client(server.address, timeout_s=10, retry=RetryPolicy(attempts_max=1)) as client:
            client.create_topic("served-until-the-bug", 1)  # it served before the task died
            time.sleep(1.5)  # the replica fault arms a second after the node serves
            with contextlib.suppress(ReplogError):  # the node may already be going down
                client.create_topic("after-the-bug-is-armed", 1)
        assert server.proc is not None
        code = server.proc.wait(EXIT_WAIT_S)
    finally:
        server.kill()
    text = server.log_text()
    assert code not in (0, None), text
    assert "task.failed" in text and f"task={task}" in text, text
    assert "Traceback" in text and f"AssertionError: injected bug: {fault}" in text, text
