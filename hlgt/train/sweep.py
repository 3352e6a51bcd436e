"""Stage 13, sweep: search space × ablation arms → Ray Tune → results table, chart, best models.

    python tune/sweep.py --ablation no_line_graph --smoke-test
    python tune/sweep.py --dataset mawps --folds 0,1,2,3,4 --ablation all --gpus-per-trial 1
    python tune/sweep.py --dataset math23k --space sweep.yaml --num-samples 8 --seeds 1,2,3

Search space: heads, layers and β_com by default (centred on the paper's 4 / 2 / 0.1), the
learning rate and hidden size when asked (``--lr``, ``--hidden``), from the command line or a YAML
file (``space:`` key → list of values, or ``{uniform: [lo, hi]}`` / ``{loguniform: [lo, hi]}``).
``--num-samples N`` draws N configurations (the first is the centre; ``--grid`` takes the whole
product); each is trained once per replicate (``--seeds``, ``--folds``), so a configuration's
score is a mean over the same replicates. An arm skips configurations that differ only in settings
its model does not read (``Config.unread_keys``: ``gts`` has no heads, layers or β_com).

Arms: ``--ablation`` names arms of ``hlgt.config.ABLATIONS`` (or ``all``); ``full`` is added as the
reference unless ``--no-reference``. Each arm is its own Tune experiment (``<storage>/<name>/<arm>``)
so that the scheduler (ASHA by default, ``--scheduler fifo|median|asha``) compares configurations
within an arm, never prunes one arm against another. An interrupted sweep resumes when re-run
with the same ``--name`` and storage: finished trials are kept, unfinished ones continue from
their last checkpoint.

Selection uses validation only: per arm, the configuration with the best mean validation value
accuracy; then its best checkpoint of every replicate is evaluated ONCE on test, here. The sweep
writes ``results.md``, ``results.csv``, ``results.json`` and ``results.png`` (bars per arm, mean ±
std) into ``<storage>/<name>/`` and, with W&B on, one summary run with the table and the best
models' test predictions (each trial has its own run, grouped by the sweep).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import itertools
import json
import math
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hlgt import config as C
from hlgt.config import ABLATIONS, DATASET_DEFAULTS, Config, ablation_arms, parse_overrides
from hlgt.train import tracking

DEFAULT_SPACE: dict[str, list] = {"model.heads": [2, 4, 8], "model.layers": [1, 2, 3], "model.beta_com": [0.05, 0.1, 0.2]}
ASKED_SPACE: dict[str, list] = {"train.lr": [5e-4, 1e-3, 2e-3], "model.hidden_size": [256, 512, 768]}
SHORT = {"model.heads": "heads", "model.layers": "layers", "model.beta_com": "beta_com", "train.lr": "lr",
         "model.hidden_size": "hidden", "model.embedding_size": "embedding", "model.dropout": "dropout"}

# --smoke-test: the whole path on the sample data in a few minutes on a laptop CPU.
SMOKE = {"data.dataset": "sample", "train.epochs": 24, "train.lr": 3e-3, "train.lr_step": 8, "train.batch_size": 16,
         "train.eval_every": 3, "train.threads": 1, "model.embedding_size": 64, "model.hidden_size": 128,
         "model.beam_size": 3, "model.max_output_len": 20}


# ---------------------------------------------------------------------------------------------
# The search space.


def parse_values(text: str) -> list:
    """``"2,4,8"`` → ``[2, 4, 8]`` (ints, floats, booleans or strings)."""
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        for cast in (int, float):
            try:
                out.append(cast(item))
                break
            except ValueError:
                continue
        else:
            out.append({"true": True, "false": False}.get(item.lower(), item))
    return out


def _check_dimension(key: str, dim: Any) -> None:
    if key not in Config().to_flat():
        raise ValueError(f"search space key {key!r} is not a config key")
    if isinstance(dim, list):
        if not dim:
            raise ValueError(f"search space {key!r} has no values")
    elif not (isinstance(dim, dict) and len(dim) == 1 and next(iter(dim)) in ("uniform", "loguniform")
              and len(next(iter(dim.values()))) == 2):
        raise ValueError(f"search space {key!r} must be a list of values or {{uniform|loguniform: [lo, hi]}}, got {dim!r}")


def _draw(dim: Any, rng: random.Random) -> Any:
    if isinstance(dim, list):
        return rng.choice(dim)
    (kind, (lo, hi)), = dim.items()
    if kind == "uniform":
        return rng.uniform(float(lo), float(hi))
    return math.exp(rng.uniform(math.log(float(lo)), math.log(float(hi))))


def _centre(dim: Any, value: Any) -> Any:
    """The base config's value when the dimension holds it, else the dimension's middle."""
    if isinstance(dim, list):
        return value if value in dim else dim[len(dim) // 2]
    (kind, (lo, hi)), = dim.items()
    if float(lo) <= float(value) <= float(hi):
        return value
    return math.sqrt(float(lo) * float(hi)) if kind == "loguniform" else (float(lo) + float(hi)) / 2


def sample_configs(space: dict[str, Any], centre: dict[str, Any], n: int, seed: int = 0, grid: bool = False) -> list[dict]:
    """The configurations to try: the whole product (``grid``), else the centre (the base config,
    i.e. the paper's settings, where the space holds them) then random draws (distinct while the
    space allows)."""
    for key, dim in space.items():
        _check_dimension(key, dim)
    if not space:
        return [{}]
    if grid:
        if not all(isinstance(d, list) for d in space.values()):
            raise ValueError("--grid needs every dimension to be a list of values")
        return [dict(zip(space, combo)) for combo in itertools.product(*space.values())]
    rng = random.Random(seed)
    configs = [{k: _centre(d, centre[k]) for k, d in space.items()}]
    finite = all(isinstance(d, list) for d in space.values())
    size = math.prod(len(d) for d in space.values()) if finite else math.inf
    while len(configs) < min(n, size):
        draw = {k: _draw(d, rng) for k, d in space.items()}
        if draw not in configs or not finite:
            configs.append(draw)
    return configs[:n]


def describe(params: dict[str, Any]) -> str:
    return " ".join(f"{SHORT.get(k, k)}={v:g}" if isinstance(v, float) else f"{SHORT.get(k, k)}={v}"
                    for k, v in params.items()) or "defaults"


# ---------------------------------------------------------------------------------------------
# The plan: everything a trial needs, decided before Ray starts.


@dataclass
class Plan:
    name: str
    storage: str  # the sweep's root: <storage>/<name>/...
    base: dict[str, Any]  # flat overrides common to every trial
    arms: list[str]
    samples: list[dict]
    replicates: list[dict]  # {"data.fold": f, "train.seed": s}
    shards: dict[int, str]  # fold → shard folder
    scheduler: str = "asha"
    workers: int = 1
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    max_concurrent: int = 0
    max_failures: int = 1
    wandb: bool = True
    wandb_dir: str = "."  # where offline W&B runs are written (on the node running each trial's rank 0)
    replicate_kind: str = "seeds"  # what the replicates vary, for the table: seeds | folds | runs

    @property
    def root(self) -> str:
        return f"{self.storage.rstrip('/')}/{self.name}"

    @property
    def local_dir(self) -> Path:
        """Where the results table, chart and test predictions are written (local even when
        the Tune results go to S3)."""
        return Path(self.root) if "://" not in self.root else Path("runs") / "sweeps" / self.name

    def trial_flat(self, arm: str, sample: int, replicate: int) -> dict[str, Any]:
        return {**self.base, **ABLATIONS[arm], **self.samples[sample], **self.replicates[replicate]}

    def arm_params(self, arm: str, sample: int) -> dict[str, Any]:
        """The searched values of a sample that the arm's model reads (gts has no heads or layers)."""
        unread = Config.from_flat({**self.base, **ABLATIONS[arm], **self.samples[sample]}).unread_keys()
        return {k: v for k, v in self.samples[sample].items() if k not in unread}

    def arm_samples(self, arm: str) -> list[int]:
        """The samples an arm trains: the first of each group that is the same model for the arm,
        so no two trials of an arm train the same configuration."""
        seen: list[dict] = []
        keep = []
        for i in range(len(self.samples)):
            params = self.arm_params(arm, i)
            if params not in seen:
                seen.append(params)
                keep.append(i)
        return keep


