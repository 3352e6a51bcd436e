"""hlgt-build (python -m hlgt.data.build): a dataset's Parquet shards, annotated in a Ray Data
actor pool or in this process (``hlgt.data.build``), or the annotation speed per actor count.

    hlgt-build --dataset math23k [--split valid] [--annotator offline|ltp|hanlp]
        [--annotator-model M] [--fold K] [--data-dir DIR] [--out DIR] [--actors N | --no-ray]
        [--address ADDR] [--force]
    hlgt-build --bench --dataset ape210k --split valid --actors 1,2
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from hlgt.commands.cli import non_negative_int, positive_int, run_command
from hlgt.config import Config
from hlgt.data.annotate import BATCH_SIZE
from hlgt.data.build import bench, build
from hlgt.data.shards import MANIFEST
from hlgt.data.splits import MAWPS_FOLD_FILES, SPLITS
from hlgt.data.srl import ANNOTATORS

PROG = "hlgt-build"


def _actor_list(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--actors takes an integer or a comma list, got {text!r}")
    if not counts or min(counts) < 0:
        raise argparse.ArgumentTypeError(f"--actors must be >= 0, got {text!r}")
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("--dataset", default="sample",
                   help="sample | sample_zh | sample_en | math23k | mawps | ape210k "
                        "(sample_zh, sample_en: one language)")
    p.add_argument("--split", action="append", choices=SPLITS, help="split(s) to build (repeatable; default all)")
    p.add_argument("--fold", type=non_negative_int, default=0, help="MAWPS fold (0..4)")
    p.add_argument("--mawps-folds", default="grouped", choices=list(MAWPS_FOLD_FILES),
                   help="MAWPS fold scheme (data.mawps_folds; see hlgt.data.splits)")
    p.add_argument("--no-mawps-valid", action="store_true",
                   help="MAWPS: no held-out validation, its problems train (data.mawps_valid=false)")
    p.add_argument("--data-dir", default=None,
                   help="real datasets folder (default $HLGT_DATA_DIR or ../shared/datasets)")
    p.add_argument("--annotator", default="offline", choices=list(ANNOTATORS), help="default offline")
    p.add_argument("--annotator-model", default="", help="LTP / HanLP model id or local directory")
    p.add_argument("--min-const-freq", type=positive_int, default=None)
    p.add_argument("--min-word-freq", type=non_negative_int, default=None)
    p.add_argument("--shards-dir", default=None, help="parent of the default output folder (config data.shards_dir)")
    p.add_argument("--out", default=None, help="output folder (default <shards-dir>/<dataset>[-<fold scheme>]"
                                               "[-novalid][-fold<k>]-<annotator>)")
    p.add_argument("--actors", type=_actor_list, default=[1],
                   help="annotation actors (default 1; 0 = in-process); with --bench a list such as 1,2")
    p.add_argument("--no-ray", action="store_true", help="annotate in this process (same as --actors 0)")
    p.add_argument("--address", default=None, help="an existing Ray cluster (default: start a local Ray)")
    p.add_argument("--batch-size", type=positive_int, default=BATCH_SIZE, help="problems per annotation batch")
    p.add_argument("--force", action="store_true", help="rebuild even when the manifest matches")
    p.add_argument("--bench", action="store_true", help="measure problems/s for each --actors count; write nothing")
    args = p.parse_args(argv)

    flat: dict[str, Any] = {"data.dataset": args.dataset, "data.fold": args.fold, "data.mawps_folds": args.mawps_folds,
                            "data.mawps_valid": not args.no_mawps_valid, "data.annotator": args.annotator,
                            "data.annotator_model": args.annotator_model}
    for key, value in (("data.data_dir", args.data_dir), ("data.min_const_freq", args.min_const_freq),
                       ("data.min_word_freq", args.min_word_freq), ("data.shards_dir", args.shards_dir)):
        if value is not None:
            flat[key] = value
    cfg = Config.from_flat(flat)
    actors = [0] if args.no_ray else args.actors
    if args.address is not None and (actors == [0] or 0 in actors and not args.bench):  # bench: 0 is the baseline
        p.error("--address annotates on that Ray cluster; --no-ray / --actors 0 in this process: give one of them")
    if args.bench:
        if args.split is None or len(args.split) != 1:
            p.error("--bench needs exactly one --split")
        bench(cfg, args.split[0], actors, args.address, args.batch_size)
        return 0
    if len(actors) != 1:
        p.error("--actors takes one number when building (a list only with --bench)")
    out = build(cfg, args.split, args.out, actors[0], args.address, args.force, args.batch_size)
    print(f"[build] done: {str(out).rstrip('/')}/{MANIFEST}")
    return 0


def run() -> None:
    sys.exit(run_command(main, PROG))
