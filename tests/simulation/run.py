"""Run one simulated schedule from the command line: the reproduction of a failing seed.

python -m tests.simulation.run --seed 1234 --nodes 3 [--observers 1] [--flush never]
    [--interrupts] [--memberships --spares 1] [--balance [--voters 2,3,1]]
    [--controller reassign|keeper --spares 2] [--late-votes] [--quiet] [--compaction]

A sweep of seeds: `--seeds N` runs seeds `--seed` .. `--seed + N - 1` with the same flags,
prints a line per failure and a summary (with `--compaction`: what the cleaners did).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import Counter

from tests.simulation.sim import SimConfig, SimulationFailure, run_schedule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--nodes", type=int, default=3, help="voters")
    parser.add_argument("--observers", type=int, default=0, help="non-voting replicas")
    parser.add_argument("--flush", choices=["always", "never"], default="always")
    parser.add_argument(
        "--interrupts", action="store_true", help="owner model with cancelled callers"
    )
    parser.add_argument("--transfers", action="store_true", help="leadership transfers")
    parser.add_argument("--corruption", action="store_true", help="bit rot on one node's disk")
    parser.add_argument("--producers", type=int, default=0, help="idempotent producers")
    parser.add_argument("--memberships", action="store_true", help="membership changes")
    parser.add_argument("--spares", type=int, default=0, help="replicas in neither set")
    parser.add_argument("--balance", action="store_true", help="the leader balancer")
    parser.add_argument(
        "--voters", default="", help="the starting voters in order (first: preferred leader)"
    )
    parser.add_argument(
        "--controller",
        choices=["reassign", "keeper"],
        default="",
        help="the server's reassignment controller or metadata quorum keeper",
    )
    parser.add_argument(
        "--late-votes", action="store_true", help="votes late past timeouts, duplicated"
    )
    parser.add_argument(
        "--quiet", action="store_true", help="quiescence, node heartbeats, pauses, one-way cuts"
    )
    parser.add_argument(
        "--compaction", action="store_true", help="a compacted topic: each replica's cleaner"
    )
    parser.add_argument("--seeds", type=int, default=0, help="sweep this many seeds")
    args = parser.parse_args()
    if args.seeds:
        sweep(args)
        return
    config = _config(args, args.seed)
    print(config)
    outcome = run_schedule(config)
    print(outcome)


def _config(args: argparse.Namespace, seed: int) -> SimConfig:
    return SimConfig.random(
        seed,
        args.nodes,
        flush_always=args.flush == "always",
        observers=args.observers,
        interrupts=args.interrupts,
        transfers=args.transfers,
        corruption=args.corruption,
        producers=args.producers,
        memberships=args.memberships,
        spares=args.spares,
        balance=args.balance,
        voter_order=tuple(int(v) for v in args.voters.split(",") if v),
        controller=args.controller,
        late_votes=args.late_votes,
        quiet=args.quiet,
        compaction=args.compaction,
    )


def sweep(args: argparse.Namespace) -> None:
    failures = 0
    totals: Counter[str] = Counter()
    for seed in range(args.seed, args.seed + args.seeds):
        try:
            outcome = run_schedule(_config(args, seed))
        except SimulationFailure as exc:
            failures += 1
            print(f"seed {seed}: {exc}", flush=True)
            continue
        if outcome.compaction is not None:
            totals.update({k: v for k, v in dataclasses.asdict(outcome.compaction).items() if v})
    print(f"{args.seeds} seeds from {args.seed}: {failures} failed; totals {dict(totals)}")


if __name__ == "__main__":
    main()
