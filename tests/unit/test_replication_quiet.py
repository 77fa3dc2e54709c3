"""Quiescence: an idle partition's replicas exchange nothing for `quiet_fetch_wait_ms`, and
the node's liveness wakes them (replication/roles/quiet.py, replication/liveness.py).

Three replicas of one partition, each on its own node with its own `NodeLiveness`; messages
are delivered at once, in order (the simulator covers loss, delay and faults)."""

from __future__ import annotations

import random

from replog.replication import (
    Acks,
    FetchRequest,
    FetchResponse,
    Output,
    Replica,
    ReplicaConfig,
    Role,
    Send,
    VoteRequest,
)
from replog.replication.liveness import NodeLiveness

QUIET_MS = 10_000
IDS = (1, 2, 3)


def config(replica_id: int) -> ReplicaConfig:
    return ReplicaConfig(
        replica_id=replica_id,
        voters=IDS,
        election_timeout_ms_min=1000,
        election_timeout_ms_max=2000,
        fetch_wait_ms_max=100,
        fetch_retry_ms=200,
        begin_epoch_retry_ms=100,
        flush_always=False,
        quiet_fetch_wait_ms=QUIET_MS,
    )


class Cluster:
    def __init__(self, *, nodes_heard: bool = True) -> None:
        """`nodes_heard`: False, the replicas get no liveness (a replica outside a node)."""
        self.now = 0
        self.liveness = {i: NodeLiveness(1000) for i in IDS}
        self.replicas = {
            i: Replica(
                config(i),
                random.Random(i),
                0,
                liveness=self.liveness[i] if nodes_heard else None,
            )
            for i in IDS
        }
        self.sent: list[tuple[int, int, object]] = []  # (from, to, message), all of them
        self.down: set[int] = set()
        for i, r in self.replicas.items():
            self.liveness[i].watch(
                lambda node, i=i: self.run(i, self.replicas[i].wake(node, self.now))
            )
            self.run(i, r.start())

    def run(self, src: int, outputs: list[Output]) -> None:
        queue = [(src, o) for o in outputs]
        while queue:
            sender, out = queue.pop(0)
            if not isinstance(out, Send) or sender in self.down or out.to in self.down:
                continue
            self.sent.append((sender, out.to, out.message))
            self.liveness[out.to].heard(sender, self.now)
            queue += [(out.to, o) for o in self.replicas[out.to].receive(out.message, self.now)]

    def tick_until(self, until: int, step: int = 10) -> None:
        """Advance time; each replica ticks only once its next tick is due (as the driver)."""
        while self.now < until:
            self.now += step
            for i, r in self.replicas.items():
                due = r.next_tick_ms()
                if i not in self.down and due is not None and due <= self.now:
                    self.run(i, r.tick(self.now))

    def heartbeats(self) -> None:
        for i in IDS:
            for j in IDS:
                if i != j and i not in self.down and j not in self.down:
                    self.liveness[j].heard(i, self.now)

    def elect_1(self) -> Replica:
        leader = self.replicas[1]
        self.run(1, leader.campaign(self.now))
        assert leader.role is Role.LEADER
        return leader

    def fetches_since(self, mark: int) -> int:
        return sum(isinstance(m, FetchRequest) for _, _, m in self.sent[mark:])


