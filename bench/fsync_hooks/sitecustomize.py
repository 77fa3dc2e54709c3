"""fsync attribution for bench/create_fsyncs.py, loaded into each `replog serve` it starts.

Python imports `sitecustomize` at start-up from the path; the bench puts this directory on
the node processes' PYTHONPATH and sets `BENCH_FSYNC_DIR`. Without that variable this
module does nothing. With it, `os.fsync` and `os.fdatasync` are wrapped: each call is
counted under a key `<what> <- <site>`, where `what` is the synced file's kind (its name
with digits folded to `N`: `quorum-state.tmp`, `partition_N/` for a directory, `N.log`)
and `site` the innermost three `replog` functions on the calling thread's stack. On
SIGUSR2 the counts so far are written as JSON to `$BENCH_FSYNC_DIR/fsyncs-<pid>-<n>.json`.
"""

from __future__ import annotations

import os

if os.environ.get("BENCH_FSYNC_DIR"):
    import itertools
    import json
    import re
    import signal
    import sys
    import threading
    from collections import Counter
    from pathlib import Path

    _counts: Counter[str] = Counter()
    _lock = threading.Lock()
    _dumps = itertools.count()
    _out = Path(os.environ["BENCH_FSYNC_DIR"])

    def _what(fd: int) -> str:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return "?"
        name = os.path.basename(path)
        if os.path.isdir(path):
            name += "/"
        return re.sub(r"\d+", "N", name)

    def _site() -> str:
        frame = sys._getframe(2)
        names: list[str] = []
        while frame is not None and len(names) < 3:
            module = frame.f_globals.get("__name__", "")
            if module.startswith("replog."):
                names.append(f"{module.rsplit('.', 1)[-1]}.{frame.f_code.co_name}")
            frame = frame.f_back  # type: ignore[assignment]
        return " < ".join(names)

    def _wrap(name: str) -> None:
        real = getattr(os, name)

        def counting(fd: int) -> None:
            key = f"{_what(fd)} <- {_site()}"
            with _lock:
                _counts[key] += 1
            real(fd)

        setattr(os, name, counting)

    _wrap("fsync")
    _wrap("fdatasync")

    def _dump(_signum: int, _frame: object) -> None:
        with _lock:
            data = dict(_counts)
        path = _out / f"fsyncs-{os.getpid()}-{next(_dumps)}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)

    signal.signal(signal.SIGUSR2, _dump)
