"""The `__cluster` partition: the replicated log of metadata commands and its apply loop.

The cluster's members are the nodes of `--peers id=host:port,...` (a single node is a
cluster of one) changed by `add_node` / `remove_node` commands (`MetadataImage.nodes`). The
metadata partition's voters are the first five members by id; further members are
observers (they fetch and apply the log but never vote). A cluster started with a `peers`
list starts so; later changes go through membership records in the log, which the metadata
leader's `membership.QuorumKeeper` appends one voter at a time.

Its records are the commands of `metadata` (JSON, typed, versioned). Every node applies
them to its `MetadataImage` in offset order once they are committed (below the `__cluster`
HW): applying is pure and cannot fail, so a command never wedges the log. After each batch
`on_applied` tells the reconciler, which performs the local side effects on its own time.
On restart a node replays its log, so the cluster's topics are a pure function of the
committed metadata log.

A record this node cannot decode (an unknown kind or version) stops the node: the apply
task raises `UnknownCommandError`, which the supervisor turns into a logged, non-zero exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

from replog import frames
from replog.errors import LeaderUnknownError, NotLeaderError
from replog.replication import Acks, ReplicaConfig, Role
from replog.replication.driver import ReplicaDriver, Spawn, Transport
from replog.server.logs import log
from replog.server.meta import command_codec
from replog.server.meta.metadata import (
    METADATA_TOPIC,
    Command,
    MetadataImage,
    NodeAddress,
    UnknownCommandError,
)
from replog.storage import PartitionLog

_log = logging.getLogger("replog.server.metadata")

METADATA_VOTERS_MAX = 5
READ_BYTES_MAX = 1 << 20


class MetadataLog:
    def __init__(
        self,
        log: PartitionLog,
        config: ReplicaConfig,
        transport: Transport,
        *,
        fetch_bytes_max: int,
        spawn: Spawn,
        on_applied: Callable[[], None],
        bootstrap: Mapping[int, NodeAddress] | None = None,
    ) -> None:
        """`bootstrap`: the members of the settings' `peers` (`MetadataImage`)."""
        self.log = log
        self.node_id = config.replica_id
        self.image = MetadataImage(bootstrap)
        self._on_applied = on_applied
        self._wanted = asyncio.Event()
        self._applied_changed = asyncio.Event()
        self._propose_lock = asyncio.Lock()
        self.driver = ReplicaDriver(
            log,
            # Followers apply what their HW covers: a HW is sent at once, never lingered for
            # the next records (`hw_linger_ms`), so metadata changes reach every node in one
            # round trip (a describe on another node right after a create sees it).
            replace(config, hw_linger_ms=0),
            transport,
            fetch_bytes_max=fetch_bytes_max,
            on_high_watermark=lambda _hw: self._wanted.set(),
            spawn=spawn,
            essential=True,  # a topic deletion must go through on a full disk (issue 25)
        )

    async def start(self) -> None:
        await self.driver.start()
        self._wanted.set()  # replay what is already committed

    async def close(self) -> None:
        await self.driver.close()

    # -- applying ------------------------------------------------------------------------

    async def run(self) -> None:
        """Apply committed commands as the HW moves; runs until cancelled."""
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            await self._apply_committed()

    async def _apply_committed(self) -> None:
        image = self.image
        while image.applied_offset < self.log.high_watermark:
            data = await asyncio.to_thread(self.log.read, image.applied_offset, READ_BYTES_MAX)
            decoded = frames.decode(data)
            control = decoded.control or [False] * len(decoded)
            for offset, value, is_control in zip(
                decoded.offsets, decoded.values, control, strict=True
            ):
                command: Command | None = None
                if not is_control:
                    try:
                        command = command_codec.decode(value)
                    except UnknownCommandError as exc:
                        log(
                            _log,
                            "metadata.unknown_command",
                            logging.CRITICAL,
                            offset=offset,
                            error=str(exc),
                        )
                        raise UnknownCommandError(
                            f"__cluster offset {offset}: {exc}; this node stops rather than "
                            "skip a command the cluster applied"
                        ) from None
                image.apply(offset, command)
            old, self._applied_changed = self._applied_changed, asyncio.Event()
            old.set()
            self._on_applied()

    async def wait_applied(self, offset: int, timeout_s: float) -> None:
        """Wait until metadata offset `offset` is applied on this node."""
        if not await self.wait_until(lambda image: image.applied_offset > offset, timeout_s):
            raise LeaderUnknownError("the cluster metadata did not apply in time")

    async def wait_until(self, holds: Callable[[MetadataImage], bool], timeout_s: float) -> bool:
        """Wait until this node's image satisfies `holds` (True), or `timeout_s` passed
        (False): a node that forwarded a command to the leader answers once it has applied
        it too, so the caller's next request to it sees its own change."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not holds(self.image):
            event = self._applied_changed
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)
        return True

    @property
    def ready(self) -> bool:
        """Whether everything in this node's metadata log is committed and applied (a node
        that just restarted may hold commands it cannot apply until the leader says)."""
        return self.image.applied_offset >= self.log.log_end_offset

    # -- proposing (on the leader) ---------------------------------------------------------

    def leader(self) -> int:
        """The `__cluster` leader this node knows of (an observer knows it too);
        LEADER_UNKNOWN when none."""
        if self.driver.role is Role.LEADER:
            return self.node_id
        leader = self.driver.leader_id
        if leader is None or leader == self.node_id:
            raise LeaderUnknownError("the cluster metadata has no leader right now")
        return leader

    async def propose(
        self, make: Callable[[MetadataImage], Command], timeout_s: float
    ) -> tuple[Command, int]:
        """On the leader: build a command from the caught-up image (`make` validates and
        raises the typed error a client should get), commit it, wait until it is applied
        here. Returns the command and its offset. One proposal at a time, so each is
        validated against an image that holds every earlier one."""
        async with self._propose_lock:
            if self.driver.role is not Role.LEADER:
                raise NotLeaderError("this node no longer leads the cluster metadata")
            # Everything this leader's log holds (its predecessors' commands included) is
            # applied before the next command is validated.
            await self.wait_applied(self.log.log_end_offset - 1, timeout_s)
            command = make(self.image)
            _, last = await self.driver.append([command_codec.encode(command)], Acks.ALL, timeout_s)
            await self.wait_applied(last, timeout_s)
            return command, last


def replica_config_members(members: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The metadata partition's voters and observers among the cluster's `members`."""
    ordered = tuple(sorted(members))
    return ordered[:METADATA_VOTERS_MAX], ordered[METADATA_VOTERS_MAX:]


__all__ = ["METADATA_TOPIC", "MetadataLog", "replica_config_members"]
