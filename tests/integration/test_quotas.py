"""Quotas on a real one-node TLS + ACL cluster (edge/quotas.py, `replog quota`).

`User:bob` (a client certificate) may do everything the ACLs allow (a cluster `all`
grant), but its quotas hold it: over its metadata-writes quota InitProducer calls are
refused QUOTA_EXCEEDED (with `retry_after_ms`) and the `__cluster` log grows by at most the
quota's worth; over its produce quota appends are refused until the hint has passed, and the
client's retries, which wait out the hint, land every record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest

from replog import certs
from replog.client import Client, ClientTls, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import QuotaExceededError
from replog.rpc_errors import from_rpc_error
from replog.v1 import log_pb2, log_pb2_grpc

pytestmark = pytest.mark.slow

PATIENT = RetryPolicy(attempts_max=1_000, deadline_ms=120_000)
INIT_CALLS = 2_000
METADATA_WRITES_PER_S = 5


@dataclass
class Quoted:
    cluster: DevCluster
    bob: ClientTls

    def admin(self) -> Client:
        return Client(self.cluster.bootstrap, tls=self.cluster.client_tls, retry=PATIENT)

    def metrics(self) -> list[tuple[str, dict[str, str], float]]:
        address = self.cluster.members[1].metrics_address
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        samples = []
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            head, _, value = line.rpartition(" ")
            name, _, rest = head.partition("{")
            pairs = [p.split("=", 1) for p in rest.rstrip("}").split(",") if "=" in p]
            samples.append((name, {k: v.strip('"') for k, v in pairs}, float(value)))
        return samples

    def metadata_log_end(self) -> float:
        return next(
            v
            for name, labels, v in self.metrics()
            if name == "replog_log_end_offset" and labels.get("topic") == "__cluster"
        )

    def throttled(self, quota: str) -> float:
        return sum(
            v
            for name, labels, v in self.metrics()
            if name == "replog_quota_throttled_total" and labels.get("quota") == quota
        )


@pytest.fixture(scope="module")
def quoted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quoted]:
    work = tmp_path_factory.mktemp("quotas")
    cluster = DevCluster(
        work / "cluster", 1, tls=True, acl=True, extra_args=["--flush", "interval"]
    )
    cluster.start()
    try:
        ca = certs.Issued(cluster.tls_dir / "ca.pem", cluster.tls_dir / "ca-key.pem")
        bob = certs.issue_client(ca, work, "bob")
        q = Quoted(cluster, ClientTls(ca.cert_file, bob.cert_file, bob.key_file))
        with q.admin() as admin:
            admin.add_acl("User:bob", "all", cluster=True)
        yield q
    finally:
        cluster.kill_all()


def test_init_producer_calls_over_the_metadata_quota_are_refused_and_the_log_stays_bounded(
    quoted: Quoted,
) -> None:
    with quoted.admin() as admin:
        admin.set_quota("User:bob", metadata_writes_per_s=METADATA_WRITES_PER_S)
        assert {"principal": "User:bob", "metadata_writes_per_s": 5}.items() <= next(
            q for q in admin.list_quotas() if q["principal"] == "User:bob"
        ).items()
    t = quoted.bob
    credentials = grpc.ssl_channel_credentials(
        t.ca_file.read_bytes(),
        t.key_file.read_bytes(),
        t.cert_file.read_bytes(),  # type: ignore[union-attr]
    )
    before = quoted.metadata_log_end()
    accepted, refused = 0, []
    started = time.monotonic()
    with grpc.secure_channel(quoted.cluster.members[1].address, credentials) as channel:
        stub = log_pb2_grpc.LogStub(channel)
        for i in range(INIT_CALLS):
            try:
                stub.InitProducer(log_pb2.InitProducerRequest(name=f"bob-{i}"), timeout=30)
                accepted += 1
            except grpc.RpcError as exc:
                refused.append(from_rpc_error(exc))
    elapsed_s = time.monotonic() - started
    bound = METADATA_WRITES_PER_S * (1 + elapsed_s) + 1
    assert accepted <= bound, (accepted, elapsed_s)
    assert len(refused) == INIT_CALLS - accepted
    assert all(isinstance(e, QuotaExceededError) for e in refused), refused[:3]
    first = refused[0]
    assert isinstance(first, QuotaExceededError)
    assert first.quota == "metadata_writes" and first.retriable
    assert first.retry_after_ms is not None and 1 <= first.retry_after_ms <= 1000
    grown = quoted.metadata_log_end() - before
    assert accepted <= grown <= bound, (grown, accepted, elapsed_s)
    assert quoted.throttled("metadata_writes") >= len(refused)
    with quoted.admin() as admin:
        admin.set_quota("User:bob")  # all 0: removed
        assert all(q["principal"] != "User:bob" for q in admin.list_quotas())


@pytest.mark.parametrize("streaming", [True, False], ids=["AppendStream", "Append"])
def test_a_produce_quota_throttles_and_the_clients_retries_land_every_record(
    quoted: Quoted, streaming: bool
) -> None:
    rate = 40_000
    value = b"v" * 10_000
    appends = 12
    topic = f"throttled-{streaming}"
    with quoted.admin() as admin:
        admin.create_topic(topic, 1, replication_factor=1)
        admin.set_quota("User:bob", produce_bytes_per_s=rate)
    before = quoted.throttled("produce_bytes")
    started = time.monotonic()
    with Client(
        quoted.cluster.bootstrap, tls=quoted.bob, retry=PATIENT, streaming=streaming
    ) as bob:
        for _ in range(appends):
            bob.append(topic, 0, [value], acks="all")
    elapsed_s = time.monotonic() - started
    # the bucket lets a burst (one second's worth) through, then the rate
    assert elapsed_s >= (appends * len(value) - rate) / rate * 0.9
    throttled = quoted.throttled("produce_bytes") - before
    assert 1 <= throttled <= 2 * appends  # retries waited out the hint: few refusals
    with quoted.admin() as admin:
        fetched = admin.fetch(topic, 0, 0, max_bytes=10_000_000).records
        assert fetched.values == [value] * appends  # each record once (control records aside)


def test_a_fetch_quota_slows_a_stream_down_to_its_rate(quoted: Quoted) -> None:
    rate = 50_000
    value = b"r" * 10_000
    records = 10
    with quoted.admin() as admin:
        admin.create_topic("streamed", 1, replication_factor=1)
        for _ in range(records):
            admin.append("streamed", 0, [value], acks="all")
        admin.set_quota("User:bob", fetch_bytes_per_s=rate)
    before = quoted.throttled("fetch_bytes")
    got = 0
    started = time.monotonic()
    with Client(quoted.cluster.bootstrap, tls=quoted.bob, retry=PATIENT) as bob:
        batches = bob.stream("streamed", 0, 0, max_bytes=len(value) + 200)
        for batch in batches:
            got += len(batch.frames)
            if batch.next_offset >= batch.high_watermark:  # every record appended above
                break
        batches.close()
    elapsed_s = time.monotonic() - started
    assert got >= records * len(value)
    # one second's worth goes at once, the rest at the rate (the last reply's debt is
    # waited out after it was sent)
    assert elapsed_s >= (got - rate - len(value)) / rate * 0.9, (elapsed_s, got)
    assert quoted.throttled("fetch_bytes") > before


def test_the_cli_sets_and_lists_quotas(quoted: Quoted) -> None:
    env = {**os.environ, **quoted.cluster.client_env()}
    run = [sys.executable, "-m", "replog"]
    subprocess.run(
        [*run, "quota", "set", "--principal", "User:*", "--requests-per-s", "1000"],
        env=env,
        check=True,
        timeout=60,
    )
    listed = subprocess.run(
        [*run, "quota", "list", "-o", "json"],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    quotas = json.loads(listed.stdout)["quotas"]
    assert {"principal": "User:*", "requests_per_s": 1000}.items() <= quotas[0].items()
