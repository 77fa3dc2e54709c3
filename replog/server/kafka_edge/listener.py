"""The Kafka listener: Kafka's wire protocol on its own port, beside the gRPC listeners.

An asyncio server (`--kafka-listen`, off by default) started and stopped with the node.
Each connection's requests are answered in order. Produce requests are pipelined: the
listener reads on past up to `pipeline.PRODUCE_IN_FLIGHT_MAX` unanswered ones, whose appends
reach each partition in the order sent while their replication and fsyncs overlap
(pipeline.py); any other request is answered once the answers before it are out, before
the next one is read (as a Kafka broker serves a connection). A connection holds at most
that many requests in memory; the rest wait in the socket's buffers.

Bounds and hostile input:

* connections: at most `connections_max`; one more is closed at once;
* a frame's size prefix above `frame_bytes_max` (or negative: a "2 GiB" prefix) closes the
  connection before any byte of the body is read; the body's bytes are counted in the
  node's request pool (`limits.RequestPool`, shared with gRPC appends and fetches) before
  they are read, and must arrive within `read_timeout_s`;
* a connection idle for `idle_timeout_s` is closed (Kafka's connections.max.idle.ms);
* a header that cannot be read, an unknown API key, a version outside `apis.SUPPORTED`
  (except ApiVersions, which answers UNSUPPORTED_VERSION with the supported ranges, as
  Kafka's brokers do) or a body that does not decode closes the connection; nothing was
  written (a body is decoded whole before it is handled);
* corrupt record batches (CRC, codec, lengths) are decoded inside Produce and answered
  CORRUPT_MESSAGE / INVALID_RECORD for their partition, with nothing appended.

A handler that fails with anything but a replog error is a bug: it is logged
(`kafka.failed`, with the traceback) and the connection closed; the node keeps serving.

Security (security.py): TLS with the node's files when it has them (no plaintext then),
SASL, the gRPC ACLs per API (authz.py) and the principal's quotas; a request the session
must not survive (a failed authentication, an API whose cluster right is missing) is
answered, then the connection closed.

Kafka node ids are replog's node ids. The brokers a Metadata response lists are this node
(its advertised address) and the peers whose Kafka address their `Nodes.Identify` answer
published (`Brokers`, asked in the background and kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from replog.errors import InvalidConfigError, UnauthenticatedError, UnavailableError
from replog.kafka import protocol
from replog.kafka.errors import KafkaDecodeError, UnsupportedVersionError
from replog.kafka.protocol import ApiKey
from replog.server.edge.limits import RequestPool
from replog.server.groups.service import GroupsService
from replog.server.kafka_edge import fetch_sessions, pipeline
from replog.server.kafka_edge.acls import KafkaAcls
from replog.server.kafka_edge.admin import once_elected
from replog.server.kafka_edge.apis import SUPPORTED, Apis
from replog.server.kafka_edge.apis import Node as ApiNode
from replog.server.kafka_edge.classic import ClassicLimits
from replog.server.kafka_edge.classic_groups import CLIENT_HOST, ClassicCoordinator, peer_host
from replog.server.kafka_edge.group_offsets import GroupOffsets
from replog.server.kafka_edge.security import KafkaSecurity, SecurityConfig, Session
from replog.server.logs import log
from replog.server.meta.acls import AclEntry
from replog.v1 import nodes_pb2, nodes_pb2_grpc

_log = logging.getLogger("replog.server.kafka")

ASK_TIMEOUT_S = 2.0
ASK_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    listen: str  # host:port (port 0: any)
    advertise: str = ""  # host:port clients reach (empty: the bound address)
    frame_bytes_max: int = 16 * 1024 * 1024
    connections_max: int = 1000
    idle_timeout_s: float = 600.0
    read_timeout_s: float = 30.0
    # Incremental fetch sessions (KIP-227; fetch_sessions.py): Kafka's cache slots,
    # partitions cached in all, and how long a session is idle before another may take
    # its slot.
    fetch_sessions_max: int = fetch_sessions.SESSIONS_MAX
    fetch_session_partitions_max: int = fetch_sessions.PARTITIONS_MAX
    fetch_session_evict_idle_s: float = fetch_sessions.EVICT_IDLE_S

    def __post_init__(self) -> None:
        assert self.frame_bytes_max >= 1024 and self.connections_max >= 1
        assert self.idle_timeout_s > 0 and self.read_timeout_s > 0


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 0xFFFF:
        raise InvalidConfigError(f"a Kafka address is host:port, not {address!r}")
    return host.strip("[]"), int(port)


class Brokers:
    """Kafka node id -> (host, port) of every node whose Kafka address is known: this one,
    and the peers that published theirs (`Nodes.Identify`'s kafka_address), asked one round
    at a time when a member is not known yet (a Metadata request waits briefly for it)."""

    def __init__(
        self,
        node_id: int,
        members: Callable[[], Sequence[int]],
        channel_for: Callable[[int], grpc.aio.Channel],
    ) -> None:
        self.node_id = node_id
        self.members = members
        self.channel_for = channel_for
        self.own: tuple[str, int] | None = None
        self.known: dict[int, tuple[str, int]] = {}
        self._asking: asyncio.Future[None] | None = None
        self._last_ask = -ASK_INTERVAL_S

    def __call__(self) -> dict[int, tuple[str, int]]:
        """The brokers known now; starts asking the members not known yet (at most one
        round per ASK_INTERVAL_S)."""
        members = set(self.members()) | {self.node_id}
        out = {i: a for i, a in self.known.items() if i in members}
        if self.own is not None:
            out[self.node_id] = self.own
        unknown = [i for i in members if i not in out]
        now = asyncio.get_running_loop().time()
        if unknown and self._asking is None and now - self._last_ask >= ASK_INTERVAL_S:
            self._last_ask = now
            self._asking = asyncio.ensure_future(self._ask(unknown))
        return out

    async def current(self) -> dict[int, tuple[str, int]]:
        """The brokers, after waiting for a round of asking that is under way (each peer
        answers or fails within ASK_TIMEOUT_S): a client's Metadata lists every live node.
        librdkafka 2.x drops the brokers a Metadata answer leaves out, failing the requests
        in flight to them (seen: CreateTopics failed with _DESTROY_BROKER when a node's
        address was learned after the first answer). A known address is kept, so the list
        only grows; the wait costs a Metadata request up to ASK_TIMEOUT_S only while some
        member has never answered (a dead peer on a reachable host fails at once)."""
        self()
        asking = self._asking
        if asking is not None:
            await asyncio.shield(asking)
        return self()

    async def close(self) -> None:
        if self._asking is not None:
            self._asking.cancel()
            await asyncio.gather(self._asking, return_exceptions=True)

    async def _ask(self, peers: list[int]) -> None:
        try:
            found = await asyncio.gather(*(self._one(p) for p in peers))
            for peer, address in zip(peers, found, strict=True):
                if address:
                    with contextlib.suppress(InvalidConfigError):
                        self.known[peer] = split_address(address)
        finally:
            self._asking = None

    async def _one(self, peer: int) -> str:
        stub: Any = nodes_pb2_grpc.NodesStub(self.channel_for(peer))  # type: ignore[no-untyped-call]
        try:
            reply = await stub.Identify(
                nodes_pb2.IdentifyRequest(node_id=self.node_id), timeout=ASK_TIMEOUT_S
            )
        except grpc.RpcError:
            return ""
        return str(reply.kafka_address)


class KafkaMetrics:
    """The listener's series, on the node's registry (served with its other metrics)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.requests = Counter(
            "replog_kafka_requests",
            "Kafka requests answered, by API key name",
            ["api"],
            registry=registry,
        )
        self.connections = Gauge(
            "replog_kafka_connections", "open Kafka connections", registry=registry
        )
        self.closed = Counter(
            "replog_kafka_connections_closed",
            "Kafka connections closed by the node: refused (over the limit), malformed "
            "(a frame or request that does not decode, an API or version not served), "
            "failed (a bug: logged as kafka.failed)",
            ["reason"],
            registry=registry,
        )
        self.produce_in_flight = Histogram(
            "replog_kafka_produce_in_flight",
            "a connection's Produce requests being answered as one more is read (that one "
            "included): how far a client pipelines its Produce requests (librdkafka's "
            "idempotent producer: one per partition, whatever max.in.flight says)",
            buckets=tuple(range(1, pipeline.PRODUCE_IN_FLIGHT_MAX + 1)),
            registry=registry,
        )
        self.fetch_sessions = Gauge(
            "replog_kafka_fetch_sessions",
            "incremental fetch sessions (KIP-227) the node holds",
            registry=registry,
        )
        self.fetch_session_evictions = Counter(
            "replog_kafka_fetch_session_evictions",
            "fetch sessions evicted (idle, for a new one)",
            registry=registry,
        )
        self.refused = Counter(
            "replog_kafka_refused",
            "Kafka requests refused by security: sasl_failed (an authentication), denied (an "
            "authenticated principal the ACLs refuse some resource), unauthenticated (an "
            "anonymous connection on a node with ACLs)",
            ["outcome"],
            registry=registry,
        )


class KafkaListener:
    def __init__(
        self,
        config: ListenerConfig,
        apis: Apis,
        pool: RequestPool,
        brokers: Brokers,
        registry: CollectorRegistry | None = None,
        security: KafkaSecurity | None = None,
    ) -> None:
        self.config = config
        self.security = security or KafkaSecurity(SecurityConfig(), lambda: _no_image())
        self.apis = apis
        self.pool = pool
        self.brokers = brokers
        self.metrics = KafkaMetrics(registry)
        self.security.count_refusal = lambda outcome: self.metrics.refused.labels(outcome).inc()
        # Known before binding unless the port is 0: peers may ask (Nodes.Identify) as soon
        # as the gRPC listener is up, before this one is.
        listen_port = split_address(config.listen)[1]
        self.advertised = config.advertise or (config.listen if listen_port else "")
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._closing = False  # close() is cancelling the connections, and waits for them
        self._evictions_counted = 0
        self.fetch_sessions = fetch_sessions.FetchSessions(
            time.monotonic,
            sessions_max=config.fetch_sessions_max,
            partitions_max=config.fetch_session_partitions_max,
            evict_idle_s=config.fetch_session_evict_idle_s,
        )

    def serve_groups(
        self, groups: GroupsService, on_fatal: Callable[[BaseException], None] | None = None
    ) -> None:
        """Committed offsets through the node's Groups service, and the classic group
        protocol on its coordinator (before `start`); `on_fatal`: see ClassicCoordinator."""
        config = groups.config
        limits = ClassicLimits(
            groups_max=config.groups_max,
            members_max=config.members_max,
            session_timeout_ms_min=config.session_timeout_ms_min,
            session_timeout_ms_max=config.session_timeout_ms_max,
            rebalance_timeout_ms_max=config.rebalance_timeout_ms_max,
        )
        self.apis.classic = ClassicCoordinator(groups.coordinator, limits, on_fatal)
        self.apis.group_offsets = GroupOffsets(groups, self.brokers.current, self.apis.classic)
        self.apis.admin.groups = groups
        self.apis.admin.classic = self.apis.classic

    def serve_acls(self, acl_service: Any, image: Callable[[], Any]) -> None:
        """Kafka's ACL APIs over the node's ACLs (before `start`): changes through the gRPC
        Acls service's path (`AclService.change`, on the metadata leader), listings from
        `image()`, the node's applied metadata."""

        async def change(entry: AclEntry, add: bool) -> None:
            await once_elected(partial(acl_service.change, entry, add))

        self.apis.acls = KafkaAcls(change, lambda: image().acls)

    async def start(self) -> str:
        """Bind and serve; the address Kafka clients are told (advertised)."""
        host, port = split_address(self.config.listen)
        try:
            tls = self.security.tls.context if self.security.tls is not None else None
            handshake_s = self.config.read_timeout_s if tls is not None else None
            self._server = await asyncio.start_server(
                self._accepted, host, port, ssl=tls, ssl_handshake_timeout=handshake_s
            )
        except OSError as exc:
            raise UnavailableError(f"cannot listen on {self.config.listen}: {exc}") from None
        bound_port = self._server.sockets[0].getsockname()[1]
        if not self.advertised:
            self.advertised = f"{host}:{bound_port}"
        self.brokers.own = split_address(self.advertised)
        self.brokers()  # starts asking the peers for their Kafka addresses
        log(
            _log,
            "kafka.serving",
            address=f"{host}:{bound_port}",
            advertised=self.advertised,
            tls=tls is not None,
            sasl=",".join(self.security.mechanisms) or "off",
        )
        return self.advertised

    async def close(self) -> None:
        """Stop accepting and end every connection (a request in flight is cancelled: an
        append it started completes or never starts, and the client retries)."""
        if self._server is not None:
            self._server.close()
        self._closing = True
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self.brokers.close()
        if self.apis.classic is not None:
            self.apis.classic.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self.config.connections_max:
            self.metrics.closed.labels("refused").inc()
            writer.close()
            return
        self._connections.add(task)
        self.metrics.connections.inc()
        CLIENT_HOST.set(peer_host(writer.get_extra_info("peername")))  # this task's own
        peer = writer.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"
        session = self.security.session(where, writer.get_extra_info("peercert"))
        try:
            await self._serve(reader, writer, session)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away, or idled past the limit: nothing to answer
        except KafkaDecodeError as exc:
            self.metrics.closed.labels("malformed").inc()
            log(_log, "kafka.malformed", logging.INFO, error=str(exc)[:200])
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # close() ended this connection and waits for it: the task ends normally, so
            # that asyncio's stream callback does not log the cancellation as an error
            task.uncancel()
        except Exception:
            self.metrics.closed.labels("failed").inc()
            _log.exception("kafka.failed")
        finally:
            self.metrics.connections.dec()
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, session: Session
    ) -> None:
        """Read and answer the connection's requests: Produce requests pipelined, answered
        in order (pipeline.py), every other request once the answers before it are out."""
        answers = pipeline.Answers(writer, self.pool)
        try:
            await self._read_requests(reader, writer, session, answers)
            await answers.written()
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            failure = answers.failure()  # the writer closed the connection: its reason
            if failure is not None:
                raise failure from None
            raise
        finally:
            await answers.close()

    async def _read_requests(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        session: Session,
        answers: pipeline.Answers,
    ) -> None:
        config = self.config
        loop = asyncio.get_running_loop()
        while not session.close:
            if session.mute_s > 0:  # over a quota: Kafka mutes the connection
                await asyncio.sleep(session.mute_s)
                session.mute_s = 0.0
            prefix = await asyncio.wait_for(reader.readexactly(4), config.idle_timeout_s)
            size = protocol.frame_size(prefix, config.frame_bytes_max)
            await self.pool.reserve(size)
            try:
                payload = await asyncio.wait_for(reader.readexactly(size), config.read_timeout_s)
                self.pool.resize(size, size)
                produce = protocol.peek_header(payload)[0] == ApiKey.PRODUCE
            except BaseException:
                self.pool.release(size, read=True)
                raise
            if produce:  # answered by its own task, in order; the next request read now
                turn = answers.turn()
                token = pipeline.PRODUCE_TURN.set(turn)
                try:
                    task = loop.create_task(self._answer(payload, session))
                finally:
                    pipeline.PRODUCE_TURN.reset(token)
                task.add_done_callback(partial(pipeline.settle_after, turn[1]))
                answers.produce(task, size)
                self.metrics.produce_in_flight.observe(len(answers.queue))
                await answers.room()
                continue
            try:
                await answers.written()
                response = await self._answer(payload, session)
            finally:
                self.pool.release(size, read=True)
            if response is not None:
                writer.write(response)
                await writer.drain()

    async def _answer(self, payload: bytes, session: Session) -> bytes | None:
        api_key, version, correlation_id = protocol.peek_header(payload)
        supported = SUPPORTED.get(api_key)
        if supported is None or not supported[0] <= version <= supported[1]:
            if api_key == ApiKey.API_VERSIONS:
                return protocol.encode_api_versions_unsupported(correlation_id, SUPPORTED)
            raise UnsupportedVersionError(
                f"api key {api_key} version {version} is not served",
                api_key=api_key,
                api_version=version,
            )
        request = protocol.decode_request(payload, trailing_ok=True)  # as Kafka's brokers
        asked = request.body
        opened = None
        if api_key == ApiKey.FETCH:  # a session's request, whole: the ACLs see every partition
            opened = self.fetch_sessions.open(session.principal, version, asked)
            asked = opened.body
        try:
            body = await self.security.answer(session, request.header, asked, self.apis.answer)
        except UnauthenticatedError as exc:  # a request out of SASL's order: closed
            log(_log, "kafka.unauthenticated", logging.INFO, error=str(exc)[:200])
            session.close = True
            return None
        self.metrics.requests.labels(ApiKey(api_key).name).inc()
        if body is None:
            return None
        if opened is not None:
            body = self.fetch_sessions.answered(opened, body)
            self.metrics.fetch_sessions.set(len(self.fetch_sessions.sessions))
            self.metrics.fetch_session_evictions.inc(
                self.fetch_sessions.evictions - self._evictions_counted
            )
            self._evictions_counted = self.fetch_sessions.evictions
        return protocol.encode_response(request.header, body, any_version=True)