def trial(config: dict, plan: dict) -> None:
    """The Tune trainable: resolve the trial's flat config, then one TorchTrainer (launch.tune_trial).

    ``config`` holds what varies (arm, sample, replicate); ``plan`` what does not (``with_parameters``).
    """
    from hlgt.train import launch

    flat = {**plan["base"], **ABLATIONS[config["arm"]], **plan["samples"][config["sample"]],
            **plan["replicates"][config["replicate"]]}
    cfg = Config.from_flat(flat)
    launch.tune_trial({
        "cfg": cfg.to_flat(), "shards_dir": plan["shards"][str(cfg.data.fold)], "storage": plan["train_storage"],
        "workers": plan["workers"], "cpus_per_worker": plan["cpus_per_worker"],
        "gpus_per_worker": plan["gpus_per_worker"] or None, "keep": 1, "max_failures": plan["max_failures"],
        "group": plan["name"], "wandb_dir": plan["wandb_dir"],
    })


class TrialName:
    """``<arm>-s<sample>-r<replicate>-<trial id>``: W&B runs and folders named by arm and trial."""

    def __init__(self, arm: str) -> None:
        self.arm = arm

    def __call__(self, t) -> str:
        return f"{self.arm}-s{t.config['sample']}-r{t.config['replicate']}-{t.trial_id}"


