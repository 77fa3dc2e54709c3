"""The server's one settings object: defaults, env vars `REPLOG_*`, CLI flags, validation.

Every setting is a field of `Settings` below with its default and help text in one place.
Precedence: command-line flag > environment variable `REPLOG_<NAME>` > default. A field
typed with an enum (`FlushPolicy`, `LogFormat`, ...) accepts exactly its values. Relations
between values are checked once at start-up (`Settings.validate`: one method per concern,
and `_AT_LEAST` for plain lower bounds), then fanned out into the per-layer frozen configs
(`storage_config()`, `replica_config()`, `limits_config()`, `groups_config()`).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from replog.errors import InvalidConfigError
from replog.frames import HEADER_BYTES
from replog.replication import ReplicaConfig
from replog.server.edge import exposure
from replog.server.edge.limits import LimitsConfig
from replog.server.groups.config import GroupsConfig
from replog.server.settings_text import convert, derive_cluster, is_address
from replog.storage import FlushPolicy, StorageConfig
from replog.storage.open_files import FILES_MAX_MIN, files_max_for, nofile_soft_limit
from replog.tls import TlsFiles

KIB = 1024
MIB = 1024 * KIB
ENV_PREFIX = "REPLOG_"
# Room for a reply's protobuf fields around its frames.
REPLY_OVERHEAD_BYTES = 4 * KIB


def _help(text: str) -> dict[str, Any]:
    return {"help": text}


RACK_CHARS_MAX = 64
LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")  # --log-level, any case


class LogFormat(enum.StrEnum):
    TEXT = "text"  # key=value
    JSON = "json"


class JoinMode(enum.StrEnum):
    MANUAL = "manual"
    AUTO = "auto"  # a new node asks to be added; nodes add those whose certificate proves it


class ClientAuth(enum.StrEnum):
    """Client certificates on the client listener."""

    NONE = "none"
    REQUIRE = "require"  # mutual TLS


class Authorization(enum.StrEnum):
    OFF = "off"  # anyone may do anything
    ACL = "acl"  # callers authenticate; the cluster metadata's ACLs decide


@dataclass(frozen=True, slots=True)
class Settings:
    data_dir: Path = field(default=Path("data"), metadata=_help("data directory"))
    listen: str = field(
        default="127.0.0.1:7070", metadata=_help("gRPC address host:port (port 0: any free)")
    )
    advertised_address: str = field(
        default="", metadata=_help("address clients are told to use (default: the bound one)")
    )
    metrics_listen: str = field(
        default="127.0.0.1:9464",
        metadata=_help("Prometheus metrics host:port (port 0: any free; empty: off)"),
    )
    ready_file: Path | None = field(
        default=None,
        metadata=_help("file that receives the bound address (line 1) and metrics=ADDR"),
    )
    node_id: int = field(default=0, metadata=_help("this node's id"))
    rack: str = field(
        default="",
        metadata=_help(
            "this node's rack or zone: new topics spread each partition's replicas over "
            "racks (empty: unknown)"
        ),
    )
    log_format: LogFormat = field(
        default=LogFormat.TEXT, metadata=_help("log format: text (key=value), json")
    )
    log_level: str = field(default="INFO", metadata=_help("log level"))
    flush: FlushPolicy = field(
        default=FlushPolicy.ALWAYS,
        metadata=_help(
            "fsync policy: always (acks wait for a majority's fsync; the default)|interval|never"
        ),
    )
    flush_interval_ms: int = field(default=1000, metadata=_help("fsync period, flush=interval"))
    segment_bytes_max: int = field(default=1 * MIB, metadata=_help("segment roll size"))
    index_interval_bytes: int = field(default=4 * KIB, metadata=_help("bytes per index entry"))
    record_bytes_max: int = field(
        default=1 * MIB, metadata=_help("largest record, envelope included")
    )
    retention_bytes: int | None = field(
        default=None, metadata=_help("per-partition size limit (default: keep all)")
    )
    retention_ms: int | None = field(
        default=None, metadata=_help("age limit of closed segments (default: keep all)")
    )
    retention_check_interval_ms: int = field(
        default=60_000, metadata=_help("how often retention runs")
    )
    open_files_max: int = field(
        default=0,
        metadata=_help(
            "storage files kept open at once; idle partitions' files are closed and reopened "
            "on use (0: half of RLIMIT_NOFILE's soft limit)"
        ),
    )
    partitions_max: int = field(
        default=20_000,
        metadata=_help("partition replicas one node hosts; a CreateTopic past it is refused"),
    )
    scrub_bytes_per_s: int = field(
        default=8 * MIB,
        metadata=_help(
            "the background scrubber re-verifies every segment's checksums at most this fast "
            "(0: no scrubber); a corrupt range it finds is refetched from a healthy replica"
        ),
    )
    cleaner_bytes_per_s: int = field(
        default=16 * MIB,
        metadata=_help(
            "the log cleaner (compacted topics) reads and writes at most this fast on the node "
            "(0: unthrottled)"
        ),
    )
    cleaner_interval_ms: int = field(
        default=15_000, metadata=_help("how often the log cleaner looks at compacted logs")
    )
    reassignment_fetch_bytes_per_s: int = field(
        default=0,
        metadata=_help(
            "a partition's leader serves the replicas a reassignment adds, while they catch "
            "up as observers, at most this fast (0: unthrottled); a fetch past it is dropped "
            "and asked again after the replica fetch retry interval"
        ),
    )
    fetch_bytes_max: int = field(
        default=1 * MIB, metadata=_help("largest frames payload of one Fetch/StreamFrom reply")
    )
    fetch_wait_ms_max: int = field(default=30_000, metadata=_help("longest Fetch long poll"))
    stream_bytes_max: int = field(
        default=64 * KIB,
        metadata=_help(
            "frames payload of a StreamFrom reply to start with (or one whole record); a "
            "stream holds one reply in flight while its reader is slow. A reader that keeps "
            "up but is behind gets replies doubling up to fetch_bytes_max, borrowing from "
            "stream_bytes_pool_max"
        ),
    )
    stream_bytes_pool_max: int = field(
        default=64 * MIB,
        metadata=_help(
            "bytes StreamFrom replies may hold above stream_bytes_max, all streams of the "
            "node together (0: every reply stays at stream_bytes_max)"
        ),
    )
    rpcs_max: int = field(
        default=2000,
        metadata=_help(
            "Log and Admin calls in progress on the node, streams included; more: "
            "RESOURCE_EXHAUSTED TOO_MANY_REQUESTS (HTTP/2 streams per connection: this + 256)"
        ),
    )
    streams_max: int = field(
        default=1000,
        metadata=_help(
            "StreamFrom calls open on the node; more: RESOURCE_EXHAUSTED TOO_MANY_STREAMS"
        ),
    )
    streams_per_connection_max: int = field(
        default=100,
        metadata=_help(
            "StreamFrom calls open on one client connection; more: RESOURCE_EXHAUSTED "
            "TOO_MANY_STREAMS"
        ),
    )
    acks_none_bytes_max: int = field(
        default=64 * MIB,
        metadata=_help(
            "record bytes of acks=none appends accepted but not yet written, per node; more: "
            "RESOURCE_EXHAUSTED TOO_MANY_BYTES_IN_FLIGHT"
        ),
    )
    append_stream_requests_max: int = field(
        default=64,
        metadata=_help(
            "AppendStream requests one stream holds read and not yet answered; more: the "
            "stream reads no further until an answer frees room (flow control, no error)"
        ),
    )
    append_stream_bytes_max: int = field(
        default=16 * MIB,
        metadata=_help(
            "bytes of requests (serialized) one AppendStream holds read and not yet answered "
            "(a lone request always fits); more: flow control"
        ),
    )
    append_stream_bytes_pool_max: int = field(
        default=256 * MIB,
        metadata=_help(
            "bytes of requests (serialized) all AppendStreams of the node hold read and not "
            "yet answered (a stream holding nothing may take one request); more: flow control"
        ),
    )
    request_bytes_pool_max: int = field(
        default=64 * MIB,
        metadata=_help(
            "bytes Append requests may hold while they are received, decoded and handled "
            "(each counted 4 times: its copies while it is decoded and written), and Fetch "
            "replies while they are built (2 times), all calls of the node together; more: "
            "the next call waits for room (a lone request always fits)"
        ),
    )
    message_bytes_max: int = field(
        default=4 * MIB, metadata=_help("gRPC message size limit (both directions)")
    )
    ack_timeout_ms: int = field(default=30_000, metadata=_help("acks=all wait limit"))
    shutdown_grace_ms: int = field(
        default=5_000, metadata=_help("how long SIGTERM waits for in-flight calls")
    )
    shutdown_handover_ms: int = field(
        default=10_000,
        metadata=_help(
            "on SIGTERM, at most this long handing every partition this node leads to a "
            "caught-up voter before it stops (0: no hand-over)"
        ),
    )
    leader_balance_interval_ms: int = field(
        default=30_000,
        metadata=_help(
            "how often a leader hands partitions whose preferred replica (the first of the "
            "assignment) is alive and caught up back to it (0: never)"
        ),
    )
    peers: str = field(
        default="",
        metadata=_help(
            "the cluster's nodes as id=host:port,... including this one (empty: a single "
            "node that leads everything); with a peer listener id=host:port/host:peer_port"
        ),
    )
    join: JoinMode = field(
        default=JoinMode.MANUAL,
        metadata=_help(
            "manual | auto: with auto, a node on an empty data directory that the cluster "
            "does not list asks its peers to add it (a StatefulSet scaled up), and this node "
            "adds nodes that ask and whose certificate proves their id (needs TLS)"
        ),
    )
    peer_listen: str = field(
        default="",
        metadata=_help(
            "peer listener host:port for replication and forwarded calls (empty: none; "
            "required in a cluster of several nodes: peer calls are never served on the "
            "client listener)"
        ),
    )
    health_listen: str = field(
        default="",
        metadata=_help(
            "plaintext grpc.health.v1 listener host:port for probes that cannot speak TLS "
            "(empty: off; Health is always served on the client listener too)"
        ),
    )
    insecure: bool = field(
        default=False,
        metadata=_help(
            "run without TLS although the node listens beyond loopback or has peers "
            "(refused otherwise): on purpose, e.g. on a private test network; the node warns "
            "every few minutes and exports replog_insecure 1"
        ),
    )
    kafka_listen: str = field(
        default="",
        metadata=_help(
            "Kafka protocol listener host:port (port 0: any free; empty: off; docs/kafka.md)"
        ),
    )
    kafka_advertise: str = field(
        default="",
        metadata=_help("address Kafka clients are told to use (default: the bound Kafka one)"),
    )
    kafka_scram_file: Path | None = field(
        default=None,
        metadata=_help(
            "Kafka SASL/SCRAM credentials: lines `User:<name> SCRAM-SHA-256|SCRAM-SHA-512 "
            "iterations=.. salt=.. stored_key=.. server_key=..` (reloaded; `replog token "
            "scram`; needs TLS; SASL/PLAIN uses --token-file)"
        ),
    )
    tls_client_auth: ClientAuth = field(
        default=ClientAuth.NONE,
        metadata=_help(
            "client certificates on the client listener: none | require (mutual TLS; the "
            "certificate's URI SAN replog://client/<name> is the principal User:<name>)"
        ),
    )
    authorization: Authorization = field(
        default=Authorization.OFF,
        metadata=_help(
            "off (anyone may do anything) | acl (callers must authenticate; ACLs in the "
            "cluster metadata decide; see docs/api.md, Authentication)"
        ),
    )
    token_file: Path | None = field(
        default=None,
        metadata=_help("bearer tokens: lines `User:<name> sha256:<hex>` (reloaded; hashes only)"),
    )
    super_users: str = field(
        default="",
        metadata=_help("principals allowed everything, comma-separated (e.g. User:admin)"),
    )
    tls_cert_file: Path | None = field(
        default=None,
        metadata=_help("PEM certificate chain of this node (TLS on when given; reloaded)"),
    )
    tls_key_file: Path | None = field(
        default=None, metadata=_help("PEM private key of tls_cert_file (reloaded)")
    )
    tls_ca_file: Path | None = field(
        default=None,
        metadata=_help("PEM CA bundle that signs the cluster's node certificates (reloaded)"),
    )
    default_replication_factor: int = field(
        default=3, metadata=_help("replicas of a topic created without one (capped by nodes)")
    )
    election_timeout_ms: int = field(
        default=1000,
        metadata=_help("follower patience before an election; randomised up to twice this"),
    )
    replica_fetch_wait_ms: int = field(
        default=400, metadata=_help("how long a leader holds a follower's fetch with no news")
    )
    replica_quiet_fetch_wait_ms: int = field(
        default=20_000,
        metadata=_help(
            "how long a leader holds the fetch of a follower that has its whole log, HW"
            " included (an idle partition goes quiet; liveness comes from node heartbeats);"
            " 0: off"
        ),
    )
    cluster_size: int = field(
        default=0,
        metadata=_help(
            "StatefulSet mode: the number of nodes named by peer_address_template (0: off)"
        ),
    )
    peer_address_template: str = field(
        default="",
        metadata=_help(
            "StatefulSet mode: host:port of the node with ordinal {ordinal}, e.g. "
            "replog-{ordinal}.replog-headless.ns.svc.cluster.local:7070; peers become "
            "1=<ordinal 0>,...; node_id, unless given, is 1 + the ordinal ending HOSTNAME"
        ),
    )
    # Consumer groups (server/groups/, docs/api.md "Consumer groups").
    group_offsets_partitions: int = field(
        default=8,
        metadata=_help(
            "partitions of __consumer_offsets when the cluster first creates it (one group "
            "coordinator per partition leader)"
        ),
    )
    group_offsets_replication_factor: int = field(
        default=3, metadata=_help("replicas of __consumer_offsets (capped by the nodes)")
    )
    group_offsets_snapshot_records: int = field(
        default=10_000,
        metadata=_help(
            "records of a __consumer_offsets partition after which its coordinator restates "
            "every live offset (a snapshot): a new coordinator loads from the latest one"
        ),
    )
    group_offsets_retention_ms: int = field(
        default=7 * 24 * 3600 * 1000,
        metadata=_help(
            "a group with no members and no commit for this long loses its committed offsets"
        ),
    )
    group_session_timeout_ms_default: int = field(
        default=10_000,
        metadata=_help("a member's session timeout when its JoinGroup asks for none"),
    )
    group_session_timeout_ms_min: int = field(
        default=1000, metadata=_help("the shortest session timeout a member may ask for")
    )
    group_session_timeout_ms_max: int = field(
        default=300_000, metadata=_help("the longest session timeout a member may ask for")
    )
    group_heartbeat_interval_ms: int = field(
        default=3000,
        metadata=_help("heartbeat interval told to members (at most a third of their session)"),
    )
    groups_max: int = field(
        default=10_000,
        metadata=_help("groups one node coordinates; more: RESOURCE_EXHAUSTED TOO_MANY_GROUPS"),
    )
    group_members_max: int = field(
        default=1000,
        metadata=_help("members of one group; more: RESOURCE_EXHAUSTED TOO_MANY_MEMBERS"),
    )
    group_metadata_bytes_max: int = field(
        default=4096,
        metadata=_help(
            "metadata bytes of one committed offset; more: INVALID_ARGUMENT "
            "OFFSET_METADATA_TOO_LARGE"
        ),
    )

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """One `--flag` per field; unset flags stay None so env and defaults apply."""
        for f in dataclasses.fields(cls):
            flag = "--" + f.name.replace("_", "-")
            default = f.default
            switch = {"nargs": "?", "const": "true"} if f.type in (bool, "bool") else {}
            parser.add_argument(
                flag,
                dest=f.name,
                default=None,
                metavar=f.name.upper(),
                help=f"{f.metadata['help']} (env {ENV_PREFIX}{f.name.upper()}; default {default})",
                **switch,  # type: ignore[arg-type]
            )

    @classmethod
    def from_sources(
        cls, args: Mapping[str, object] | None = None, env: Mapping[str, str] | None = None
    ) -> Settings:
        """Build from flags (`args`, e.g. `vars(namespace)`) over env over defaults; validate."""
        args = args or {}
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        types = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            raw = args.get(f.name)
            if raw is None:
                raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is None:
                continue
            values[f.name] = convert(f.name, str(f.type), types[f.name], raw)
        derive_cluster(values, env)
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Relations between values (InvalidConfigError naming the first one broken). A new
        plain lower bound goes into `_AT_LEAST`; anything else into the method of its
        concern."""
        for name, minimum in _AT_LEAST.items():
            _need(getattr(self, name) >= minimum, f"{name} must be >= {minimum}")
        self._validate_identity()
        self._validate_sizes()
        self._validate_timers()
        self._validate_security()
        self._validate_cluster()
        self._validate_groups()
        self.storage_config()  # the storage layer validates its own ranges

    def _validate_identity(self) -> None:
        _need(
            len(self.rack) <= RACK_CHARS_MAX and self.rack.isprintable(),
            f"rack must be at most {RACK_CHARS_MAX} printable characters",
        )
        _need(
            self.log_level.upper() in LOG_LEVELS,
            f"log_level must be one of {'|'.join(LOG_LEVELS).lower()}, got {self.log_level!r}",
        )
        _need(is_address(self.listen), f"listen must be host:port, got {self.listen!r}")
        for name in ("metrics_listen", "peer_listen", "health_listen"):
            value = getattr(self, name)
            _need(value == "" or is_address(value), f"{name} must be host:port or empty")
        _need(
            self.open_files_max == 0 or self.open_files_max >= FILES_MAX_MIN,
            f"open_files_max must be 0 (derived) or >= {FILES_MAX_MIN}",
        )

    def _validate_sizes(self) -> None:
        _need(self.message_bytes_max >= 64 * KIB, "message_bytes_max must be >= 64 KiB")
        _need(self.fetch_bytes_max >= HEADER_BYTES, "fetch_bytes_max must be >= 12")
        # A reply holds up to fetch_bytes_max of frames, or one whole frame if it is larger.
        reply = max(self.fetch_bytes_max, self.record_bytes_max + HEADER_BYTES)
        _need(
            reply + REPLY_OVERHEAD_BYTES <= self.message_bytes_max,
            "fetch_bytes_max and record_bytes_max + 12 must leave 4 KiB under message_bytes_max",
        )
        _need(self.stream_bytes_max >= HEADER_BYTES, "stream_bytes_max must be >= 12")
        _need(
            self.streams_max <= self.rpcs_max,
            "streams_max must be <= rpcs_max (a stream is a call)",
        )
        _need(
            self.streams_per_connection_max <= self.streams_max,
            "streams_per_connection_max must be <= streams_max",
        )

    def _validate_timers(self) -> None:
        _need(self.election_timeout_ms >= 50, "election_timeout_ms must be >= 50")
        _need(
            0 < self.replica_fetch_wait_ms < self.election_timeout_ms // 2,
            "replica_fetch_wait_ms must be in (0, election_timeout_ms / 2)",
        )
        _need(
            self.replica_quiet_fetch_wait_ms == 0
            or self.replica_quiet_fetch_wait_ms >= self.election_timeout_ms,
            "replica_quiet_fetch_wait_ms must be 0 (off) or >= election_timeout_ms",
        )

    def _validate_security(self) -> None:
        tls_files = (self.tls_cert_file, self.tls_key_file, self.tls_ca_file)
        _need(
            all(f is None for f in tls_files) or all(f is not None for f in tls_files),
            "tls_cert_file, tls_key_file and tls_ca_file go together",
        )
        _need(
            self.tls_client_auth is ClientAuth.NONE or self.tls is not None,
            "tls_client_auth=require needs TLS (tls_cert_file, tls_key_file, tls_ca_file)",
        )
        _need(
            self.authorization is Authorization.OFF or self.tls is not None,
            "authorization=acl needs TLS: credentials never cross the network in the clear",
        )
        _need(
            self.token_file is None or self.tls is not None,
            "bearer tokens need TLS: without it they cross the network in the clear",
        )
        _need(
            self.join is JoinMode.MANUAL or self.tls is not None,
            "join=auto needs TLS: a joining node's certificate proves its id",
        )
        for name in ("kafka_listen", "kafka_advertise"):
            value = getattr(self, name)
            _need(value == "" or is_address(value), f"{name} must be host:port or empty")
        _need(
            self.kafka_scram_file is None or self.tls is not None,
            "kafka_scram_file needs TLS: SASL credentials never cross the network in the clear",
        )

    def _validate_cluster(self) -> None:
        peers = self.peer_map()
        if peers:
            _need(self.node_id in peers, f"node_id {self.node_id} is not in peers {self.peers!r}")
        refused = exposure.refusal(  # after the addresses were checked (_validate_identity)
            listen=self.listen,
            peer_listen=self.peer_listen,
            peers=len(peers),
            tls=self.tls is not None,
            insecure=self.insecure,
            kafka_listen=self.kafka_listen,
        )
        _need(refused is None, str(refused))
        if len(peers) > 1:
            _need(
                self.tls is None or bool(self.peer_listen),
                "TLS in a cluster of several nodes needs peer_listen (mutual TLS between nodes)",
            )
            if self.peer_listen:
                dial = self.peer_dial_map()
                _need(
                    all(dial[i] != peers[i] for i in peers),
                    "with peer_listen every peers entry is id=host:port/host:peer_port",
                )

    def _validate_groups(self) -> None:
        _need(
            1
            <= self.group_session_timeout_ms_min
            <= self.group_session_timeout_ms_default
            <= self.group_session_timeout_ms_max,
            "group session timeouts must be 1 <= min <= default <= max",
        )

    def peer_map(self) -> dict[int, str]:
        """`peers` parsed: node id -> the host:port clients use (empty for a single node)."""
        return {ident: client for ident, (client, _peer) in self._parse_peers().items()}

    def peer_dial_map(self) -> dict[int, str]:
        """Node id -> the host:port other nodes dial (its peer listener when it has one)."""
        return {ident: peer or client for ident, (client, peer) in self._parse_peers().items()}

    def _parse_peers(self) -> dict[int, tuple[str, str]]:
        out: dict[int, tuple[str, str]] = {}
        for item in filter(None, (x.strip() for x in self.peers.split(","))):
            ident, sep, addresses = item.partition("=")
            client, _, peer = addresses.strip().partition("/")
            if not (
                sep
                and ident.strip().isdigit()
                and is_address(client)
                and (peer == "" or is_address(peer))
            ):
                raise InvalidConfigError(
                    "invalid settings: peers must be id=host:port[/host:peer_port],..., "
                    f"got {item!r}"
                )
            if int(ident) in out:
                raise InvalidConfigError(f"invalid settings: node {ident} listed twice in peers")
            out[int(ident)] = (client, peer)
        return out

    @property
    def tls(self) -> TlsFiles | None:
        """The TLS files (None: plaintext)."""
        if self.tls_cert_file is None or self.tls_key_file is None or self.tls_ca_file is None:
            return None
        return TlsFiles(self.tls_cert_file, self.tls_key_file, self.tls_ca_file)

    # -- fan-out ----------------------------------------------------------------------------

    def replica_config(
        self, voters: tuple[int, ...], observers: tuple[int, ...] = ()
    ) -> ReplicaConfig:
        """The replication core's config of one replica of this node (`voters`, `observers`:
        the partition's starting membership; the log's membership records govern after)."""
        return ReplicaConfig(
            self.node_id,
            voters,
            observers,
            election_timeout_ms_min=self.election_timeout_ms,
            election_timeout_ms_max=2 * self.election_timeout_ms,
            fetch_wait_ms_max=self.replica_fetch_wait_ms,
            fetch_retry_ms=min(self.election_timeout_ms - 1, self.replica_fetch_wait_ms * 2),
            begin_epoch_retry_ms=max(10, self.election_timeout_ms // 5),
            flush_always=self.flush is FlushPolicy.ALWAYS,
            quiet_fetch_wait_ms=self.replica_quiet_fetch_wait_ms,
        )

    def storage_config(self) -> StorageConfig:
        return StorageConfig(
            segment_bytes_max=self.segment_bytes_max,
            index_interval_bytes=self.index_interval_bytes,
            record_bytes_max=self.record_bytes_max,
            retention_bytes=self.retention_bytes,
            retention_ms=self.retention_ms,
            flush=self.flush,
            flush_interval_ms=self.flush_interval_ms,
            # Client reads are capped at fetch_bytes_max by the services; a leader's fetch
            # answer may read up to a message to carry one batch whole (replication).
            read_bytes_max=max(self.fetch_bytes_max, self.message_bytes_max),
        )

    def files_max(self) -> int:
        """The open-files budget of storage: the setting, or half of RLIMIT_NOFILE."""
        return self.open_files_max or files_max_for(nofile_soft_limit())

    def limits_config(self) -> LimitsConfig:
        return LimitsConfig(
            rpcs_max=self.rpcs_max,
            streams_max=self.streams_max,
            streams_per_connection_max=self.streams_per_connection_max,
            acks_none_bytes_max=self.acks_none_bytes_max,
            stream_bytes_pool_max=self.stream_bytes_pool_max,
            append_stream_requests_max=self.append_stream_requests_max,
            append_stream_bytes_max=self.append_stream_bytes_max,
            append_stream_bytes_pool_max=self.append_stream_bytes_pool_max,
            request_bytes_pool_max=self.request_bytes_pool_max,
            message_bytes_max=self.message_bytes_max,
        )

    def groups_config(self) -> GroupsConfig:
        return GroupsConfig(
            offsets_partitions=self.group_offsets_partitions,
            offsets_replication_factor=self.group_offsets_replication_factor,
            offsets_retention_ms=self.group_offsets_retention_ms,
            snapshot_records=self.group_offsets_snapshot_records,
            retention_check_interval_ms=self.retention_check_interval_ms,
            log_retention_ms=self.retention_ms,
            session_timeout_ms_default=self.group_session_timeout_ms_default,
            session_timeout_ms_min=self.group_session_timeout_ms_min,
            session_timeout_ms_max=self.group_session_timeout_ms_max,
            heartbeat_interval_ms=self.group_heartbeat_interval_ms,
            groups_max=self.groups_max,
            members_max=self.group_members_max,
            metadata_bytes_max=self.group_metadata_bytes_max,
            timeout_s=self.ack_timeout_ms / 1000,
        )


# Plain lower bounds, checked first by `Settings.validate` ("<name> must be >= <minimum>").
_AT_LEAST: dict[str, int] = {
    "node_id": 0,
    "partitions_max": 1,
    "fetch_wait_ms_max": 0,
    "stream_bytes_pool_max": 0,
    "rpcs_max": 1,
    "streams_max": 1,
    "streams_per_connection_max": 1,
    "acks_none_bytes_max": 1,
    "append_stream_requests_max": 1,
    "append_stream_bytes_max": 1,
    "append_stream_bytes_pool_max": 1,
    "request_bytes_pool_max": 1,
    "ack_timeout_ms": 1,
    "shutdown_grace_ms": 0,
    "shutdown_handover_ms": 0,
    "leader_balance_interval_ms": 0,
    "retention_check_interval_ms": 1,
    "scrub_bytes_per_s": 0,
    "cleaner_bytes_per_s": 0,
    "cleaner_interval_ms": 1,
    "reassignment_fetch_bytes_per_s": 0,
    "default_replication_factor": 1,
    "group_offsets_partitions": 1,
    "group_offsets_replication_factor": 1,
    "group_offsets_retention_ms": 1,
    "group_offsets_snapshot_records": 1,
    "group_heartbeat_interval_ms": 1,
    "groups_max": 1,
    "group_members_max": 1,
    "group_metadata_bytes_max": 0,
}


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise InvalidConfigError(f"invalid settings: {what}")
