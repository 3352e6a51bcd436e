"""hlgt-sweep (python tune/sweep.py): search space × ablation arms → Ray Tune → results table, chart,
best models.

    python tune/sweep.py --ablation no_line_graph --smoke-test
    python tune/sweep.py --dataset mawps --folds 0,1,2,3,4 --ablation all --gpus-per-worker 1
    python tune/sweep.py --dataset math23k --space sweep.yaml --num-samples 8 --seeds 1,2,3

Search space (``hlgt/sweep/space.py``): heads, layers and β_com by default (centred on the paper's
4 / 2 / 0.1), the learning rate and hidden size when asked (``--lr``, ``--hidden``), from the
command line or a YAML file (``space:`` key → list of values, or ``{uniform: [lo, hi]}`` /
``{loguniform: [lo, hi]}``). ``--num-samples N`` draws N configurations (the first is the centre;
``--grid`` takes the whole product); each is trained once per replicate (``--seeds``, ``--folds``),
so a configuration's score is a mean over the same replicates. An arm skips configurations that
differ only in settings its model does not read (``Config.unread_keys``: ``gts`` has no heads,
layers or β_com).

Arms: ``--ablation`` names arms of ``hlgt.config.ABLATIONS`` (or ``all``); ``full`` is added as the
reference unless ``--no-reference``. Each arm is its own Tune experiment (``<storage>/<name>/<arm>``,
``hlgt/sweep/experiments.py``) so that the scheduler (ASHA by default, ``--scheduler
fifo|median|asha``) compares configurations within an arm, never prunes one arm against another,
and on the same replicate (fold, seed), never one replicate against another.
An interrupted sweep resumes when re-run with the same ``--name`` and storage: finished trials are
kept, unfinished ones continue from their last checkpoint. ``--fresh`` starts it over instead (it
removes a sweep folder only when the project made it, ``hlgt.storage``). These stop before Ray
starts and say so: a ``--name`` that is not one folder name, a sweep of more than ``--max-trials``
trials (configurations x arms x replicates, counted before any is drawn), a re-run of other
settings (other arms, configurations, replicates, scheduler or config keys, but where files go and
how trials run; ``<name>/sweep.json`` holds them), a sweep of a name that another sweep is
running, a sweep whose saved models an older version wrote (another weights format).

The paper's tables (``--no-mawps-valid``, MAWPS's literature protocol): no search, each arm trains
its one configuration (the paper's settings and ``--set``) on every fold, and every trial's last
epoch is tested; a search, or a scheduler that stops trials by validation, is refused::

    python tune/sweep.py --dataset mawps --mawps-folds graph2tree-1921 --no-mawps-valid --ablation all \
        --folds 0,1,2,3,4 --set data.min_word_freq=5 --name paper-tables

Selection uses validation only (``hlgt/sweep/results.py``): per arm, the configuration with the
best mean validation value accuracy; then its best checkpoint of every replicate is evaluated ONCE
on test (a replicate the scheduler stopped early too, as it was: the table counts those, and the
trials that failed or left no model). The sweep writes ``results.md`` (the arms' table, then the
paper's Tables 2, 3 and 4 from the test predictions pooled over the replicates, with the paper's
figures, each arm's difference to ``full``, the problems only one of the two solves and the exact
McNemar p, by problem where replicates share test problems: ``hlgt/sweep/tables.py``),
``results.csv`` (one row per arm and replicate), ``results.json`` and ``results.png`` (a point per
arm, mean ± std, the paper's figures marked) into ``<storage>/<name>/``, the table and the chosen models' folders
(``--model`` of ``hlgt.solve`` and ``hlgt.train.evaluate``) also on the console, and, with W&B on,
one summary run with the table and the best models' test predictions (each trial has its own run,
grouped by the sweep).

While a long sweep runs, ``--so-far`` with the sweep's own flags writes the same tables for the
trials finished so far into ``<storage>/<name>/so-far/`` and prints them: it reads the trials'
checkpoints without starting Ray and leaves the running sweep alone; a model it has tested is not tested
again by the next ``--so-far``, and leaves a record (``so-far/best/<arm>/replicate<r>/``: its
test predictions and ``trial.json``) that stands for the trial once its checkpoints are gone: a
sweep whose storage was lost resumes from the records put back, training none of those trials
again (``hlgt.sweep.results.recorded_trials``). With a search, its test figures are of the configurations that
validation chooses so far, among the trials that ran to their last epoch and those that asha or
median stopped early (by Tune's state as last saved, every few seconds: such a trial has no final
checkpoint, and is tested at its last one, as the sweep's own results test it).

This command reads the command line (and the YAML file) into a ``hlgt.sweep.spec.SweepSpec`` and
runs it; the sweep itself lives in ``hlgt.sweep``, which Ray's workers import.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from hlgt.commands.cli import non_negative_int, positive_float, positive_int, refuse_flag_keys, run_command
from hlgt.config import ABLATIONS, DATASET_DEFAULTS, MAWPS_FOLD_SCHEMES, Config, ablation_arms, parse_overrides
from hlgt.storage import check_name, is_uri, sole_writer, storage_root
from hlgt.sweep.experiments import run as run_sweep
from hlgt.sweep.results import report_so_far, results_markdown
from hlgt.sweep.space import DEFAULT_SPACE, check_grid, check_space, parse_values, sample_configs, space_size
from hlgt.sweep.spec import (
    SCHEDULERS,
    SweepSpec,
    build_shards,
    check_removable,
    check_same_sweep,
    check_saved_weights,
    check_trials,
    remove_earlier,
    save_settings,
    sole_sweep,
)

# pyyaml is imported when a --space file is read: the GPU machines lack it.

PROG = "hlgt-sweep"
# --smoke-test: the whole path on the sample data in a few minutes on a laptop CPU.
SMOKE = {"data.dataset": "sample", "train.epochs": 24, "train.lr": 3e-3, "train.lr_step": 8, "train.batch_size": 16,
         "train.eval_every": 3, "train.threads": 1, "model.embedding_size": 64, "model.hidden_size": 128,
         "model.beam_size": 3, "model.max_output_len": 20}
YAML_KEYS = {"space", "num_samples", "seeds", "folds", "ablation", "scheduler", "set"}
# Trials a sweep may hold unless --max-trials says more: a mistyped space (a 12-dimension grid,
# num_samples: 1000000) is refused before it is enumerated.
MAX_TRIALS = 3000
# The config keys this command's flags set: neither ``--set`` nor the YAML's ``set`` may name them.
FLAG_KEYS = {"data.dataset": "--dataset", "data.data_dir": "--data-dir", "data.mawps_folds": "--mawps-folds",
             "data.mawps_valid": "--no-mawps-valid", "train.wandb": "--no-wandb", "train.use_gpu": "--gpus-per-worker",
             "train.workers": "--workers-per-trial", "train.seed": "--seeds", "data.fold": "--folds",
             "train.out_dir": "--storage"}
# The search flags and the config key each one searches.
SEARCH_FLAGS = {"heads": "model.heads", "layers": "model.layers", "beta_com": "model.beta_com", "lr": "train.lr",
                "hidden": "model.hidden_size"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="HLGT hyperparameter and ablation sweep on Ray Tune.",
                                allow_abbrev=False)
    p.add_argument("--dataset", default=None,
                   help="sample | math23k | mawps | ape210k (default mawps; sample with --smoke-test)")
    p.add_argument("--data-dir", default=None, help="benchmark files (default $HLGT_DATA_DIR or ../shared/datasets)")
    p.add_argument("--shards", default=None,
                   help="prebuilt shard folder to train on as is (no raw data or annotator needed); for several "
                        "folds a pattern with {fold}, e.g. shards/mawps-fold{fold}")
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
    p.add_argument("--num-samples", type=positive_int, default=None, help="configurations per arm (default 4)")
    p.add_argument("--grid", action="store_true", help="try the whole product of the space instead of samples")
    p.add_argument("--max-trials", type=positive_int, default=MAX_TRIALS,
                   help=f"refuse a sweep of more trials (configurations x arms x replicates; default {MAX_TRIALS})")
    p.add_argument("--search-seed", type=int, default=0)
    p.add_argument("--seeds", default=None, help="training seeds per configuration, e.g. 1,2,3")
    p.add_argument("--folds", default=None, help="MAWPS folds per configuration, e.g. 0,1,2,3,4")
    p.add_argument("--mawps-folds", default=None, choices=MAWPS_FOLD_SCHEMES,
                   help="MAWPS fold scheme (default grouped; graph2tree-1921: the folds of the published numbers)")
    p.add_argument("--no-mawps-valid", action="store_true",
                   help="MAWPS: the literature's protocol, the validation problems train too and every trial's "
                        "last epoch is tested; no search: each arm trains its one configuration (a table)")
    p.add_argument("--scheduler", default=None, choices=SCHEDULERS, help="default asha")
    p.add_argument("--workers-per-trial", type=positive_int, default=1)
    p.add_argument("--cpus-per-worker", type=positive_float, default=1.0, help="CPUs per training worker")
    p.add_argument("--gpus-per-worker", type=float, default=None,
                   help="GPUs per training worker (0: CPUs only; default: on a cluster with GPUs, as many "
                        "workers per GPU as fit in its memory, measured by one probe step)")
    p.add_argument("--max-concurrent", type=non_negative_int, default=0,
                   help="trials at once (default: what the cluster fits)")
    p.add_argument("--max-failures", type=int, default=1,
                   help="retries of a failed trial (its actor or a training worker lost), each from its last "
                        "checkpoint, before it counts as failed")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    p.add_argument("--name", default=None,
                   help="sweep name, its folder under --storage; re-run with the same name to resume")
    p.add_argument("--fresh", action="store_true",
                   help="start the sweep of this name over: remove its earlier trials, checkpoints and results first")
    p.add_argument("--storage", default=None, help="results root (default $HLGT_STORAGE/sweeps, else runs/sweeps)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--no-wandb", action="store_true", help="no W&B runs")
    p.add_argument("--smoke-test", action="store_true",
                   help="the whole path on the sample data in a few minutes on a CPU")
    p.add_argument("--so-far", action="store_true",
                   help="with the flags of a sweep that has started: its tables from the trials finished so far, "
                        "into <storage>/<name>/so-far/ (Ray not started; the sweep itself is only read)")
    p.add_argument("--verbose", action="store_true",
                   help="Ray's, Tune's and the workers' own output (default: one line per trial per epoch)")
    return p


def load_yaml(path: str | None) -> dict:
    """The ``--space`` file's keys (none without one); an unknown key is an error."""
    if not path:
        return {}
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of {sorted(YAML_KEYS)}, got {type(data).__name__}")
    unknown = set(data) - YAML_KEYS
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown, key=str)}")
    for key in ("space", "set"):
        if key in data and not isinstance(data[key], dict):
            raise ValueError(f"{path}: {key} must be a mapping of config keys, got {data[key]!r}")
    arms = data.get("ablation", "full")
    if not (isinstance(arms, str) or isinstance(arms, list) and all(isinstance(a, str) for a in arms)) or not arms:
        raise ValueError(f"{path}: ablation must be an arm name or a list of them, got {arms!r}")
    if data.get("scheduler", "asha") not in SCHEDULERS:
        raise ValueError(f"{path}: scheduler must be one of {', '.join(SCHEDULERS)}, got {data['scheduler']!r}")
    return data