def _scheduler(kind: str, epochs: int):
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule

    if kind == "asha":
        # max_t one past the last epoch: ASHA stops a trial that reaches max_t, and the last epoch
        # must not be cut short (the trial still has its final report to make).
        return ASHAScheduler(time_attr=C.EPOCH, max_t=max(epochs, 1) + 1, grace_period=max(1, epochs // 4),
                             reduction_factor=3)
    if kind == "median":
        return MedianStoppingRule(time_attr=C.EPOCH, grace_period=max(1, epochs // 4))
    if kind == "fifo":
        return FIFOScheduler()
    raise ValueError(f"unknown scheduler {kind!r}; choose asha, median or fifo")


def concurrency(plan: Plan) -> int:
    """Trials that fit the cluster at once, one CPU left free for Ray Data's read tasks."""
    import ray

    from hlgt.train.launch import worker_cpus

    if plan.max_concurrent > 0:
        return plan.max_concurrent
    res = ray.cluster_resources()
    worker_cpus(plan.workers, plan.cpus_per_worker)  # raises when even one trial would starve Ray Data
    fit = int((res.get("CPU", 0.0) - 1.0 + 1e-9) // (plan.workers * plan.cpus_per_worker))
    if plan.gpus_per_worker > 0:
        fit = min(fit, int(res.get("GPU", 0.0) // (plan.workers * plan.gpus_per_worker)))
        if fit < 1:
            raise RuntimeError(f"the cluster has {res.get('GPU', 0):g} GPUs; a trial needs "
                               f"{plan.workers * plan.gpus_per_worker:g}")
    return max(fit, 1)


def run_arm(plan: Plan, arm: str):
    """One Tune experiment for one arm (restored when it exists); returns its ResultGrid."""
    import ray.tune

    epochs = Config.from_flat(plan.base).train.epochs
    path = f"{plan.root}/{arm}"
    plan_dict = {"name": plan.name, "base": plan.base, "samples": plan.samples, "replicates": plan.replicates,
                 "shards": {str(k): v for k, v in plan.shards.items()}, "workers": plan.workers,
                 "cpus_per_worker": plan.cpus_per_worker, "gpus_per_worker": plan.gpus_per_worker,
                 "max_failures": plan.max_failures, "train_storage": f"{plan.root}/train",
                 "wandb_dir": plan.wandb_dir}
    # The trial function only waits on its TorchTrainer, whose workers hold the CPUs (GPUs). It asks
    # for memory, not CPU: a fraction of a CPU would leave Ray Data's 1-CPU read tasks unschedulable.
    trainable = ray.tune.with_resources(ray.tune.with_parameters(trial, plan=plan_dict),
                                        {"CPU": 0, "memory": 64 * 1024**2})
    if ray.tune.Tuner.can_restore(path):
        print(f"[sweep] {arm}: resuming {path}", flush=True)
        tuner = ray.tune.Tuner.restore(path, trainable=trainable, resume_errored=True)
    else:
        tuner = ray.tune.Tuner(
            trainable,
            param_space={"arm": arm, "sample": ray.tune.grid_search(plan.arm_samples(arm)),
                         "replicate": ray.tune.grid_search(list(range(len(plan.replicates))))},
            tune_config=ray.tune.TuneConfig(metric=C.VAL_VALUE_ACC, mode="max", scheduler=_scheduler(plan.scheduler, epochs),
                                            max_concurrent_trials=concurrency(plan), trial_name_creator=TrialName(arm),
                                            trial_dirname_creator=TrialName(arm)),
            run_config=ray.tune.RunConfig(name=arm, storage_path=plan.root),
        )
    grid = tuner.fit()
    if grid.num_terminated + grid.num_errors < len(grid):  # Ctrl-C: Tune saved its state and returned
        raise KeyboardInterrupt(f"sweep interrupted in arm {arm}; re-run the same command to resume it")
    return grid


# ---------------------------------------------------------------------------------------------
# Selection on validation, one test evaluation per arm, the results table and chart.


@dataclass
class TrialOutcome:
    arm: str
    sample: int
    replicate: int
    val_value_acc: float  # best validation value accuracy the trial reached
    checkpoint: str | None  # its latest checkpoint (holds best/)
    error: str | None


def outcomes(arm: str, grid) -> list[TrialOutcome]:
    out = []
    for r in grid:
        df = r.metrics_dataframe
        best = float(df[C.VAL_VALUE_ACC].max()) if df is not None and C.VAL_VALUE_ACC in df else float("nan")
        out.append(TrialOutcome(arm=arm, sample=int(r.config["sample"]), replicate=int(r.config["replicate"]),
                                val_value_acc=best, checkpoint=(r.metrics or {}).get("checkpoint_path"),
                                error=None if r.error is None else str(r.error)))
    return out


def mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _checkpoint_dir(plan: Plan, path: str):
    """A local folder for a trial's checkpoint path (downloaded when the storage is remote)."""
    if "://" not in plan.storage:
        return contextlib.nullcontext(path)
    import pyarrow.fs
    from ray.train import Checkpoint

    fs, _ = pyarrow.fs.FileSystem.from_uri(plan.storage)
    return Checkpoint(path=path, filesystem=fs).as_directory()


def select_and_test(plan: Plan, arm: str, trials: list[TrialOutcome], tracker) -> dict:
    """The arm's best configuration by mean validation accuracy, evaluated once on test per replicate."""
    from hlgt.data.build import load_rows
    from hlgt.model.solver import Solver
    from hlgt.train import evaluate as E

    usable = [t for t in trials if t.checkpoint and not math.isnan(t.val_value_acc)]
    if not usable:
        errors = "; ".join(sorted({t.error for t in trials if t.error})) or "no checkpoint reported"
        raise RuntimeError(f"arm {arm}: no trial produced a checkpoint ({errors})")
    by_sample: dict[int, list[TrialOutcome]] = {}
    for t in usable:
        by_sample.setdefault(t.sample, []).append(t)
    best_sample = max(by_sample, key=lambda s: (statistics.fmean(t.val_value_acc for t in by_sample[s]), -s))
    chosen = sorted(by_sample[best_sample], key=lambda t: t.replicate)
    test_value, test_equation = [], []
    for t in chosen:
        cfg = Config.from_flat(plan.trial_flat(arm, t.sample, t.replicate))
        rows = load_rows(plan.shards[cfg.data.fold], "test")
        with _checkpoint_dir(plan, t.checkpoint) as directory:
            solver = Solver.load(Path(directory) / "best")
        report, scored = E.evaluate(solver, rows, solver.vocab, variant=cfg.data.graph, beam_size=cfg.model.beam_size,
                                    batch_size=cfg.train.batch_size)
        E.write_report(plan.local_dir / "best" / arm / f"replicate{t.replicate}", "test", report, scored)
        test_value.append(report.value_acc)
        test_equation.append(report.equation_acc)
        tracker.log_predictions(f"predictions/{arm}/replicate{t.replicate}", scored)
    val_mean, val_std = mean_std([t.val_value_acc for t in chosen])
    tv_mean, tv_std = mean_std(test_value)
    te_mean, te_std = mean_std(test_equation)
    return {"arm": arm, "config": describe(plan.arm_params(arm, best_sample)), "runs": len(chosen),
            "trials": len(trials), "failed": sum(t.error is not None for t in trials),
            "val_value_acc_mean": val_mean, "val_value_acc_std": val_std,
            "test_value_acc_mean": tv_mean, "test_value_acc_std": tv_std,
            "test_equation_acc_mean": te_mean, "test_equation_acc_std": te_std,
            "checkpoints": [str(Path(t.checkpoint) / "best") for t in chosen]}


CSV_COLUMNS = ["arm", "config", "runs", "trials", "failed", "val_value_acc_mean", "val_value_acc_std",
               "test_value_acc_mean", "test_value_acc_std", "test_equation_acc_mean", "test_equation_acc_std"]


def _pct(mean: float, std: float) -> str:
    return f"{100 * mean:.1f} ± {100 * std:.1f}"


def results_markdown(rows: list[dict], replicate_kind: str) -> str:
    lines = [f"| arm | config | val value acc (%) | test value acc (%) | test equation acc (%) | {replicate_kind} |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['config']} | {_pct(r['val_value_acc_mean'], r['val_value_acc_std'])} "
                     f"| {_pct(r['test_value_acc_mean'], r['test_value_acc_std'])} "
                     f"| {_pct(r['test_equation_acc_mean'], r['test_equation_acc_std'])} | {r['runs']} |")
    return "\n".join(lines) + "\n"


def write_results(directory: Path, rows: list[dict], replicate_kind: str, title: str) -> dict[str, Path]:
    """results.md / .csv / .json and the bar chart results.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    paths = {"md": directory / "results.md", "csv": directory / "results.csv",
             "json": directory / "results.json", "png": directory / "results.png"}
    paths["md"].write_text(f"## {title.replace(chr(10), ' — ')}\n\n" + results_markdown(rows, replicate_kind),
                           encoding="utf-8")
    with paths["csv"].open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    paths["json"].write_text(json.dumps(rows, indent=1), encoding="utf-8")

    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(rows) + 1.5), 3.8))
    x = list(range(len(rows)))
    width = 0.38
    for offset, key, label in ((-width / 2, "val_value_acc", "validation"), (width / 2, "test_value_acc", "test")):
        ax.bar([i + offset for i in x], [100 * r[f"{key}_mean"] for r in rows], width,
               yerr=[100 * r[f"{key}_std"] for r in rows], capsize=3, label=label)
    ax.set_xticks(x, [r["arm"] for r in rows], rotation=20, ha="right")
    ax.set_ylabel("value accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(paths["png"], dpi=120)
    plt.close(fig)
    return paths


# ---------------------------------------------------------------------------------------------
# Command line.


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tune/sweep.py", description="HLGT hyperparameter and ablation sweep on Ray Tune.")
    p.add_argument("--dataset", default=None, help="sample | math23k | mawps | ape210k (default mawps; sample with --smoke-test)")
    p.add_argument("--data-dir", default=None, help="benchmark files (default $HLGT_DATA_DIR or ../shared/datasets)")
    p.add_argument("--ablation", default=None,
                   help="arm, comma list of arms, or 'all' (%s); default full" % ", ".join(ABLATIONS))
    p.add_argument("--no-reference", action="store_true", help="do not add the full model as the reference arm")
    p.add_argument("--space", default=None, help="YAML file: space (key → values), and optionally num_samples, "
                   "seeds, folds, ablation, scheduler, set")
    p.add_argument("--heads", default=None, help="values for model.heads, e.g. 2,4,8")
    p.add_argument("--layers", default=None, help="values for model.layers")
    p.add_argument("--beta-com", default=None, help="values for model.beta_com")
    p.add_argument("--lr", default=None, help="values for train.lr (searched only when given)")
    p.add_argument("--hidden", default=None, help="values for model.hidden_size (searched only when given)")
    p.add_argument("--num-samples", type=int, default=None, help="configurations per arm (default 4)")
    p.add_argument("--grid", action="store_true", help="try the whole product of the space instead of samples")
    p.add_argument("--search-seed", type=int, default=0)
    p.add_argument("--seeds", default=None, help="training seeds per configuration, e.g. 1,2,3")
    p.add_argument("--folds", default=None, help="MAWPS folds per configuration, e.g. 0,1,2,3,4")
    p.add_argument("--scheduler", default=None, choices=["asha", "median", "fifo"], help="default asha")
    p.add_argument("--workers-per-trial", type=int, default=1)
    p.add_argument("--cpus-per-trial", type=float, default=1.0, help="CPUs per training worker")
    p.add_argument("--gpus-per-trial", type=float, default=0.0, help="GPUs per training worker (> 0 trains on GPU)")
    p.add_argument("--max-concurrent", type=int, default=0, help="trials at once (default: what the cluster fits)")
    p.add_argument("--max-failures", type=int, default=1, help="worker-failure retries per trial")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    p.add_argument("--name", default=None, help="experiment name; re-run with the same name to resume")
    p.add_argument("--storage", default=None, help="results root (default $HLGT_STORAGE/sweeps, else runs/sweeps)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--no-wandb", action="store_true", help="no W&B runs")
    p.add_argument("--smoke-test", action="store_true", help="the whole path on the sample data in a few minutes on a CPU")
    return p


def _load_yaml(path: str | None) -> dict:
    if not path:
        return {}
    import yaml

    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    unknown = set(data) - {"space", "num_samples", "seeds", "folds", "ablation", "scheduler", "set"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
    return data


def _as_list(v: Any) -> list:
    if v is None:
        return []
    if isinstance(v, str):
        return parse_values(v)
    return list(v) if isinstance(v, (list, tuple)) else [v]


def make_plan(args: argparse.Namespace) -> Plan:
    """Arguments (+ YAML) → the plan; builds or reuses the shards of every fold."""
    from hlgt.data.build import ensure_shards
    from hlgt.train.launch import storage_root

    spec = _load_yaml(args.space)
    dataset = "sample" if args.smoke_test else (args.dataset or "mawps")
    base: dict[str, Any] = {**DATASET_DEFAULTS.get(dataset, {}), "data.dataset": dataset}
    if args.data_dir:
        base["data.data_dir"] = args.data_dir
    if args.smoke_test:
        base.update(SMOKE)
    base.update(spec.get("set") or {})
    base.update(parse_overrides(args.set))
    if args.no_wandb:
        base["train.wandb"] = False
    if args.gpus_per_trial > 0:
        base["train.use_gpu"] = True
    base["train.workers"] = args.workers_per_trial
    centre = Config.from_flat(base)  # validates every key now, before Ray starts
    base = {k: v for k, v in centre.to_flat().items() if k in base}

    space = {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in (spec.get("space") or DEFAULT_SPACE).items()}
    for flag, key in (("heads", "model.heads"), ("layers", "model.layers"), ("beta_com", "model.beta_com"),
                      ("lr", "train.lr"), ("hidden", "model.hidden_size")):
        if getattr(args, flag):
            space[key] = parse_values(getattr(args, flag))
    num_samples = args.num_samples or spec.get("num_samples") or (1 if args.smoke_test else 4)
    samples = sample_configs(space, centre.to_flat(), num_samples, seed=args.search_seed, grid=args.grid)

    arms = ablation_arms(args.ablation or spec.get("ablation") or "full")
    if not args.no_reference and "full" not in arms:
        arms = ["full"] + arms
    seeds = _as_list(args.seeds) or _as_list(spec.get("seeds")) or [centre.train.seed]
    folds = _as_list(args.folds) or _as_list(spec.get("folds")) or [centre.data.fold]
    replicates = [{"data.fold": int(f), "train.seed": int(s)} for f in folds for s in seeds]

    shards = {}
    for fold in sorted({int(f) for f in folds}):
        cfg = centre.override({"data.fold": fold})
        shards[fold] = str(Path(ensure_shards(cfg, address=args.address)).resolve())
    name = args.name or ("smoke-" if args.smoke_test else "") + f"{dataset}-{'-'.join(arms)}"[:80]
    storage = storage_root(args.storage, os.path.join("runs", "sweeps"), "sweeps")
    plan = Plan(name=name, storage=storage, base=base, arms=arms, samples=samples, replicates=replicates, shards=shards,
                scheduler=args.scheduler or spec.get("scheduler") or "asha", workers=args.workers_per_trial,
                cpus_per_worker=args.cpus_per_trial, gpus_per_worker=args.gpus_per_trial,
                max_concurrent=args.max_concurrent, max_failures=args.max_failures, wandb=centre.train.wandb)
    # Offline W&B runs live next to the results, or in the home folder when the results go to S3.
    plan.wandb_dir = plan.root if "://" not in plan.root else os.path.join("~", "hlgt-wandb", name)
    plan.replicate_kind = "folds" if len(folds) > 1 and len(seeds) == 1 else "seeds" if len(folds) == 1 else "runs"
    return plan


def run(plan: Plan, address: str | None = None) -> list[dict]:
    """Every arm's experiment, then selection, test evaluation, table, chart and W&B summary."""
    from hlgt.train.launch import init_ray

    init_ray(address)
    started = time.perf_counter()
    print(f"[sweep] {plan.name}: arms {', '.join(plan.arms)}; {len(plan.samples)} configuration(s) × "
          f"{len(plan.replicates)} replicate(s) per arm; scheduler {plan.scheduler}; results in {plan.root}", flush=True)
    for i, s in enumerate(plan.samples):
        print(f"[sweep]   configuration {i}: {describe(s)}", flush=True)
    for arm in plan.arms:
        kept = plan.arm_samples(arm)
        if len(kept) < len(plan.samples):
            print(f"[sweep]   {arm}: configuration(s) {kept} only (the others differ in settings {arm} does not read)",
                  flush=True)
    grids = {arm: run_arm(plan, arm) for arm in plan.arms}
    mode = tracking.prepare_environment(plan.wandb)
    tracker = tracking.start({"sweep": plan.name, "arms": plan.arms, **plan.base}, enabled=plan.wandb,
                             project=Config.from_flat(plan.base).train.wandb_project, name=f"{plan.name}-results",
                             group=plan.name, directory=plan.wandb_dir, job_type="summary", mode=mode)
    try:
        rows = [select_and_test(plan, arm, outcomes(arm, grids[arm]), tracker) for arm in plan.arms]
        kind = plan.replicate_kind
        title = f"{plan.name}\n{Config.from_flat(plan.base).data.dataset}: value accuracy, mean ± std over {kind}"
        paths = write_results(plan.local_dir, rows, kind, title)
        tracker.log_table("results", CSV_COLUMNS, [[r[c] for c in CSV_COLUMNS] for r in rows])
    finally:
        tracker.finish()
    print(f"\n[sweep] done in {time.perf_counter() - started:.0f} s; selection on validation, test evaluated once per "
          f"arm's best configuration\n", flush=True)
    print(results_markdown(rows, kind), flush=True)
    print(f"[sweep] wrote {', '.join(str(p) for p in paths.values())}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    plan = make_plan(args)
    run(plan, address=args.address)
    return 0


if __name__ == "__main__":
    sys.exit(main())