def test_an_idle_partition_goes_quiet_once_every_follower_holds_the_whole_log_and_its_hw() -> None:
    c = Cluster()
    leader = c.elect_1()
    c.run(1, leader.append(1, [b"a"], Acks.ALL, c.now))
    assert leader.high_watermark == leader.log_end_offset == 2
    assert all(r.high_watermark == 2 and r.quiet for r in c.replicas.values())
    mark = len(c.sent)
    # held for 3/4 of quiet_fetch_wait_ms at least (jittered up to all of it: `quiet.park`)
    c.tick_until(QUIET_MS * 3 // 4 - 100)  # 7.5 times as long as an election timeout
    assert c.sent[mark:] == []
    assert leader.role is Role.LEADER and all(r.epoch == leader.epoch for r in c.replicas.values())
    # the safety net: the held fetches are answered after quiet_fetch_wait_ms, and go quiet again
    c.tick_until(QUIET_MS + 500)
    assert 0 < c.fetches_since(mark) <= 2
    assert leader.role is Role.LEADER and all(r.quiet for r in c.replicas.values())


def test_an_append_to_a_quiet_partition_is_answered_at_once() -> None:
    c = Cluster()
    leader = c.elect_1()
    c.run(1, leader.append(1, [b"a"], Acks.ALL, c.now))
    c.tick_until(3000)
    c.run(1, leader.append(2, [b"b"], Acks.ALL, c.now))
    assert leader.high_watermark == 3
    assert all(r.high_watermark == 3 for r in c.replicas.values())


def test_without_node_liveness_nothing_goes_quiet() -> None:
    c = Cluster(nodes_heard=False)
    leader = c.elect_1()
    c.run(1, leader.append(1, [b"a"], Acks.ALL, c.now))
    assert not any(r.quiet for r in c.replicas.values())
    mark = len(c.sent)
    c.tick_until(1000)
    assert c.fetches_since(mark) >= 2 * 5  # every fetch wait, as before quiescence


def test_followers_of_a_silent_leader_node_wake_and_elect_another_leader() -> None:
    c = Cluster()
    leader = c.elect_1()
    c.run(1, leader.append(1, [b"a"], Acks.ALL, c.now))
    c.down.add(1)  # its node crashes: no heartbeat, no answer
    for step in range(10):
        c.now += 250
        c.heartbeats()  # 2 and 3 hear each other
        for i in (2, 3):
            c.liveness[i].check(c.now)
        c.tick_until(c.now + 10)
        if step == 4:
            assert not c.replicas[2].quiet and not c.replicas[3].quiet
    roles = {c.replicas[i].role for i in (2, 3)}
    assert Role.LEADER in roles
    assert any(isinstance(m, VoteRequest) for _, _, m in c.sent)


def test_a_leader_restart_wakes_its_followers_which_fetch_again() -> None:
    c = Cluster()
    leader = c.elect_1()
    c.run(1, leader.append(1, [b"a"], Acks.ALL, c.now))
    for i in (2, 3):
        c.liveness[i].heard(1, c.now, incarnation=1)
    mark = len(c.sent)
    c.now += 50
    c.liveness[2].heard(1, c.now, incarnation=2)  # node 1 restarted (a new process)
    assert not c.replicas[2].quiet and c.replicas[3].quiet
    assert [(s, t) for s, t, m in c.sent[mark:] if isinstance(m, FetchRequest)] == [(2, 1)]


def test_a_retried_fetch_is_parked_as_usual_and_answered_at_the_fetch_wait() -> None:
    c = Cluster()
    leader = c.elect_1()
    c.run(1, leader.append(1, [b"a"], Acks.ALL, c.now))
    mark = len(c.sent)
    c.run(2, [Send(1, FetchRequest(leader.epoch, 2, 2, leader.epoch))])  # a second one
    c.tick_until(150)
    answers = [(s, t) for s, t, m in c.sent[mark:] if isinstance(m, FetchResponse)]
    assert (1, 2) in answers


def test_a_leader_cut_off_from_its_quiet_followers_steps_down() -> None:
    c = Cluster()
    leader = c.elect_1()
    c.run(1, leader.append(1, [b"a"], Acks.ALL, c.now))
    c.down.update({2, 3})
    for _ in range(20):
        c.now += 250
        c.liveness[1].check(c.now)
        c.tick_until(c.now + 10)
    assert leader.role is Role.FOLLOWER


def test_node_liveness_wakes_once_per_silence_restart_or_reconnection() -> None:
    liveness = NodeLiveness(1000)
    woken: list[int] = []
    liveness.watch(woken.append)
    liveness.heard(2, 0, incarnation=7)
    liveness.check(999)
    assert woken == []
    liveness.check(1000)
    liveness.check(1250)  # still silent: woken once
    assert woken == [2]
    liveness.heard(2, 1300, incarnation=7)  # back, same process
    assert woken == [2]
    liveness.heard(2, 1400, incarnation=8)  # restarted
    liveness.connected(2, 1500, incarnation=8)  # a new stream
    assert woken == [2, 2, 2]
    liveness.unwatch(woken.append)
    liveness.check(5000)
    assert woken == [2, 2, 2] and liveness.heard_ms(2) == 1500


def test_a_follower_whose_fetch_is_held_quietly_counts_as_fresh_for_the_balancer() -> None:
    c = Cluster()
    leader = c.elect_1()
    c.run(1, leader.append(1, [b"a"], Acks.ALL, c.now))
    c.tick_until(5000)
    assert leader.held_quietly() == {2, 3}
    assert c.replicas[2].held_quietly() == frozenset()  # (a follower holds nothing)
