"""`make run`: a local 3-node cluster, driven through the `replog` CLI and the Python client.

Starts `replog dev-cluster`'s nodes (separate processes on 127.0.0.1, over TLS with a
throwaway CA, mutual TLS between the nodes), creates a replicated topic, produces records
through `replog produce`, kills the leader of partition 0 with SIGKILL, keeps producing
(the client follows the new leader), shows who leads now, then consumes everything back
through `replog consume` and checks that every acknowledged record is there, in order.
Stops the nodes with SIGTERM.

Each node serves Kafka's protocol too (docs/kafka.md), over the same TLS with client
certificates: at the end, librdkafka (confluent-kafka, a dev dependency; skipped without it)
produces to a topic through the Kafka listeners and the records are read back through
replog's own client, the same offsets and keys (`kafka_step`).

The web console (`replog console`, docs/console.md) runs beside the cluster from the start,
as its own process on 127.0.0.1; its URL is printed first, so the failover can be watched
on its cluster page. `--keep` (`make run KEEP=1`) keeps the cluster and the console running
after the demo, until Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from replog.client import Client
from replog.devcluster import DevCluster
from replog.records import DecodedRecords

RECORDS = 5000
TOPIC = "demo"


def replog(*args: str, stdin: bytes | None = None) -> str:
    cmd = [sys.executable, "-m", "replog", *args]
    result = subprocess.run(cmd, input=stdin, capture_output=True, timeout=120, check=False)
    if result.returncode != 0:
        sys.stderr.write(result.stderr.decode(errors="replace"))
        raise SystemExit(f"`replog {' '.join(args)}` failed with exit code {result.returncode}")
    return result.stdout.decode()


def leader_of(client: Client, partition: int) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = client.refresh_metadata([TOPIC])
        leader = meta.topics[0].partitions[partition].leader_id
        if leader > 0:
            return int(leader)
        time.sleep(0.1)
    raise SystemExit("no leader was elected")


def start_console(cluster: DevCluster, workdir: Path) -> subprocess.Popen[bytes] | None:
    """`replog console` for the cluster on 127.0.0.1 (a free port); prints its URL. None
    when it cannot start (e.g. without the console extra): the demo goes on without it."""
    tls = cluster.client_tls
    assert tls is not None and tls.cert_file is not None and tls.key_file is not None
    ready = workdir / "console.ready"
    log = workdir / "console.log"
    cmd = [
        sys.executable, "-m", "replog", "console",
        "--address", cluster.bootstrap,
        "--tls-ca", str(tls.ca_file), "--tls-cert", str(tls.cert_file),
        "--tls-key", str(tls.key_file),
        "--listen", "127.0.0.1:0", "--ready-file", str(ready), "--log-level", "warning",
    ]  # fmt: skip
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=out)
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_console(proc)
            print(f"  (the web console did not start: {log.read_text(errors='replace')[-300:]})")
            return None
        time.sleep(0.05)
    print(f"web console: {ready.read_text().splitlines()[0]}  (replog console, pid {proc.pid})")
    return proc


def stop_console(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)


def main() -> None:
    keep = "--keep" in sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="replog-demo-") as tmp:
        cluster = DevCluster(Path(tmp), 3, tls=True, acl=True, kafka=True)
        print(
            "starting 3 nodes (flush=always) over TLS with ACLs, with a throwaway CA "
            "(the CLI and the console use the operator's certificate, User:admin) ..."
        )
        cluster.start()
        console = None
        try:
            console = start_console(cluster, Path(tmp))
            run(cluster)
            kafka_step(cluster)
            if keep:
                print("the cluster and the console keep running (--keep): Ctrl-C stops them")
                wait_for_interrupt()
            elif console is not None:
                print("(make run KEEP=1 keeps the cluster and the console running afterwards)")
        finally:
            stop_console(console)
            cluster.stop()
        print("nodes stopped with SIGTERM")


def wait_for_interrupt() -> None:
    """Until SIGINT (Ctrl-C) or SIGTERM; the caller's `finally` then stops everything."""
    signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        signal.sigwait(signals)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)


