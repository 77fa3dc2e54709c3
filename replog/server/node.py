"""The node: composition root of one server process, and the serve loop.

A node is always a member of a cluster (a single node is a cluster of one). `Node` builds
the parts and hands each what it needs; none reaches back into the node:

    Supervisor      every background task (supervisor.py)
    Roster          the members and the address book; RosterKeeper, its one owner, keeps
                    it following the metadata and tells the links (cluster/roster_keeper.py)
    Peers, PeerLinks  the other nodes: forwarded admin calls; replication streams
    MetadataLog     the `__cluster` replica, its apply loop and MetadataImage (desired state)
    ReplicaManager  the reconciler: local replicas follow the image (local state)
    Router          where each request is served; Topics: create/delete on the leader
    Reassigner      moves the replicas of partitions led here to their target (reassignment.py)
    Repairer        scrubs the logs and repairs corrupt ranges from the replicas (repair.py)
    LogService, AdminService, ReplicationService   the gRPC services

`serve(settings)` runs the serve loop (`_serve`): start-up (the data directory's identity,
`Node`, `Node.open`, the listeners' servers with every service: `_servers`, then bound and
started: `_start_serving`), serving until SIGTERM/SIGINT, then the graceful stop (`_stop`):
health NOT_SERVING, long polls and streams ended (UNAVAILABLE SHUTTING_DOWN), in-flight
calls finished (up to `shutdown_grace_ms`), every replica stopped, its log flushed, HW
checkpointed, files closed. A background task that fails ends it with exit code 70
(`_stop_failed`).

Listeners (`listeners.py`): the client listener, and the peer listener (`peer_listen`)
for replication and forwarded calls, mutual TLS with TLS on (`security.py`).

Ready file (`--ready-file`), written atomically once serving::

    127.0.0.1:41234            line 1: the gRPC address clients use
    metrics=127.0.0.1:41235    the metrics address (absent when metrics are off)
    peer=127.0.0.1:41236       the peer listener's address (absent without one)
    pid=12345
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from replog.errors import ReplogError, UnavailableError
from replog.replication import FetchRequest, Message
from replog.replication.campaigns import metadata_patience
from replog.replication.driver import ReplicaDriver
from replog.server import logs
from replog.server.cluster import identity as identities
from replog.server.cluster.balancer import run_balancer
from replog.server.cluster.identity import Identity, NodesService
from replog.server.cluster.joins import Joins
from replog.server.cluster.membership import Members, QuorumKeeper
from replog.server.cluster.reassignment import Reassigner
from replog.server.cluster.roster import Roster
from replog.server.cluster.roster_keeper import RosterKeeper, follow_links
from replog.server.control.producer_ids import ProducerIds, peer_handler
from replog.server.control.routing import Router
from replog.server.control.topics import OFFSETS_TOPIC, Topics
from replog.server.edge import auth, exposure
from replog.server.edge.draining import Draining, Health, stop_servers
from replog.server.edge.guard import Guard, maximum_concurrent_rpcs
from replog.server.edge.guard import server_options as guard_options
from replog.server.edge.handler_chain import serve_through
from replog.server.edge.limits import Limits
from replog.server.edge.listeners import (
    IdentifyGuard,
    MembersOnly,
    add_port,
    dialer,
    generic_handlers_only,
    server_options,
)
from replog.server.edge.quotas import Quotas
from replog.server.edge.readiness import READY_SERVICE, report_readiness, write_ready_file
from replog.server.edge.reflection import enable_reflection
from replog.server.groups import service as groups_service
from replog.server.groups.coordinator import Coordinator
from replog.server.groups.internal import InternalTopics
from replog.server.kafka_edge import listener as kafka_edge
from replog.server.logs import log
from replog.server.meta.metadata import METADATA_TOPIC, TopicMeta
from replog.server.meta.metadata_log import MetadataLog
from replog.server.metrics import Metrics
from replog.server.partitions.cleaning import CleanerCollector, CleanerStats, node_cleaner
from replog.server.partitions.flusher import run_flusher
from replog.server.partitions.handover import hand_over
from replog.server.partitions.legacy_import import import_legacy_topics, metadata_dir
from replog.server.partitions.repair import Repairer, corrupt_found, run_scrubber
from replog.server.partitions.replica_manager import ReplicaManager
from replog.server.partitions.replicated import ReplicatedPartition
from replog.server.peering.leader_news import LeaderNews
from replog.server.peering.peers import Peers
from replog.server.peering.replication_transport import (
    CHANNEL_OPTIONS,
    PRIORITY_CHANNEL_OPTIONS,
    PeerLinks,
    ReplicationService,
    same_incarnation,
)
from replog.server.services.acl_service import AclService, CallerIdentity
from replog.server.services.admin_service import AdminService
from replog.server.services.log_service import LogService
from replog.server.settings import Settings
from replog.server.supervisor import EXIT_TASK_FAILED, Supervisor, dump_stacks_if_stop_lasts
from replog.storage import PartitionLog
from replog.storage.open_files import OpenFiles
from replog.v1 import (
    acl_pb2_grpc,
    admin_pb2,
    admin_pb2_grpc,
    groups_pb2,
    log_pb2,
    log_pb2_grpc,
    nodes_pb2_grpc,
    replication_pb2_grpc,
)

_log = logging.getLogger("replog.server")
T = TypeVar("T")

FAILED_CLOSE_TIMEOUT_S = 5.0
OPEN_WAIT_S = 60.0
CATCH_UP_POLL_S = 0.2
ReplicationTarget = Callable[[Message], Awaitable[None]]
ANSWER_MARGIN_BYTES = 64 * 1024  # a fetch answer's envelope fields, under the message limit
SERVICE_NAMES = (
    log_pb2.DESCRIPTOR.services_by_name["Log"].full_name,
    admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name,
    groups_pb2.DESCRIPTOR.services_by_name["Groups"].full_name,
)


class Node:
    def __init__(
        self, settings: Settings, supervisor: Supervisor, identity: Identity | None = None
    ) -> None:
        """`identity`: from `identity.establish_for` (None: a directory adopted as it is)."""
        self.settings = settings
        self.supervisor = supervisor
        self.node_id = node_id = settings.node_id
        self.identity = identity or Identity(node_id, "", identities.EXISTING)
        self.address = settings.advertised_address or settings.listen
        addresses = settings.peer_map() or {node_id: self.address}  # a cluster of one
        members = sorted(addresses)
        self.single = members == [node_id]
        self.limits = Limits(settings.limits_config())
        # The member set and the address book: one owner (roster_keeper.py), followed by the
        # links (told of each change), forwarded calls and the TLS peer check (reading it).
        self.roster = Roster(node_id, addresses, settings.peer_dial_map() or addresses)
        self.peers = Peers(node_id, self.roster, dialer(settings.tls))
        self.links = PeerLinks(
            node_id,
            dict(self.roster.dial),
            dialer(settings.tls, CHANNEL_OPTIONS),
            silence_ms=settings.election_timeout_ms,
            priority_dial=dialer(settings.tls, PRIORITY_CHANNEL_OPTIONS),  # the metadata log's
        )
        data_dir, storage = settings.data_dir, settings.storage_config()
        data_dir.mkdir(parents=True, exist_ok=True)
        self.imported = import_legacy_topics(data_dir, node_id, members, storage)
        self.metadata = self._open_metadata(members)
        self._wire_membership()
        self.replicas = ReplicaManager(
            node_id,
            data_dir,
            storage,
            self.metadata.image,
            self._make_replica,
            lambda: self.metadata.ready,
            files=OpenFiles(settings.files_max()),
            partitions_max=settings.partitions_max,
        )
        self.router = Router(self.metadata, self.replicas, self.peers)
        # every partition's leader, told by peers (leader_news.py, the directory's writer)
        self.leader_news = LeaderNews(node_id, self.router.leaders, self.peers.channel)
        self.roster_keeper.subscribe(self.leader_news.follow)
        self.topics = Topics(
            self.router,
            self.metadata,
            self.replicas,
            self.peers,
            default_replication_factor=settings.default_replication_factor,
            timeout_s=settings.ack_timeout_ms / 1000,
            racks=self.roster_keeper.racks,
        )
        self.reassigner = Reassigner(  # moves replicas of partitions led here (issue 15)
            node_id,
            self.metadata.image,
            self.replicas,
            self._complete_reassignment,
            timeout_s=settings.ack_timeout_ms / 1000,
            fetch_bytes_per_s=settings.reassignment_fetch_bytes_per_s,
            answer_bytes=settings.fetch_bytes_max,
        )
        self.groups = Coordinator(  # consumer groups (server/groups/)
            settings.groups_config(),
            self.router,
            self.metadata,
            self.replicas,
            self.topics,
            self.peers,
        )
        self.metrics = Metrics(self.logs)
        self.cleaner_stats = CleanerStats()
        self.metrics.registry.register(CleanerCollector(self.cleaner_stats))
        self.repairer = Repairer(self.drivers)
        self._watch()
        self._tasks: list[asyncio.Task[None]] = []

    def _open_metadata(self, members: list[int]) -> MetadataLog:
        """The `__cluster` log's replica (a lost disk's floored first: identity.py)."""
        settings, data_dir = self.settings, self.settings.data_dir
        voters, observers = self.identity.metadata_quorum(members)
        if self.identity.catching_up:  # a lost disk: no vote before catching up
            identities.floor_replica(metadata_dir(data_dir))
        return MetadataLog(
            PartitionLog(metadata_dir(data_dir), METADATA_TOPIC, 0, settings.storage_config()),
            metadata_patience(settings.replica_config(voters, observers)),
            self.links.transport(METADATA_TOPIC, 0),
            fetch_bytes_max=settings.fetch_bytes_max,
            spawn=self.supervisor.spawn,
            on_applied=self._metadata_applied,
            bootstrap=dict(self.roster.members),
        )

    def _wire_membership(self) -> None:
        """The roster's one owner, the AddNode/RemoveNode path and the metadata quorum."""
        settings = self.settings
        self.roster_keeper = RosterKeeper(
            self.roster,
            self.metadata,
            self.peers.channel,
            rack=settings.rack,
            single=self.single,
            spawn=self.supervisor.spawn,
        )
        self.roster_keeper.subscribe(follow_links(self.links))
        # Members added or removed at run time (`membership`): the metadata quorum follows.
        self.members = Members(
            self.metadata,
            self.peers,
            self.roster_keeper,
            timeout_s=settings.ack_timeout_ms / 1000,
            peer_port=settings.peer_listen.rpartition(":")[2] if settings.peer_listen else "",
        )
        self.quorum_keeper = QuorumKeeper(
            self.metadata,
            lambda: self.metadata.image.nodes,
            timeout_s=settings.ack_timeout_ms / 1000,
            on_change=self.roster_keeper.sync,
        )

    def _watch(self) -> None:
        """What the metrics read of the node's parts."""
        self.metrics.watch_replicas(self.drivers)
        self.metrics.watch_repairs(lambda: list(self.repairer.blocked))
        self.metrics.watch_limits(self.limits.snapshot, lambda: self.limits.malformed)
        self.metrics.watch_reassignments(self.reassigner.snapshot)
        self.metrics.watch_membership(self._membership_snapshot)
        news = self.leader_news
        self.metrics.watch_leader_news(
            lambda: (
                news.messages_sent,
                news.entries_sent,
                news.bytes_sent,
                news.messages_received,
                news.directory.held(),
            )
        )
        self.metrics.watch_failures(
            lambda: [(f.topic, f.partition, f.action, f.attempts) for f in self.replicas.failures()]
        )

    def _metadata_applied(self) -> None:
        self.roster_keeper.sync()
        self.replicas.wake()
        self.reassigner.wake()
        self.quorum_keeper.wake()

    def _membership_snapshot(self) -> tuple[int, int, int, int, int]:
        driver = self.metadata.driver
        quorum = driver.membership
        pending = 1 if self.quorum_keeper.step else 0
        members = len(self.metadata.image.nodes)
        return members, len(quorum.voters), len(quorum.observers), driver.leader_id or 0, pending

    async def _complete_reassignment(
        self, topic: str, topic_id: int, partition: int, replicas: tuple[int, ...]
    ) -> None:
        await self.topics.complete_reassignment(topic, topic_id, partition, replicas)

    def _make_replica(self, meta: TopicMeta, p: int, plog: PartitionLog) -> ReplicatedPartition:
        assignment = meta.assignment[p]
        # A replica a reassignment adds starts with the partition's starting membership plus
        # itself as an observer (docs/design.md); the log's membership records govern.
        joining = () if self.node_id in assignment else (self.node_id,)
        if joining or self.identity.floors(meta.topic_id):
            # A lost disk's replicas, and a replica a move adds (maybe one a completed move
            # deleted here, which others may still count as a voter), start with the
            # unreachable vote floor: no vote before they hold what a leader committed.
            identities.floor_replica(plog.directory)
        return ReplicatedPartition(
            plog,
            self.settings.replica_config(assignment, joining),
            self.links.transport(meta.name, p, meta.topic_id),
            self.roster.addresses,
            fetch_bytes_max=self.settings.fetch_bytes_max,
            answer_bytes_max=self.settings.message_bytes_max - ANSWER_MARGIN_BYTES,
            spawn=self.supervisor.spawn,
            topic_id=meta.topic_id,
            limits=self.limits,
            on_serving=self._serving,
        )

    def _serving(self, part: ReplicatedPartition) -> None:
        if part.topic == OFFSETS_TOPIC:
            self.groups.wake()  # its group coordinator takes over the partition's groups now
        self.leader_news.led(part.topic, part.topic_id, part.partition, part.driver.epoch)

    def heard_from(self, peer: int) -> None:
        """A peer opened a replication stream here: it is up (links and news retry now)."""
        self.links.heard_from(peer)
        self.leader_news.heard_from(peer)

    def identify(self) -> tuple[str, bool, int, int, bool]:
        """What `Nodes.Identify` answers: directory id, deciding (never, once running),
        metadata epoch and log end, still a replacement catching up."""
        driver = self.metadata.driver
        return (
            self.identity.directory_id,
            False,
            driver.epoch,
            self.metadata.log.log_end_offset,
            self.identity.catching_up,
        )

    async def watch_catch_up(self) -> None:
        """A replacement: note where its metadata partition caught up (its vote floor gone),
        which tells which replicas of later topics start without one (`Identity.floors`)."""
        while self.identity.catching_up:
            if not self.metadata.driver.replica.quorum_state.vote_floor:
                hw = self.metadata.log.high_watermark
                self.identity = await asyncio.to_thread(
                    identities.caught_up, self.settings.data_dir, self.identity, hw
                )
                return
            await asyncio.sleep(CATCH_UP_POLL_S)

    def listed(self) -> bool:
        """Whether the metadata log's membership names this node (not only the quorum its
        identity started the replica with)."""
        driver = self.metadata.driver
        named = self.node_id in driver.membership.replicas
        return named and bool(driver.replica.membership_history)

    def logs(self) -> list[PartitionLog]:
        """Every log this node has open, the metadata log included (metrics, flusher)."""
        return [self.metadata.log, *self.replicas.logs()]

    def drivers(self) -> list[tuple[str, int, ReplicaDriver]]:
        """Every replica this node hosts, the metadata partition included (for metrics)."""
        out = [(t, p, part.driver) for (t, p), part in list(self.replicas.replicas.items())]
        out.append((METADATA_TOPIC, 0, self.metadata.driver))
        return out

    def route(self, topic: str, partition: int, topic_id: int = 0) -> ReplicationTarget | None:
        """The replica an incoming replication message is for (None: not hosted here, or
        the message was meant for another incarnation of the topic's name)."""
        if topic == METADATA_TOPIC:
            return self.metadata.driver.post
        part = self.replicas.replicas.get((topic, partition))
        if part is None or not same_incarnation(topic_id, part.topic_id):
            return None
        if self.reassigner.throttles:  # (empty unless a move is throttled here)
            return partial(self._throttled, part)
        return part.driver.post

    def _throttled(self, part: ReplicatedPartition, message: Message) -> Awaitable[None]:
        """Deliver `message` (`ReplicaDriver.post`), unless it is the fetch of a joining
        observer that the reassignment throttle drops (`reassignment.Throttle`): a future
        either way, so that a replica gets its messages in the stream's order."""
        if isinstance(message, FetchRequest):
            throttle = self.reassigner.throttle(part.topic, part.partition, message.replica_id)
            plog = part.log
            lag = plog.log_end_offset - message.fetch_offset
            if throttle is not None and lag > 0:
                held = max(1, plog.log_end_offset - plog.log_start_offset)
                if not throttle.allow(lag * plog.size_bytes // held):
                    dropped: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                    dropped.set_result(None)
                    return dropped
        return part.driver.post(message)

    # -- lifecycle --------------------------------------------------------------------------

    async def open(self, ready_timeout_s: float = OPEN_WAIT_S) -> None:
        """Start replication, the metadata log and the reconciler. A cluster of one returns
        once its metadata is applied and its replicas run (it serves at once); a member of a
        larger cluster returns at once (its metadata arrives from the leader)."""
        spawn = self.supervisor.spawn
        if self.imported:
            log(_log, "legacy.imported", topics=len(self.imported))
        self.links.start(spawn)
        self.leader_news.start(spawn, self.links.addresses())
        await self.replicas.load()
        await self.metadata.start()
        self._tasks = [
            spawn(self.watch_catch_up(), "identity-catch-up"),
            spawn(self.metadata.run(), "metadata-apply"),
            spawn(self.replicas.run(), "reconciler"),
            spawn(self.reassigner.run(), "reassigner"),
            spawn(self.quorum_keeper.run(), "metadata-quorum"),
            spawn(run_flusher(self.logs, self.settings.storage_config()), "flusher"),
            spawn(self.replicas.group_flusher.run(), "group-flusher"),
            spawn(self.run_retention(), "retention"),
            spawn(
                node_cleaner(
                    self.logs,
                    self.settings.cleaner_bytes_per_s,
                    self.settings.cleaner_interval_ms,
                    self.cleaner_stats,
                ),
                "log-cleaner",
            ),
            spawn(self.repairer.run(), "repair"),
        ]
        if not self.single:
            self._tasks.append(spawn(self.roster_keeper.discover(), "member-discovery"))
        self.groups.start(spawn)
        if self.settings.scrub_bytes_per_s:
            found = corrupt_found(asyncio.get_running_loop(), self.repairer)
            scrub = run_scrubber(self.logs, self.settings.scrub_bytes_per_s, found)
            self._tasks.append(spawn(scrub, "scrubber"))
        if self.settings.leader_balance_interval_ms:
            interval_s = self.settings.leader_balance_interval_ms / 1000
            drivers = lambda: [d for _t, _p, d in self.drivers()]  # noqa: E731
            self._tasks.append(spawn(run_balancer(drivers, interval_s), "leader-balancer"))
        if self.single:
            await self.metadata.wait_applied(self.metadata.log.log_end_offset - 1, ready_timeout_s)
            await self.replicas.wait_passes(2, ready_timeout_s)

    def begin_shutdown(self) -> None:
        """Refuse new work and wake every long poll and stream."""
        self.router.shutting_down = True
        self.replicas.begin_shutdown()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.groups.close()
        await self.replicas.close()
        await self.metadata.close()
        await self.leader_news.close()
        await self.links.close()
        await self.peers.close()
        await asyncio.to_thread(self.metadata.log.close)

    async def run_retention(self) -> None:
        interval_s = self.settings.retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            now_ms = int(time.time() * 1000)
            for part in list(self.replicas.replicas.values()):
                if part.closed or not self.groups.retention_allowed(part):
                    continue
                with contextlib.suppress(ReplogError):  # e.g. a disk error; a bug ends the node
                    # The driver does it, so that the core learns the new log start.
                    deleted = await part.driver.apply_retention(now_ms)
                    if deleted:
                        log(_log, "retention.deleted", topic=part.topic, segments=deleted)


# -- the serve loop ----------------------------------------------------------------------------


def serve(settings: Settings) -> int:
    """Run a node until SIGTERM/SIGINT; returns the process exit code."""
    logs.configure(settings.log_format, settings.log_level)
    return asyncio.run(_serve(settings))


async def _serve(settings: Settings) -> int:
    """Start-up (the node's identity, its parts, its listeners), serving until stopped, then
    the graceful stop or, after a bug, the fast one."""
    # Handlers first: a SIGTERM that arrives while the node recovers its logs, or right after
    # the ready file appears, must drain and exit 0, not kill the process mid-write.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A background task that dies of a bug stops the node too, and the exit code says so.
    supervisor = Supervisor(on_fatal=lambda _exc: stop.set())
    identity = await _until_stopped(identities.establish_for(settings), stop)
    if identity is None:
        return 0  # stopped while asking its peers: nothing was started
    node = Node(settings, supervisor, identity)
    await node.open()
    servers = _servers(node, settings, supervisor)
    await _start_serving(node, servers, settings, supervisor)

    await stop.wait()
    dump_stacks_if_stop_lasts()  # (supervisor.py: a stop that never ends says where it waits)
    if supervisor.failure is not None:
        return await _stop_failed(node, servers, supervisor)
    return await _stop(node, servers, settings, supervisor)


@dataclass(frozen=True)
class Servers:
    """A node's gRPC servers and what stopping them needs."""

    client: grpc.aio.Server
    peer: grpc.aio.Server | None  # replication and forwarded calls (`peer_listen`), if apart
    health: grpc.aio.Server | None  # plaintext grpc.health.v1 (`health_listen`)
    health_servicer: Health
    draining: Draining
    replication: ReplicationService
    kafka: kafka_edge.KafkaListener | None  # `--kafka-listen` (kafka_edge/), if on

    def all(self) -> list[grpc.aio.Server]:
        return [s for s in (self.client, self.peer, self.health) if s is not None]


def _servers(node: Node, settings: Settings, supervisor: Supervisor) -> Servers:
    """The listeners' servers with every service on them (not bound yet)."""
    guard = Guard(node.limits)  # malformed bodies, limits (guard.py)
    # Who calls and what it may do (auth.py; none with --authorization off): after the guard,
    # so that it sees decoded requests.
    authenticator = auth.authenticator_for(settings.token_file)  # also WhoAmI's
    authorizer = auth.authorizers(
        settings.authorization,
        settings.token_file,
        settings.super_users,
        lambda: node.metadata.image,
        authenticator,
    )
    for wrapper in authorizer:
        if isinstance(wrapper, Quotas):  # replog_quota_throttled_total (edge/quotas.py)
            node.metrics.watch_quotas(wrapper.snapshot)
    server = grpc.aio.server(
        options=[*server_options(settings.message_bytes_max), *guard_options(node.limits)],
        maximum_concurrent_rpcs=maximum_concurrent_rpcs(node.limits),
    )
    generic_handlers_only(server)  # a call's cost stays flat in the methods served
    # Outermost: request streams end at the next read once the node stops (draining.py).
    draining = Draining()
    serve_through(  # once per method
        server, [draining, guard, exposure.PeerOnly(), InternalTopics(), *authorizer]
    )
    # Replication and forwarded calls on a peer listener of their own, if there is one.
    peer_server = None
    if settings.peer_listen:
        peer_server = grpc.aio.server(options=server_options(settings.message_bytes_max))
        generic_handlers_only(peer_server)
        serve_through(peer_server, [draining, guard])  # peers' bodies decode safely too
    identity = CallerIdentity(
        authenticator.identify, settings.authorization, auth.super_users_of(settings.super_users)
    )
    replication, kafka = _add_services(node, settings, supervisor, server, peer_server, identity)
    if kafka is not None:  # one principal, one set of quota buckets, whatever the protocol
        kafka.security.quotas = next(w for w in authorizer if isinstance(w, Quotas))
    health_servicer = Health()  # its Watch ends once the node stops
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    # Plaintext grpc.health.v1 only, for probes that cannot speak TLS (the kubelet's).
    health_server = None
    if settings.health_listen:
        health_server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, health_server)
    enable_reflection((*SERVICE_NAMES, health.SERVICE_NAME), server)
    return Servers(
        server, peer_server, health_server, health_servicer, draining, replication, kafka
    )