def as_list(v: Any) -> list:
    """A flag's ``"1,2,3"`` or a YAML list (or a single YAML value) as a list."""
    if v is None:
        return []
    if isinstance(v, str):
        return parse_values(v)
    return list(v) if isinstance(v, (list, tuple)) else [v]


def int_list(values: list, name: str) -> list[int]:
    """``--seeds`` / ``--folds`` values (or the YAML's) as integers; ``name`` is said when one is not."""
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int)]
    if bad:
        raise ValueError(f"{name} takes integers, got {', '.join(map(repr, bad))}")
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:  # a replicate twice would count its problems twice in the means and the pooled tests
        raise ValueError(f"{name} names {', '.join(map(str, twice))} twice")
    return values


def sample_count(args: argparse.Namespace, from_file: dict) -> int:
    """``--num-samples``, else the YAML's ``num_samples``, else 4 (1 for the smoke test)."""
    n = args.num_samples or from_file.get("num_samples", 1 if args.smoke_test else 4)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{args.space}: num_samples must be an integer >= 1, got {n!r}")
    return n


def base_overrides(args: argparse.Namespace, from_file: dict, dataset: str) -> dict[str, Any]:
    """The flat overrides every trial shares, checked and coerced now, before Ray starts: the
    dataset's paper settings, ``--smoke-test``, the YAML's ``set``, ``--set`` (neither naming a key
    that a flag sets), then the flags."""
    base: dict[str, Any] = {**DATASET_DEFAULTS.get(dataset, {}), "data.dataset": dataset}
    if args.data_dir:
        base["data.data_dir"] = args.data_dir
    if args.mawps_folds:
        base["data.mawps_folds"] = args.mawps_folds
    if args.no_mawps_valid:
        base["data.mawps_valid"] = False
    if args.smoke_test:
        base.update(SMOKE)
    from_yaml, overrides = from_file.get("set") or {}, parse_overrides(args.set)
    refuse_flag_keys(from_yaml, FLAG_KEYS, given_as=f"{args.space}'s set: ")
    refuse_flag_keys(overrides, FLAG_KEYS)
    base.update(from_yaml)
    base.update(overrides)
    if args.no_wandb:
        base["train.wandb"] = False
    if args.gpus_per_worker is not None and args.gpus_per_worker < 0:
        raise ValueError(f"--gpus-per-worker must be >= 0, got {args.gpus_per_worker:g}")
    if args.gpus_per_worker:
        base["train.use_gpu"] = True
    base["train.workers"] = args.workers_per_trial
    return {k: v for k, v in Config.from_flat(base).to_flat().items() if k in base}


