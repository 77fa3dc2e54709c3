"""A leader's side of the log (pure): appends, acknowledgements, the HW, serving fetches.

The leader appends client batches and membership records, tracks each other replica's
`Progress`, advances the HW to what a majority of its voters holds (`quorum.py`), answers
acknowledgements once flushed (acks=leader under flush=always) or committed (acks=all),
and answers fetches with records, a divergence, or a log start (parking a fetch that is
up to date as a long poll).
"""

from __future__ import annotations

from collections.abc import Sequence

from replog.replication.epochs import EpochHistory
from replog.replication.membership import Membership, MembershipEntry
from replog.replication.messages import (
    BeginEpoch,
    Diverging,
    FetchRequest,
    FetchResponse,
    Records,
    StartAt,
    TimeoutNow,
)
from replog.replication.outputs import (
    AckCompleted,
    AckFailed,
    AckFailure,
    Acks,
    AppendControl,
    AppendRecords,
    MembershipChange,
    PersistMembershipHistory,
    Send,
    SetHighWatermark,
)
from replog.replication.producers import BatchHeader, Check, ProducerBatch, Verdict
from replog.replication.quorum import next_high_watermark
from replog.replication.roles import quiet
from replog.replication.roles.core import Core, PendingAck, Progress, Step


def serving(c: Core) -> bool:
    """A leader whose own epoch is committed (its HW is past the epoch's control record)."""
    return c.step is Step.LEADER and c.hw > c.control_offset and c.transfer is None


def append(
    c: Core,
    request_id: int,
    values: Sequence[bytes],
    acks: Acks,
    now_ms: int,
    producer: ProducerBatch | None,
    timestamp_ms: int,
) -> None:
    """A client Append (see `Replica.append`)."""
    if c.step is not Step.LEADER:
        c.out.append(AckFailed(request_id, AckFailure.NOT_LEADER, c.leader_id))
        return
    if c.transfer is not None:  # handing over: the target leads next
        c.out.append(AckFailed(request_id, AckFailure.NOT_LEADER, c.transfer[0]))
        return
    header = None
    if producer is not None:
        check = c.producers.check(producer, len(values))
        if check.verdict is Verdict.DUPLICATE:
            await_ack(c, PendingAck(request_id, check.base_offset, check.last_offset), acks, now_ms)
            return
        if check.verdict is not Verdict.APPEND:
            c.out.append(_refusal(request_id, check))
            return
        header = BatchHeader(
            producer.producer_id,
            producer.producer_epoch,
            producer.base_sequence,
            len(values),
            timestamp_ms,
        )
        c.producers.record(c.leo, header)
    frame_offset = c.leo
    c.out.append(AppendRecords(frame_offset, tuple(values), header))
    base = frame_offset + (header is not None)
    c.leo = base + len(values)
    await_ack(c, PendingAck(request_id, base, c.leo - 1), acks, now_ms)


def change_membership(c: Core, request_id: int, wanted: Membership, now_ms: int) -> None:
    """Append a membership record (see `Replica.change_membership`)."""
    refusal = membership_refusal(c, wanted)
    if refusal is not None:
        leader = c.transfer[0] if c.transfer is not None else c.leader_id
        c.out.append(AckFailed(request_id, refusal, leader))
        return
    latest = c.members.latest_offset
    if latest >= 0 and wanted.same_as(c.membership):  # wait for the record of it
        await_ack(c, PendingAck(request_id, latest, latest), Acks.ALL, now_ms)
        return
    offset = c.leo
    c.members.append(MembershipEntry(offset, wanted))
    c.out.append(PersistMembershipHistory(c.members.entries))
    c.out.append(AppendControl(offset, MembershipChange(wanted.voters, wanted.observers)))
    c.leo += 1
    sync_progress(c, now_ms)
    await_ack(c, PendingAck(request_id, offset, offset), Acks.ALL, now_ms)


def membership_refusal(c: Core, wanted: Membership) -> AckFailure | None:
    if c.step is not Step.LEADER or c.transfer is not None:
        return AckFailure.NOT_LEADER
    if not serving(c):  # (see `Replica.change_membership`: Ongaro's fix)
        return AckFailure.EPOCH_NOT_COMMITTED
    if wanted.problem() is not None:
        return AckFailure.INVALID_MEMBERSHIP
    current = c.membership
    if wanted.same_as(current):
        return None
    if c.members.latest_offset >= c.hw:
        return AckFailure.MEMBERSHIP_CHANGE_IN_PROGRESS
    added = set(wanted.voters) - set(current.voters)
    removed = set(current.voters) - set(wanted.voters)
    if len(added) + len(removed) > 1:
        return AckFailure.TOO_MANY_VOTER_CHANGES
    if c.replica_id in removed:
        return AckFailure.LEADER_REMOVAL
    for replica in added:
        progress = c.progress.get(replica)
        if (
            replica not in current.observers
            or progress is None
            or progress.last_fetch_ms is None
            or progress.match < c.hw
        ):
            return AckFailure.NOT_CAUGHT_UP
    return None


