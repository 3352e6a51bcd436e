"""The data report: per dataset and split, problems read, skipped by the reader, kept, dropped.

    python -m hlgt.data.report --data-dir ../shared/datasets [--dataset NAME ...] [--fold K|all]
        [--mawps-folds grouped|graph2tree|graph2tree-1921]
    python -m hlgt.data.report --dataset math23k --explain ID --out page.html [--split S]
        [--annotator offline|ltp|hanlp] [--annotator-model M] [--graph srl|parse|quantity_cell]

For every split it prints the records in the file(s), the reader's skips by reason (the first
few named by file and line), the problems read, the problems kept (and their share of those
read), the problems dropped by reason (training rules, see clean.py) and, for valid and test, the
problems kept whose gold equation cannot be represented (they score as wrong unless the model
finds another equation with the right value); for MAWPS also how many test problems have their text among the fold's train and
valid problems (0 with the grouped folds). Two reference rows show the training rules on files
that are not training files here: MAWPS's whole file (its folds only split it), and APE210K's
valid file when train.ape.json is absent (valid and test rows need constants learned on a real
training file, so they are printed only when it is present). A missing file is a printed line, not a failure; the exit
status is 0 unless the data folder does not exist (2) or a dataset named with ``--dataset`` has
no readable split at all (1).

``--explain ID`` draws one problem instead, straight from its raw file, with the annotator given
(``hlgt.explain.data_page``: its tokens and quantities, its gold equation and the graph, as an
HTML page): an annotator can be judged before anything is trained.
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

from hlgt.commands.cli import non_negative_int, positive_int
from hlgt.data.clean import DROP_REASONS, MAX_TOKENS, CleanResult, clean_split
from hlgt.data.problems import ReadResult
from hlgt.data.graph import GRAPH_VARIANTS
from hlgt.data.splits import (DATASETS, MAWPS_FOLD_FILES, MAWPS_N_FOLDS, SPLITS, find_problem, read_split,
                               resolve_data_dir, split_paths, text_key)
from hlgt.data.srl import ANNOTATORS


def _reasons(counter: collections.Counter) -> str:
    order = {r: i for i, r in enumerate(DROP_REASONS)}
    items = sorted(counter.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
    return " ".join(f"{k}={v}" for k, v in items if v) or "-"


def _row(label: str, read: ReadResult, cleaned: CleanResult) -> str:
    dropped = sum(cleaned.dropped.values())
    kept = len(cleaned.examples)
    share = f"{100.0 * kept / len(read.problems):.2f}%" if read.problems else "-"
    text = (f"  {label:<16} {read.records:>7} {sum(read.skipped.values()):>7} {len(read.problems):>8} "
            f"{kept:>7} {share:>8} {dropped:>7}  dropped: {_reasons(cleaned.dropped)}")
    if read.skipped:
        text += f"; reader skipped: {_reasons(read.skipped)}"
    if cleaned.unrepresentable:
        text += f"; kept, prefix None: {_reasons(cleaned.unrepresentable)}"
    return "\n".join([text, *(f"  {'':<16} {note}" for note in read.notes)])


HEADER = f"  {'split':<16} {'records':>7} {'skipped':>7} {'problems':>8} {'kept':>7} {'kept %':>8} {'dropped':>7}"


def report_dataset(dataset: str, data_dir: Path, folds: list[int], min_const_freq: int, max_tokens: int,
                   mawps_folds: str = "grouped") -> int:
    """Print one dataset's table; return how many splits were read."""
    print(f"\n== {dataset} ==")
    print(HEADER)
    done = 0
    for fold in folds if dataset == "mawps" else [0]:
        reads: dict[str, ReadResult] = {}
        for split in SPLITS:
            try:
                reads[split] = read_split(dataset, split, data_dir, fold, mawps_folds)
            except (FileNotFoundError, ValueError) as e:
                print(f"  {split:<16} not read: {e}")
        tag = f" f{fold}" if dataset == "mawps" else ""
        constants = None
        if "train" in reads:
            train = clean_split(reads["train"].problems, train=True, min_const_freq=min_const_freq,
                                max_tokens=max_tokens)
            constants = train.constants
            print(_row("train" + tag, reads["train"], train))
        elif "valid" in reads:  # APE210K here: show the training rules on the file that exists
            as_train = clean_split(reads["valid"].problems, train=True, min_const_freq=min_const_freq,
                                   max_tokens=max_tokens)
            constants = as_train.constants
            print(_row("valid (as train)", reads["valid"], as_train))
        for split in ("valid", "test"):
            if split in reads and "train" in reads:
                cleaned = clean_split(reads[split].problems, train=False, constants=constants, max_tokens=max_tokens)
                print(_row(split + tag, reads[split], cleaned))
        if dataset == "mawps" and all(s in reads for s in SPLITS):
            seen = {text_key(p) for s in ("train", "valid") for p in reads[s].problems}
            print(f"  {'':<16} test problems whose text is in train or valid ({mawps_folds} folds): "
                  f"{sum(text_key(p) in seen for p in reads['test'].problems)}")
        if constants is not None:
            print(f"  {'':<16} constants (min_const_freq={min_const_freq}): {' '.join(constants) or '-'}")
        done += len(reads)
    if dataset == "mawps" and done:
        whole = read_split("mawps", "train", data_dir, 0)
        for split in ("valid", "test"):
            part = read_split("mawps", split, data_dir, 0)
            whole.problems += part.problems
            whole.records += part.records
        print(_row("file (as train)", whole, clean_split(whole.problems, train=True, min_const_freq=min_const_freq,
                                                         max_tokens=max_tokens)))
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hlgt.data.report", description=__doc__.split("\n\n")[0],
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
    parser.add_argument("--max-tokens", type=positive_int, default=MAX_TOKENS, help="longer problems are dropped, in every split")
    explaining = parser.add_argument_group("one problem as a page, instead of the report")
    explaining.add_argument("--explain", default=None, metavar="ID",
                            help="draw the problem of this id (one --dataset) from its raw file as an HTML page")
    explaining.add_argument("--out", default=None, metavar="PAGE", help="the page's file")
    explaining.add_argument("--split", default=None, choices=list(SPLITS), help="look in this split's file only")
    explaining.add_argument("--annotator", default=None, choices=list(ANNOTATORS), help="default: offline")
    explaining.add_argument("--annotator-model", default=None, help="hub id or local folder for ltp / hanlp")
    explaining.add_argument("--graph", default=None, choices=sorted(GRAPH_VARIANTS),
                            help="the graph arm drawn (data.graph; default srl)")
    args = parser.parse_args(argv)
    page_flags = [f for f, v in (("--out", args.out), ("--split", args.split), ("--annotator", args.annotator),
                                 ("--annotator-model", args.annotator_model), ("--graph", args.graph)) if v is not None]
    if args.explain is None and page_flags:
        parser.error(f"{', '.join(page_flags)}: only with --explain ID")
    if args.explain is not None and (args.out is None or len(args.dataset or []) != 1):
        parser.error("--explain ID draws one problem: give one --dataset and the page's --out file")
    if args.explain is not None:
        done = explain_problem(args.dataset[0], args.explain, args.out, args.data_dir, args.split,
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


def explain_problem(dataset: str, problem_id: str, out: str, data_dir: str | None = None, split: str | None = None,
                    annotator: str = "offline", annotator_model: str = "", graph: str = "srl") -> str:
    """The page of one problem, straight from its raw file, with ``annotator`` and no model
    (``hlgt.explain.data_page``); the page's file is checked before anything is read. Returns a
    line saying what was written."""
    from hlgt.data.srl import AnnotatorLoadError, make_annotator
    from hlgt.explain import data_page
    from hlgt.storage import write_text
    from hlgt.pages import check_page_file

    page = check_page_file(out, "--out")
    annotate = make_annotator(annotator, annotator_model)
    try:
        getattr(annotate, "load", lambda: None)()
    except AnnotatorLoadError as error:
        raise ValueError(f"--annotator {annotator}: {error}") from None
    problem, found_in = find_problem(dataset, problem_id, resolve_data_dir(data_dir), (split,) if split else SPLITS)
    about = [("data", f"{dataset}, the {found_in} file {problem.source}"), ("annotator", annotator),
             ("model", "none: the graph as the data pipeline builds it")]
    write_text(page, data_page(problem, annotate, graph, about))
    return f"problem {problem.id} of {dataset} ({found_in}) -> {page}"


if __name__ == "__main__":
    from hlgt.commands.cli import run_command

    sys.exit(run_command(main, "python -m hlgt.data.report"))
