"""The cluster's shape: members, node identity, joins, leader balance and reassignment.

    roster        a node's member set and address book (clients', peers', racks): pure state
    roster_keeper the one owner of the roster: follows the metadata, asks peers, tells the links
    membership    cluster membership without restarts: the metadata quorum follows the members
    identity      a node's data directory identity; what a node on an empty directory may do
    joins         a node that joins on its own (`--join auto`)
    balancer      leader balancing: leadership goes back to each partition's preferred replica
    reassignment  the reassignment controller: moves replicas to the target in the metadata

Above `settings`, `groups`, `control`, `partitions` and `peering`; only `services` and `node`
import it.
"""