def sync_progress(c: Core, now_ms: int) -> None:
    """Track the replicas of the current membership (a new one is told who leads at once;
    a removed one is sent nothing more)."""
    me = c.replica_id
    members = c.membership
    wanted = {v: True for v in members.voters if v != me}
    wanted.update(dict.fromkeys(members.observers, False))
    for replica in [r for r in c.progress if r not in wanted]:
        del c.progress[replica]
    for replica, voter in wanted.items():
        progress = c.progress.get(replica)
        if progress is None:
            c.progress[replica] = Progress(voter=voter, begin_sent_ms=now_ms)
            c.out.append(Send(replica, BeginEpoch(c.epoch, me)))
        else:
            progress.voter = voter


def await_ack(c: Core, ack: PendingAck, acks: Acks, now_ms: int) -> None:
    """Answer `ack` now or once its records are flushed (acks=leader under flush=always)
    or committed (acks=all)."""
    done = AckCompleted(ack.request_id, ack.base_offset, ack.last_offset)
    if acks is Acks.NONE or (acks is Acks.LEADER and not c.config.flush_always):
        c.out.append(done)
    elif acks is Acks.LEADER:
        if c.flushed > ack.last_offset:
            c.out.append(done)
        else:
            c.pending_leader.append(ack)
    elif c.hw > ack.last_offset:  # a retry of a committed batch
        c.out.append(done)
    else:  # (a retry may queue behind newer batches: they commit first anyway)
        c.pending_all.append(ack)
    update_high_watermark(c, now_ms)
    answer_parked(c, now_ms)


def flushed(c: Core, now_ms: int) -> None:
    """The log was flushed further: answer acks=leader, recount the HW."""
    while c.pending_leader and c.pending_leader[0].last_offset < c.flushed:
        ack = c.pending_leader.popleft()
        c.out.append(AckCompleted(ack.request_id, ack.base_offset, ack.last_offset))
    update_high_watermark(c, now_ms)
    maybe_timeout_now(c)


def fail_pending_acks(c: Core) -> None:
    for ack in (*c.pending_leader, *c.pending_all):
        c.out.append(AckFailed(ack.request_id, AckFailure.OUTCOME_UNKNOWN, None))
    c.pending_leader.clear()
    c.pending_all.clear()


def maybe_timeout_now(c: Core) -> None:
    """Transfer under way: once the target holds the whole log and every append is
    committed (so none is left waiting), tell it to campaign."""
    if c.transfer is None or c.timeout_now_sent:
        return
    target = c.transfer[0]
    progress = c.progress.get(target)
    if progress is not None and progress.match >= c.leo and c.hw >= c.leo:
        c.timeout_now_sent = True
        c.out.append(Send(target, TimeoutNow(c.epoch, c.replica_id)))


def update_high_watermark(c: Core, now_ms: int) -> None:
    matches = [c.own_match(), *(p.match for p in c.progress.values() if p.voter)]
    hw = next_high_watermark(c.hw, matches, c.membership.majority, c.control_offset)
    assert hw >= c.hw, (hw, c.hw)
    if hw == c.hw:
        return
    assert hw <= c.leo, (hw, c.leo)
    c.hw = hw
    c.out.append(SetHighWatermark(hw))
    while c.pending_all and c.pending_all[0].last_offset < hw:
        ack = c.pending_all.popleft()
        c.out.append(AckCompleted(ack.request_id, ack.base_offset, ack.last_offset))
    answer_parked(c, now_ms)


def answer_parked(c: Core, now_ms: int) -> None:
    """Answer the long polls that new records concern; one whose only news is a new HW is
    answered `hw_linger_ms` later (`hw_news`) unless records come first."""
    for replica, progress in c.progress.items():
        parked = progress.parked
        if parked is None:
            continue
        if parked.fetch_offset < c.leo:
            quiet.unpark(progress, now_ms)
            send_records(c, replica, parked)
        elif progress.hw_sent != c.hw:
            quiet.unpark(progress, now_ms)
            hw_news(c, replica, progress, now_ms)


