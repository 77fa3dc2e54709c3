"""`replog group` and the group metrics against a real node: list, describe (members,
assignment, committed offsets, lag), reset-offsets (dry run, earliest, latest, clamped
offset, refused while members run), delete; lag per group and partition on the coordinator."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from replog.client import Client
from tests.integration.servers import ServerProcess
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration

TIMEOUT_S = 60
OPTIONS = {"session_timeout_ms": 1000, "fetch_wait_ms": 100}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("group-cli")
    server = ServerProcess(work / "data", work, ["--group-session-timeout-ms-min", "300"]).start()
    yield server
    server.kill()


def replog(node: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "replog", *args, "--address", node.address]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def document(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def group(node: ServerProcess) -> str:
    """Group "billing" has consumed (and committed) 7 of the 10 records of "bills" p0 and
    all 4 of p1."""
    with Client(node.address) as client:
        client.create_topic("bills", 2)
        client.append("bills", 0, [b"a%d" % i for i in range(10)])
        client.append("bills", 1, [b"b%d" % i for i in range(4)])
        with client.consumer("bills", group="billing", auto_commit=False, **OPTIONS) as c:
            taken: list[Any] = []
            wait_until(lambda: len(taken.__iadd__(c.poll(0.2))) >= 14, "all records")
            p0 = sorted(r.offset for r in taken if r.partition == 0)
            p1 = max(r.offset for r in taken if r.partition == 1)
            c.commit({("bills", 0): p0[7], ("bills", 1): p1 + 1})
    return "billing"


def test_group_list_and_describe_show_members_committed_offsets_and_lag(
    node: ServerProcess, group: str
) -> None:
    listed = document(replog(node, "group", "list", "-o", "json"))
    assert {"group": group, "state": "EMPTY", "members": 0} == {
        k: v for k, v in listed["groups"][0].items() if k in ("group", "state", "members")
    }
    assert set(listed["groups"][0]) == {"group", "state", "members", "generation", "coordinator_id"}
    described = document(replog(node, "group", "describe", group, "-o", "json"))
    assert set(described) == {
        "group",
        "state",
        "generation",
        "coordinator_id",
        "members",
        "partitions",
    }
    rows = {p["partition"]: p for p in described["partitions"]}
    assert rows[0]["lag"] == 3 and rows[0]["high_watermark"] - rows[0]["committed_offset"] == 3
    assert rows[1]["lag"] == 0
    text = replog(node, "group", "describe", group)
    assert text.returncode == 0 and "state EMPTY" in text.stdout
    assert re.search(r"^bills\t0\t\d+\t\d+\t3\t-$", text.stdout, re.M), text.stdout
    with Client(node.address) as client, client.consumer("bills", group=group, **OPTIONS) as c:
        wait_until(lambda: c.poll(0.1) is not None and c.assignment(), "a member")
        live = document(replog(node, "group", "describe", group, "-o", "json"))
        (member,) = live["members"]
        assert member["client_id"] == "replog-python"
        assert {(p["topic"], p["partition"]) for p in member["partitions"]} == {
            ("bills", 0),
            ("bills", 1),
        }
        refused = replog(node, "group", "reset-offsets", group, "--to-earliest")
        assert refused.returncode == 1 and "GROUP_NOT_EMPTY" in refused.stderr
        assert replog(node, "group", "delete", group).returncode == 1


def test_the_coordinator_exports_lag_per_group_and_partition(
    node: ServerProcess, group: str
) -> None:
    def lag_line() -> str | None:
        text = node.metrics()
        match = re.search(
            r'^replog_group_lag_records\{group="billing",partition="0",topic="bills"\} (\S+)$',
            text,
            re.M,
        )
        return match.group(1) if match else None

    assert float(wait_until(lag_line, "the lag metric (refreshed every 5 s)")) >= 0
    text = node.metrics()
    assert 'replog_group_members{group="billing"}' in text
    assert re.search(
        r'^replog_group_committed_offset\{group="billing",partition="1",topic="bills"\} \d',
        text,
        re.M,
    )


def test_reset_offsets_plans_then_moves_a_stopped_group(node: ServerProcess, group: str) -> None:
    def committed() -> dict[int, int]:
        d = document(replog(node, "group", "describe", group, "-o", "json"))
        return {p["partition"]: p["committed_offset"] for p in d["partitions"]}

    before = committed()
    plan = document(
        replog(node, "group", "reset-offsets", group, "--to-earliest", "--dry-run", "-o", "json")
    )
    assert plan["dry_run"] is True
    assert {p["partition"]: p["current_offset"] for p in plan["partitions"]} == before
    assert committed() == before
    earliest = {p["partition"]: p["new_offset"] for p in plan["partitions"]}
    assert replog(node, "group", "reset-offsets", group, "--to-earliest").returncode == 0
    assert committed() == earliest
    done = replog(
        node,
        "group",
        "reset-offsets",
        group,
        "--to-offset",
        "999",
        "--topic",
        "bills",
        "--partition",
        "1",
    )
    assert done.returncode == 0, done.stderr
    hw1 = document(replog(node, "offsets", "bills", "-o", "json"))["partitions"][1]["latest"]
    assert committed() == {0: earliest[0], 1: hw1}  # clamped to the HW
    assert replog(node, "group", "reset-offsets", group, "--to-latest").returncode == 0
    assert all(
        p["lag"] == 0
        for p in document(replog(node, "group", "describe", group, "-o", "json"))["partitions"]
    )
    usage = replog(node, "group", "reset-offsets", group, "--to-latest", "--partition", "0")
    assert usage.returncode == 2


def test_group_delete_drops_a_stopped_group(node: ServerProcess) -> None:
    with Client(node.address) as client:
        client.create_topic("gone", 1)
        client.commit_offsets("doomed", {("gone", 0): 0})
    assert replog(node, "group", "delete", "doomed").returncode == 0
    missing = replog(node, "group", "describe", "doomed")
    assert missing.returncode == 1 and "UNKNOWN_GROUP" in missing.stderr


def test_reset_offsets_to_a_time_and_a_member_seeks_to_a_time(node: ServerProcess) -> None:
    from replog.records import Record

    base = 1_700_000_000_000
    with Client(node.address) as client:
        client.create_topic("stamped", 1, format="envelope")
        res = client.append(
            "stamped", 0, [Record(b"%d" % i, timestamp_ms=base + i) for i in range(10)]
        )
        client.commit_offsets("timely", {("stamped", 0): res.base_offset})
    wanted = res.base_offset + 6  # the first record with timestamp >= base + 6
    plan = document(
        replog(node, "group", "reset-offsets", "timely", "--to-time", str(base + 6), "-o", "json")
    )
    assert [p["new_offset"] for p in plan["partitions"]] == [wanted]
    with Client(node.address) as client:
        assert {c.offset for c in client.committed_offsets("timely")} == {wanted}
        with client.consumer("stamped", group="seeker", auto_commit=False, **OPTIONS) as c:
            first: list[Any] = []
            wait_until(lambda: len(first.__iadd__(c.poll(0.2))) >= 10, "all ten records")
            c.seek_to_time("stamped", 0, base + 8)
            again: list[Any] = []
            wait_until(lambda: len(again.__iadd__(c.poll(0.2))) >= 2, "the last two again")
            assert [r.value for r in again] == [b"8", b"9"]
    bad = replog(node, "group", "reset-offsets", "timely", "--to-time", "yesterday")
    assert bad.returncode == 2 and "--to-time" in bad.stderr
