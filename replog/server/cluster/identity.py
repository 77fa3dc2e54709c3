"""A node's data directory identity, and what a node on an empty directory may do.

A node whose data directory is empty cannot tell by itself whether it is one of the first
nodes of a new cluster or a node whose disk was lost (a wiped or replaced volume). The
difference matters: a replacement has forgotten the records it acknowledged and the votes it
cast, so its vote could elect a leader that lacks committed records (Raft's and KIP-853's
wiped-disk hazard). So, before it takes part in any vote, a node on an empty directory asks
its peers (`Nodes.Identify`, on their peer listener) and decides (`decide`, pure):

* **replacement**: a peer has seen cluster metadata (a metadata epoch or log end above 0)
  or is a replacement itself: the cluster exists. The node starts every replica it had
  before (the metadata partition, and each partition of a topic created before it caught
  up) with a *vote floor* it cannot reach (`QuorumState.vote_floor`): it fetches as a
  follower, votes for nobody and never campaigns, until it durably holds everything its
  leader has committed in the leader's current epoch (the core's repair rule); then it is a
  voter like the others. Its metadata catch-up point is kept (`caught_up_at`), so replicas
  of topics created before it are floored and those created after are not.
* **joining**: as a replacement, but the node is not a voter of the metadata quorum the
  peers' log holds: a node being added (`replog node add`, or a StatefulSet scaled up).
  Its metadata partition starts as an *observer*, so the peer list it was given never
  makes it a voter that the log's membership does not have; the log's records (the quorum
  keeper promoting it once caught up) make it one.

In an existing cluster, a node on an empty directory starts its metadata partition from
the quorum the most advanced peer reports (`starting_quorum`: highest metadata epoch, then
log end; this node an observer unless it is in it), kept in the identity file until the
log's own records govern: "replacement" when it is a voter there, "joining" otherwise. The
metadata leader writes the starting quorum to the log at the cluster's first election
(`membership.QuorumKeeper`), so the quorum is always the log's; until a peer that answers
holds that record, the node asks again.
* **bootstrap**: a majority of the metadata voters (this node included) answer that they
  are on empty directories too and have seen no metadata, and none of the peers that have
  seen no metadata reports other starting voters than this node's settings (`disagreeing`:
  a node started with a longer peer list while the cluster is being founded waits, and
  joins once the cluster exists): nothing can have been acknowledged yet, so the node votes
  at once. A cluster of one bootstraps at once.
* neither (peers unreachable, or not enough of them): ask again; nothing is decided while
  the peers that would tell are down.

A founder that decides late: nodes started together count each other's answers, and a
majority may found the cluster (and elect, and create topics) before a slower one asks
again; that one then finds a cluster that exists and would take itself for a lost disk,
floor its replicas and, in a partition of two replicas, never let the other be elected.
So a node that bootstraps records whom it counted (`founders`: node id and the directory
id each answered with, which a deciding node picks before it asks, and keeps) and
reports them in `Identify`; a deciding node that finds itself there with its own directory
id bootstraps too (it never voted: the very directory it answered with was counted empty),
from the quorum the peers' log holds.

While deciding, the node answers `Identify` itself (`deciding=true`) on a temporary server
on its peer address, so that nodes started together on empty directories find each other.
The decision is written (with a new random directory id) to `node-identity.json` before any
replica starts; a directory that is not empty and has no identity file (a node of an
earlier release, or a single-node data dir to import) is adopted as it is ("existing").

File `node-identity.json` (JSON, written atomically)::

    {"node_id": 2, "directory_id": "0b6c...", "start": "replacement",
     "caught_up_at": 1234,      (null until the metadata partition caught up)
     "voters": [2, 3, 4], "observers": [5],   (optional: the starting quorum, see above)
     "founders": [[1, "9f2e..."], [2, "0b6c..."]]}   (optional: a "bootstrap", see above)

What this does not close: a replacement forgets the votes it cast before the loss, and it
may vote again, after catching up, in an election of an epoch it had voted in already (a
candidate of that epoch cut off since); KIP-853 closes that by making the new directory a
non-voter until a membership change adds it, which the server does not do for a member's
own lost disk (it does for a node being added: "joining").
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc

from replog.errors import CorruptDataError, UnavailableError
from replog.replication.driver import QUORUM_STATE_FILE, encode_quorum_state
from replog.replication.state import EPOCH_MAX, OFFSET_MAX, QuorumState
from replog.server.edge.listeners import add_port, dialer, server_options
from replog.server.logs import log
from replog.server.meta.metadata import NODE_ID_MAX, NODES_MAX, is_address
from replog.server.meta.metadata_log import replica_config_members
from replog.server.settings import RACK_CHARS_MAX, Settings
from replog.storage import checkpoint
from replog.v1 import nodes_pb2, nodes_pb2_grpc

_log = logging.getLogger("replog.server.identity")

IDENTITY_FILE = "node-identity.json"
IGNORED_ENTRIES = frozenset({"lost+found", IDENTITY_FILE + ".tmp"})  # an empty volume has these
BOOTSTRAP = "bootstrap"
REPLACEMENT = "replacement"
JOINING = "joining"
EXISTING = "existing"
STARTS = (BOOTSTRAP, REPLACEMENT, JOINING, EXISTING)
CATCHING_UP_STARTS = (REPLACEMENT, JOINING)  # floored until caught up
ASK_TIMEOUT_S = 1.0
ASK_INTERVAL_S = 0.2
WAITING_LOG_INTERVAL_S = 10.0
DIRECTORY_ID_CHARS_MAX = 64
# A floor no log reaches: votes for nobody until caught up with a leader (see above).
UNREACHABLE_FLOOR = QuorumState(vote_floor=OFFSET_MAX, vote_floor_epoch=EPOCH_MAX)


@dataclass(frozen=True, slots=True)
class Identity:
    node_id: int
    directory_id: str
    start: str  # one of STARTS
    caught_up_at: int | None = None  # replacement: metadata HW once caught up
    # The metadata quorum to start from (empty: the settings' peers), when the peers' log
    # had changed it: the most advanced peer's, this node an observer unless a voter there.
    voters: tuple[int, ...] = ()
    observers: tuple[int, ...] = ()
    # bootstrap: the nodes counted as empty when the cluster was founded (id, directory id)
    founders: tuple[tuple[int, str], ...] = ()

    def floors(self, topic_id: int) -> bool:
        """Whether a new replica of the topic created at metadata offset `topic_id` starts
        floored: on a replacement, for topics created before it caught up."""
        if self.start not in CATCHING_UP_STARTS:
            return False
        return self.caught_up_at is None or topic_id < self.caught_up_at

    @property
    def catching_up(self) -> bool:
        return self.start in CATCHING_UP_STARTS and self.caught_up_at is None

    def metadata_quorum(self, members: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The `__cluster` voters and observers this node starts its metadata replica with
        (`members`: the settings' peers): the quorum this identity recorded (a node started
        on an empty disk learned it from its peers); for a node being added, the other
        members' quorum with this node an observer, no vote before (the log's membership
        records make it a voter); else the quorum `members` call for."""
        if self.voters:
            return self.voters, self.observers
        if self.start == JOINING:
            voters, observers = replica_config_members([m for m in members if m != self.node_id])
            return voters, (*observers, self.node_id)
        return replica_config_members(list(members))


