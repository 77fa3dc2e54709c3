"""A disk I/O error (EIO) takes the affected partition offline, not the process (issue 25).

`faulty_serve` (FAULTY_SERVE_TASK=eio) makes every segment write and read of the topics
named `broken*` raise EIO while a flag file exists, as a bad sector would. The node stays
up: the broken partition answers UNAVAILABLE (STORAGE_ERROR for the request that met the
error, PARTITION_OFFLINE from then on) and `replog_replica_offline` is 1 for it; the other
topics keep taking appends and serving reads; nothing reaches the supervisor.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.errors import PartitionOfflineError, StorageError
from tests.integration.servers import ServerProcess
from tests.integration.test_disk_full import gauge

pytestmark = pytest.mark.integration

ONCE = RetryPolicy(attempts_max=1)


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
