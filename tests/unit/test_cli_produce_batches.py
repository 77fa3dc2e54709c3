"""How `replog produce` cuts its input into Appends (replog.cli.produce, pure parts): at most
`--batch-records` records and `--batch-bytes` bytes each, every value once, in order."""

from __future__ import annotations

import argparse
import io
import os
import queue
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from replog.cli.produce import CHUNK_BYTES, batch_slices, batcher, read_lines


def args(**options: object) -> argparse.Namespace:
    defaults: dict[str, object] = {
        "topic": "t", "partition": None, "key": None, "partitioner": "murmur2", "header": [],
        "key_delimiter": None, "batch_records": 3, "batch_bytes": 10,
    }  # fmt: skip
    return argparse.Namespace(**{**defaults, **options})


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 30), max_size=60),
    records_max=st.integers(1, 8),
    bytes_max=st.integers(1, 50),
)
def test_slices_cover_every_record_in_order_within_both_caps(
    sizes: list[int], records_max: int, bytes_max: int
) -> None:
    cuts = batch_slices(sizes, records_max, bytes_max)
    assert [i for cut in cuts for i in range(len(sizes))[cut]] == list(range(len(sizes)))
    for cut in cuts:
        count = len(range(len(sizes))[cut])
        assert 1 <= count <= records_max
        assert count == 1 or sum(sizes[cut]) <= bytes_max  # a larger record goes alone


def test_an_oversized_record_goes_alone_and_the_rest_fill_up() -> None:
    assert batch_slices([4, 20, 3, 3, 3, 1], 3, 10) == [
        slice(0, 1), slice(1, 2), slice(2, 5), slice(5, 6)
    ]  # fmt: skip
    assert batch_slices([1] * 7, 3, 100) == [slice(0, 3), slice(3, 6), slice(6, 7)]


def test_a_batch_not_yet_full_waits_for_the_next_chunk_and_leaves_at_the_end() -> None:
    split = batcher(args(partition=0), partitions=2, envelope=False)
    assert split([b"a", b"b"], False) == []  # held: it may fill up
    assert split([b"c", b"d"], False) == [(0, [b"a", b"b", b"c"])]
    assert split([b"0123456789", b"e"], False) == [(0, [b"d"]), (0, [b"0123456789"])]
    assert split([], True) == [(0, [b"e"])]
    assert split([], True) == []


def test_keyed_lines_batch_per_partition_within_each_chunk() -> None:
    split = batcher(args(key_delimiter=":"), partitions=1, envelope=True)
    batches = split([b"k:v1", b"k:v2", b"k:v3", b"k:v4", b"plain"], False)
    assert [[r.value for r in records] for _, records in batches] == [  # type: ignore[union-attr]
        [b"v1", b"v2"],  # 8 bytes of lines: a third would pass 10
        [b"v3", b"v4"],
        [b"plain"],  # no key: the same partition (the only one), the next batch
    ]


def test_a_slow_pipe_gives_each_write_as_it_comes_and_a_file_full_chunks() -> None:
    """`tail -f log | replog produce T`: a line written to a pipe is read (and its batch let
    go: not `full`) while the pipe stays open; ready input comes in full 1 MiB chunks."""
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "rb") as reader, os.fdopen(write_fd, "wb") as writer:
        writer.write(b"first\nsecond\npart")
        writer.flush()
        got: queue.Queue[tuple[list[bytes], bool]] = queue.Queue()
        lines = read_lines(reader)
        thread = threading.Thread(target=lambda: got.put(next(lines)), daemon=True)
        thread.start()
        try:
            assert got.get(timeout=60) == ([b"first", b"second"], False)
        finally:
            writer.close()  # the end of the input lets a reader that waited return
            thread.join(timeout=60)
        assert list(lines) == [([b"part"], False)]
    data = io.BytesIO(b"x" * (CHUNK_BYTES - 1) + b"\n" + b"y\n" * 10)
    assert [(len(values), full) for values, full in read_lines(data)] == [(1, True), (10, False)]