@dataclass(frozen=True, slots=True)
class Answer:
    """A peer's `IdentifyResponse`, as far as the decision goes."""

    deciding: bool
    metadata_epoch: int
    metadata_end_offset: int
    replacement: bool = False  # a replacement itself (still catching up)
    members: tuple[int, ...] = ()  # the members its metadata has (empty: it does not say)
    membership_changed: bool = False  # its metadata log holds a membership record
    voters: tuple[int, ...] = ()  # its metadata quorum (empty: it does not say)
    observers: tuple[int, ...] = ()
    directory_id: str = ""  # (a deciding node's too: the id it will keep)
    founders: tuple[tuple[int, str], ...] = ()  # whom it counted when it bootstrapped


def founded_with(node_id: int, directory_id: str, answers: Mapping[int, Answer]) -> bool:
    """Whether a peer founded the cluster counting this very directory (a late founder)."""
    return bool(directory_id) and any(
        (node_id, directory_id) in a.founders for a in answers.values()
    )


def counted_founders(
    node_id: int, directory_id: str, voters: Sequence[int], answers: Mapping[int, Answer]
) -> tuple[tuple[int, str], ...]:
    """Whom a node that bootstraps counted as empty (itself included), with the directory
    ids they answered with; a late founder keeps those the peers reported instead."""
    if founded_with(node_id, directory_id, answers):
        return tuple(sorted({f for a in answers.values() for f in a.founders}))
    counted = {(node_id, directory_id)} if directory_id else set()
    counted.update(
        (peer, a.directory_id)
        for peer, a in answers.items()
        if peer in voters and a.directory_id and _empty(a)
    )
    return tuple(sorted(counted))