def run(cluster: DevCluster) -> None:
    for node_id, address in cluster.addresses.items():
        print(f"  node {node_id}: {address}")
    tls = cluster.client_tls
    assert tls is not None and tls.cert_file is not None and tls.key_file is not None
    a = (
        "--address", cluster.bootstrap,
        "--tls-ca", str(tls.ca_file),
        "--tls-cert", str(tls.cert_file),
        "--tls-key", str(tls.key_file),
    )  # fmt: skip
    print(replog("topic", "create", TOPIC, "-p", "2", "--replication-factor", "3", *a).strip())

    lines = b"".join(b"record %06d\n" % i for i in range(RECORDS))
    started = time.perf_counter()
    print(replog("produce", TOPIC, *a, stdin=lines).strip())
    print(f"  {RECORDS:,} records through the CLI in {time.perf_counter() - started:.2f}s")
    print(replog("topic", "describe", TOPIC, *a).rstrip())

    with Client(cluster.bootstrap, tls=tls) as client:
        victim = leader_of(client, 0)
        print(f"killing node {victim}, the leader of partition 0, with SIGKILL")
        cluster.members[victim].kill()
        killed_at = time.perf_counter()
        first_ack = None
        acked = 0
        for i in range(0, RECORDS, 500):
            batch = [b"after-failover %06d" % n for n in range(i, i + 500)]
            client.append(TOPIC, 0, batch, acks="all")
            acked += len(batch)
            if first_ack is None:
                first_ack = time.perf_counter() - killed_at
        print(f"  first acks=all append after the kill: {first_ack:.2f}s; {acked:,} more acked")
        new_leader = leader_of(client, 0)
        print(f"  partition 0 is now led by node {new_leader}")
    print(replog("topic", "describe", TOPIC, *a).rstrip())

    out = replog("consume", TOPIC, "-p", "0", "--format", "json", *a)
    values = [line for line in out.splitlines() if line.strip()]
    print(f"consumed {len(values):,} records of partition 0 back through the CLI")
    expected_tail = [b"after-failover %06d" % n for n in range(RECORDS)]
    import json

    got = [json.loads(v)["value"].encode() for v in values]
    assert got[-RECORDS:] == expected_tail, "every acknowledged record is there, in order"
    print("  every record acknowledged after the failover is there, in order")
    print(replog("offsets", TOPIC, *a).rstrip())


KAFKA_TOPIC = "demo-kafka"
KAFKA_RECORDS = 100


def kafka_step(cluster: DevCluster) -> list[tuple[bytes | None, bytes | None, int]]:
    """Produce through the Kafka listeners with librdkafka (the operator's certificate),
    read back through replog's client: the (key, value, offset) triples it read."""
    for node_id, address in cluster.kafka_addresses.items():
        print(f"  node {node_id} serves Kafka on {address}")
    try:
        from confluent_kafka import Message, Producer
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.cimpl import NewTopic
    except ImportError:
        print("  (confluent-kafka is not installed: the Kafka step is skipped)")
        return []
    config: dict[str, str | int | float | bool] = dict(cluster.kafka_client_config())
    running = [cluster.kafka_addresses[i] for i, n in cluster.members.items() if n.running]
    config["bootstrap.servers"] = ",".join(running)  # not the node the demo killed
    admin = AdminClient(config)
    admin.create_topics([NewTopic(KAFKA_TOPIC, 1, 3)])[KAFKA_TOPIC].result(60)
    producer = Producer(config | {"enable.idempotence": True, "acks": "all"})
    offsets: list[int] = []

    def delivered(err: object, msg: Message) -> None:
        if err is None:
            offsets.append(int(msg.offset() or 0))

    for i in range(KAFKA_RECORDS):
        producer.produce(
            KAFKA_TOPIC, key=b"k%03d" % i, value=b"kafka %03d" % i, on_delivery=delivered
        )
    left = producer.flush(60)
    assert left == 0 and len(offsets) == KAFKA_RECORDS, "every Kafka record was acknowledged"
    print(f"{KAFKA_RECORDS} records produced through Kafka (librdkafka, acks=all, idempotent)")
    with Client(cluster.bootstrap, tls=cluster.client_tls) as client:
        got: list[tuple[bytes | None, bytes | None, int]] = []
        offset = 0
        deadline = time.monotonic() + 60
        while len(got) < KAFKA_RECORDS and time.monotonic() < deadline:
            batch = client.fetch(KAFKA_TOPIC, 0, offset, max_wait_ms=500)
            records = batch.records
            assert isinstance(records, DecodedRecords), "an envelope topic"
            got += [(r.key, r.value, r.offset) for r in records.records()]
            offset = batch.next_offset
    assert [k for k, _, _ in got] == [b"k%03d" % i for i in range(KAFKA_RECORDS)]
    assert [v for _, v, _ in got] == [b"kafka %03d" % i for i in range(KAFKA_RECORDS)]
    assert [o for _, _, o in got] == sorted(offsets), "the offsets Kafka was told"
    print("  read back through replog's client: the same keys, values and offsets")
    return got


if __name__ == "__main__":
    main()
