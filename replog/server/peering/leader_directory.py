"""The leader directory: the leader (node id and epoch) of every partition of the cluster,
as this node has heard of it, including partitions it hosts no replica of (pure: no I/O).

Each partition is its own Raft group, so a node's replicas know the leaders of their own
partitions only. Nodes tell each other of leadership changes (`leader_news.py`: a replica
that starts to lead tells every peer); this directory keeps what they said so that
GetMetadata and Kafka's Metadata name a leader for every partition. What it holds is a hint
that may lag: a node that hosts a replica answers from its replica, never from here.

Merge rules (`merge`), for an entry (topic, topic_id, partition, epoch, leader_id):
- current topic (the image has `topic` with that `topic_id`) and partition: kept if its
  epoch is higher than the one held for the partition (a lower or equal epoch never
  replaces one: one leader per epoch);
- a topic id the image does not have yet (`topic_id >= image.applied_offset`: its
  CreateTopic is not applied here yet), or a partition past the topic's count (its
  CreatePartitions is not applied yet): kept aside, at most `EARLY_ENTRIES_MAX`, and
  merged when the image has it (`version`, `leader`);
- anything else (a deleted topic, an older incarnation of the name): dropped.
A topic's entries go when the image no longer has it with that id (swept once per
`topics_version`, O(topics)). So the directory holds at most one entry per partition of
the image, plus the bounded early ones.

`version(meta)` counts the changes of a topic's entries: answer caches (control/answers.py)
rebuild a topic's answer only when it moved.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from replog.errors import InvalidArgumentError
from replog.replication.state import EPOCH_MAX, NODE_ID_MAX
from replog.server.meta.metadata import MetadataImage, TopicMeta
from replog.storage.names import PARTITIONS_MAX, TOPIC_NAME_CHARS_MAX

# Entries of topics (or partitions) not applied here yet: a node that starts gets its peers'
# directories before it has caught up on the metadata (~200 bytes each at most).
EARLY_ENTRIES_MAX = 65_536
TOPIC_ID_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Entry:
    topic: str
    topic_id: int
    partition: int
    epoch: int
    leader_id: int


class _Topic:
    __slots__ = ("leaders", "topic_id", "version")

    def __init__(self, topic_id: int) -> None:
        self.topic_id = topic_id
        self.leaders: dict[int, tuple[int, int]] = {}  # partition -> (epoch, leader id)
        self.version = 0


def check_entry(entry: Entry) -> None:
    """Range checks of an entry off the wire (`InvalidArgumentError`)."""
    topic = entry.topic
    if not 1 <= len(topic) <= TOPIC_NAME_CHARS_MAX:
        raise InvalidArgumentError(f"leader entry: topic name of {len(topic)} characters")
    if not 0 <= entry.partition < PARTITIONS_MAX:
        raise InvalidArgumentError(f"leader entry: partition {entry.partition} out of range")
    if not 0 <= entry.epoch <= EPOCH_MAX:
        raise InvalidArgumentError(f"leader entry: epoch {entry.epoch} out of range")
    if not 1 <= entry.leader_id <= NODE_ID_MAX:
        raise InvalidArgumentError(f"leader entry: leader id {entry.leader_id} out of range")
    if not 0 <= entry.topic_id <= TOPIC_ID_MAX:
        raise InvalidArgumentError(f"leader entry: topic id {entry.topic_id} out of range")


class LeaderDirectory:
    """Partition leaders as heard of, checked against the node's metadata image."""

    def __init__(self, image: MetadataImage, early_entries_max: int = EARLY_ENTRIES_MAX) -> None:
        self.image = image
        self.early_entries_max = early_entries_max
        self._topics: dict[str, _Topic] = {}
        self._early: dict[str, dict[int, Entry]] = {}  # topic -> partition -> newest
        self._early_count = 0
        self._swept_version = -1
        self.dropped = 0  # entries dropped as stale, deleted or over the bound (tests, metrics)

    def merge(self, entries: Iterable[Entry]) -> list[Entry]:
        """Take what a peer (or this node) says; returns the entries that changed the
        directory (the news worth passing on)."""
        self._sweep()
        changed = []
        for entry in entries:
            if self._merge_one(entry):
                changed.append(entry)
        return changed

    def _merge_one(self, entry: Entry) -> bool:
        meta = self.image.topics.get(entry.topic)
        if meta is None or meta.topic_id != entry.topic_id:
            if entry.topic_id >= self.image.applied_offset:
                return self._keep_early(entry)
            self.dropped += 1  # a deleted topic, or an older incarnation of the name
            return False
        if entry.partition >= meta.partitions:
            return self._keep_early(entry)  # CreatePartitions not applied here yet
        held = self._topics.get(entry.topic)
        if held is None or held.topic_id != meta.topic_id:
            held = self._topics[entry.topic] = _Topic(meta.topic_id)
        now = held.leaders.get(entry.partition)
        if now is not None and entry.epoch <= now[0]:
            return False  # not newer: one leader per epoch
        held.leaders[entry.partition] = (entry.epoch, entry.leader_id)
        held.version += 1
        return True

    def _keep_early(self, entry: Entry) -> bool:
        mine = self._early.get(entry.topic)
        now = mine.get(entry.partition) if mine is not None else None
        if now is not None and (now.topic_id, now.epoch) >= (entry.topic_id, entry.epoch):
            return False
        if now is None and self._early_count >= self.early_entries_max:
            self.dropped += 1
            return False
        if mine is None:
            mine = self._early[entry.topic] = {}
        self._early_count += now is None
        mine[entry.partition] = entry
        return True

    def _promote(self, name: str) -> None:
        """Merge the early entries of topic `name` (those the image does not have yet are
        kept aside again)."""
        mine = self._early.pop(name, {})
        self._early_count -= len(mine)
        self.merge(list(mine.values()))

    def _sweep(self) -> None:
        """Forget the entries of topics the image no longer has (with that id), once per
        topics change."""
        image = self.image
        if image.topics_version == self._swept_version:
            return
        self._swept_version = image.topics_version
        for name, held in list(self._topics.items()):
            meta = image.topics.get(name)
            if meta is None or meta.topic_id != held.topic_id:
                self.dropped += len(held.leaders)
                del self._topics[name]
        for name, mine in list(self._early.items()):
            stale = [p for p, e in mine.items() if self._stale(e)]
            for p in stale:
                del mine[p]
            if not mine:
                del self._early[name]
            self._early_count -= len(stale)
            self.dropped += len(stale)

    def _stale(self, entry: Entry) -> bool:
        """An early entry whose topic the image has gone past (deleted, or made again)."""
        if entry.topic_id >= self.image.applied_offset:
            return False
        meta = self.image.topics.get(entry.topic)
        return meta is None or meta.topic_id != entry.topic_id

    def version(self, meta: TopicMeta) -> int:
        """How many times the topic's entries changed (answer caches compare it)."""
        self._sweep()
        if meta.name in self._early:
            self._promote(meta.name)
        held = self._topics.get(meta.name)
        if held is None or held.topic_id != meta.topic_id:
            return 0
        return held.version

    def leader(self, meta: TopicMeta, partition: int) -> tuple[int, int] | None:
        """(epoch, leader id) of `partition` of `meta`'s topic, as heard (None: unknown)."""
        if meta.name in self._early:
            self._promote(meta.name)
        held = self._topics.get(meta.name)
        if held is None or held.topic_id != meta.topic_id:
            return None
        return held.leaders.get(partition)

    def entries(self) -> Iterator[Entry]:
        """Every entry held for a current topic (a peer's full copy)."""
        self._sweep()
        for name, held in list(self._topics.items()):
            for partition, (epoch, leader) in list(held.leaders.items()):
                yield Entry(name, held.topic_id, partition, epoch, leader)

    def held(self) -> int:
        """Entries held, without sweeping (safe from the metrics thread: reads only)."""
        return sum(len(h.leaders) for h in list(self._topics.values())) + self._early_count

    def __len__(self) -> int:
        self._sweep()
        return sum(len(held.leaders) for held in self._topics.values()) + self._early_count
