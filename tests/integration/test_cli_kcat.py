"""The `replog` command at kcat's level, against a real server: every partition by default,
`-p`, `-K` keys on produce and consume, format strings, `-o -N`, `--count`, `--group`,
`--follow` over several partitions, exit codes, and `node list`'s state column."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.integration.servers import ServerProcess
from tests.integration.test_cli import TIMEOUT_S, replog

pytestmark = pytest.mark.integration

PARTITIONS = 3


def lines_of(result: subprocess.CompletedProcess[bytes]) -> list[bytes]:
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.fixture(scope="module")
def keyed(shared_server: ServerProcess) -> dict[bytes, list[bytes]]:
    """Topic `kc-keyed` (3 partitions) with 60 records `key<i % 10>:value<i>` produced
    with `-K :`; the values of each key, in order."""
    addr = shared_server.address
    created = replog("topic", "create", "kc-keyed", "-p", str(PARTITIONS), address=addr)
    assert created.returncode == 0, created.stderr
    stdin = b"".join(b"key%d:value%d\n" % (i % 10, i) for i in range(60))
    produced = replog("produce", "kc-keyed", "-K", ":", stdin=stdin, address=addr)
    assert produced.returncode == 0, produced.stderr
    by_key: dict[bytes, list[bytes]] = {}
    for i in range(60):
        by_key.setdefault(b"key%d" % (i % 10), []).append(b"value%d" % i)
    return by_key


def test_consume_reads_every_partition_by_default_and_p_narrows(
    shared_server: ServerProcess, keyed: dict[bytes, list[bytes]]
) -> None:
    addr = shared_server.address
    rows = [
        line.split()
        for line in lines_of(replog("consume", "kc-keyed", "-f", "%p %k %s\\n", address=addr))
    ]
    assert len(rows) == 60
    assert {int(p) for p, _k, _v in rows} == set(range(PARTITIONS))  # keys spread over all
    for key, values in keyed.items():  # one key, one partition, in the order produced
        assert [v for _p, k, v in rows if k == key] == values
        assert len({p for p, k, _v in rows if k == key}) == 1
    only = {p for p, _k, _v in rows}
    one = lines_of(replog("consume", "kc-keyed", "-p", "1", "-f", "%p\\n", address=addr))
    assert set(one) == {b"1"} and len(one) == sum(p == b"1" for p, _k, _v in rows)
    two = lines_of(replog("consume", "kc-keyed", "-p", "0,2", "-f", "%p\\n", address=addr))
    repeated = lines_of(
        replog("consume", "kc-keyed", "-p", "0", "-p", "2", "-f", "%p\\n", address=addr)
    )
    assert set(two) == set(repeated) == {b"0", b"2"} & only
    assert len(two) == len(repeated) == 60 - len(one)


def test_key_delimiter_prints_key_then_value(
    shared_server: ServerProcess, keyed: dict[bytes, list[bytes]]
) -> None:
    out = lines_of(replog("consume", "kc-keyed", "-K", "=", address=shared_server.address))
    pairs = {tuple(line.split(b"=")) for line in out}
    assert pairs == {(k, v) for k, vs in keyed.items() for v in vs}


def test_offset_minus_n_starts_n_records_before_each_partitions_end(
    shared_server: ServerProcess, keyed: dict[bytes, list[bytes]]
) -> None:
    addr = shared_server.address
    offsets = json.loads(replog("offsets", "kc-keyed", "-o", "json", address=addr).stdout)
    latest = {p["partition"]: p["latest"] for p in offsets["partitions"]}
    shown = lines_of(replog("consume", "kc-keyed", "-o", "-2", "-f", "%p %o\\n", address=addr))
    expected = {b"%d %d" % (p, end - n) for p, end in latest.items() for n in (2, 1)}
    assert sorted(shown) == sorted(expected)
    assert lines_of(replog("consume", "kc-keyed", "-o", "end", address=addr)) == []
    # kcat's -o s@TIMESTAMP_MS: from the first record at or after it
    every = lines_of(replog("consume", "kc-keyed", "-f", "%p %o\\n", address=addr))
    from_epoch = replog("consume", "kc-keyed", "-o", "s@0", "-f", "%p %o\\n", address=addr)
    assert sorted(lines_of(from_epoch)) == sorted(every) and len(every) == 60
    future = replog("consume", "kc-keyed", "-o", "s@4102444800000", address=addr)
    assert future.returncode == 0 and lines_of(future) == []


def test_count_stops_after_n_records(
    shared_server: ServerProcess, keyed: dict[bytes, list[bytes]]
) -> None:
    assert (
        len(lines_of(replog("consume", "kc-keyed", "-c", "7", address=shared_server.address))) == 7
    )


def test_format_string_prints_every_letter(shared_server: ServerProcess) -> None:
    addr = shared_server.address
    assert replog("topic", "create", "kc-format", address=addr).returncode == 0
    before = int(time.time() * 1000)
    produced = replog(
        "produce", "kc-format", "-K", ":", "--header", "h=1", stdin=b"key1:val1\n", address=addr
    )
    assert produced.returncode == 0, produced.stderr
    fmt = "%t|%p|%o|%k|%K|%s|%S|%T|%h|%%\\n"
    (line,) = lines_of(replog("consume", "kc-format", "-f", fmt, address=addr))
    topic, partition, offset, key, key_len, value, value_len, ts, headers, pct = line.split(b"|")
    assert (topic, partition, key, key_len, value, value_len) == (
        b"kc-format",
        b"0",
        b"key1",
        b"4",
        b"val1",
        b"4",
    )
    assert int(offset) >= 0
    assert before <= int(ts) <= int(time.time() * 1000)
    assert (headers, pct) == (b"h=1", b"%")


def test_group_member_consumes_commits_and_the_next_member_gets_the_rest(
    shared_server: ServerProcess, keyed: dict[bytes, list[bytes]]
) -> None:
    addr = shared_server.address
    first = lines_of(
        replog("consume", "kc-keyed", "--group", "kc-g", "-c", "25", "-f", "%p %o\\n", address=addr)
    )
    assert len(first) == 25
    rest = lines_of(
        replog("consume", "kc-keyed", "--group", "kc-g", "-e", "-f", "%p %o\\n", address=addr)
    )
    assert len(rest) == 35 and not set(first) & set(rest)  # what was printed was committed
    described = json.loads(replog("group", "describe", "kc-g", "-o", "json", address=addr).stdout)
    assert [p["lag"] for p in described["partitions"]] == [0] * PARTITIONS


def test_follow_prints_records_arriving_on_every_partition(shared_server: ServerProcess) -> None:
    addr = shared_server.address
    assert replog("topic", "create", "kc-follow", "-p", "2", address=addr).returncode == 0
    cmd = [sys.executable, "-m", "replog", "consume", "kc-follow", "--follow", "-c", "4",
           "-f", "%p %s\\n", "-a", addr]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for p in (0, 1):
            stdin = b"%d-a\n%d-b\n" % (p, p)
            assert (
                replog("produce", "kc-follow", "-p", str(p), stdin=stdin, address=addr).returncode
                == 0
            )
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert sorted(out.splitlines()) == [b"0 0-a", b"0 0-b", b"1 1-a", b"1 1-b"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("consume", "kc-missing"), 1, b"UNKNOWN_TOPIC"),
        (("consume", "kc-keyed", "-f", "%z"), 2, b"unknown format letter %z"),
        (("consume", "kc-keyed", "-o", "stored"), 2, b"-o stored needs --group"),
        (("consume", "kc-keyed", "-o", "soon"), 2, b"--offset must be"),
        (("consume", "kc-keyed", "-p", "9"), 2, b"no partition [9]"),
        (("consume", "kc-keyed", "-p", "x"), 2, b"comma-separated list of partitions"),
        (("produce", "kc-keyed", "-K", ":", "--key", "k"), 2, b"excludes --key"),
    ],
)
def test_exit_codes_and_one_line_errors(
    shared_server: ServerProcess,
    keyed: dict[bytes, list[bytes]],
    args: tuple[str, ...],
    code: int,
    message: bytes,
) -> None:
    done = replog(*args, address=shared_server.address)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2  # usage errors: argparse's usage line
    assert b"Traceback" not in done.stderr


def test_node_list_shows_each_nodes_state(shared_server: ServerProcess) -> None:
    addr = shared_server.address
    text = lines_of(replog("node", "list", address=addr))
    assert text[0].split(b"\t")[-1] == b"state"
    assert text[1].split(b"\t")[-1] == b"up"
    listed = json.loads(replog("node", "list", "-o", "json", address=addr).stdout)
    assert [n["state"] for n in listed["nodes"]] == ["up"]


def test_a_tombstone_prints_as_an_empty_value_null_in_json_and_length_minus_one(
    shared_server: ServerProcess,
) -> None:
    from replog.client import Client, Record

    with Client(shared_server.address) as client:
        client.create_topic("kc-tomb", 1)
        client.append("kc-tomb", 0, [Record(b"v", key=b"k"), Record(None, key=b"k")])
    addr = shared_server.address
    sizes = lines_of(replog("consume", "kc-tomb", "-f", "%k %S\\n", address=addr))
    assert sizes == [b"k 1", b"k -1"]
    shown = [
        json.loads(line)
        for line in lines_of(replog("consume", "kc-tomb", "-f", "json", address=addr))
    ]
    assert [(r["key"], r["value"]) for r in shown] == [("k", "v"), ("k", None)]
    assert lines_of(replog("consume", "kc-tomb", address=addr)) == [b"v", b""]
