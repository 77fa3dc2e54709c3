"""The partition append path in one process, without gRPC: `python bench/append_inprocess.py`.

Issue 10's 1-node produce CPU: how much a partition's `append` costs on top of the storage
append, for whichever source tree `replog` is imported from (run it with
`PYTHONPATH=<tree> python -P`, once per tree):

* a tree with `replog.server.partition.SoloLeader` (before the one server path) appends
  through `SoloLeader.append`;
* a later tree through `ReplicatedPartition.append` (a replica set of one: the driver and
  its owner task), as the Append handler does.

Also `storage`: `PartitionLog.append` alone, the floor both share. Each mode appends
`--batches` batches of `--records` records of `--value-bytes` bytes from `--appenders`
concurrent tasks, acks=leader or acks=all (`--acks`), flush=never (CPU, not the disk), to
a fresh log in a temporary directory; the figure is the process CPU time (user + system)
per append, the median of `--repeats` runs. `--cprofile FILE` profiles one more run (exact
call counts; pstats file).

Output: one JSON line per result on stdout (see `_common.py`). Bounded: a fixed count of
appends per run.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Result, emit, log

from replog.storage import FlushPolicy, PartitionLog, StorageConfig

Append = Callable[[list[bytes]], Awaitable[Any]]


def _storage_config() -> StorageConfig:
    return StorageConfig(flush=FlushPolicy.NEVER, segment_bytes_max=64 * 1024 * 1024)


Opened = tuple[Append, Callable[[], Awaitable[None]]]


async def _partition(directory: Path, acks_name: str) -> Opened:
    """An append function on a fresh one-voter partition of this tree, and its closer."""
    plog = PartitionLog(directory, "t", 0, _storage_config())
    try:
        from replog.server.partition import SoloLeader  # before the one server path
    except ImportError:
        SoloLeader = None
    if SoloLeader is not None:
        from replog.server.partition import Acks as OldAcks

        solo = SoloLeader(plog, 1)
        old_acks = OldAcks.ALL if acks_name == "all" else OldAcks.LEADER

        async def solo_append(values: list[bytes]) -> Any:
            return await solo.append(values, old_acks, 30.0)

        async def solo_close() -> None:
            solo.close()
            plog.close()

        return solo_append, solo_close
    from replog.replication import Acks, ReplicaConfig

    try:
        from replog.server.partitions.replicated import ReplicatedPartition
    except ImportError:  # a tree before the server's rooms (replog/server/__init__.py)
        from replog.server.replicated import ReplicatedPartition

    class _NoTransport:
        def send(self, to: int, message: object) -> None:
            raise AssertionError("a replica set of one sends nothing")

    def spawn(coro: Any, name: str) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(coro, name=name)

    config = ReplicaConfig(replica_id=1, voters=(1,), flush_always=False)
    part = ReplicatedPartition(
        plog, config, _NoTransport(), {}, fetch_bytes_max=1024 * 1024, spawn=spawn
    )
    await part.start()
    deadline = time.monotonic() + 10
    while not part.is_leader:
        assert time.monotonic() < deadline, "a replica set of one did not lead"
        await asyncio.sleep(0.001)
    acks = Acks.ALL if acks_name == "all" else Acks.LEADER

    async def replicated_append(values: list[bytes]) -> Any:
        return await part.append(values, acks, 30.0, values_bytes=len(values) * len(values[0]))

    async def replicated_close() -> None:
        await part.stop()
        plog.close()

    return replicated_append, replicated_close


async def _storage(directory: Path, acks_name: str) -> Opened:
    plog = PartitionLog(directory, "t", 0, _storage_config())

    async def append(values: list[bytes]) -> Any:
        return plog.append(values)

    async def close() -> None:
        plog.close()

    return append, close


async def _run(args: argparse.Namespace, mode: str, profile: cProfile.Profile | None) -> float:
    """CPU seconds per append of one run."""
    values = [bytes(args.value_bytes) for _ in range(args.records)]
    with tempfile.TemporaryDirectory(prefix="replog-append-") as tmp:
        make = _storage if mode == "storage" else _partition
        append, close = await make(Path(tmp), args.acks)
        try:
            per_task = args.batches // args.appenders

            async def appender() -> None:
                for _ in range(per_task):
                    await append(values)

            for _ in range(min(20, per_task)):  # warm up (first segment, caches)
                await append(values)
            if profile is not None:
                profile.enable()
            start = time.process_time()
            await asyncio.gather(*(appender() for _ in range(args.appenders)))
            cpu_s = time.process_time() - start
            if profile is not None:
                profile.disable()
        finally:
            await close()
    return cpu_s / (per_task * args.appenders)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("partition", "storage"), default="partition")
    parser.add_argument("--records", type=int, default=1000, help="records per append")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batches", type=int, default=2000, help="appends per run")
    parser.add_argument("--appenders", type=int, default=1, help="concurrent tasks")
    parser.add_argument("--acks", choices=("leader", "all"), default="leader")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cprofile", type=Path, help="profile one more run into this file")
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    import replog

    where = str(Path(replog.__file__).resolve().parent.parent)
    runs = [asyncio.run(_run(args, args.mode, None)) for _ in range(args.repeats)]
    us = statistics.median(runs) * 1e6
    name = f"{args.mode}_{args.records}x{args.value_bytes}_acks_{args.acks}_{args.appenders}t"
    label = args.label or where
    each = [round(r * 1e6, 1) for r in runs]
    log(f"{label}: {name}: {us:.1f} us per append (runs {each})")
    emit(Result(f"append_inprocess {name} {label}", round(us, 2), "us/append"))
    if args.cprofile is not None:
        profile = cProfile.Profile()
        asyncio.run(_run(args, args.mode, profile))
        profile.dump_stats(str(args.cprofile))


if __name__ == "__main__":
    main()