def _add_services(
    node: Node,
    settings: Settings,
    supervisor: Supervisor,
    server: grpc.aio.Server,
    peer_server: grpc.aio.Server | None,
    identity: CallerIdentity,
) -> tuple[ReplicationService, kafka_edge.KafkaListener | None]:
    """Log, Admin, Acls, Groups on the client listener (Admin, Acls and forwarded calls on
    the peer listener too); Replication and Nodes on the peer listener if there is one."""
    # The member a peer call's certificate names (None: TLS is off, nothing is proven).
    authenticate = node.roster_keeper.authenticate if settings.tls is not None else None
    producer_ids = ProducerIds(
        node.router, node.metadata, node.peers, timeout_s=settings.ack_timeout_ms / 1000
    )
    supervisor.spawn(producer_ids.keep_reserved(), "producer-ids")  # blocks of anonymous ids
    log_service = LogService(node.router, node.metrics, settings, node.limits, producer_ids)
    kafka = kafka_edge.build(settings, node, log_service, producer_ids)  # None: no --kafka-listen
    admin_service = AdminService(
        node.router,
        node.topics,
        node.peers,
        node.metrics,
        node.reassigner.progress,
        member=authenticate,
        members=node.members,
        nodes=node.roster_keeper.nodes,
    )
    log_pb2_grpc.add_LogServicer_to_server(log_service, server)  # type: ignore[no-untyped-call]
    admin_pb2_grpc.add_AdminServicer_to_server(admin_service, server)  # type: ignore[no-untyped-call]
    acl_service = AclService(
        node.metadata,
        node.node_id,
        node.peers.acls,
        node.metrics,
        settings.ack_timeout_ms / 1000,
        identity,
    )
    acl_pb2_grpc.add_AclsServicer_to_server(acl_service, server)  # type: ignore[no-untyped-call]
    if kafka is not None:  # Kafka's ACL APIs: the same ACLs, changed the same way
        kafka.serve_acls(acl_service, lambda: node.metadata.image)
    # a peer that opens a stream here is up: the link to it stops waiting out its backoff
    replication = ReplicationService(
        node.route, authenticate, node.heard_from, node.leader_news, liveness=node.links.liveness
    )
    if peer_server is not None:
        peer_admin = (
            admin_service if authenticate is None else MembersOnly(admin_service, authenticate)
        )
        admin_pb2_grpc.add_AdminServicer_to_server(peer_admin, peer_server)  # type: ignore[no-untyped-call]
        peer_acls = acl_service if authenticate is None else MembersOnly(acl_service, authenticate)
        acl_pb2_grpc.add_AclsServicer_to_server(peer_acls, peer_server)  # type: ignore[no-untyped-call]
        peer_server.add_generic_rpc_handlers((peer_handler(log_service, authenticate),))
    replication_pb2_grpc.add_ReplicationServicer_to_server(  # type: ignore[no-untyped-call]
        replication, peer_server or server
    )
    # Identify answers any caller the listener lets in (on the peer listener with TLS: a
    # certificate of the cluster's CA): a node that joins is not a member of this node's
    # peer list yet, and the answer (directory id, metadata position, rack) is no secret.
    nodes = NodesService(
        node.node_id,
        node.identify,
        settings.rack,
        node.roster_keeper.member_addresses,
        lambda: bool(node.metadata.driver.replica.membership_history),
        lambda: (node.metadata.driver.membership.voters, node.metadata.driver.membership.observers),
        Joins(node.members, node.metrics, accept=settings.join == "auto").join,
        kafka_address=lambda: kafka.advertised if kafka is not None else "",
        founders=lambda: node.identity.founders,
    )
    peer_nodes = IdentifyGuard(nodes, authenticate)  # Identify: members, proven nodes
    nodes_pb2_grpc.add_NodesServicer_to_server(peer_nodes, peer_server or server)  # type: ignore[no-untyped-call]
    groups = groups_service.register(
        node.groups, node.metrics, server, peer_server, authenticate, supervisor.spawn
    )
    if kafka is not None:
        kafka.serve_groups(groups, lambda exc: supervisor.fail(exc, "kafka group timer"))
    return replication, kafka


