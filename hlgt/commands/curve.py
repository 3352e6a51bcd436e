"""hlgt-curve (python -m hlgt.train.curve): the learning-curve diagnostic, ablation arms trained side
by side on the same problems, seed and budget, compared epoch by epoch (``hlgt.train.curve``).

    hlgt-curve --dataset math23k --limit 6000 --epochs 4 --ablation gts,full
    hlgt-curve --shards datasets/processed/math23k-offline --dataset math23k --ablation all

Every arm runs THE training loop (``hlgt.train.loop.train``) on the first ``--limit`` training
rows of the shards (the same rows, shuffled the same way, for every arm), validates after every
epoch on the first ``--val-limit`` validation rows (named in the output) and never looks at test.
Arms run in parallel processes (``--jobs``, one torch thread each by default) or one after the
other; an arm's result does not depend on which. Per epoch and arm it prints validation value
accuracy, tree and comparison loss, the largest gradient norm of the whole model and of each part
(``hlgt.metrics.MODEL_PARTS``) and the activation scales (``hlgt.metrics.ACTIVATIONS``), then the
curves side by side. ``--out DIR`` keeps each arm's run folder and writes ``curve.json`` and
``curve.md``; without it the runs are trained in a temporary folder, removed at the end. A
measurement, not a test.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from hlgt.commands.cli import device, non_negative_int, positive_int, refuse_flag_keys, run_command
from hlgt.config import ABLATIONS, DATASET_DEFAULTS, Config, ablation_arms, check_ablation, parse_overrides
from hlgt.data.build import ensure_shards
from hlgt.data.shards import use_shards
from hlgt.data.splits import MAWPS_FOLD_FILES
from hlgt.storage import claim, folder_kind, sole_writer, write_text
from hlgt.train.curve import curve_rows, curve_table, curves_side_by_side, train_arms

PROG = "hlgt-curve"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                allow_abbrev=False)
    p.add_argument("--dataset", default="sample", help="sample | math23k | mawps | ape210k")
    p.add_argument("--fold", type=non_negative_int, default=0, help="MAWPS cross-validation fold (0..4)")
    p.add_argument("--mawps-folds", default="grouped", choices=list(MAWPS_FOLD_FILES))
    p.add_argument("--data-dir", default=None, help="benchmark files (default $HLGT_DATA_DIR or ../shared/datasets)")
    p.add_argument("--shards", default=None, help="a prebuilt shard folder (no raw data needed)")
    p.add_argument("--ablation", default="gts,full",
                   help="ablation arms, comma-separated, or 'all'; ARM+KEY=VALUE adds overrides to one curve")
    p.add_argument("--limit", type=positive_int, default=6000, help="training problems (the first of the split)")
    p.add_argument("--val-limit", type=positive_int, default=1000, help="validation problems (the first of the split)")
    p.add_argument("--epochs", type=positive_int, default=4)
    p.add_argument("--jobs", type=non_negative_int, default=0,
                   help="arms trained at once (0: one per CPU core, at most one per arm)")
    p.add_argument("--threads", type=non_negative_int, default=0, help="torch threads per arm (0: cores / jobs)")
    p.add_argument("--device", type=device, default="cpu", help="cpu | cuda")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override over every arm (repeatable); not of a key one of these flags sets")
    p.add_argument("--out", default=None, help="keep the runs and write curve.json / curve.md here")
    return p


# The config keys this command's flags set: ``--set`` may not name them.
FLAG_KEYS = {"data.dataset": "--dataset", "data.fold": "--fold", "data.mawps_folds": "--mawps-folds",
             "data.data_dir": "--data-dir", "train.epochs": "--epochs", "train.threads": "--threads",
             "train.use_gpu": "--device"}


def parse_arms(text: str) -> list[str]:
    """``"gts,full+train.grad_clip=5"`` -> the curves to draw: an ablation arm, optionally with
    ``+KEY=VALUE`` overrides of its own (``'all'``: every arm)."""
    curves = [c.strip() for c in text.split(",") if c.strip()]
    if curves == ["all"]:
        return ablation_arms("all")
    for c in curves:  # one arm may be drawn with several overrides
        check_ablation(c.split("+")[0])
    if len(set(curves)) != len(curves):
        raise ValueError(f"--ablation names a curve twice: {text!r}")
    return curves


def arm_config(args: argparse.Namespace, curve: str, threads: int) -> Config:
    """A curve's configuration: the dataset's paper settings, the arm, ``--set``, then the curve's own
    ``+KEY=VALUE`` overrides."""
    arm, *own = curve.split("+")
    flat = {**DATASET_DEFAULTS.get(args.dataset, {}), "data.dataset": args.dataset, "data.fold": args.fold,
            "data.mawps_folds": args.mawps_folds, **ABLATIONS[arm], "train.epochs": args.epochs,
            "train.wandb": False, "train.threads": threads, "train.use_gpu": args.device != "cpu"}
    if args.data_dir:
        flat["data.data_dir"] = args.data_dir
    overrides, own = parse_overrides(args.set), parse_overrides(own)
    refuse_flag_keys(overrides, FLAG_KEYS)
    refuse_flag_keys(own, FLAG_KEYS, given_as="--ablation ...+")  # the curves compare on the same data and budget
    return Config.from_flat({**flat, **overrides, **own})


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    arms = parse_arms(args.ablation)
    cores = os.cpu_count() or 1
    jobs = args.jobs or max(1, min(len(arms), cores))
    threads = args.threads or max(1, cores // jobs)
    configs = {arm: arm_config(args, arm, threads) for arm in arms}

    with contextlib.ExitStack() as stack:  # without --out the runs go to a temporary folder, removed after
        out = Path(args.out) if args.out else Path(stack.enter_context(tempfile.TemporaryDirectory(
            prefix="hlgt-curve-"))) / "runs"
        stack.enter_context(sole_writer(str(out), f"another command is writing {out}: let it finish, or give "
                                                  "another --out"))
        claim(str(out), "curve", earlier=("curve.json",))  # never a run's, a sweep's or a user's folder
        for arm in arms:  # an arm's folder is the curve's, never a run a training made there
            if (kind := folder_kind(str(arm_folder(out, arm)))) is not None:
                raise ValueError(f"{arm_folder(out, arm)} is a {kind} folder, not the curve's arm {arm}: give "
                                 "another --out")
        return curve(args, arms, configs, jobs, threads, out, stack)


def arm_folder(out: Path, arm: str) -> Path:
    """Where an arm (``ARM+key=value``, made a folder name) trains."""
    return out / re.sub(r"[^\w.-]+", "_", arm)


def curve(args: argparse.Namespace, arms: list[str], configs: dict[str, Config], jobs: int, threads: int,
          out: Path, held: contextlib.ExitStack) -> int:
    """Train the arms side by side, the shards held for reading in ``held`` (each arm reads them as it starts)."""
    first = configs[arms[0]]
    shards = str(use_shards(first, args.shards, held) if args.shards else ensure_shards(first, held=held))
    n_train, n_valid = map(len, curve_rows(shards, args.limit, args.val_limit))  # fewer where the split is smaller
    print(f"[curve] {args.dataset}: arms {', '.join(arms)}; the first {n_train} training and "
          f"{n_valid} validation problems of {shards}; {args.epochs} epochs, seed {first.train.seed}, "
          f"batch {first.train.batch_size}; {jobs} at once, {threads} torch thread(s) each, {args.device}",
          flush=True)
    started = time.perf_counter()
    jobs_args = {arm: (arm, configs[arm], shards, args.limit, args.val_limit, str(arm_folder(out, arm)),
                     args.device) for arm in arms}
    histories = train_arms(jobs_args, jobs)
    minutes = (time.perf_counter() - started) / 60
    table, side = curve_table(histories), curves_side_by_side(histories)
    print(f"\n{table}\n\nValidation value accuracy (%) on the first {n_valid} validation problems:\n\n{side}\n"
          f"\n[curve] {minutes:.1f} minutes", flush=True)
    if args.out:
        write_text(out / "curve.json", json.dumps({"args": vars(args), "shards": shards, "histories": histories},
                                                  indent=1))
        write_text(out / "curve.md", f"{table}\n\n{side}\n")
        print(f"[curve] wrote {out / 'curve.json'} and {out / 'curve.md'}", flush=True)
    return 0


def run() -> None:
    sys.exit(run_command(main, PROG))
