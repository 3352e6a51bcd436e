"""One training run in its folder: ``<storage>/<name>``, trained by one command at a time.

``train_run`` builds (or reuses) the shards, or takes a prebuilt folder as is, then trains: through
the TorchTrainer of ``hlgt.train.launch`` (data-parallel Ray Train workers) or the same loop in this
process (``hlgt.train.loop``). It ends with ``best/`` (the model), ``results.json``, the predictions
files and the Table-4 tables. Run again with the same name it continues an interrupted run; a run of
other settings, or one trained the other way, is refused (``fresh`` starts it over, removing the run
folder only when the project made it: ``hlgt.storage``).
"""
from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from hlgt.config import Config
from hlgt.data.build import ensure_shards, fold_tag
from hlgt.data.shards import use_shards
from hlgt.model.solver import read_json_object
from hlgt.ray_session import start_ray
from hlgt.storage import check_owned, claim, folder_kind, is_uri, remove_owned, sole_writer
from hlgt.train import checkpoint, launch, loop


def run_name(cfg: Config, arm: str) -> str:
    """``<dataset>[-fold<k>]-<arm>-seed<s>``: a run's default name."""
    return f"{cfg.data.dataset}{fold_tag(cfg.data)}-{arm}-seed{cfg.train.seed}"


def run_folder(cfg: Config, name: str) -> str:
    return f"{cfg.train.out_dir.rstrip('/')}/{name}"


def sole_trainer(run_dir: str) -> contextlib.AbstractContextManager:
    """The lock of ``run_dir`` while training: two commands training one run at once would
    interleave its checkpoints and metrics, so the second is refused."""
    return sole_writer(run_dir,
                       f"another command is training {run_dir}: let it finish, or give this one another --name")


def uses_ray(cfg: Config, no_ray: bool) -> bool:
    """Ray Train when it is installed, asked for and given workers; else the loop in this process."""
    if not no_ray and not launch.ray_available():
        print("[train] Ray is not installed: training in this process", flush=True)
    return not no_ray and cfg.train.workers >= 1 and launch.ray_available()


def train_run(cfg: Config, name: str, shards: str | None = None, address: str | None = None, fresh: bool = False,
              no_ray: bool = False, cpus_per_worker: float | None = None) -> dict:
    """Train the run ``name`` of ``cfg`` (resumed when its folder holds a checkpoint of the same
    settings); its final metrics."""
    use_ray = uses_ray(cfg, no_ray)
    run_dir = run_folder(cfg, name)
    if not use_ray and is_uri(run_dir):
        raise ValueError(f"in process the run folder is on this machine, not {run_dir}: give --storage DIR, "
                         "or train with Ray")
    inside = folder_kind(cfg.train.out_dir)
    if inside is not None:  # a curve's arm, a sweep's or shard folder's entry: another command's files
        raise ValueError(f"--storage {cfg.train.out_dir} is a {inside} folder: its folders are that {inside}'s, "
                         "give another --storage")
    # The shards are held for reading until the run ends: it reads them each epoch and at its end.
    with sole_trainer(run_dir), contextlib.ExitStack() as held:
        if fresh:
            check_owned(run_dir, "run", "--fresh")  # before the shards: a refusal is immediate
        folder = use_shards(cfg, shards, held) if shards else ensure_shards(cfg, address=address, held=held)
        print(f"[train] {name}: {cfg.data.dataset} shards {folder}; "
              f"{'Ray Train, %d worker(s)' % cfg.train.workers if use_ray else 'in process'}", flush=True)
        if fresh and remove_owned(run_dir, "run", "--fresh"):
            print(f"[train] --fresh: removed {run_dir}", flush=True)
        check_resumable(cfg, run_dir, use_ray)
        claim(run_dir, "run", earlier=checkpoint.EARLIER_RUN)
        if use_ray:
            start_ray(address)
            return launch.fit(cfg, folder, name=name, storage=cfg.train.out_dir,
                              cpus_per_worker=cpus_per_worker).metrics
        return train_here(cfg, folder, run_dir, name)


def check_resumable(cfg: Config, run_dir: str, use_ray: bool) -> None:
    """``ValueError`` when ``run_dir`` holds a checkpoint that this command would not resume as
    is: one of the other way of training (Ray Train's ``checkpoint_<time>`` folders, the in-process
    loop's ``checkpoint/``), beside which it would train anew, or one of other settings."""
    with_ray = launch.resumed_config(run_dir)
    here = None if is_uri(run_dir) else checkpoint.LocalReporter(run_dir).latest()
    if (here if use_ray else with_ray) is not None:
        raise ValueError(f"{run_dir} holds a run trained {'in process' if use_ray else 'with Ray'}, which this "
                         "command would not resume: re-run it the same way, or --fresh starts it over")
    if use_ray:
        checkpoint.check_same_run(cfg, with_ray, run_dir)
    elif here is not None:
        checkpoint.check_same_run(cfg, read_json_object(here / "config.json"), run_dir)


def train_here(cfg: Config, shards: Path, run_dir: str, name: str) -> dict:
    """The loop in this process, resuming the run folder's checkpoint if it has one."""
    resume = checkpoint.LocalReporter(run_dir).latest() if Path(run_dir).is_dir() else None
    device = torch.device("cuda" if cfg.train.use_gpu and torch.cuda.is_available() else "cpu")
    if cfg.train.use_gpu and device.type != "cuda":
        print("[train] train.use_gpu is set but CUDA is not available: training on CPU", flush=True)
    return loop.train(cfg, shards, run_dir=run_dir, resume_from=resume,
                      runtime=loop.Runtime(device=device), run_name=name, wandb_dir=run_dir).metrics
