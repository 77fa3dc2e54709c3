"""`replog serve` under a low RLIMIT_NOFILE (soft and hard), for the open-files tests.

    python -m tests.integration.low_nofile_serve serve --data-dir ...

The limit is `NOFILE_LIMIT` (256), or `LOW_NOFILE_LIMIT` from the environment, set before
anything else opens a file.
"""

from __future__ import annotations

import os
import resource

NOFILE_LIMIT = 256
LIMIT_ENV = "LOW_NOFILE_LIMIT"


def main() -> None:
    limit = int(os.environ.pop(LIMIT_ENV, NOFILE_LIMIT))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    from replog import cli

    cli.main()


if __name__ == "__main__":
    main()
