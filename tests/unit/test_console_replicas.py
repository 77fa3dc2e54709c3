"""How the console's topic page words each replica of a partition, as its leader sees it:
the leader's log end, a follower's lag and last fetch, one that has not fetched since the
election, and the state of its node, each part spaced from the next."""

from __future__ import annotations

import html
import re

from replog.client.results import PartitionInfo, ReplicaStatus
from replog.console.state import template_environment

LEADER, FETCHING, DEAD, SILENT = 1, 2, 3, 4


def replica_lines(states: dict[int, str]) -> dict[int, str]:
    """The text of each replica's line on the topic page (tags removed, as a reader sees it)."""
    partition = PartitionInfo(
        partition=0,
        leader_id=LEADER,
        replicas=(LEADER, FETCHING, DEAD, SILENT),
        log_start_offset=0,
        log_end_offset=34043,
        high_watermark=34043,
        size_bytes=1 << 20,
        segment_count=1,
        epoch=2,
        replica_status=(
            ReplicaStatus(LEADER, 34043, 0, 0),
            ReplicaStatus(FETCHING, 34000, 43, 12711),
            ReplicaStatus(DEAD, 0, 34043, -1),
        ),
    )
    template = template_environment().get_template("topic.html")
    context = {
        "topic": "orders",
        "format": "raw",
        "timestamp_type": "",
        "partitions": [partition],
        "states": states,
        "size_total": partition.size_bytes,
        "records_total": 34043,
        "refresh_ms": 2000,
    }
    body = "".join(template.blocks["live"](template.new_context(context)))
    return {
        int(rid): html.unescape(re.sub(r"<[^>]+>", "", line))
        for rid, line in re.findall(r'<li id="replica-0-(\d+)">(.*?)</li>', body)
    }


def test_a_dead_replica_that_never_fetched_says_so_in_words_and_its_node_is_unreachable() -> None:
    lines = replica_lines({LEADER: "ready", FETCHING: "ready", SILENT: "ready"})
    assert lines[DEAD] == (
        "node 3: not fetched since the leader's election, 34043 records behind "
        "down node unreachable"
    )
    assert "never" not in lines[DEAD] and " / " not in lines[DEAD]


def test_a_fetching_replica_shows_its_log_end_lag_and_last_fetch_apart_from_its_badge() -> None:
    lines = replica_lines({LEADER: "ready", FETCHING: "not ready", SILENT: "ready"})
    assert lines[FETCHING] == "node 2: log end 34000, 43 behind, fetched 12711 ms ago not ready"
    lines = replica_lines({LEADER: "ready", FETCHING: "down", SILENT: "ready"})
    assert lines[FETCHING].endswith("fetched 12711 ms ago down node unreachable")


def test_the_leader_shows_its_log_end_and_a_replica_without_status_says_so() -> None:
    lines = replica_lines({LEADER: "ready", FETCHING: "ready", SILENT: "ready", DEAD: "ready"})
    assert lines[LEADER] == "node 1 (leader): log end 34043"
    assert lines[SILENT] == "node 4: no status"
    assert lines[FETCHING] == "node 2: log end 34000, 43 behind, fetched 12711 ms ago"
