"""hlgt-train (python -m hlgt.train): one training run (``hlgt.train.run``).

    hlgt-train --dataset mawps --fold 0 [--workers N] [--address ADDR] [--set key=value ...] [--no-ray]

Builds (or reuses) the shards (or takes a prebuilt folder as is: ``--shards DIR``), then trains:
with Ray installed and ``--workers >= 1`` through Ray Train's data-parallel workers, otherwise
(``--no-ray``, or no Ray on this machine) the same loop in this process. Either way the run folder
is ``<storage>/<name>`` (``--storage`` sets ``train.out_dir``) and it ends with ``best/``, the model
that ``hlgt-solve --model <run>/best "..."`` reads. Re-running the same command (same ``--name``, a
folder name) continues an interrupted run; ``--fresh`` starts it over.
"""
from __future__ import annotations

import argparse
import json
import sys

from hlgt import metrics as M
from hlgt.commands.cli import non_negative_int, positive_float, positive_int, refuse_flag_keys, run_command
from hlgt.config import ABLATIONS, DATASET_DEFAULTS, Config, check_ablation, parse_overrides
from hlgt.data.splits import MAWPS_FOLD_FILES
from hlgt.storage import check_name, is_uri
from hlgt.train.run import run_folder, run_name, train_run

PROG = "hlgt-train"

# The config keys this command's flags set: ``--set`` may not name them.
FLAG_KEYS = {"data.dataset": "--dataset", "data.fold": "--fold", "data.mawps_folds": "--mawps-folds",
             "data.mawps_valid": "--no-mawps-valid", "data.data_dir": "--data-dir", "train.out_dir": "--storage",
             "train.workers": "--workers", "train.wandb": "--no-wandb", "train.use_gpu": "--gpu"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Train HLGT (one run).", allow_abbrev=False)
    p.add_argument("--dataset", default="sample", help="sample | math23k | mawps | ape210k")
    p.add_argument("--fold", type=non_negative_int, default=0, help="MAWPS cross-validation fold (0..4)")
    p.add_argument("--mawps-folds", default="grouped", choices=list(MAWPS_FOLD_FILES),
                   help="MAWPS fold scheme: grouped (default; no text in two folds), graph2tree (Graph2Tree's "
                        "file-order folds over all 2,373 problems) or graph2tree-1921 (the folds behind the published "
                        "numbers: the 1,921 problems Graph2Tree's code keeps, cut in file order)")
    p.add_argument("--no-mawps-valid", action="store_true",
                   help="MAWPS: no held-out validation, its problems train and the last epoch is kept "
                        "(data.mawps_valid=false; the literature's protocol)")
    p.add_argument("--data-dir", default=None, help="benchmark files (default $HLGT_DATA_DIR or ../shared/datasets)")
    p.add_argument("--shards", default=None,
                   help="a prebuilt shard folder to train on as is (no raw data or annotator needed)")
    p.add_argument("--ablation", default="full",
                   help="ablation arm: %s (default full)" % ", ".join(ABLATIONS))
    p.add_argument("--workers", type=positive_int, default=None, help="Ray Train workers (default train.workers)")
    p.add_argument("--cpus-per-worker", type=positive_float, default=None,
                   help="CPUs per Ray Train worker (default: 1, or less so that one CPU stays free for Ray Data)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: a local Ray)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    p.add_argument("--no-ray", action="store_true", help="train in this process, without Ray")
    p.add_argument("--name", default=None,
                   help="run name (default <dataset>[-<fold scheme>][-novalid][-fold<k>]-<ablation>-seed<s>)")
    p.add_argument("--storage", default=None,
                   help="where the run folder <storage>/<name> goes, with Ray or without: sets train.out_dir "
                        "(default $HLGT_STORAGE/runs, else runs)")
    p.add_argument("--fresh", action="store_true",
                   help="start the run over: remove the run folder an earlier run of this name made")
    p.add_argument("--no-wandb", action="store_true", help="no W&B run")
    p.add_argument("--gpu", action="store_true", help="train on GPU (train.use_gpu=true)")
    return p


def make_config(args: argparse.Namespace) -> Config:
    arm = check_ablation(args.ablation)
    flat = {**DATASET_DEFAULTS.get(args.dataset, {}), "data.dataset": args.dataset, "data.fold": args.fold,
            "data.mawps_folds": args.mawps_folds, "data.mawps_valid": not args.no_mawps_valid, **ABLATIONS[arm]}
    if args.data_dir:
        flat["data.data_dir"] = args.data_dir
    if args.storage:
        flat["train.out_dir"] = args.storage
    if args.workers is not None:
        flat["train.workers"] = args.workers
    if args.no_wandb:
        flat["train.wandb"] = False
    if args.gpu:
        flat["train.use_gpu"] = True
    overrides = parse_overrides(args.set)
    refuse_flag_keys(overrides, FLAG_KEYS)
    return Config.from_flat({**flat, **overrides})


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = make_config(args)
    name = check_name(args.name) if args.name is not None else run_name(cfg, args.ablation)
    metrics = train_run(cfg, name, shards=args.shards, address=args.address, fresh=args.fresh, no_ray=args.no_ray,
                        cpus_per_worker=args.cpus_per_worker)
    run_dir = run_folder(cfg, name)
    trained = metrics.get(M.EPOCH, cfg.train.epochs)
    if trained < cfg.train.epochs:  # train.max_minutes: the best model so far was evaluated, test included
        print(f"[train] stopped at epoch {trained} of {cfg.train.epochs} (train.max_minutes); the same command goes "
              f"on from there: {json.dumps(metrics)}", flush=True)
    else:
        print(f"[train] done: {json.dumps(metrics)}", flush=True)
    if is_uri(run_dir):  # the commands that load a model read a folder on this machine
        print(f"[train] model: {run_dir}/best   (copy it here, then hlgt-solve --model best \"...\")", flush=True)
    else:
        print(f"[train] model: {run_dir}/best   (hlgt-solve --model {run_dir}/best \"...\")", flush=True)
    return 0


def run() -> None:
    sys.exit(run_command(main, PROG))