def search_space(args: argparse.Namespace, from_file: dict) -> dict[str, Any]:
    """The YAML's ``space`` (an empty one: no search), else the default one, with the search
    flags' values over it."""
    space = {k: list(v) if isinstance(v, (list, tuple)) else v
             for k, v in (from_file["space"] if "space" in from_file else DEFAULT_SPACE).items()}
    for flag, key in SEARCH_FLAGS.items():
        if getattr(args, flag):
            space[key] = parse_values(getattr(args, flag))
    return space


def searched(args: argparse.Namespace, from_file: dict) -> list[str]:
    """The flags and YAML keys that ask for a search (several configurations per arm)."""
    asked = [f"--{flag.replace('_', '-')}" for flag in SEARCH_FLAGS if getattr(args, flag)]
    asked += [f"--{flag.replace('_', '-')}" for flag in ("space", "num_samples", "grid") if getattr(args, flag)]
    return asked + [f"{args.space}: {key}" for key in ("space", "num_samples") if key in from_file]


def configurations(args: argparse.Namespace, from_file: dict, centre: Config, trials_each: int) -> list[dict]:
    """The configurations every arm trains: samples of the search space; without validation
    (``--no-mawps-valid``) the one configuration of the base settings, since nothing could choose
    among several (a search is refused, naming what asked for it). Each configuration makes
    ``trials_each`` trials; more than ``--max-trials`` in all are refused before any is drawn."""
    if centre.data.mawps_valid:
        space = check_space(search_space(args, from_file))
        if args.grid:
            check_grid(space)
        count = space_size(space) if args.grid else min(sample_count(args, from_file), space_size(space))
        if count * trials_each > args.max_trials:
            what = "the grid's" if args.grid else "num_samples"
            raise ValueError(f"{what} {count:,} configurations x {trials_each:,} trials each (arms x replicates) "
                             f"= {count * trials_each:,} trials, more than --max-trials {args.max_trials:,}: narrow "
                             "the search, or raise --max-trials")
        return sample_configs(space, centre.to_flat(), sample_count(args, from_file), seed=args.search_seed,
                              grid=args.grid)
    asked = searched(args, from_file)
    if asked:
        raise ValueError(f"--no-mawps-valid leaves no validation split to choose among configurations on, and "
                         f"{', '.join(asked)} asks for a search: search with validation (drop --no-mawps-valid), or "
                         f"give the one configuration with --set")
    return [{}]


