"""`replog serve` with one injected bug in a background task, for supervision tests.

    FAULTY_SERVE_TASK=retention python -m tests.integration.faulty_serve serve --data-dir ...

`FAULTY_SERVE_TASK` names the task that fails with an `AssertionError` (a stand-in for any
bug): `retention` (the retention loop, on its first round). Nothing in `replog` itself
knows about this: the wrapper replaces a method, then runs the real command.
"""

from __future__ import annotations

import asyncio
import os

from replog import cli
from replog.server.node import Node

FAULT_ENV = "FAULTY_SERVE_TASK"


async def _broken_retention(self: Node) -> None:
    await asyncio.sleep(self.settings.retention_check_interval_ms / 1000)
    raise AssertionError("injected bug: retention")


def main() -> None:
    fault = os.environ.pop(FAULT_ENV, "")
    if fault == "retention":
        Node.run_retention = _broken_retention  # type: ignore[method-assign]
    elif fault:
        raise SystemExit(f"unknown fault {fault!r}")
    cli.main()


if __name__ == "__main__":
    main()