def build(settings: Any, node: Any, log_service: Any, producer_ids: Any) -> KafkaListener | None:
    """The node's Kafka listener (None with `--kafka-listen` unset), not started yet; its
    parts are the node's own: router, topics, producer ids, request pool, peers."""
    if not settings.kafka_listen:
        return None
    config = ListenerConfig(settings.kafka_listen, settings.kafka_advertise)
    brokers = Brokers(
        node.node_id,
        lambda: [i for i, _ in node.peers.nodes()],
        node.peers.channel,
    )
    parts = ApiNode(
        node.node_id,
        node.router,
        log_service,
        producer_ids,
        node.topics,
        brokers.current,
        settings.fetch_wait_ms_max,
    )
    registry = node.metrics.registry
    security = KafkaSecurity(
        SecurityConfig(
            tls=settings.tls,
            require_client_auth=settings.tls_client_auth == "require",
            authorization=settings.authorization == "acl",
            super_users=frozenset(p.strip() for p in settings.super_users.split(",") if p.strip()),
            token_file=settings.token_file,
            scram_file=settings.kafka_scram_file,
        ),
        lambda: node.metadata.image,
    )
    return KafkaListener(config, Apis(parts), node.limits.requests, brokers, registry, security)


def _no_image() -> Any:
    raise AssertionError("authorization off: the ACLs are never asked")
