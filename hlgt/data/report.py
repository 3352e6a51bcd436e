"""The data report: per dataset and split, problems read, skipped by the reader, kept, dropped.

    python -m hlgt.data.report --data-dir ../shared/datasets [--dataset NAME ...] [--fold K|all]
        [--mawps-folds grouped|graph2tree|graph2tree-1921]
    python -m hlgt.data.report --dataset math23k --id ID --explain page.html [--split S]
        [--annotator offline|ltp|hanlp] [--annotator-model M] [--graph srl|parse|quantity_cell|nc]

For every split it prints the records in the file(s), the reader's skips by reason (the first few
named by file and line), the problems read, the problems kept (and their share of those read), the
problems dropped by reason (training rules, see clean.py) and, for valid and test, the problems
kept whose gold equation cannot be represented (they score as wrong unless the model finds another
equation with the right value); for MAWPS also how many test problems have their text among the
fold's train and valid problems (0 with the grouped folds). Two reference rows show the training
rules on files that are not training files here: MAWPS's whole file (its folds only split it), and
APE210K's valid file when train.ape.json is absent (valid and test rows need constants learned on a
real training file, so they are printed only when it is present). A missing file is a printed line,
not a failure; the exit status is 0 unless the data folder does not exist (2) or a dataset named
with ``--dataset`` has no readable split at all (1).

``--id ID --explain PAGE`` draws one problem instead, straight from its raw file, with the annotator given
(``hlgt.explain.data_page``: its tokens and quantities, its gold equation and the graph, as an
HTML page): an annotator can be judged before anything is trained.
"""
from __future__ import annotations

import collections
from pathlib import Path

from hlgt.data.clean import DROP_REASONS, CleanResult, clean_split
from hlgt.data.problems import ReadResult
from hlgt.data.splits import SPLITS, read_split, text_key


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


if __name__ == "__main__":  # python -m hlgt.data.report: the command hlgt-report
    from hlgt.commands.report import run

    run()