def scheduler_kind(args: argparse.Namespace, from_file: dict, centre: Config) -> str:
    """``--scheduler``, else the YAML's, else asha; fifo without validation (a scheduler that stops
    trials by their validation scores has none to read)."""
    kind = args.scheduler or from_file.get("scheduler")
    if centre.data.mawps_valid:
        return kind or "asha"
    if kind not in (None, "fifo"):
        raise ValueError(f"the {kind} scheduler stops trials by their validation scores, and --no-mawps-valid "
                         "leaves none: every trial runs to its last epoch (fifo)")
    return "fifo"


def check_folds(folds: list[int], dataset: str) -> list[int]:
    """``--folds`` are MAWPS's cross-validation folds; another dataset has one split of each kind."""
    if dataset != "mawps" and folds and folds != [0]:
        raise ValueError(f"--folds {','.join(map(str, folds))}: {dataset} has no folds (MAWPS alone is "
                         "cross-validated); give --seeds for replicates")
    return folds


def make_spec(args: argparse.Namespace) -> SweepSpec:
    """The command line and its YAML file as a SweepSpec (the shards are built afterwards)."""
    from_file = load_yaml(args.space)
    dataset = "sample" if args.smoke_test else (args.dataset or "mawps")
    base = base_overrides(args, from_file, dataset)
    centre = Config.from_flat(base)
    arms = ablation_arms(args.ablation or from_file.get("ablation") or "full")
    if not args.no_reference and "full" not in arms:
        arms = ["full"] + arms
    seeds = int_list(as_list(args.seeds) or as_list(from_file.get("seeds")), "--seeds") or [centre.train.seed]
    folds = (check_folds(int_list(as_list(args.folds) or as_list(from_file.get("folds")), "--folds"), dataset)
             or [centre.data.fold])
    replicates = [{"data.fold": f, "train.seed": s} for f in folds for s in seeds]
    samples = configurations(args, from_file, centre, len(arms) * len(replicates))
    name = (check_name(args.name) if args.name is not None
            else ("smoke-" if args.smoke_test else "") + f"{dataset}-{'-'.join(arms)}"[:80])
    storage = storage_root(args.storage, os.path.join("runs", "sweeps"), "sweeps")
    if not is_uri(storage) and Path(storage).exists() and not Path(storage).is_dir():
        raise ValueError(f"--storage {storage} is a file, not a folder")
    spec = SweepSpec(name=name, storage=storage, base=base, arms=arms, samples=samples, replicates=replicates,
                scheduler=scheduler_kind(args, from_file, centre), workers=args.workers_per_trial,
                cpus_per_worker=args.cpus_per_worker, gpus_per_worker=args.gpus_per_worker,
                max_concurrent=args.max_concurrent, max_failures=args.max_failures, wandb=centre.train.wandb)
    # Offline W&B runs live next to the results, or in the home folder when the results go to S3.
    spec.wandb_dir = spec.root if not is_uri(spec.root) else os.path.join("~", "hlgt-wandb", name)
    spec.replicate_kind = "folds" if len(folds) > 1 and len(seeds) == 1 else "seeds" if len(folds) == 1 else "runs"
    spec.verbose = args.verbose
    check_trials(spec)
    return spec


