"""`replog serve`, `replog dev-cluster` and `replog console`: run nodes and the console.

replog serve --data-dir DIR --listen 127.0.0.1:7070 [--ready-file F] [...]
replog dev-cluster [--nodes N] [--data-dir DIR] [--plaintext] [--env-file F]
replog console [--listen 127.0.0.1:8080]   (the web console: replog/console/)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from replog.cli.common import EXIT_ERROR, Subparsers, UsageError, client_parser


def add_parsers(sub: Subparsers, *, full: bool = True) -> None:
    """`serve`, `console` and `dev-cluster`. Not `full` (another command runs): the first
    two without their options, which would import the server's settings and the console
    (a quicker start for `produce` and `consume`)."""
    serve = sub.add_parser("serve", help="run a node", description="Run a replog node.")
    serve.set_defaults(run=cmd_serve)
    console = client_parser(sub, "console", "run the web console for a cluster (docs/console.md)")
    console.set_defaults(run=cmd_console)
    if full:
        from replog.console.server import add_arguments as add_console_arguments
        from replog.server.settings import Settings

        Settings.add_arguments(serve)
        add_console_arguments(console)
    dev = sub.add_parser(
        "dev-cluster",
        help="run a local cluster of nodes (separate processes on 127.0.0.1)",
        description="Run a local cluster of replog nodes on 127.0.0.1 until interrupted.",
    )
    dev.set_defaults(run=cmd_dev_cluster)
    dev.add_argument("--nodes", type=int, default=3, help="how many nodes (1-5)")
    dev.add_argument("--data-dir", default="dev-data", help="parent of each node's data dir")
    dev.add_argument("--flush", choices=["always", "interval", "never"], default="always")
    dev.add_argument(
        "--plaintext",
        action="store_true",
        help="no TLS, no ACLs: the nodes run --insecure (default: a throwaway CA in "
        "DATA_DIR/tls, TLS, mutual TLS between nodes, client certificates and ACLs, the "
        "operator User:admin a super-user)",
    )
    dev.add_argument(
        "--env-file",
        default=None,
        metavar="FILE",
        help="once every node serves, write FILE (atomically; removed when the cluster "
        "stops): the exports its clients need, REPLOG_ADDRESS and the operator's "
        "REPLOG_TLS_CA/_CERT/_KEY, for `. FILE` (replog and replog.Client.from_env() "
        "read them)",
    )


def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    from replog.server.node import serve
    from replog.server.settings import Settings

    settings = Settings.from_sources(vars(args))
    return serve(settings)


def cmd_console(args: argparse.Namespace, out: TextIO) -> int:
    from replog.console.server import ConsoleUsageError
    from replog.console.server import run as run_console

    try:
        return run_console(args, out)
    except ConsoleUsageError as err:
        raise UsageError(str(err)) from None


def cmd_dev_cluster(args: argparse.Namespace, out: TextIO) -> int:
    import os
    import shlex
    import signal
    import threading

    from replog.devcluster import DevCluster, Supervisor, env_file_text, write_atomically

    if not 1 <= args.nodes <= 5:
        raise UsageError("--nodes must be in [1, 5]")
    cluster = DevCluster(
        Path(args.data_dir),
        args.nodes,
        extra_args=["--flush", args.flush],
        tls=not args.plaintext,
        acl=not args.plaintext,  # users and ACLs too; the printed certificate: the operator's
        kafka=True,  # each node serves Kafka's protocol too (docs/kafka.md)
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def say(line: str) -> None:
        print(line, file=out, flush=True)

    env_file = None if args.env_file is None else Path(args.env_file)
    if env_file is not None:
        if not env_file.parent.is_dir():
            raise UsageError(f"--env-file: no directory {str(env_file.parent)[:200]!r}")
        env_file.unlink(missing_ok=True)  # a stale one must not pass for this cluster's
    try:
        cluster.start()
        for node_id, node in cluster.members.items():
            assert node.proc is not None
            say(f"node {node_id}: {node.address}  pid {node.proc.pid}  (log: {node.log_file})")
        if cluster.client_tls is not None:
            say("TLS and ACLs on; clients use the operator's certificate (super-user User:admin)")
        env = cluster.client_env()
        say("for clients: export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()))
        say(f"bootstrap: {cluster.bootstrap}   (Ctrl-C stops the cluster)")
        say(f"Kafka bootstrap.servers: {cluster.kafka_bootstrap}   (docs/kafka.md)")
        say("kill -9 a node's pid to try a failover: it is restarted (same data dir and ports)")
        if env_file is not None:
            shown = shlex.quote(str(env_file) if "/" in str(env_file) else f"./{env_file}")
            say(f"{env_file} has them: `. {shown}`")
            write_atomically(env_file, env_file_text(env, os.getpid()))
        supervisor = Supervisor(cluster, say)
        while not stop.wait(0.5):
            supervisor.check()
            if not supervisor.any_up:
                say("every node died too often; stopping")
                return EXIT_ERROR
    except KeyboardInterrupt:
        pass
    finally:
        if env_file is not None:
            env_file.unlink(missing_ok=True)
        cluster.stop()
    return 0
