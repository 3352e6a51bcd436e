"""The training command.

    python -m hlgt.train --dataset mawps --fold 0 [--workers N] [--address ADDR] [--set key=value ...] [--no-ray]

Builds (or reuses) the shards (or takes a prebuilt folder as is: ``--shards DIR``), then trains:
with Ray installed and ``--workers >= 1`` through the TorchTrainer of ``hlgt.train.launch``
(data-parallel workers), otherwise (``--no-ray``, or no Ray on this machine) the same loop in this
process. Either way the run folder is ``<storage>/<name>`` (``--storage`` sets ``train.out_dir``),
one command at a time trains it, and it ends with ``best/`` (the model: ``python -m hlgt.solve
--model <run>/best "..."``), ``results.json``, the predictions files and the Table-4 tables.
Re-running the same command (same ``--name``, a folder name) continues an interrupted run; a run
of other settings under that name is refused (``--fresh`` starts it over, removing the run folder
only when the project made it: ``hlgt.files``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from hlgt.config import ABLATIONS, DATASET_DEFAULTS, Config, check_ablation, is_uri, parse_overrides
from hlgt.data.splits import MAWPS_FOLD_FILES
from hlgt.files import check_name, check_owned, claim, remove_owned
from hlgt.ray_session import start_ray


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hlgt.train", description="Train HLGT (one run).", allow_abbrev=False)
    p.add_argument("--dataset", default="sample", help="sample | math23k | mawps | ape210k")
    p.add_argument("--fold", type=int, default=0, help="MAWPS cross-validation fold (0..4)")
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
    p.add_argument("--ablation", "--arm", dest="ablation", default="full",
                   help="ablation arm: %s (default full)" % ", ".join(ABLATIONS))
    p.add_argument("--workers", type=int, default=None, help="Ray Train workers (default train.workers)")
    p.add_argument("--cpus-per-worker", type=float, default=None,
                   help="CPUs per Ray Train worker (default: 1, or less so that one CPU stays free for Ray Data)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: a local Ray)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    p.add_argument("--no-ray", action="store_true", help="train in this process, without Ray")
    p.add_argument("--name", default=None, help="run name (default <dataset>[-fold<k>]-<ablation>-seed<s>)")
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
    return Config.from_flat({**flat, **parse_overrides(args.set)})


def run_name(cfg: Config, arm: str) -> str:
    from hlgt.data.build import fold_tag

    return f"{cfg.data.dataset}{fold_tag(cfg.data)}-{arm}-seed{cfg.train.seed}"


def sole_trainer(run_dir: str) -> contextlib.AbstractContextManager:
    """The lock of ``run_dir`` while training: two commands training one run at once would
    interleave its checkpoints and metrics, so the second is refused."""
    from hlgt.data.build import sole_writer

    return sole_writer(run_dir, f"another command is training {run_dir}: let it finish, or give this one another --name")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = make_config(args)
    name = check_name(args.name) if args.name is not None else run_name(cfg, args.ablation)

    from hlgt.data.build import ensure_shards
    from hlgt.data.shards import use_shards
    from hlgt.train import launch

    use_ray = not args.no_ray and cfg.train.workers >= 1 and launch.ray_available()
    if not args.no_ray and not launch.ray_available():
        print("[train] Ray is not installed: training in this process", flush=True)
    run_dir = f"{cfg.train.out_dir.rstrip('/')}/{name}"
    if not use_ray and is_uri(run_dir):
        raise ValueError(f"in process the run folder is on this machine, not {run_dir}: give --storage DIR, "
                         "or train with Ray")
    with sole_trainer(run_dir):
        if args.fresh:
            check_owned(run_dir, "run", "--fresh")  # before the shards: a refusal is immediate
        shards = use_shards(cfg, args.shards) if args.shards else ensure_shards(cfg, address=args.address)
        print(f"[train] {name}: {cfg.data.dataset} shards {shards}; "
              f"{'Ray Train, %d worker(s)' % cfg.train.workers if use_ray else 'in process'}", flush=True)
        if args.fresh and remove_owned(run_dir, "run", "--fresh"):
            print(f"[train] --fresh: removed {run_dir}", flush=True)
        check_resumable(cfg, run_dir, use_ray)
        claim(run_dir, "run")
        if use_ray:
            start_ray(args.address)
            result = launch.fit(cfg, shards, name=name, storage=cfg.train.out_dir, cpus_per_worker=args.cpus_per_worker)
            metrics = result.metrics
        else:
            metrics = train_here(cfg, shards, run_dir, name)
    print(f"[train] done: {json.dumps(metrics)}", flush=True)
    print(f"[train] model: {run_dir}/best   (python -m hlgt.solve --model {run_dir}/best \"...\")", flush=True)
    return 0


def check_resumable(cfg: Config, run_dir: str, use_ray: bool) -> None:
    """``ValueError`` when ``run_dir`` holds a checkpoint that this command would not resume as
    is: one of the other way of training (Ray Train's ``checkpoint_<time>`` folders, the in-process
    loop's ``checkpoint/``), beside which it would train anew, or one of other settings."""
    from hlgt.train import launch, loop

    with_ray = launch.resumed_config(run_dir)
    here = None if is_uri(run_dir) else loop.LocalReporter(run_dir).latest()
    if (here if use_ray else with_ray) is not None:
        raise ValueError(f"{run_dir} holds a run trained {'in process' if use_ray else 'with Ray'}, which this "
                         "command would not resume: re-run it the same way, or --fresh starts it over")
    if use_ray:
        loop.check_same_run(cfg, with_ray, run_dir)
    elif here is not None:
        loop.check_same_run(cfg, json.loads((here / "config.json").read_text(encoding="utf-8")), run_dir)


def train_here(cfg: Config, shards: Path, run_dir: str, name: str) -> dict:
    """The loop in this process, resuming the run folder's checkpoint if it has one."""
    import torch

    from hlgt.train import loop

    resume = loop.LocalReporter(run_dir).latest() if Path(run_dir).is_dir() else None
    device = torch.device("cuda" if cfg.train.use_gpu and torch.cuda.is_available() else "cpu")
    if cfg.train.use_gpu and device.type != "cuda":
        print("[train] train.use_gpu is set but CUDA is not available: training on CPU", flush=True)
    return loop.train(cfg, shards, run_dir=run_dir, resume_from=resume,
                      runtime=loop.Runtime(device=device), run_name=name, wandb_dir=run_dir).metrics


if __name__ == "__main__":
    from hlgt.cli import run_command

    sys.exit(run_command(main, "python -m hlgt.train"))
