"""hlgt-report (python -m hlgt.data.report): what the readers and cleaning make of each dataset
(read, kept, dropped by reason; ``hlgt.data.report``), or with ``--id ID --explain PAGE`` one raw
problem's graph drawn as a page, before any training.

    hlgt-report --data-dir ../shared/datasets
    hlgt-report --dataset math23k --id 65 --explain page.html
"""
from __future__ import annotations

import argparse
import sys
import time

from hlgt.commands.cli import non_negative_int, positive_int, run_command
from hlgt.data.clean import MAX_TOKENS
from hlgt.data.graph import GRAPH_VARIANTS
from hlgt.data.report import report_dataset
from hlgt.data.splits import DATASETS, MAWPS_FOLD_FILES, MAWPS_N_FOLDS, SPLITS, resolve_data_dir, split_paths
from hlgt.data.srl import ANNOTATORS
from hlgt.explain import explain_problem

PROG = "hlgt-report"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                     allow_abbrev=False)
    parser.add_argument("--data-dir", default=None,
                        help="folder holding math23k/, mawps/, ape210k/ "
                             "(default: $HLGT_DATA_DIR or ../shared/datasets)")
    parser.add_argument("--dataset", action="append", choices=list(DATASETS),
                        help="dataset to report (repeatable; default: all)")
    parser.add_argument("--fold", default="all", choices=["all", *map(str, range(MAWPS_N_FOLDS))],
                        help="MAWPS fold, or 'all' (default)")
    parser.add_argument("--mawps-folds", default="grouped", choices=list(MAWPS_FOLD_FILES),
                        help="MAWPS fold scheme (see hlgt.data.splits)")
    parser.add_argument("--min-const-freq", type=non_negative_int, default=5,
                        help="a constant is kept when seen in >= N training equations")
    parser.add_argument("--max-tokens", type=positive_int, default=MAX_TOKENS,
                        help="longer problems are dropped, in every split")
    explaining = parser.add_argument_group("one problem as a page, instead of the report")
    explaining.add_argument("--id", default=None, help="the problem drawn (one --dataset), from its raw file")
    explaining.add_argument("--explain", default=None, metavar="PAGE", help="the HTML page's file")
    explaining.add_argument("--split", default=None, choices=list(SPLITS), help="look in this split's file only")
    explaining.add_argument("--annotator", default=None, choices=list(ANNOTATORS), help="default: offline")
    explaining.add_argument("--annotator-model", default=None, help="hub id or local folder for ltp / hanlp")
    explaining.add_argument("--graph", default=None, choices=sorted(GRAPH_VARIANTS),
                            help="the graph arm drawn (data.graph; default srl)")
    args = parser.parse_args(argv)
    page_flags = [f for f, v in (("--id", args.id), ("--split", args.split), ("--annotator", args.annotator),
                                 ("--annotator-model", args.annotator_model), ("--graph", args.graph)) if v is not None]
    if args.explain is None and page_flags:
        parser.error(f"{', '.join(page_flags)}: only with --explain PAGE")
    if args.explain is not None and (args.id is None or len(args.dataset or []) != 1):
        parser.error("--explain PAGE draws one problem: give one --dataset and its --id")
    if args.explain is not None:
        done = explain_problem(args.dataset[0], args.id, args.explain, args.data_dir, args.split,
                               args.annotator or "offline", args.annotator_model or "", args.graph or "srl")
        print(f"[report] {done}")
        return 0
    folds = list(range(MAWPS_N_FOLDS)) if args.fold == "all" else [int(args.fold)]
    data_dir = resolve_data_dir(args.data_dir)
    datasets = args.dataset or list(DATASETS)
    if any(d != "sample" for d in datasets) and not data_dir.is_dir():
        print(f"data folder {data_dir} does not exist; pass --data-dir or set HLGT_DATA_DIR", file=sys.stderr)
        return 2
    print(f"data dir: {data_dir}   (sample: {split_paths('sample', 'train')[0].parent})")
    start = time.perf_counter()
    status = 0
    for dataset in datasets:
        if report_dataset(dataset, data_dir, folds, args.min_const_freq, args.max_tokens,
                          args.mawps_folds) == 0 and args.dataset:
            status = 1
    print(f"\n({time.perf_counter() - start:.1f} s)")
    return status


def run() -> None:
    sys.exit(run_command(main, PROG))
