"""A node whose disk was lost votes for nobody until it has caught up (server/cluster/identity.py).

The hazard: records acknowledged by {L, X} while S was paused; X's disk is then lost and L
dies. S (stale) and X (empty) are a majority: if X voted as a fresh voter, S would lead
without the acknowledged records, and they would be truncated away when L comes back.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import ReplogError
from replog.replication.driver import load_quorum_state
from replog.server.cluster.identity import IDENTITY_FILE
from tests.integration.test_large_cluster import metadata_leader
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.slow

ELECTION_TIMEOUT_MS = 300
# Long enough for an election to be won several times over (a timeout is 300-600 ms).
LEADERLESS_WINDOW_S = 20 * 2 * ELECTION_TIMEOUT_MS / 1000
PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=200, deadline_ms=60_000)
TOPIC = "acked"


def _leader(client: Client) -> int | None:
    try:
        meta = client.refresh_metadata([TOPIC])
    except ReplogError:
        return None
    leader = meta.topics[0].partitions[0].leader_id
    return leader if leader > 0 else None


def _identity(data_dir: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((data_dir / IDENTITY_FILE).read_text())
    return data


def test_a_wiped_node_does_not_elect_a_stale_leader_and_rejoins_once_caught_up(
    tmp_path: Path,
) -> None:
    args = ["--election-timeout-ms", str(ELECTION_TIMEOUT_MS), "--flush", "always"]
    args += ["--replica-fetch-wait-ms", "100"]
    with DevCluster(tmp_path / "cluster", 3, extra_args=args) as cluster:
        nodes = cluster.members
        # A majority founded the cluster; a node that asked once they had elected a leader
        # counts itself a replacement (and catches up before it votes: harmless).
        starts = [_identity(n.data_dir)["start"] for n in nodes.values()]
        assert starts.count("bootstrap") >= 2 and set(starts) <= {"bootstrap", "replacement"}
        with Client(cluster.bootstrap, retry=PATIENT) as client:
            client.create_topic(TOPIC, partitions=1, replication_factor=3, format="raw")
            leader = wait_until(lambda: _leader(client), "a leader")
            client.append(TOPIC, 0, [b"first"], acks="all")
            stale, wiped = sorted(set(nodes) - {leader})
            # S must not lead the metadata log (`__cluster`): resumed, a paused metadata
            # leader still leads until its check-quorum notices L gone (~1 s), and X, just
            # restarted, may catch its whole metadata log up from it then, which is allowed
            # (no metadata changed meanwhile) but not the case under test (failed ~1 in 4
            # runs, whenever S happened to be the metadata leader).
            if wait_until(lambda: metadata_leader(cluster), "a metadata leader") == stale:
                stale, wiped = wiped, stale
            nodes[stale].signal(signal.SIGSTOP)  # S misses what follows
            acked = [b"acked-%d" % i for i in range(50)]
            for i in range(0, len(acked), 10):
                client.append(TOPIC, 0, acked[i : i + 10], acks="all")  # on L and X
        # X loses its disk, then L dies: only S (stale) and X (empty) are left.
        nodes[wiped].kill()
        shutil.rmtree(nodes[wiped].data_dir)
        nodes[leader].kill()
        nodes[stale].signal(signal.SIGCONT)
        nodes[wiped].start()
        assert _identity(nodes[wiped].data_dir)["start"] == "replacement"
        only_s = nodes[stale].address
        with Client(only_s, retry=RetryPolicy(attempts_max=1)) as client:
            for restart in (True, False):  # X is SIGKILLed and restarted half way: still floored
                deadline = time.monotonic() + LEADERLESS_WINDOW_S / 2
                while time.monotonic() < deadline:  # a window in which S would have won
                    assert _leader(client) not in (stale, wiped), "elected without L's records"
                    time.sleep(0.2)
                if restart:
                    nodes[wiped].kill()
                    nodes[wiped].start()
                    assert _identity(nodes[wiped].data_dir)["caught_up_at"] is None
        # L comes back: it leads, and every acknowledged record is there.
        nodes[leader].start()
        with Client(cluster.bootstrap, retry=PATIENT) as client:
            wait_until(lambda: _leader(client), "a leader once L is back")
            fetched = client.fetch(TOPIC, 0, 0, max_bytes=1 << 20)
            values = list(fetched.records.values)
            assert [v for v in values if v.startswith(b"acked-")] == acked
            # X catches up: its metadata partition, then its replica of the topic
            wait_until(
                lambda: _identity(nodes[wiped].data_dir)["caught_up_at"] is not None,
                "the replacement caught up on the metadata",
            )
            replica_dir = nodes[wiped].data_dir / TOPIC / "partition_0"
            wait_until(
                lambda: replica_dir.exists() and load_quorum_state(replica_dir).vote_floor == 0,
                "the replacement's replica caught up",
            )
            # ...and is a voter again: with L gone once more, S and X elect a leader that
            # has every record, and appends go on
            nodes[leader].kill()
            client.append(TOPIC, 0, [b"after"], acks="all")
            wait_until(lambda: _leader(client) in (stale, wiped), "S or X leads")
            values = list(client.fetch(TOPIC, 0, 0, max_bytes=1 << 20).records.values)
            assert [v for v in values if v.startswith(b"acked-")] == acked
            assert values[-1] == b"after"
