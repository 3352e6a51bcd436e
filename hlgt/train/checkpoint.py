"""A training run's checkpoints, and the run folder of a single-process run.

``LocalReporter`` is the single-process ``report`` of ``hlgt.train.loop.train``: the latest
checkpoint in ``run_dir/checkpoint``, the metrics in ``run_dir/metrics.jsonl``, a finished run's
outputs published beside them. ``check_same_run`` refuses to resume a checkpoint of other settings.

Checkpoint folder (``read_checkpoint`` / ``write_checkpoint``)::

    trainer_state.pt   epoch, optimizer, scheduler, best epoch and metrics, history, RNG (the CPU's,
                       and the GPU's of a run on one), finished, starts (the epoch each start or
                       resume began after), the W&B run id
    config.json        the full flat config
    model/             Solver.save of the current weights + run_config.json: the last epoch's model
                       folder on its own (what GTS's reference code tests, having no validation split)
    best/              Solver.save of the best weights + run_config.json: a model folder on its own
    results.json, predictions_{valid,test}.jsonl, numbers_{valid,test}.{md,csv}   (final only)

Everything loads with ``torch.load(weights_only=True)``.
"""
from __future__ import annotations

import copy
import json
import pickle
import shutil
import uuid
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from hlgt import metrics as M
from hlgt.config import Config
from hlgt.inference import RUN_CONFIG_FILE
from hlgt.model.solver import first_fault
from hlgt.storage import copy_tree, folder_kind, write_text

STATE_FILE = "trainer_state.pt"
RESULTS_FILE = "results.json"
# Files a finished run publishes next to its checkpoints (``publish``).
OUTPUTS = ("best", RESULTS_FILE, "predictions_valid.jsonl", "predictions_test.jsonl",
           "numbers_valid.md", "numbers_valid.csv", "numbers_test.md", "numbers_test.csv")


def fresh_state() -> dict:
    """A run's trainer state before its first epoch. ``wandb_id``: its W&B run, drawn anew for each
    fresh start (from the OS, not torch's seeded generator), kept by its resumes: a run started
    over under an earlier run's name does not write into that run's W&B record."""
    return {"epoch": 0, "best_epoch": 0, "best": {M.VAL_VALUE_ACC: -1.0, M.VAL_EQUATION_ACC: 0.0},
            "last_val": {}, "history": [], "finished": False, "starts": [0], "wandb_id": uuid.uuid4().hex[:8]}


def write_checkpoint(directory: Path, cfg: Config, solver: nn.Module, best_weights: dict, opt, sched,
                     state: Mapping[str, Any]) -> None:
    """One resumable checkpoint (layout in the module docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(cfg.to_flat(), indent=1), encoding="utf-8")
    _model_folder(directory / "model", cfg, solver, {"epoch": state["epoch"]})
    best = copy.deepcopy(solver)
    best.load_state_dict(best_weights)
    _model_folder(directory / "best", cfg, best, {"epoch": state["best_epoch"], **state["best"]})
    device = next(solver.parameters()).device
    torch.save({**state, "optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None},
               directory / STATE_FILE)


def _model_folder(directory: Path, cfg: Config, solver: nn.Module, about: Mapping[str, Any]) -> None:
    """``Solver.save`` and the run's config beside it (``run_config.json``): what evaluating and
    solving load."""
    solver.save(directory, extra=dict(about))
    (directory / RUN_CONFIG_FILE).write_text(json.dumps({"config": cfg.to_flat(), **about}, indent=1),
                                             encoding="utf-8")


# What a run folder of a version before the marker holds: an in-process run's checkpoint, or Ray
# Train's (``checkpoint_<time>/``), each with its trainer state.
EARLIER_RUN = (f"checkpoint/{STATE_FILE}", f"checkpoint_*/{STATE_FILE}")


def holds_run(folder: Path) -> bool:
    """Whether ``folder`` is a run's or one of its checkpoints (the predictions there are its best
    model's): the marker training writes, a trainer state, or a run of a version before the marker."""
    return (folder_kind(str(folder)) == "run" or (folder / STATE_FILE).is_file()
            or any(p.is_file() for pattern in EARLIER_RUN for p in folder.glob(pattern)))


def read_checkpoint(directory: str | Path) -> dict:
    """The trainer state of a checkpoint folder (``weights_only=True``); ``ValueError`` when the
    file is damaged or lacks what a resume reads."""
    path = Path(directory) / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: not a checkpoint folder written by hlgt's training")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError) as error:
        raise ValueError(f"{path} is damaged ({first_fault(error)}): --fresh starts the run over") from error
    needed = set(fresh_state()) - {"wandb_id"} | {"optimizer", "scheduler", "rng"}
    missing = sorted(needed - set(state)) if isinstance(state, dict) else ["everything: not a dict"]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}: not a trainer state this code wrote; "
                         "--fresh starts the run over")
    return state


# Keys that say where a run's files are or how it runs, not what it trains: a resumed run may
# change them (another machine, a time budget, W&B off). Not train.workers: train.batch_size is per
# worker, so another count trains with another batch.
PLACEMENT_KEYS = frozenset({"data.data_dir", "data.shards_dir", "train.out_dir", "train.wandb", "train.wandb_project",
                            "train.threads", "train.use_gpu", "train.compile", "train.cuda_graphs",
                            "train.capture_bigrus", "train.max_minutes", "model.bf16_inference"})


