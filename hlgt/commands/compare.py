"""hlgt-compare (python -m hlgt.train.compare): two models on the same problems, paired problem by
problem (``hlgt.train.compare``): each one's accuracy, the problems only one of them solves and the
exact McNemar p, per pair of runs and pooled (by problem where pairs share problems: seeds on one
test set); with ``--curves``, each pair's learning curves side by side and the settings the two
runs differ in.

    hlgt-compare --a runs/f0-full runs/f1-full --b runs/f0-gts runs/f1-gts [--split test] [--metric equation] [--curves]

``--a`` and ``--b`` take run folders, model folders (``<run>/best``) or predictions files
(``hlgt-evaluate --out``), paired by position, all in local folders; ``--curves`` reads the runs'
checkpoints (a run folder, its ``best/`` or a checkpoint folder) and shows runs still training too
(the paired counts wait until every run has its predictions).
"""
from __future__ import annotations

import argparse
import sys

from hlgt.commands.cli import run_command
from hlgt.train.compare import METRICS, Unfinished, compare, curves, markdown

PROG = "hlgt-compare"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=PROG, allow_abbrev=False,
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--a", nargs="+", required=True, metavar="RUN", help="runs, model folders or predictions files")
    p.add_argument("--b", nargs="+", required=True, metavar="RUN", help="as many, paired with --a by position")
    p.add_argument("--split", default="test", choices=["valid", "test"])
    p.add_argument("--metric", default="value", choices=list(METRICS))
    p.add_argument("--curves", action="store_true",
                   help="also each pair's learning curves side by side (from run folders, their best/ or "
                        "checkpoint folders)")
    args = p.parse_args(argv)
    try:
        print(markdown(compare(args.a, args.b, split=args.split, metric=args.metric), args.metric), end="")
    except Unfinished as unfinished:
        if not args.curves:
            raise
        # Runs still training have curves but no predictions yet: their curves are worth watching.
        print(f"{PROG}: no paired counts until every run has finished: {unfinished}\n", flush=True)
    if args.curves:
        print(curves(args.a, args.b), end="")
    return 0


def run() -> None:
    sys.exit(run_command(main, PROG))
