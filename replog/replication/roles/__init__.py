"""The roles of a partition replica, behind `replication.replica.Replica` (pure, no I/O).

core         the replica's state (`Core`), the public `Role` and the stepped `Step`
steps        dispatch: an epoch rule per message kind, then a table per role; timers
voting       votes and pre-votes: requests answered, answers counted
following    a follower's fetches and the leader's answers applied to its log
leading      a leader's appends, acknowledgements, HW, membership changes, fetches served
transitions  role changes: follow, pre-vote, campaign, lead
"""