def hw_news(c: Core, replica: int, progress: Progress, now_ms: int) -> None:
    """A parked fetch whose only news is a new HW: answered now with `hw_linger_ms` 0,
    else at most that much later, carried by the records that usually come first (the next
    append). The HW a follower holds is only what it may expose and checkpoint, never what
    commits (the leader counts fetch offsets): a late one loses nothing, and a single-record
    append costs one message each way per follower instead of two. The HW that commits
    this leader's epoch goes at once: a replica that handed leadership over waits for it
    (`ReplicaDriver.leader_serving`) before its node stops."""
    parked = progress.parked
    assert parked is not None
    if c.config.hw_linger_ms == 0 or progress.hw_sent <= c.control_offset < c.hw:
        send_records(c, replica, parked)
    elif progress.hw_due_ms is None:
        progress.hw_due_ms = now_ms + c.config.hw_linger_ms


def send_records(c: Core, replica: int, request: FetchRequest) -> None:
    progress = c.progress[replica]
    progress.parked = None
    progress.hw_due_ms = None
    progress.hw_sent = c.hw
    quiet.answered(c, progress)
    start, end = request.fetch_offset, c.leo
    records = Records(
        start,
        end,
        c.history.boundaries(start, end),
        c.hw,
        memberships=c.members.between(start, end),
    )
    response = FetchResponse(c.epoch, c.replica_id, start, request.last_fetched_epoch, records)
    c.out.append(Send(replica, response))


def serve_fetch(c: Core, request: FetchRequest, now_ms: int) -> None:
    """A fetch of this epoch from a replica of the membership: answer it or park it."""
    sender = request.replica_id
    if request.fetch_offset < c.log_start:
        _send_start_at(c, sender, request, now_ms)
        return
    epoch, end = c.history.end_offset_for(request.last_fetched_epoch, c.leo)
    if epoch != request.last_fetched_epoch or request.fetch_offset > end:
        response = FetchResponse(
            c.epoch,
            c.replica_id,
            request.fetch_offset,
            request.last_fetched_epoch,
            Diverging(epoch, end),
        )
        c.out.append(Send(sender, response))
        return
    progress = c.progress[sender]
    progress.last_fetch_ms = now_ms
    # Offsets below fetch_offset are on the follower (flushed, under flush_always) and
    # agree with this log. The latest fetch wins, even when it is lower: a follower that
    # discarded its log to repair corrupt data no longer holds what it acknowledged (a
    # stale, reordered fetch only delays the HW; the HW itself never goes back).
    progress.match = request.fetch_offset
    progress.parked = None
    progress.hw_due_ms = None
    update_high_watermark(c, now_ms)
    maybe_timeout_now(c)
    if request.fetch_offset < c.leo:
        send_records(c, sender, request)
    else:
        progress.parked = request  # long poll: answered on new data, new HW or expiry
        progress.parked_since_ms = now_ms
        quiet.park(c, progress, request, now_ms)
        if progress.hw_sent != c.hw:
            hw_news(c, sender, progress, now_ms)


def _send_start_at(c: Core, sender: int, request: FetchRequest, now_ms: int) -> None:
    """Retention deleted what `sender` would fetch next: every offset below the log start
    is committed, so it may start an empty log there (with the epochs before it) rather
    than fetch records that are gone. Whatever its log holds (a divergent tail included)
    lies below the log start, so no divergence check is needed first."""
    progress = c.progress[sender]
    progress.last_fetch_ms = now_ms  # it is alive (check-quorum), but matches nothing yet
    progress.parked = None
    progress.quiet = progress.answered_quiet = False
    progress.hw_due_ms = None
    before = EpochHistory(c.history.entries)
    before.truncate_to(c.log_start)
    start_at = StartAt(c.log_start, before.entries, c.members.in_force_at(c.log_start))
    response = FetchResponse(
        c.epoch, c.replica_id, request.fetch_offset, request.last_fetched_epoch, start_at
    )
    c.out.append(Send(sender, response))


_REFUSALS = {
    Verdict.FENCED: AckFailure.PRODUCER_FENCED,
    Verdict.OUT_OF_ORDER: AckFailure.OUT_OF_ORDER_SEQUENCE,
    Verdict.DUPLICATE_OLD: AckFailure.DUPLICATE_SEQUENCE,
}


def _refusal(request_id: int, check: Check) -> AckFailed:
    detail = check.epoch if check.verdict is Verdict.FENCED else check.expected_sequence
    return AckFailed(request_id, _REFUSALS[check.verdict], None, detail)
