"""Counters for bench/per_message.py, loaded into each `replog serve` process it starts.

Python imports `sitecustomize` at start-up from the path; bench/per_message.py puts this
directory on the node processes' PYTHONPATH and sets `BENCH_COUNT_DIR`. Without that
variable this module does nothing. With it, it wraps (by monkey-patching, at start-up)
the functions whose calls are counted, and on SIGUSR2 writes the counts so far as JSON
to `$BENCH_COUNT_DIR/counts-<pid>-<n>.json` (n: 0, 1, ...): the bench takes one snapshot
before and one after a run of appends, and divides the difference by the appends.

What is counted (the names are the JSON keys):

    loop_passes         asyncio `_run_once` iterations (every pass of the event loop)
    loop_sleeps         selector waits that could block (timeout None or > 0): wake-ups
    loop_idle_wakeups   of those, the ones that came back with no I/O event (a timer)
    timers_armed        loop.call_at / call_later (asyncio timers armed, any caller)
    tasks_created       loop.create_task (asyncio.ensure_future of a coroutine included)
    ticker_arms         the node's one replication timer (`Ticker._arm`)
    ticker_fired        replicas the ticker called back (`Ticker.fired`)
    owner_submits       inputs put in a replica's inbox for its owner task (`_submit`)
    owner_direct        appends performed by the caller while the owner was parked
    owner_passes        owner passes over inbox inputs (`_handle`) and ticks (`_tick`)
    peer_messages_out   replication gRPC messages sent (one `Envelopes` batch each)
    peer_envelopes_out  replication envelopes queued to peers (`PeerLinks.send`)
    peer_messages_in    replication gRPC messages received (`Envelopes` batches)
    peer_envelopes_in   replication envelopes received
    fsyncs              os.fsync + os.fdatasync (any thread)
    log_records         log records that reached a handler (`Logger.callHandlers`)
    metric_updates      prometheus_client Counter.inc, Gauge.inc/dec/set,
                        Histogram.observe, Summary.observe
    client_messages_in  client-call requests read by any handler (`draining._Reads`)
    client_messages_out client-call answers written by a streaming handler (`rpc._write`)

With `BENCH_CPROFILE=1` as well, the first SIGUSR2 also starts cProfile on the thread that
handles the signal (the main thread: the event loop's) and the second stops it and writes
its stats to `$BENCH_COUNT_DIR/cprofile-<pid>.pstats` (per function calls and CPU inside
the event-loop thread; grpc's own threads are not in it).
"""

from __future__ import annotations

import os

