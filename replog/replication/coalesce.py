"""Group commit for the driver: merge the log appends of many inputs into one write.

Pure logic (no I/O). The driver computes the outputs of every input waiting in its inbox,
then performs them through `coalesce`, which may **only move outputs later, never
earlier**, and never across an output that must be durable before the next one:

* consecutive `AppendRecords` (offsets contiguous) become one `AppendRecords` with all the
  values (or, when some carry a producer batch header, one `AppendPieces`): one write,
  and under flush=always one fsync, for the whole group;
* outputs that do not change the log or durable state (`Send`, `SetHighWatermark`,
  `AckCompleted`, `AckFailed`) met between those appends are deferred until just after the
  merged write. That is safe because each of them only needs what came before it: a
  `Send` of records `[s, e)` reads a range that is already in the group, a high watermark
  is at most the LEO the core had then, an ack names offsets already appended;
* anything else (`Persist*`, `AppendControl`, `AppendFrames`, `TruncateTo`, `ResetLog`)
  is a barrier: the pending group and its deferred outputs are emitted before it.
"""

from __future__ import annotations

from itertools import chain

from replog.replication.outputs import (
    AckCompleted,
    AckFailed,
    AppendPieces,
    AppendRecords,
    Output,
    Send,
    SetHighWatermark,
)

_DEFERRABLE = (Send, SetHighWatermark, AckCompleted, AckFailed)


def coalesce(outputs: list[Output]) -> list[Output]:
    """`outputs` with runs of appends merged (see the module docstring). Performing the
    result has the same effect on the log, the durable files and the network as performing
    `outputs` one by one, with fewer writes."""
    result: list[Output] = []
    group: list[AppendRecords] = []
    deferred: list[Output] = []

    def emit_group() -> None:
        if len(group) == 1:
            result.append(group[0])
        elif group and any(a.header is not None for a in group):
            result.append(AppendPieces(group[0].base_offset, tuple(group)))
        elif group:  # no Python work per record: the values are concatenated in C
            values = tuple(chain.from_iterable(a.values for a in group))
            result.append(AppendRecords(group[0].base_offset, values))
        group.clear()
        result.extend(deferred)
        deferred.clear()

    for out in outputs:
        if isinstance(out, AppendRecords):
            if group:
                last = group[-1]
                assert out.base_offset == last.base_offset + last.frame_count, (last, out)
            group.append(out)
        elif group and isinstance(out, _DEFERRABLE):
            deferred.append(out)
        else:
            emit_group()
            result.append(out)
    emit_group()
    return result
