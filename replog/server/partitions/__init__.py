"""This node's partition replicas: the partition role, their directories and lifecycle.

    replicated       a partition replica as the services see it: writes and HW go through
                     replication, its leader, HW notifications
    replica_manager  the reconciler: this node's replicas follow the metadata image
    replica_dirs     the directories of the replicas a node hosts
    legacy_import    one-time import of single-node data directories of earlier releases
    flusher          interval fsync (flush=interval) and HW checkpoints
    repair           scrubbing and repair: re-verify logs, refetch what rotted
    handover         leadership hand-over of every led partition before the node stops

Imports `meta`, `edge`, `supervisor` and `logs`; never `peering` or a room above.
"""