if os.environ.get("BENCH_COUNT_DIR"):
    import asyncio
    import itertools
    import json
    import logging
    import selectors
    import signal
    import threading
    import time
    from collections import Counter
    from pathlib import Path

    _counts: Counter[str] = Counter()
    _lock = threading.Lock()  # fsyncs run in threads
    _dumps = itertools.count()

    def _wrap(owner: object, name: str, key: str) -> None:
        original = getattr(owner, name)

        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            _counts[key] += 1
            return original(*args, **kwargs)

        setattr(owner, name, counted)

    def _wrap_locked(owner: object, name: str, key: str) -> None:
        original = getattr(owner, name)

        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            with _lock:
                _counts[key] += 1
            return original(*args, **kwargs)

        setattr(owner, name, counted)

    _wrap_locked(os, "fsync", "fsyncs")
    _wrap_locked(os, "fdatasync", "fsyncs")
    _wrap(asyncio.base_events.BaseEventLoop, "_run_once", "loop_passes")
    _wrap(asyncio.base_events.BaseEventLoop, "call_at", "timers_armed")
    _wrap(asyncio.base_events.BaseEventLoop, "create_task", "tasks_created")
    _wrap(logging.Logger, "callHandlers", "log_records")

    _select = selectors.EpollSelector.select

    def _counted_select(self, timeout=None):  # type: ignore[no-untyped-def]
        ready = _select(self, timeout)
        if timeout is None or timeout > 0:
            _counts["loop_sleeps"] += 1
            if not ready:
                _counts["loop_idle_wakeups"] += 1
        return ready

    selectors.EpollSelector.select = _counted_select  # type: ignore[method-assign]

    # call_later goes through call_at; count it once
    def _call_later(self, delay, callback, *args, context=None):  # type: ignore[no-untyped-def]
        return asyncio.base_events.BaseEventLoop.call_at(
            self, self.time() + delay, callback, *args, context=context
        )

    asyncio.base_events.BaseEventLoop.call_later = _call_later  # type: ignore[method-assign]

    import prometheus_client.metrics as pm

    for cls, names in (
        (pm.Counter, ("inc",)),
        (pm.Gauge, ("inc", "dec", "set")),
        (pm.Histogram, ("observe",)),
        (pm.Summary, ("observe",)),
    ):
        for name in names:
            _wrap(cls, name, "metric_updates")

    from replog.replication import driver as _driver
    from replog.replication import ticker as _ticker
    from replog.server.peering import replication_transport as _rt

    _wrap(_ticker.Ticker, "_arm", "ticker_arms")
    _wrap(_driver.ReplicaDriver, "_submit", "owner_submits")
    _wrap(_driver.ReplicaDriver, "_append_here", "owner_direct")
    _wrap(_driver.ReplicaDriver, "_handle", "owner_passes")
    _wrap(_driver.ReplicaDriver, "_tick", "owner_passes")
    _wrap(_rt.PeerLinks, "send", "peer_envelopes_out")
    _tickers: list[_ticker.Ticker] = []
    _ticker_init = _ticker.Ticker.__init__

    def _init_ticker(self, loop):  # type: ignore[no-untyped-def]
        _ticker_init(self, loop)
        _tickers.append(self)

    _ticker.Ticker.__init__ = _init_ticker  # type: ignore[method-assign]

    _batches = _rt.PeerLinks._batches

    async def _counted_batches(self, link, readers):  # type: ignore[no-untyped-def]
        async for batch in _batches(self, link, readers):
            _counts["peer_messages_out"] += 1
            yield batch

    _rt.PeerLinks._batches = _counted_batches  # type: ignore[method-assign]

    _serve = _rt.ReplicationService._serve

    async def _counted_serve(self, batches, context):  # type: ignore[no-untyped-def]
        async def counted():  # type: ignore[no-untyped-def]
            async for batch in batches:
                _counts["peer_messages_in"] += 1
                _counts["peer_envelopes_in"] += len(batch)
                yield batch

        return await _serve(self, counted(), context)

    _rt.ReplicationService._serve = _counted_serve  # type: ignore[method-assign]

    from replog.server.edge import draining as _draining
    from replog.server.edge import rpc as _rpc

    _wrap(_draining._Reads, "__anext__", "client_messages_in")
    _wrap(_rpc, "_write", "client_messages_out")

    _profiler = None

    def _toggle_profile(n: int) -> None:
        global _profiler
        if not os.environ.get("BENCH_CPROFILE"):
            return
        import cProfile

        if n == 0:
            _profiler = cProfile.Profile(time.thread_time)  # CPU, not waits
            _profiler.enable()
        elif _profiler is not None:
            _profiler.disable()
            path = Path(os.environ["BENCH_COUNT_DIR"]) / f"cprofile-{os.getpid()}.pstats"
            _profiler.dump_stats(str(path.with_suffix(".tmp")))
            path.with_suffix(".tmp").rename(path)
            _profiler = None

    def _dump(_signum: int, _frame: object) -> None:
        n = next(_dumps)
        if n > 0:
            _toggle_profile(n)  # stopped before the counts are written
        snapshot = dict(_counts)
        snapshot["ticker_fired"] = sum(t.fired for t in _tickers)
        path = Path(os.environ["BENCH_COUNT_DIR"]) / f"counts-{os.getpid()}-{n}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(snapshot))
        tmp.rename(path)
        if n == 0:
            _toggle_profile(n)

    signal.signal(signal.SIGUSR2, _dump)