def so_far(spec: SweepSpec, args: argparse.Namespace) -> int:
    """``--so-far``: the tables of the sweep's finished trials, its settings checked as a re-run's."""
    check_saved_weights(spec)
    check_same_sweep(spec, must_exist=True)
    with contextlib.ExitStack() as held:
        spec.shards = build_shards(spec, address=args.address, prebuilt=args.shards, held=held)
        with sole_writer(str(spec.so_far_dir), f"another --so-far is writing {spec.so_far_dir}: let it finish"):
            rows, paper_tables, paths, notes = report_so_far(spec)
    print(results_markdown(rows, spec.replicate_kind), flush=True)
    print(paper_tables, flush=True)
    print(f"[sweep] wrote {', '.join(str(p) for p in paths.values())}", flush=True)
    for note in notes:
        print(f"[sweep] passed over: {note}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Everything a mistake can be in (arms, config keys and values, the YAML file, the shard
    # folder) is checked here, before Ray starts: a ValueError naming it ends the command.
    spec = make_spec(args)
    if args.so_far:
        if args.fresh:
            raise ValueError("--so-far reports on a sweep as it is; --fresh would start it over")
        return so_far(spec, args)
    with sole_sweep(spec), contextlib.ExitStack() as held:
        if args.fresh:
            check_removable(spec)
        else:
            check_saved_weights(spec)
            check_same_sweep(spec)
        spec.shards = build_shards(spec, address=args.address, prebuilt=args.shards, held=held)
        if args.fresh:  # only once the shards are there: a bad --shards removes nothing
            remove_earlier(spec)
        save_settings(spec)
        rows = run_sweep(spec, address=args.address)  # Ctrl-C: Tune saved the arm's state, run_command says so
    return 1 if any(not r["runs"] for r in rows) else 0  # an arm without a score is no result


def run() -> None:
    sys.exit(run_command(main, PROG))
