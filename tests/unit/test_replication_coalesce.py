"""Group commit merges appends and only ever moves outputs later, never across a barrier."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from replog.replication import (
    AckCompleted,
    AppendRecords,
    Output,
    PersistQuorumState,
    QuorumState,
    SetHighWatermark,
    TruncateTo,
)
from replog.replication.coalesce import coalesce

_BARRIERS = (PersistQuorumState, TruncateTo)


@st.composite
def output_lists(draw: st.DrawFn) -> list[Output]:
    """Appends at contiguous offsets mixed with deferrable outputs and barriers."""
    out: list[Output] = []
    leo = draw(st.integers(0, 100))
    for step in draw(st.lists(st.sampled_from(["append", "ack", "hw", "persist"]), max_size=30)):
        if step == "append":
            count = draw(st.integers(1, 4))
            out.append(AppendRecords(leo, tuple(b"v%d" % (leo + i) for i in range(count))))
            leo += count
        elif step == "ack":
            out.append(AckCompleted(len(out), max(0, leo - 1), max(0, leo - 1)))
        elif step == "hw":
            out.append(SetHighWatermark(leo))
        else:
            out.append(PersistQuorumState(QuorumState(len(out), None, None)))
    return out


def _appended(outputs: list[Output]) -> list[tuple[int, bytes]]:
    return [
        (a.base_offset + i, v)
        for a in outputs
        if isinstance(a, AppendRecords)
        for i, v in enumerate(a.values)
    ]


@given(output_lists())
def test_the_same_records_are_appended_at_the_same_offsets(outputs: list[Output]) -> None:
    assert _appended(coalesce(outputs)) == _appended(outputs)


@given(output_lists())
def test_other_outputs_keep_their_order_and_barriers_split_the_groups(
    outputs: list[Output],
) -> None:
    merged = coalesce(outputs)
    others = [o for o in outputs if not isinstance(o, AppendRecords)]
    assert [o for o in merged if not isinstance(o, AppendRecords)] == others
    # a barrier sees exactly the records that came before it in the original order
    for index, out in enumerate(merged):
        if isinstance(out, _BARRIERS):
            k = outputs.index(out)
            assert _appended(merged[:index]) == _appended(outputs[:k])


@given(output_lists())
def test_no_output_moves_before_an_append_that_preceded_it(outputs: list[Output]) -> None:
    merged = coalesce(outputs)
    for out in outputs:
        if isinstance(out, AppendRecords):
            continue
        before = _appended(outputs[: outputs.index(out)])
        after = _appended(merged[: merged.index(out)])
        assert after[: len(before)] == before


def test_concurrent_appends_become_one_write() -> None:
    outputs: list[Output] = [
        AppendRecords(5, (b"a",)),
        AckCompleted(1, 5, 5),
        AppendRecords(6, (b"b", b"c")),
        SetHighWatermark(8),
        AckCompleted(2, 6, 7),
    ]
    assert coalesce(outputs) == [
        AppendRecords(5, (b"a", b"b", b"c")),
        AckCompleted(1, 5, 5),
        SetHighWatermark(8),
        AckCompleted(2, 6, 7),
    ]
