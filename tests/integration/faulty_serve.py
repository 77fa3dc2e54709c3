"""`replog serve` with one injected bug in a background task, for supervision tests.

    FAULTY_SERVE_TASK=retention python -m tests.integration.faulty_serve serve --data-dir ...

`FAULTY_SERVE_TASK` names the task that fails with an `AssertionError` (a stand-in for any
bug): `retention` (the retention loop, on its first round), `replica` (a replica's owner
task: the core's tick fails once the node has served for a second), `metadata` (the
metadata apply loop, at the second topic created). `no-space` is not a bug but a local
failure: creating the directory of a topic whose name starts with `broken` fails with
ENOSPC while the file named by `FAULTY_SERVE_FLAG` exists. `eio` is a failing disk: while
that file exists, every write to and read from a segment of a topic whose name starts with
`broken` raises EIO (as a bad sector would); a flag without a directory is a file beside
the node's data directory (one flag per node of a cluster). `rpc` is a bug in two request
handlers' bodies (ListTopics, StreamFrom): they raise an exception whose text holds a server
path, as a careless bug would. Nothing in `replog`
itself knows about this: the wrapper replaces a method, then runs the real command.
"""

from __future__ import annotations

import asyncio
import errno
import os
import sys
import time
from typing import Any

from replog import cli
from replog.replication.replica import Replica
from replog.server.edge.rpc import streaming, unary
from replog.server.meta.metadata import CreateTopic, MetadataImage
from replog.server.node import Node
from replog.server.partitions import replica_dirs
from replog.server.services.admin_service import AdminService
from replog.server.services.log_service import LogService
from replog.storage.segment import Segment

FAULT_ENV = "FAULTY_SERVE_TASK"


async def _broken_retention(self: Node) -> None:
    await asyncio.sleep(self.settings.retention_check_interval_ms / 1000)
    raise AssertionError("injected bug: retention")


_armed_at = [float("inf")]  # the replica fault arms a second after the node is serving


def _arm_after_open() -> None:
    open_node = Node.open

    async def open_and_arm(self: Node, *args: Any) -> None:
        await open_node(self, *args)
        _armed_at[0] = time.monotonic() + 1.0

    Node.open = open_and_arm  # type: ignore[method-assign]


def _break_replica_ticks() -> None:
    _arm_after_open()
    tick = Replica.tick
    next_tick_ms = Replica.next_tick_ms

    def broken_tick(self: Replica, now_ms: int) -> Any:
        if time.monotonic() > _armed_at[0]:
            raise AssertionError("injected bug: replica tick")
        return tick(self, now_ms)

    def soon(self: Replica) -> int | None:
        # An idle replica (a single node's) has no timer at all: once armed, ask for a
        # tick within a second so that the broken one runs.
        due = next_tick_ms(self)
        if _armed_at[0] == float("inf"):
            return due
        return 0 if due is None else min(due, 0)

    Replica.tick = broken_tick  # type: ignore[method-assign]
    Replica.next_tick_ms = soon  # type: ignore[method-assign]


def _break_metadata_apply() -> None:
    apply = MetadataImage.apply
    creates = [0]

    def broken_apply(self: MetadataImage, offset: int, command: Any) -> None:
        if isinstance(command, CreateTopic):
            creates[0] += 1
            if creates[0] == 2:  # the first create works; the second meets the bug
                raise AssertionError("injected bug: metadata apply")
        apply(self, offset, command)

    MetadataImage.apply = broken_apply  # type: ignore[method-assign]


def _no_space_for_broken_topics() -> None:
    flag = os.environ.pop("FAULTY_SERVE_FLAG")
    create = replica_dirs.create

    def create_or_fail(data_dir: Any, name: str, partitions: int, topic_id: int) -> Any:
        if name.startswith("broken") and os.path.exists(flag):
            raise OSError(errno.ENOSPC, "No space left on device (injected)", name)
        return create(data_dir, name, partitions, topic_id)

    replica_dirs.create = create_or_fail  # type: ignore[assignment]


def _eio_for_broken_topics() -> None:
    flag = os.environ.pop("FAULTY_SERVE_FLAG")
    if os.sep not in flag:  # a bare name: beside this node's data directory (its own disk)
        data_dir = sys.argv[sys.argv.index("--data-dir") + 1]
        flag = os.path.join(os.path.dirname(os.path.abspath(data_dir)), flag)
    append, read = Segment.append, Segment.read

    def check(segment: Segment) -> None:
        topic = segment.log_path.parent.parent.name
        if topic.startswith("broken") and os.path.exists(flag):
            raise OSError(errno.EIO, "Input/output error (injected)", str(segment.log_path))

    def failing_append(self: Segment, *args: Any, **kwargs: Any) -> Any:
        check(self)
        return append(self, *args, **kwargs)

    def failing_read(self: Segment, *args: Any, **kwargs: Any) -> Any:
        check(self)
        return read(self, *args, **kwargs)

    Segment.append = failing_append  # type: ignore[method-assign]
    Segment.read = failing_read  # type: ignore[method-assign]


def _break_handlers() -> None:
    secret = "/srv/secret/replog/data/t/partition_0"

    async def list_topics(self: Any, request: Any, context: Any) -> Any:
        raise KeyError(f"{secret}: injected bug in ListTopics")

    async def stream_from(self: Any, request: Any, context: Any) -> Any:
        raise KeyError(f"{secret}: injected bug in StreamFrom")
        yield  # an async generator, as the real handler is

    AdminService.ListTopics = unary("ListTopics")(list_topics)  # type: ignore[method-assign]
    LogService.StreamFrom = streaming("StreamFrom")(stream_from)  # type: ignore[assignment]


def main() -> None:
    fault = os.environ.pop(FAULT_ENV, "")
    if fault == "retention":
        Node.run_retention = _broken_retention  # type: ignore[method-assign]
    elif fault == "replica":
        _break_replica_ticks()
    elif fault == "metadata":
        _break_metadata_apply()
    elif fault == "no-space":
        _no_space_for_broken_topics()
    elif fault == "eio":
        _eio_for_broken_topics()
    elif fault == "rpc":
        _break_handlers()
    elif fault:
        raise SystemExit(f"unknown fault {fault!r}")
    cli.main()


if __name__ == "__main__":
    main()
