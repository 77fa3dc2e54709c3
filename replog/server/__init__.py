"""The replog server: gRPC services over replicated partitions (see `node` for the layout).

A single node is a cluster of one; every request takes the same path. Rooms, top to bottom
(a room imports only the rooms below it; `lint-imports` checks it, pyproject.toml):

    node        composition root (`Node` builds every part) and the serve loop (`serve`)
    services    the gRPC services clients call: Log (and AppendStream), Admin, Acls
    cluster     the members and address book (roster), identity, joins, leader balance,
                reassignment
    settings    the one settings object (it holds the groups' and the limits' configs)
    groups      consumer groups: offsets in `__consumer_offsets`, membership, assignment
    control     routing (where a request is served), topics, producer ids
    partitions  this node's replicas: the partition role, reconciler, dirs, repair, flusher,
                leadership hand-over | peering: peer calls, replication transport and codec
    edge        what every call passes: guard, rpc wrappers, status, auth, TLS, limits
    meta        typed metadata commands, the image they build, the `__cluster` log
    metrics     Prometheus | supervisor: every background task
    logs        structured logs

Each room's `__init__` maps its modules, one line each.
"""
