"""`replog serve` under a low RLIMIT_NOFILE (soft and hard), for the open-files tests.

    python -m tests.integration.low_nofile_serve serve --data-dir ...

The limit is `NOFILE_LIMIT` (256), set before anything else opens a file.
"""

from __future__ import annotations

import resource

NOFILE_LIMIT = 256


def main() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE_LIMIT, NOFILE_LIMIT))
    from replog import cli

    cli.main()


if __name__ == "__main__":
    main()