async def _bind(node: Node, servers: Servers, settings: Settings) -> tuple[str, str | None]:
    """Bind the listeners; returns the client and peer addresses bound (port 0: picked)."""
    peer_bound = None
    try:
        client_auth = settings.tls_client_auth == "require"
        tls = settings.tls
        port, _ = add_port(servers.client, settings.listen, tls, require_client_auth=client_auth)
        if servers.peer is not None:
            peer_port, _ = add_port(
                servers.peer, settings.peer_listen, tls, require_client_auth=True
            )
            peer_bound = f"{settings.peer_listen.rpartition(':')[0]}:{peer_port}"
        if servers.health is not None:
            servers.health.add_insecure_port(settings.health_listen)
    except RuntimeError as exc:
        await node.close()
        raise UnavailableError(f"cannot listen on {settings.listen}: {exc}") from None
    return f"{settings.listen.rpartition(':')[0]}:{port}", peer_bound


async def _start_serving(
    node: Node, servers: Servers, settings: Settings, supervisor: Supervisor
) -> None:
    """Bind, start the servers and the metrics endpoint, report SERVING, write the ready
    file; a node started to join asks its peers to add it."""
    bound, peer_bound = await _bind(node, servers, settings)
    if not settings.advertised_address:
        node.address = bound
        if node.single:
            node.roster.set_own_address(bound)
    for each in servers.all():
        await each.start()
    if servers.kafka is not None:
        await servers.kafka.start()
    metrics_address = None
    if settings.metrics_listen:
        try:
            metrics_address = node.metrics.serve(settings.metrics_listen)
        except OSError as exc:
            await stop_servers(servers.all(), 0)
            await node.close()
            raise UnavailableError(
                f"cannot serve metrics on {settings.metrics_listen}: {exc}"
            ) from None
    for name in ("", *SERVICE_NAMES):
        await servers.health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    joining = node.identity.start == identities.JOINING and node.identity.catching_up
    if settings.join == "auto" and joining:  # (never again once caught up: see joins.py)
        supervisor.spawn(node.roster_keeper.ask_to_join(node.listed), "join")
    supervisor.spawn(
        report_readiness(
            lambda: [driver for _topic, _p, driver in node.drivers()],
            partial(_publish_ready, servers.health_servicer),
        ),
        "readiness",
    )
    if settings.ready_file is not None:
        write_ready_file(settings.ready_file, node.address, metrics_address, peer_bound)
    log(
        _log,
        "server.serving",
        address=bound,
        peer_address=peer_bound,
        tls=settings.tls is not None,
        metrics=metrics_address,
        data_dir=settings.data_dir,
        flush=settings.flush,
        node_id=settings.node_id,
        topics=len(node.router.topics()),
    )
    exposure.announce(
        settings.insecure and settings.tls is None, bound, node.metrics.registry, supervisor.spawn
    )


