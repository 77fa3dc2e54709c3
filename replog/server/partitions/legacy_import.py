"""One-time import of a data directory written by the single-node mode of earlier releases.

Earlier releases ran a single node without a metadata log: its topics were the
`{topic}/topic.json` directories alone (see `replica_dirs`). Now a single node is a cluster
of one whose topics live in `__cluster` like everyone's. On the first start on such a data
directory (topic directories, no `__cluster`), `import_legacy_topics` writes a metadata log
holding one `CreateTopic` per topic (every partition assigned to this node) into a staging
directory and renames it to `__cluster/` in one step: either the import happened completely
or not at all, and it never runs twice. The topics' own directories are not touched: the
reconciler adopts them (they lack a `topic_id`) and stamps them; their replicas' first
election commits every record they hold, so no record is lost.

A data directory like that started as part of a larger cluster is refused: its records
would have to be copied to the other replicas first, which this import does not do.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from replog.errors import InvalidConfigError
from replog.server.meta.command_codec import encode
from replog.server.meta.metadata import METADATA_TOPIC, CreateTopic
from replog.server.partitions import replica_dirs
from replog.storage import PartitionLog, StorageConfig, checkpoint

STAGING_DIR = METADATA_TOPIC + ".import~"  # '~' never appears in a topic name


def metadata_dir(data_dir: Path) -> Path:
    return data_dir / METADATA_TOPIC / "partition_0"


def import_legacy_topics(
    data_dir: Path, node_id: int, members: list[int], config: StorageConfig
) -> list[str]:
    """Import the single-node topics of `data_dir` if it has them and no metadata log yet;
    returns the imported names (empty when there was nothing to do). Blocking."""
    staging = data_dir / STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)  # an import that crashed half way
    if (data_dir / METADATA_TOPIC).exists():
        return []
    topics = replica_dirs.scan(data_dir)
    if not topics:
        return []
    if members != [node_id]:
        raise InvalidConfigError(
            f"data dir {data_dir} holds topics of a single node ({', '.join(sorted(topics))}) "
            "and no cluster metadata: start it once as a single node (no --peers) to import "
            "them, or start this node with an empty data dir"
        )
    commands = [
        CreateTopic(name, t.partitions, tuple((node_id,) for _ in range(t.partitions)))
        for name, t in sorted(topics.items())
    ]
    plog = PartitionLog(staging / "partition_0", METADATA_TOPIC, 0, config)
    try:
        plog.append([encode(c) for c in commands])
        plog.flush()
    finally:
        plog.close()
    checkpoint.fsync_dir(staging / "partition_0")
    checkpoint.fsync_dir(staging)
    staging.rename(data_dir / METADATA_TOPIC)
    checkpoint.fsync_dir(data_dir)
    return [c.name for c in commands]