def _empty(a: Answer) -> bool:
    return not a.replacement and a.metadata_epoch == 0 and a.metadata_end_offset == 0


def decide(
    node_id: int, voters: Sequence[int], answers: Mapping[int, Answer], directory_id: str = ""
) -> str | None:
    """BOOTSTRAP, REPLACEMENT, JOINING, or None (ask again). `voters`: the metadata
    partition's voters of this node's settings; `answers`: the peers that answered (this
    node not among them); `directory_id`: the one this node answers with while deciding."""
    if founded_with(node_id, directory_id, answers):
        return BOOTSTRAP  # counted empty by a founder: it never voted (module docstring)
    for answer in answers.values():
        if not _empty(answer):
            return _joining_or_replacement(node_id, answers)
    if disagreeing(voters, answers):
        return None  # founders with other voters: never found a cluster over theirs
    empty = 1 if node_id in voters else 0
    empty += sum(1 for peer, a in answers.items() if peer in voters and peer != node_id)
    if empty >= len(voters) // 2 + 1:
        return BOOTSTRAP
    return None


def disagreeing(voters: Sequence[int], answers: Mapping[int, Answer]) -> list[int]:
    """The peers that have seen no metadata and report starting voters other than
    `voters` (this node's settings'). A node must not found a cluster with them: each side
    would count its own majority, and majorities of voter sets that differ by two nodes or
    more need not overlap (voters 1-5: node 5 elected by 1, 4 and 5; voters 1-3: node 3 by
    2 and 3, in the same epoch); by one node, it would still be a voter the others' log
    never names. It waits until the cluster exists; then the log's quorum decides (it
    joins)."""
    mine = set(voters)
    return sorted(
        peer
        for peer, a in answers.items()
        if a.metadata_epoch == 0
        and a.metadata_end_offset == 0
        and a.voters
        and set(a.voters) != mine
    )


