"""A disk I/O error (EIO) takes the affected partition offline, not the process (issue 25).

`faulty_serve` (FAULTY_SERVE_TASK=eio) makes every segment write and read of the topics
named `broken*` raise EIO while a flag file exists, as a bad sector would. The node stays
up: the broken partition answers UNAVAILABLE (STORAGE_ERROR for the request that met the
error, PARTITION_OFFLINE from then on) and `replog_replica_offline` is 1 for it; the other
topics keep taking appends and serving reads; nothing reaches the supervisor.
"""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.errors import PartitionOfflineError, StorageError
from tests.integration.servers import ServerProcess
from tests.integration.test_cluster import leader_of, read_all
from tests.integration.test_disk_full import gauge

pytestmark = pytest.mark.integration

ONCE = RetryPolicy(attempts_max=1)
PATIENT = RetryPolicy(attempts_max=200, backoff_max_ms=200, deadline_ms=60_000)


def test_an_io_error_takes_only_its_partition_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = tmp_path / "eio-on"
    monkeypatch.setenv("FAULTY_SERVE_TASK", "eio")
    monkeypatch.setenv("FAULTY_SERVE_FLAG", str(flag))
    server = ServerProcess(
        tmp_path / "data", tmp_path, module="tests.integration.faulty_serve"
    ).start()
    try:
        with Client(server.address, timeout_s=10, retry=ONCE) as client:
            client.create_topic("broken", 1)
            client.create_topic("fine", 2)
            first = client.append("broken", 0, [b"before"]).base_offset
            flag.touch()  # the disk under `broken` fails from now on
            with pytest.raises(StorageError) as met:
                client.append("broken", 0, [b"during"])
            assert met.value.code == "UNAVAILABLE" and met.value.retriable
            deadline = time.monotonic() + 30
            while True:  # from now on the partition is offline, for appends and reads
                try:
                    client.append("broken", 0, [b"again"])
                except PartitionOfflineError as err:
                    assert err.code == "UNAVAILABLE" and err.retriable
                    break
                except StorageError:
                    pass
                assert time.monotonic() < deadline, "the partition never went offline"
            with pytest.raises(PartitionOfflineError):
                client.fetch("broken", 0, first)
            for i in range(20):  # the other partitions keep serving
                for p in (0, 1):
                    res = client.append("fine", p, [b"fine-%d" % i])
                    assert client.fetch("fine", p, res.base_offset).records.values[:1] == [
                        b"fine-%d" % i
                    ]
            assert gauge(server, "replog_replica_offline", topic="broken", partition="0") == 1
            assert gauge(server, "replog_replica_offline", topic="fine", partition="0") == 0
            assert client.list_topics() == {"broken": 1, "fine": 2}
        assert server.proc is not None and server.proc.poll() is None
        text = server.log_text()
        assert "is offline: an I/O error" in text
        assert "task.failed" not in text and "server.failed" not in text
    finally:
        server.kill()


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def test_the_other_replicas_elect_a_leader_when_the_leaders_disk_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    free = free_ports(6)
    ports = dict(zip((1, 2, 3), free[:3], strict=True))
    peer_ports = dict(zip((1, 2, 3), free[3:], strict=True))
    peers = ",".join(f"{i}=127.0.0.1:{port}/127.0.0.1:{peer_ports[i]}" for i, port in ports.items())
    monkeypatch.setenv("FAULTY_SERVE_TASK", "eio")
    monkeypatch.setenv("FAULTY_SERVE_FLAG", "eio-on")  # beside each node's data directory
    nodes: dict[int, ServerProcess] = {}
    for i, port in ports.items():
        workdir = tmp_path / f"node{i}"
        workdir.mkdir()
        args = ["--node-id", str(i), "--listen", f"127.0.0.1:{port}", "--peers", peers]
        args += ["--peer-listen", f"127.0.0.1:{peer_ports[i]}", "--insecure"]
        nodes[i] = ServerProcess(
            workdir / "data", workdir, args, module="tests.integration.faulty_serve"
        )
    try:
        with ThreadPoolExecutor(3) as pool:  # together: each waits for the others
            list(pool.map(ServerProcess.start, nodes.values()))
        bootstrap = ",".join(n.address for n in nodes.values())
        with Client(bootstrap, timeout_s=10, retry=PATIENT) as client:
            client.create_topic("broken", 1, 3)
            acked = [b"before-%d" % i for i in range(20)]
            client.append("broken", 0, acked, acks="all")
            old = leader_of(client, "broken")
            (nodes[old].workdir / "eio-on").touch()  # the leader's disk fails
            for i in range(20):  # the client moves to the new leader
                client.append("broken", 0, [b"after-%d" % i], acks="all")
                acked.append(b"after-%d" % i)
            survivors = ",".join(n.address for i, n in nodes.items() if i != old)
            with Client(survivors, timeout_s=10, retry=PATIENT) as others:
                assert leader_of(others, "broken") != old  # the offline node knows none
            assert [v for _, v in read_all(client, "broken")] == acked
            assert gauge(nodes[old], "replog_replica_offline", topic="broken", partition="0") == 1
        for node in nodes.values():
            assert node.proc is not None and node.proc.poll() is None, node.log_text()
        assert "task.failed" not in nodes[old].log_text()
    finally:
        for node in nodes.values():
            node.kill()
