"""The replicated partition role: a `Partition` whose writes and HW go through replication.

The replica's driver (`replog.replication.driver`) runs the protocol core; this role maps
the server's calls onto it: `append` (leader only, acks none/leader/all), `check_leader`
(NOT_LEADER with the leader's id and address, or LEADER_UNKNOWN during an election), and
HW notifications for long polls and streams.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from replog.errors import LeaderUnknownError, NotLeaderError, ShuttingDownError
from replog.replication import Acks as CoreAcks
from replog.replication import ReplicaConfig, Role
from replog.replication.driver import ReplicaDriver, Transport
from replog.server.partition import Acks, LeaderInfo, Partition
from replog.storage import AppendResult, PartitionLog

_ACKS = {Acks.NONE: CoreAcks.NONE, Acks.LEADER: CoreAcks.LEADER, Acks.ALL: CoreAcks.ALL}


class ReplicatedPartition(Partition):
    def __init__(
        self,
        log: PartitionLog,
        node_id: int,
        config: ReplicaConfig,
        transport: Transport,
        peers: dict[int, str],
        *,
        fetch_bytes_max: int,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(log, node_id)
        self.peers = peers
        self.voters = config.voters
        self.driver = ReplicaDriver(
            log,
            config,
            transport,
            rng=rng,
            fetch_bytes_max=fetch_bytes_max,
            on_high_watermark=lambda _hw: self._notify(),
        )

    async def start(self) -> None:
        await self.driver.start()

    async def stop(self) -> None:
        self.close()
        await self.driver.close()

    @property
    def leader(self) -> LeaderInfo:
        return LeaderInfo(self.driver.leader_id, self.driver.epoch, self.voters)

    @property
    def is_leader(self) -> bool:
        return self.driver.role is Role.LEADER

    def check_leader(self) -> None:
        if self._closed:
            raise ShuttingDownError("the server is shutting down")
        if self.driver.role is Role.LEADER:
            return
        leader = self.driver.leader_id
        where = f"{self.topic}/{self.partition}"
        if leader is None or leader == self.node_id:
            raise LeaderUnknownError(
                f"{where} has no leader right now (an election is under way)",
                topic=self.topic,
                partition=self.partition,
            )
        raise NotLeaderError(
            f"node {self.node_id} does not lead {where}; node {leader} does",
            leader_id=leader,
            leader_address=self.peers.get(leader),
            topic=self.topic,
            partition=self.partition,
        )

    async def append(self, values: Sequence[bytes], acks: Acks, timeout_s: float) -> AppendResult:
        self.check_leader()
        base, last = await self.driver.append(values, _ACKS[acks], timeout_s)
        return AppendResult(base, last)
