"""GetMetadata's and ListTopics's answers, built once per change (issue 27).

A topic's `TopicMetadata` (each partition's leader, epoch and replicas) is kept with what
it was built from: the topic's `TopicMeta` (a new object each time a command changes the
topic) and, for each partition with a replica here, that replica's `LeaderInfo` (leader,
epoch, voters) as this node knows it. It is built again only when one of them changed;
otherwise a call costs a look at this node's replicas of the topic, not a message per
partition. A partition with no replica running here (none assigned here, or one starting,
or failing to open: the reconciler retries it) answers its assignment and the leader the
node's leader directory has heard of (`peering/leader_directory.py`, a hint that may lag;
no leader when it has heard of none, or of one that is not a replica any more); the
directory's version of the topic is kept with the answer, so news rebuilds it too.

`ListTopics`'s answer, and the sorted topic names, are kept per `MetadataImage.topics_version`.
Cached messages are never changed after they are built: callers copy them into answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from replog.server.control.topics import WIRE_FORMATS, WIRE_TIMESTAMP_TYPES
from replog.server.meta.metadata import MetadataImage, TopicMeta
from replog.server.partitions.replica_manager import ReplicaManager
from replog.server.partitions.replicated import LeaderInfo
from replog.server.peering.leader_directory import LeaderDirectory
from replog.v1 import admin_pb2

NO_LEADER = -1

State = LeaderInfo | None  # None: no replica running here


@dataclass(slots=True)
class _Built:
    meta: TopicMeta
    hosted: list[int]  # the partitions with a replica here
    states: list[State]  # theirs, as the answer shows them
    heard: int  # the leader directory's version of the topic
    answer: admin_pb2.TopicMetadata


class MetadataAnswers:
    def __init__(
        self,
        image: MetadataImage,
        replicas: ReplicaManager,
        node_id: int,
        leaders: LeaderDirectory | None = None,
    ) -> None:
        self.image = image
        self.leaders = leaders if leaders is not None else LeaderDirectory(image)
        self.replicas = replicas
        self.node_id = node_id
        self._topics: dict[str, _Built] = {}
        self._listed: tuple[int, admin_pb2.ListTopicsResponse, list[str]] | None = None
        self.built = 0  # topic answers built (a cache miss each; tests, metrics)
        self.reused = 0  # topic answers served as they were (a cache hit each)

    def list_topics(self) -> admin_pb2.ListTopicsResponse:
        return self._list()[1]

    def names(self) -> list[str]:
        """Every topic's name, sorted."""
        return self._list()[2]

    def _list(self) -> tuple[int, admin_pb2.ListTopicsResponse, list[str]]:
        image = self.image
        if self._listed is None or self._listed[0] != image.topics_version:
            names = sorted(image.topics)
            answer = admin_pb2.ListTopicsResponse(
                topics=[
                    admin_pb2.TopicSummary(name=n, partitions=image.topics[n].partitions)
                    for n in names
                ]
            )
            self._listed = (image.topics_version, answer, names)
            if len(self._topics) > 2 * len(names) + 64:  # forget topics deleted since
                self._topics = {n: b for n, b in self._topics.items() if n in image.topics}
        return self._listed

    def topic(self, meta: TopicMeta) -> admin_pb2.TopicMetadata:
        """The topic's answer, as this node knows it now."""
        built = self._topics.get(meta.name)
        if built is None or built.meta is not meta:
            hosted = [p for p in range(meta.partitions) if self.node_id in meta.hosts(p)]
            built = None
        else:
            hosted = built.hosted
        states = self._states(meta, hosted)
        heard = self.leaders.version(meta)
        if built is not None and built.states == states and built.heard == heard:
            self.reused += 1
            return built.answer
        answer = self._build(meta, dict(zip(hosted, states, strict=True)))
        self._topics[meta.name] = _Built(meta, hosted, states, heard, answer)
        self.built += 1
        return answer

    def _states(self, meta: TopicMeta, hosted: list[int]) -> list[State]:
        replicas = self.replicas
        states: list[State] = []
        for p in hosted:
            part = replicas.replica(meta, p)
            states.append(part.leader if part is not None and not part.closed else None)
        return states

    def _build(self, meta: TopicMeta, here: dict[int, State]) -> admin_pb2.TopicMetadata:
        partitions = []
        for p in range(meta.partitions):
            state = here.get(p)
            if state is not None:
                leader_id = NO_LEADER if state.leader_id is None else state.leader_id
                partitions.append(
                    admin_pb2.PartitionMetadata(
                        partition=p, leader_id=leader_id, replicas=state.replicas, epoch=state.epoch
                    )
                )
            else:  # not running here: the leader as heard of (a hint), if still a replica
                heard = self.leaders.leader(meta, p)
                if heard is not None and heard[1] in meta.hosts(p):
                    epoch, leader_id = heard
                else:
                    epoch, leader_id = 0, NO_LEADER
                partitions.append(
                    admin_pb2.PartitionMetadata(
                        partition=p, leader_id=leader_id, replicas=meta.assignment[p], epoch=epoch
                    )
                )
        return admin_pb2.TopicMetadata(
            name=meta.name,
            format=WIRE_FORMATS[meta.format],
            timestamp_type=WIRE_TIMESTAMP_TYPES[meta.timestamp_type],
            partitions=partitions,
            configs=meta.configs,
        )