async def _stop_failed(node: Node, servers: Servers, supervisor: Supervisor) -> int:
    """After a bug: stop serving at once, keep what is on disk consistent if that still
    works, and exit non-zero (Kubernetes restarts the pod; recovery trusts only the disk)."""
    log(_log, "server.failed", logging.CRITICAL, error=repr(supervisor.failure))
    await servers.health_servicer.enter_graceful_shutdown()
    node.begin_shutdown()
    if servers.kafka is not None:
        await servers.kafka.close()
    await stop_servers(servers.all(), 0)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(_close(node, supervisor), FAILED_CLOSE_TIMEOUT_S)
    return EXIT_TASK_FAILED


async def _stop(node: Node, servers: Servers, settings: Settings, supervisor: Supervisor) -> int:
    """The graceful stop: leadership handed over, streams ended, in-flight calls finished
    (up to the grace), every replica closed."""
    log(_log, "server.stopping", grace_ms=settings.shutdown_grace_ms)
    if settings.shutdown_handover_ms:
        # Still serving everything: each partition led here moves to a caught-up voter
        # (writers get one NOT_LEADER naming it, instead of waiting out an election).
        drivers = [driver for _topic, _p, driver in node.drivers()]
        await hand_over(drivers, settings.shutdown_handover_ms / 1000)
    await servers.health_servicer.enter_graceful_shutdown()
    node.begin_shutdown()  # long polls and StreamFrom end: their partitions close
    servers.replication.close()  # no new incoming replication streams
    servers.draining.begin()  # every request stream ends at its next read (draining.py)
    if servers.kafka is not None:
        await servers.kafka.close()
    await stop_servers(servers.all(), settings.shutdown_grace_ms / 1000)
    await _close(node, supervisor)
    if supervisor.failure is not None:  # a task failed during the drain
        return EXIT_TASK_FAILED
    log(_log, "server.stopped")
    return 0


async def _until_stopped(work: Awaitable[T], stop: asyncio.Event) -> T | None:
    """`work`'s result, or None if `stop` is set first (`work` is then cancelled)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([task, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return None
    return task.result()


async def _publish_ready(servicer: Any, ready: bool) -> None:
    status = health_pb2.HealthCheckResponse
    await servicer.set(READY_SERVICE, status.SERVING if ready else status.NOT_SERVING)


async def _close(node: Node, supervisor: Supervisor) -> None:
    await node.close()  # stops its loops, then every replica between two of its inputs
    await supervisor.close()  # whatever is left (acks=none appends)