def changed_settings(saved: Mapping[str, Any], now: Mapping[str, Any],
                     ignore: frozenset[str] = PLACEMENT_KEYS) -> list[str]:
    """``"key old -> new"`` for every setting of ``now`` (flat) that differs from ``saved``, but
    the keys in ``ignore``."""
    return [f"{k} {saved.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(saved) | set(now))
            if k not in ignore and saved.get(k) != now.get(k)]


def check_same_run(cfg: Config, saved: Mapping[str, Any] | None, run_dir: str | Path) -> None:
    """``ValueError`` when ``saved``, the config of the checkpoint a run in ``run_dir`` would resume,
    trained other settings than ``cfg``: resuming would silently keep the old ones, or fail on the
    weights. ``saved=None``: nothing to resume."""
    if saved is None:
        return
    changed = changed_settings(saved, cfg.to_flat())
    if changed:
        raise ValueError(f"{run_dir} holds a run of other settings ({'; '.join(changed)}): "
                         "--fresh starts it over, --name NAME trains a new run beside it")


def publish(checkpoint_dir: Path, run_dir: Path) -> None:
    """Copy a finished run's outputs (best model, results, predictions, tables) into ``run_dir``,
    each copied beside its place and renamed into it: a command reading ``best/`` meanwhile finds
    the old copy or the new one, never half of one."""
    for name in OUTPUTS:
        src = Path(checkpoint_dir) / name
        dst = Path(run_dir) / name
        if not src.exists():
            continue
        new, old = dst.with_name(f".{name}.new"), dst.with_name(f".{name}.old")
        for leftover in (new, old):  # a publish killed midway
            if leftover.is_dir():
                shutil.rmtree(leftover)
            leftover.unlink(missing_ok=True)
        if src.is_dir():
            shutil.copytree(src, new)
            if dst.is_dir():
                dst.rename(old)
            new.rename(dst)
            shutil.rmtree(old, ignore_errors=True)
        else:
            shutil.copy2(src, new)
            new.replace(dst)


def publish_remote(fs, checkpoint_path: str) -> None:
    """``publish`` for a run folder at a URI (a cluster's S3 storage): the outputs of the finished
    run's checkpoint (``checkpoint_path`` in the pyarrow filesystem ``fs``, as Ray Train names it)
    copied into the run folder, the checkpoint's parent there (the folder as Ray names it, whatever
    characters the run's name holds), file by file (a URI has no rename)."""
    import pyarrow.fs

    checkpoint_path = checkpoint_path.rstrip("/")
    run = checkpoint_path.rsplit("/", 1)[0]
    for name in OUTPUTS:
        info = fs.get_file_info(f"{checkpoint_path}/{name}")
        if info.type == pyarrow.fs.FileType.Directory:
            copy_tree(fs, info.path, fs, f"{run}/{name}")
        elif info.type == pyarrow.fs.FileType.File:
            fs.copy_file(info.path, f"{run}/{name}")


def _metrics_record(line: bytes) -> dict | None:
    """One line of ``metrics.jsonl`` as its record, or None when it is blank or no record."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested beyond reading
        return None
    return record if isinstance(record, dict) else None


class LocalReporter:
    """The single-process ``report``: keeps the latest checkpoint in ``run_dir/checkpoint``
    (swapped in whole, so a kill mid-copy leaves the previous one), appends metrics to
    ``run_dir/metrics.jsonl`` and publishes the outputs of the final checkpoint."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)  # created with the first report: a run that fails first leaves no folder

    @property
    def checkpoint(self) -> Path:
        return self.run_dir / "checkpoint"

    def latest(self) -> Path | None:
        """The checkpoint to resume from, or None. A kill between the swap's two renames leaves
        only ``.checkpoint.old``, complete: it is moved back into place first."""
        old = self.run_dir / ".checkpoint.old"
        if not self.checkpoint.exists() and (old / STATE_FILE).exists():
            old.rename(self.checkpoint)
        return self.checkpoint if (self.checkpoint / STATE_FILE).exists() else None

    def restart(self, epoch: int) -> None:
        """Keep in ``metrics.jsonl`` only the epochs up to ``epoch``, where training (re)starts (0
        for a fresh run): a resume or ``--fresh`` re-run then never lists an epoch twice."""
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return
        kept = []
        for number, line in enumerate(path.read_bytes().split(b"\n"), 1):
            record = _metrics_record(line)
            if record is None and line.strip():  # a kill mid-append tears the last line
                print(f"[train] {path} line {number} is not a metrics record (cut short?): dropped", flush=True)
            elif record is not None and record.get(M.EPOCH, 0) <= epoch:
                kept.append(line.decode("utf-8") + "\n")
        write_text(path, "".join(kept))

    def __call__(self, metrics: dict, checkpoint_dir: Path | None) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with (self.run_dir / "metrics.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(metrics) + "\n")
        if checkpoint_dir is None:
            return
        self.latest()
        staging = self.run_dir / ".checkpoint.tmp"
        old = self.run_dir / ".checkpoint.old"
        for p in (staging, old):
            if p.exists():
                shutil.rmtree(p)
        shutil.copytree(checkpoint_dir, staging)
        if self.checkpoint.exists():
            self.checkpoint.rename(old)
        staging.rename(self.checkpoint)
        if old.exists():
            shutil.rmtree(old)
        if (self.checkpoint / RESULTS_FILE).exists():
            publish(self.checkpoint, self.run_dir)