def starting_quorum(
    node_id: int, answers: Mapping[int, Answer]
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The metadata quorum a node on an empty directory of an existing cluster starts
    from: the quorum of the most advanced peer whose log holds a membership record (highest
    metadata epoch, then log end), this node added as an observer unless it is in it; None
    when no such peer answered. So neither a peer list nor a lost disk makes it a voter the
    log does not have."""
    reported = [a for a in answers.values() if a.membership_changed and a.voters]
    if not reported:
        return None
    best = max(reported, key=lambda a: (a.metadata_epoch, a.metadata_end_offset))
    if node_id in best.voters or node_id in best.observers:
        return best.voters, best.observers
    return best.voters, (*best.observers, node_id)


def _joining_or_replacement(node_id: int, answers: Mapping[int, Answer]) -> str | None:
    """The cluster exists: the quorum its log holds decides. REPLACEMENT when this node is
    a voter there (a member's lost disk), JOINING otherwise (a node being added: it starts
    as an observer, so that the peer list it was given never makes it a voter the log does
    not have). None (ask again) while no peer that answered holds a membership record: the
    metadata leader writes the starting quorum at the cluster's first election
    (`membership.QuorumKeeper`), so this lasts a moment after the first election, or until
    the nodes of a cluster of an earlier release run this one (or its quorum is back)."""
    quorum = starting_quorum(node_id, answers)
    if quorum is None:
        return None
    return REPLACEMENT if node_id in quorum[0] else JOINING


# -- the file ---------------------------------------------------------------------------------


def is_empty(data_dir: Path) -> bool:
    """No data yet: the directory does not exist or holds nothing but an empty volume's own
    entries."""
    if not data_dir.exists():
        return True
    return all(entry.name in IGNORED_ENTRIES for entry in data_dir.iterdir())


def load(data_dir: Path) -> Identity | None:
    return checkpoint.load_json(data_dir / IDENTITY_FILE, _identity)


def _identity(data: Any) -> Identity | None:
    identity = Identity(
        data["node_id"],
        data["directory_id"],
        data["start"],
        data.get("caught_up_at"),
        tuple(data.get("voters", ())),
        tuple(data.get("observers", ())),
        tuple((f[0], f[1]) for f in data.get("founders", ())),
    )
    ids = (*identity.voters, *identity.observers)
    ok = (
        all(type(i) is int and 0 < i <= NODE_ID_MAX for i in ids)
        and len(set(ids)) == len(ids)
        and (not identity.observers or bool(identity.voters))
        and type(identity.node_id) is int
        and isinstance(identity.directory_id, str)
        and 0 < len(identity.directory_id) <= DIRECTORY_ID_CHARS_MAX
        and identity.start in STARTS
        and (identity.caught_up_at is None or type(identity.caught_up_at) is int)
        and all(_founder_ok(i, d) for i, d in identity.founders)
    )
    return identity if ok else None


def _founder_ok(node_id: object, directory_id: object) -> bool:
    return (
        type(node_id) is int
        and 0 <= node_id <= NODE_ID_MAX
        and isinstance(directory_id, str)
        and 0 < len(directory_id) <= DIRECTORY_ID_CHARS_MAX
    )


def save(data_dir: Path, identity: Identity) -> None:
    data = {
        "node_id": identity.node_id,
        "directory_id": identity.directory_id,
        "start": identity.start,
        "caught_up_at": identity.caught_up_at,
    }
    if identity.voters:
        data["voters"] = list(identity.voters)
        data["observers"] = list(identity.observers)
    if identity.founders:
        data["founders"] = [list(f) for f in identity.founders]
    checkpoint.write_atomic(data_dir / IDENTITY_FILE, json.dumps(data).encode())


def caught_up(data_dir: Path, identity: Identity, metadata_hw: int) -> Identity:
    """A replacement's metadata partition caught up at `metadata_hw`: saved, returned."""
    done = replace(identity, caught_up_at=metadata_hw)
    save(data_dir, done)
    log(_log, "identity.caught_up", metadata_offset=metadata_hw)
    return done


def floor_replica(directory: Path) -> bool:
    """Write the unreachable vote floor into a replica directory about to start empty (no
    quorum state yet); False (nothing written) when it has one."""
    if (directory / QUORUM_STATE_FILE).exists():
        return False
    directory.mkdir(parents=True, exist_ok=True)
    checkpoint.write_atomic(directory / QUORUM_STATE_FILE, encode_quorum_state(UNREACHABLE_FLOOR))
    return True


# -- deciding -----------------------------------------------------------------------------------

Ask = Callable[[int], Awaitable[Answer | None]]


async def establish(
    data_dir: Path,
    node_id: int,
    voters: Sequence[int],
    peers: Sequence[int],
    ask: Ask,
    *,
    interval_s: float = ASK_INTERVAL_S,
    directory_id: str | None = None,
) -> Identity:
    """This node's identity: from its file, or adopted (a directory with data and no file),
    or decided by asking `peers` (an empty directory). Written before it returns.
    `directory_id`: the new directory's id (a random one if None), which the node answers
    `Identify` with while it decides."""
    known = load(data_dir)
    if known is not None:
        if known.node_id != node_id:
            raise CorruptDataError(
                f"{data_dir} belongs to node {known.node_id}, not to node {node_id}"
            )
        return known
    directory_id = directory_id or new_directory_id()
    start, quorum, founders = (
        (EXISTING, None, ())
        if not is_empty(data_dir)
        else await _decide(node_id, voters, peers, ask, interval_s, directory_id)
    )
    identity = Identity(node_id, directory_id, start, founders=founders)
    if quorum is not None:
        identity = replace(identity, voters=quorum[0], observers=quorum[1])
    data_dir.mkdir(parents=True, exist_ok=True)
    save(data_dir, identity)
    log(_log, "identity.decided", start=start, directory_id=identity.directory_id)
    return identity


def new_directory_id() -> str:
    return uuid.uuid4().hex


async def _decide(
    node_id: int,
    voters: Sequence[int],
    peers: Sequence[int],
    ask: Ask,
    interval_s: float,
    directory_id: str,
) -> tuple[str, tuple[tuple[int, ...], tuple[int, ...]] | None, tuple[tuple[int, str], ...]]:
    """(start, starting quorum or None, founders) once the answers decide."""
    others = [p for p in peers if p != node_id]
    logged = 0.0
    while True:
        replies = await asyncio.gather(*(ask(p) for p in others))
        answers = {p: a for p, a in zip(others, replies, strict=True) if a is not None}
        start = decide(node_id, voters, answers, directory_id)
        if start is not None:
            if start != BOOTSTRAP:
                return start, starting_quorum(node_id, answers), ()
            founders = counted_founders(node_id, directory_id, voters, answers)
            # a late founder: the quorum the peers' log holds, if it changed already
            return start, starting_quorum(node_id, answers), founders
        now = time.monotonic()
        if now - logged >= WAITING_LOG_INTERVAL_S:
            logged = now
            log(
                _log,
                "identity.waiting",
                logging.WARNING,
                answered=sorted(answers),
                peers=others,
                other_voters=disagreeing(voters, answers),
                why="an empty data directory: waiting for peers to tell a new cluster "
                "from a lost disk, and, in an existing cluster, for a peer whose metadata "
                "log holds the quorum (its leader writes it at the first election)",
            )
        await asyncio.sleep(interval_s)


def asker(channel_for: Callable[[int], grpc.aio.Channel], node_id: int) -> Ask:
    """`Ask` over gRPC: a peer that does not answer within ASK_TIMEOUT_S counts as absent."""

    async def ask(peer: int) -> Answer | None:
        stub: Any = nodes_pb2_grpc.NodesStub(channel_for(peer))  # type: ignore[no-untyped-call]
        try:
            reply = await stub.Identify(
                nodes_pb2.IdentifyRequest(node_id=node_id), timeout=ASK_TIMEOUT_S
            )
        except grpc.RpcError:
            return None
        voters, observers = tuple(reply.metadata_voters), tuple(reply.metadata_observers)
        if not _is_quorum(voters, observers):  # out of shape: as if it did not say
            voters, observers = (), ()
        return Answer(
            reply.deciding,
            reply.metadata_epoch,
            reply.metadata_end_offset,
            replacement=reply.replacement,
            members=tuple(m.id for m in reply.members),
            membership_changed=reply.metadata_membership_changed,
            voters=voters,
            observers=observers,
            directory_id=_bounded_id(reply.directory_id),
            founders=tuple(
                (f.node_id, f.directory_id)
                for f in reply.founders[:NODES_MAX]
                if _founder_ok(f.node_id, f.directory_id)
            ),
        )

    return ask


def _bounded_id(directory_id: str) -> str:
    return directory_id if len(directory_id) <= DIRECTORY_ID_CHARS_MAX else ""


def _is_quorum(voters: tuple[int, ...], observers: tuple[int, ...]) -> bool:
    ids = (*voters, *observers)
    return (
        len(voters) > 0
        and len(ids) <= NODES_MAX
        and len(set(ids)) == len(ids)
        and all(0 < i <= NODE_ID_MAX for i in ids)
    )


# -- answering ------------------------------------------------------------------------------


JoinHandler = Callable[[nodes_pb2.JoinRequest, Any], Awaitable[nodes_pb2.JoinResponse]]


class NodesService:
    """`Nodes.Identify`: `state()` gives (directory_id, deciding, epoch, end, replacement);
    `Nodes.Join`: `join` (`joins.Joins.join`; None: not served, e.g. while deciding)."""

    def __init__(
        self,
        node_id: int,
        state: Callable[[], tuple[str, bool, int, int, bool]],
        rack: str = "",
        members: Callable[[], Sequence[tuple[int, str, str]]] = lambda: (),
        membership_changed: Callable[[], bool] = lambda: False,
        quorum: Callable[[], tuple[Sequence[int], Sequence[int]]] = lambda: ((), ()),
        join: JoinHandler | None = None,
        kafka_address: Callable[[], str] = lambda: "",
        founders: Callable[[], Sequence[tuple[int, str]]] = lambda: (),
    ) -> None:
        """`members()`: (id, address, peer_address) of the members this node's metadata has;
        `membership_changed()`: whether its metadata log holds a membership record;
        `kafka_address()`: its Kafka listener's advertised address ("": none)."""
        self.kafka_address = kafka_address
        self.founders = founders
        self.node_id = node_id
        self.state = state
        self.rack = rack
        self.members = members
        self.membership_changed = membership_changed
        self.quorum = quorum
        self.join = join

    async def Join(self, request: nodes_pb2.JoinRequest, context: Any) -> nodes_pb2.JoinResponse:
        if self.join is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this node is not running yet")
        assert self.join is not None
        return await self.join(request, context)

    async def Identify(
        self, request: nodes_pb2.IdentifyRequest, context: Any
    ) -> nodes_pb2.IdentifyResponse:
        directory_id, deciding, epoch, end, replacement = self.state()
        voters, observers = self.quorum()
        return nodes_pb2.IdentifyResponse(
            node_id=self.node_id,
            directory_id=directory_id,
            deciding=deciding,
            metadata_epoch=epoch,
            metadata_end_offset=end,
            replacement=replacement,
            rack=self.rack,
            members=[
                nodes_pb2.Member(id=i, address=a, peer_address=p) for i, a, p in self.members()
            ],
            metadata_membership_changed=self.membership_changed(),
            metadata_voters=voters,
            metadata_observers=observers,
            kafka_address=self.kafka_address(),
            founders=[nodes_pb2.Founder(node_id=i, directory_id=d) for i, d in self.founders()],
        )


async def establish_for(settings: Settings) -> Identity:
    """The data directory's identity as a node starts (`establish`). On an empty directory
    in a cluster of several, this node answers `Nodes.Identify` (deciding) on its peer
    address while it asks its peers, so that nodes started together on empty directories
    find each other."""
    node_id, data_dir = settings.node_id, settings.data_dir
    members = sorted(settings.peer_map() or {node_id: settings.listen})
    voters, observers = replica_config_members(members)
    if load(data_dir) is not None or not is_empty(data_dir):
        return await establish(data_dir, node_id, voters, [], _nobody)
    if members == [node_id]:
        return await establish(data_dir, node_id, voters, [], _nobody)
    temporary = grpc.aio.server(options=server_options(settings.message_bytes_max))
    # (its starting voters too: a peer with other ones does not found a cluster with it)
    directory_id = new_directory_id()  # answered while deciding, kept (late founders)
    deciding = NodesService(
        node_id, lambda: (directory_id, True, 0, 0, False), quorum=lambda: (voters, observers)
    )
    nodes_pb2_grpc.add_NodesServicer_to_server(deciding, temporary)  # type: ignore[no-untyped-call]
    address = settings.peer_listen or settings.listen
    client_auth = bool(settings.peer_listen) or settings.tls_client_auth == "require"
    try:
        add_port(temporary, address, settings.tls, require_client_auth=client_auth)
    except RuntimeError as exc:
        raise UnavailableError(f"cannot listen on {address}: {exc}") from None
    await temporary.start()
    dial_map = settings.peer_dial_map() or settings.peer_map()
    dial = dialer(settings.tls)
    channels: dict[int, grpc.aio.Channel] = {}

    def channel_for(peer: int) -> grpc.aio.Channel:
        if peer not in channels:
            channels[peer] = dial(dial_map[peer])
        return channels[peer]

    try:
        return await establish(
            data_dir,
            node_id,
            voters,
            members,
            asker(channel_for, node_id),
            directory_id=directory_id,
        )
    finally:
        await temporary.stop(0)
        for channel in channels.values():
            await channel.close(None)


async def _nobody(_peer: int) -> Answer | None:
    return None


async def racks_of(
    channel_for: Callable[[int], grpc.aio.Channel], node_id: int, peers: Sequence[int]
) -> dict[int, str]:
    """The racks the `peers` that answer `Identify` within ASK_TIMEOUT_S report ("" for the
    others: unknown)."""

    async def one(peer: int) -> str:
        stub: Any = nodes_pb2_grpc.NodesStub(channel_for(peer))  # type: ignore[no-untyped-call]
        try:
            reply = await stub.Identify(
                nodes_pb2.IdentifyRequest(node_id=node_id), timeout=ASK_TIMEOUT_S
            )
        except grpc.RpcError:
            return ""
        rack = str(reply.rack)
        return rack if len(rack) <= RACK_CHARS_MAX and rack.isprintable() else ""

    found = await asyncio.gather(*(one(p) for p in peers))
    return dict(zip(peers, found, strict=True))


async def members_of(
    channel_for: Callable[[int], grpc.aio.Channel], node_id: int, peers: Sequence[int]
) -> list[tuple[int, str, str]]:
    """The members (id, address, peer_address) that the first of `peers` to answer
    `Identify` within ASK_TIMEOUT_S lists ([] when none answers). Entries out of shape
    (an id out of range, an address that is not host:port) are left out."""
    for peer in peers:
        stub: Any = nodes_pb2_grpc.NodesStub(channel_for(peer))  # type: ignore[no-untyped-call]
        try:
            reply = await stub.Identify(
                nodes_pb2.IdentifyRequest(node_id=node_id), timeout=ASK_TIMEOUT_S
            )
        except grpc.RpcError:
            continue
        found = [
            (m.id, m.address, m.peer_address)
            for m in reply.members[:NODES_MAX]
            if 1 <= m.id <= NODE_ID_MAX
            and is_address(m.address)
            and (not m.peer_address or is_address(m.peer_address))
        ]
        if found:
            return found
    return []
