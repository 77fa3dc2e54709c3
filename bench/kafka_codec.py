"""The Kafka codec (`replog.kafka`) on one core: messages and record batches per second,
beside kafka-python's codec on the same inputs when it is installed (a dev dependency).

    .venv/bin/python bench/kafka_codec.py [--seconds 1.0]

Each case runs for about `--seconds` (bounded in count too), five times, interleaved with
kafka-python's runs; the medians are reported. Prints one JSON line per case
(`bench/_common.py`): `value` is ours, `ceiling` kafka-python's, both in the case's unit
(higher is better). Cases:

* `produce_request_decode`: a Produce v9 request, 1 topic x 8 partitions, each partition a
  16 KiB records field (kept as bytes: the message layer does not parse batches).
* `metadata_response_encode`: Metadata v12, 50 topics x 12 partitions x 3 replicas.
* `batch_decode_records` / `batch_encode_records`: a record batch of 1000 records (16 B key,
  100 B value, one header), uncompressed and lz4: records per second.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from _common import Result, emit, log

from replog.kafka import codec, protocol
from replog.kafka.compression import Compression
from replog.kafka.protocol import ApiKey, RequestHeader
from replog.kafka.records import Header, batch_of, decode_batch, encode_batch
from replog.kafka.schema import load_spec

RUNS = 5
CALLS_MAX = 200_000


def _run(fn: Callable[[], object], seconds: float, per_call: int) -> float:
    calls = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline and calls < CALLS_MAX:
        fn()
        calls += 1
    return calls * per_call / (time.perf_counter() - start)


def rates(
    ours: Callable[[], object], theirs: Callable[[], object] | None, seconds: float, per_call: int
) -> tuple[float, float | None]:
    """Calls (times `per_call`) per second of `ours` and `theirs`: medians of RUNS runs,
    the two interleaved so that a shared machine's load weighs on both alike."""
    ours_runs: list[float] = []
    their_runs: list[float] = []
    ours()
    if theirs is not None:
        theirs()
    for _ in range(RUNS):
        ours_runs.append(_run(ours, seconds, per_call))
        if theirs is not None:
            their_runs.append(_run(theirs, seconds, per_call))
    return statistics.median(ours_runs), statistics.median(their_runs) if their_runs else None


def produce_request() -> tuple[bytes, dict[str, Any]]:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [
            {
                "name": "events",
                "partition_data": [{"index": p, "records": bytes(16 * 1024)} for p in range(8)],
            }
        ],
    }
    framed = protocol.encode_request(RequestHeader(ApiKey.PRODUCE, 9, 1, "bench"), body)
    return framed[4:], body


def metadata_response() -> dict[str, Any]:
    topics = []
    for t in range(50):
        partitions = [
            {
                "partition_index": p,
                "leader_id": p % 3,
                "leader_epoch": 5,
                "replica_nodes": [0, 1, 2],
                "isr_nodes": [0, 1, 2],
                "offline_replicas": [],
            }
            for p in range(12)
        ]
        topics.append({"name": f"topic-{t}", "topic_id": uuid.uuid4(), "partitions": partitions})
    brokers = [{"node_id": n, "host": f"node-{n}", "port": 9092, "rack": None} for n in range(3)]
    return {"brokers": brokers, "cluster_id": "replog", "controller_id": 0, "topics": topics}


def kafka_python_cases(payload: bytes, metadata: dict[str, Any], batch: bytes) -> dict[str, Any]:
    try:
        from kafka.protocol.metadata import MetadataResponse
        from kafka.protocol.producer import ProduceRequest
        from kafka.record.default_records import DefaultRecordBatch
    except ImportError:
        return {}
    meta_bytes = codec.encode_bytes(load_spec("MetadataResponse"), 12, metadata)
    theirs_meta = MetadataResponse.decode(meta_bytes, version=12)

    def decode_their_batch() -> None:
        for _ in DefaultRecordBatch(batch):
            pass

    return {
        "produce": lambda: ProduceRequest.decode(payload, version=9, header=True),
        "metadata": lambda: theirs_meta.encode(),
        "batch_decode": decode_their_batch,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    payload, _ = produce_request()
    metadata = metadata_response()
    meta_spec = load_spec("MetadataResponse")
    rows = [
        (b"k" * 16, b"v" * 100, 1_700_000_000_000 + i, [Header("h", b"x")]) for i in range(1000)
    ]
    plain = encode_batch(batch_of(0, rows))
    lz4 = encode_batch(batch_of(0, rows, compression=Compression.LZ4))
    theirs = kafka_python_cases(payload, metadata, plain)
    cases: list[tuple[str, str, Callable[[], object], int, str | None]] = [
        (
            "produce_request_decode",
            "requests/s",
            lambda: protocol.decode_request(payload),
            1,
            "produce",
        ),
        (
            "metadata_response_encode",
            "responses/s",
            lambda: codec.encode_bytes(meta_spec, 12, metadata),
            1,
            "metadata",
        ),
        ("batch_decode_records", "records/s", lambda: decode_batch(plain), 1000, "batch_decode"),
        ("batch_decode_lz4_records", "records/s", lambda: decode_batch(lz4), 1000, None),
        ("batch_encode_records", "records/s", lambda: encode_batch(batch_of(0, rows)), 1000, None),
    ]
    for name, unit, ours, per_call, their_key in cases:
        value, ceiling = rates(ours, theirs.get(their_key or ""), args.seconds, per_call)
        log(
            f"{name}: ours {value:,.0f} {unit}"
            + (f", kafka-python {ceiling:,.0f}" if ceiling else "")
        )
        emit(Result(name, round(value), unit, None if ceiling is None else round(ceiling)))


if __name__ == "__main__":
    main()
