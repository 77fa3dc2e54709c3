"""Topic names and the partition directory layout (seed 001).

Layout: `{data_dir}/{topic}/partition_{N}/` holds one partition's segment files and small
state files. A topic name is 1-249 characters of `[A-Za-z0-9._-]` and is neither `.` nor
`..`, so it can never escape `data_dir` or name a hidden parent.
"""

from __future__ import annotations

import re
from pathlib import Path

from replog.errors import InvalidArgumentError, InvalidTopicNameError

TOPIC_NAME_CHARS_MAX = 249
PARTITIONS_MAX = 10_000
_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")


def validate_topic_name(name: object) -> str:
    """Return `name` if it is a valid topic name; raise `InvalidTopicNameError` otherwise."""
    if not isinstance(name, str) or not _TOPIC_RE.fullmatch(name) or name in (".", ".."):
        raise InvalidTopicNameError(
            f"invalid topic name {name!r}: use 1-{TOPIC_NAME_CHARS_MAX} characters of "
            "[A-Za-z0-9._-], not '.' or '..'",
            topic=name if isinstance(name, str) else None,
        )
    return name


def validate_partition(partition: object, partitions: int | None = None) -> int:
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise InvalidArgumentError(f"invalid partition {partition!r}: must be an int >= 0")
    if partitions is not None and partition >= partitions:
        from replog.errors import PartitionNotFoundError

        raise PartitionNotFoundError(
            f"partition {partition} does not exist (the topic has {partitions})",
            partition=partition,
            partitions=partitions,
        )
    return partition


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    return data_dir / validate_topic_name(topic) / f"partition_{validate_partition(partition)}"
