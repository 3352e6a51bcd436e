"""hlgt-compare (python -m hlgt.train.compare): two models on the same problems, paired problem by
problem (``hlgt.train.compare``): each one's accuracy, the problems only one of them solves and the
exact McNemar p, per pair of runs and pooled.

    hlgt-compare --a runs/f0-full runs/f1-full --b runs/f0-gts runs/f1-gts [--split test] [--metric equation]

``--a`` and ``--b`` take run folders, model folders (``<run>/best``) or predictions files
(``hlgt-evaluate --out``), paired by position.
"""
from __future__ import annotations

import argparse
import sys

from hlgt.cli import run_command
from hlgt.train.compare import METRICS, compare, markdown

PROG = "hlgt-compare"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=PROG, allow_abbrev=False,
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--a", nargs="+", required=True, metavar="RUN", help="runs, model folders or predictions files")
    p.add_argument("--b", nargs="+", required=True, metavar="RUN", help="as many, paired with --a by position")
    p.add_argument("--split", default="test", choices=["valid", "test"])
    p.add_argument("--metric", default="value", choices=list(METRICS))
    args = p.parse_args(argv)
    print(markdown(compare(args.a, args.b, split=args.split, metric=args.metric), args.metric), end="")
    return 0


def run() -> None:
    sys.exit(run_command(main, PROG))
