"""The sweep's results: selection on validation, one test evaluation per arm, the tables and chart.

Per arm, of the configurations with the most replicates, the one with the best mean validation
value accuracy over the replicates they share is chosen; then the best checkpoint of each of its
replicates is evaluated ONCE on test, here.
Without validation (MAWPS's literature protocol) each arm has one configuration and each
replicate's last epoch is tested. The results are written as ``results.md`` (the arms' table,
then the paper's Tables 2, 3 and 4 from the pooled test predictions: ``hlgt.sweep.tables``),
``results.csv`` (one row per arm and replicate: per-fold figures), ``results.json`` and
``results.png`` (a point per arm, mean ± std, the paper's figure marked) and, with W&B on, as one
summary run with the tables and the chosen models' test predictions. ``report_so_far`` writes the
same for the trials finished so far, read from their checkpoints without starting Ray, into
``<sweep>/so-far/``, while the sweep runs. Each trial it tests leaves there a record
(``so-far/best/<arm>/replicate<r>/``: the test predictions and ``trial.json``, its settings), which
stands for the trial when its checkpoints are gone: a sweep whose storage was lost (a cluster torn
down, a machine wiped) and whose records were kept does not train those trials again.
"""
from __future__ import annotations

import collections
import contextlib
import csv
import importlib.util
import json
import logging
import math
import posixpath
import statistics
import uuid
from dataclasses import dataclass
from pathlib import Path

from hlgt import metrics as M
from hlgt import storage
from hlgt.config import Config
from hlgt.data.shards import load_rows
from hlgt.model.solver import Solver
from hlgt.storage import write_text
from hlgt.sweep import tables
from hlgt.sweep.space import describe
from hlgt.sweep.spec import RESULTS_COPY, SweepSpec, experiments, read_trial_folder
from hlgt.train import evaluate as E
from hlgt.train import tracking
from hlgt.train.checkpoint import RESULTS_FILE, changed_settings

# Ray (a trial's checkpoint) and matplotlib (the chart) are imported where they are used: writing the
# tables of finished trials needs neither.

ROW_COLUMNS = ["arm", "config", "runs", "stopped_early", "epochs_unknown", "trials", "failed", "without_model",
               "val_value_acc_mean", "val_value_acc_std", "test_value_acc_mean", "test_value_acc_std",
               "test_equation_acc_mean", "test_equation_acc_std"]
CHECKPOINT_PATH = "checkpoint_path"  # the key of a trial's last checkpoint in its results (TuneReportCallback's)
CSV_COLUMNS = ["arm", "config", "replicate", "fold", "seed", "epochs", "problems", "val_value_acc",
               "test_value_acc", "test_equation_acc", "model"]


@dataclass
class TrialOutcome:
    arm: str
    sample: int
    replicate: int
    val_value_acc: float  # the validation value accuracy of the trial's best model
    checkpoint: str | None  # its latest checkpoint (holds best/)
    error: str | None
    record: Path | None = None  # its tested record (``recorded_trials``) when its checkpoints are gone
    epochs: int | None = None  # the epochs it trained (a scheduler or a time budget may stop it short); None: unknown


def best_validation(fs, checkpoint: str | None) -> float:
    """The validation value accuracy of a checkpoint's best model, as the trial saved it with the
    model (``best/run_config.json``): over every epoch, where Tune's history of a resumed trial
    starts at the resume. NaN without a checkpoint or a validated epoch."""
    try:
        with fs.open_input_stream(f"{checkpoint}/best/run_config.json") as f:
            best = float(json.loads(f.read())[M.VAL_VALUE_ACC])
    except (TypeError, FileNotFoundError, KeyError):
        return float("nan")
    return best if best >= 0 else float("nan")  # -1: no epoch validated yet


def outcomes(spec: SweepSpec, arm: str, grid) -> list[TrialOutcome]:
    """What each trial of an arm's ResultGrid reached on validation, and where its checkpoint is."""
    fs = storage.filesystem(spec.storage)[0]  # Tune's checkpoint paths lie on it
    out = []
    for r in grid:
        checkpoint = (r.metrics or {}).get(CHECKPOINT_PATH)
        out.append(TrialOutcome(arm=arm, sample=int(r.config["sample"]), replicate=int(r.config["replicate"]),
                                val_value_acc=best_validation(fs, checkpoint), checkpoint=checkpoint,
                                error=None if r.error is None else str(r.error),
                                epochs=_epochs(fs, checkpoint, r.metrics)))
    return out


def _epochs(fs, checkpoint: str | None, metrics: dict | None) -> int | None:
    """The epochs a trial trained: its final checkpoint's ``results.json`` where it has one (a
    resumed trial whose run had finished reports nothing new to Tune), else Tune's last result."""
    found = trained_epochs(fs, checkpoint) if checkpoint else None
    epochs = found if found is not None else (metrics or {}).get(M.EPOCH)
    return epochs if isinstance(epochs, int) else None


def finished_trials(spec: SweepSpec, notes: list[str]) -> dict[str, list[TrialOutcome]]:
    """The sweep's trials finished so far, per arm, read from the trials' folders without starting Ray: a
    folder named as a trial of the sweep (``hlgt.sweep.spec.trial_folder``) whose latest final checkpoint
    (one holding ``results.json``) trained what the sweep says that trial trains, or that Tune's
    saved state says its scheduler stopped or failed past its retries (``ended_by_tune``). Folders
    passed over for another reason than still training are said in ``notes``."""
    import pyarrow.fs

    fs, root = storage.filesystem(spec.train_storage)
    ended, failed = ended_by_tune(spec, notes)
    found: dict[tuple[str, int, int], TrialOutcome] = {}
    for folder in fs.get_file_info(pyarrow.fs.FileSelector(root, allow_not_found=True)):
        trial = read_trial_folder(folder.base_name) if folder.type == pyarrow.fs.FileType.Directory else None
        if trial is None:
            continue
        arm, sample, replicate = trial
        if arm not in spec.arms or sample not in spec.arm_samples(arm) or replicate >= len(spec.replicates):
            notes.append(f"{folder.path}: no trial of this sweep's arms, configurations and replicates")
            continue
        checkpoint, result = final_checkpoint(fs, folder.path), ended.get(folder.base_name)
        if checkpoint is None and folder.base_name in failed:
            found[trial] = TrialOutcome(arm=arm, sample=sample, replicate=replicate, checkpoint=None,
                                        error="failed past its retries (Tune's state; a re-run retries it)",
                                        val_value_acc=float("nan"))
            continue
        if checkpoint is None and result is None:
            continue  # still training, or waiting to resume
        if checkpoint is None:
            # Stopped by the scheduler: tested as it was, at its last reported checkpoint, as the
            # sweep's own tables test it (none: stopped before its first, no model).
            checkpoint = reported_checkpoint(fs, folder.path, result, notes)
        if checkpoint is not None:
            with fs.open_input_stream(f"{checkpoint}/config.json") as f:
                changed = changed_settings(json.loads(f.read()), Config.from_flat(spec.trial_flat(*trial)).to_flat())
            if changed:
                notes.append(f"{folder.path}: trained other settings than the sweep's ({'; '.join(changed)})")
                continue
        # Checkpoints are named by their path in the storage's filesystem, as Tune reports them.
        outcome = TrialOutcome(arm=arm, sample=sample, replicate=replicate, checkpoint=checkpoint, error=None,
                               val_value_acc=best_validation(fs, checkpoint), epochs=_epochs(fs, checkpoint, result))
        if trial in found:
            # Ray Train names checkpoints by the time they were made: the later name is the later one.
            outcome = max(found[trial], outcome, key=lambda t: posixpath.basename(t.checkpoint or ""))
            notes.append(f"{arm} configuration {sample} replicate {replicate} finished twice: the later "
                         f"checkpoint is used ({outcome.checkpoint})")
        found[trial] = outcome
    found = {**recorded_trials(spec, notes), **found}
    return {arm: [t for key, t in sorted(found.items()) if key[0] == arm] for arm in spec.arms}


def reported_checkpoint(fs, trial_dir: str, result: dict, notes: list[str]) -> str | None:
    """The checkpoint a stopped trial last reported to Tune, found by its name in the trial's folder
    (Tune's state holds the path where the sweep's storage was then); None when it reported none, or
    when Ray Train has replaced it since (a checkpoint made after the scheduler's decision), said in
    ``notes``."""
    import pyarrow.fs

    if result.get(CHECKPOINT_PATH) is None:
        return None
    checkpoint = f"{trial_dir}/{posixpath.basename(result[CHECKPOINT_PATH].rstrip('/'))}"
    if fs.get_file_info(f"{checkpoint}/config.json").type != pyarrow.fs.FileType.File:
        notes.append(f"{trial_dir}: the checkpoint the scheduler's last result names is gone ({checkpoint}): "
                     "counted without a model")
        return None
    return checkpoint


def ended_by_tune(spec: SweepSpec, notes: list[str]) -> tuple[dict[str, dict], set[str]]:
    """What Tune's saved state of each experiment (saved every few seconds while the sweep runs)
    says ended without a final checkpoint: the trials a scheduler that stops trials (asha, median)
    stopped, by trial name, with their last results (a trial that finished is ended too, and has
    its final checkpoint; one interrupted with the sweep is not: Tune resumes it), and the trials
    that failed past their retries (a re-run retries them). An unreadable state is said in ``notes``."""
    import pyarrow.fs
    from ray.tune import ExperimentAnalysis

    stops = spec.validated and spec.scheduler != "fifo"
    fs, root = storage.filesystem(spec.root)
    ended, failed = {}, set()
    for name in experiments(spec):
        files = fs.get_file_info(pyarrow.fs.FileSelector(f"{root}/{name}", allow_not_found=True))
        if not any(f.base_name.startswith("experiment_state") for f in files):
            continue  # its experiment has not started, or not saved its state yet
        try:
            # It also reads each trial's results, and warns of trials that have none yet (not started).
            with _quiet("ray.tune.analysis.experiment_analysis"):
                trials = ExperimentAnalysis(f"{root}/{name}", storage_filesystem=fs).trials
        except Exception as e:  # noqa: BLE001  Tune's own format: a state it cannot read is a note, not the end
            notes.append(f"{spec.root}/{name}: Tune's state unreadable ({e}); the trials it stopped or that "
                         "failed are not counted")
            continue
        if stops:
            ended.update({str(t): t.last_result or {} for t in trials if t.status == "TERMINATED"})
        failed.update(str(t) for t in trials if t.status == "ERROR")
    return ended, failed


@contextlib.contextmanager
def _quiet(logger: str):
    """The logger's warnings held back meanwhile."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


RECORD_FILE = "trial.json"  # beside a tested trial's predictions: what it trained, and its validation


def record_dir(spec: SweepSpec, arm: str, replicate: int) -> Path:
    """Where ``--so-far`` writes a tested trial's predictions and record."""
    return spec.so_far_dir / "best" / arm / f"replicate{replicate}"


def recorded_trials(spec: SweepSpec, notes: list[str]) -> dict[tuple[str, int, int], TrialOutcome]:
    """The trials that ``--so-far`` tested and recorded (``record_dir``), by (arm, sample,
    replicate): each stands for its trial, whose test predictions it holds, when the trial's
    checkpoints are gone. A record of other settings than the sweep's, or one unreadable, is
    passed over and said in ``notes``."""
    found = {}
    for arm in spec.arms:
        for replicate in range(len(spec.replicates)):
            folder = record_dir(spec, arm, replicate)
            if not (folder / RECORD_FILE).exists():
                continue
            try:
                record = json.loads((folder / RECORD_FILE).read_text(encoding="utf-8"))
                trial = (arm, int(record["sample"]), replicate)
                checkpoint = (folder / "checkpoint.txt").read_text(encoding="utf-8")
                E.read_predictions(folder / "predictions_test.jsonl")
                now = Config.from_flat(spec.trial_flat(*trial)).to_flat()
                changed = changed_settings(record["config"], now)
                val_value_acc = float(record["val_value_acc"])
            except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
                notes.append(f"{folder}: an unreadable trial record ({e})")
                continue
            if changed:
                notes.append(f"{folder}: a trial record of other settings than the sweep's ({'; '.join(changed)})")
                continue
            found[trial] = TrialOutcome(arm=arm, sample=trial[1], replicate=replicate, val_value_acc=val_value_acc,
                                        checkpoint=checkpoint, error=None, record=folder,
                                        epochs=record.get("epochs") if isinstance(record.get("epochs"), int) else None)
    return found


def with_records(spec: SweepSpec, trials: list[TrialOutcome]) -> list[TrialOutcome]:
    """An arm's trials from Tune, each one that left no checkpoint (it was recorded, so not
    trained again) replaced by its record (``spec.recorded``)."""
    return [spec.recorded.get((t.arm, t.sample, t.replicate), t) if t.checkpoint is None else t for t in trials]


def trained_epochs(fs, checkpoint: str) -> int | None:
    """The epochs a final checkpoint's run trained (its ``results.json``); None when unreadable."""
    try:
        with fs.open_input_stream(f"{checkpoint}/{RESULTS_FILE}") as f:
            epochs = json.loads(f.read())[M.EPOCH]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return epochs if isinstance(epochs, int) else None


def final_checkpoint(fs, trial_dir: str) -> str | None:
    """A trial folder's latest checkpoint that a finished run wrote (Ray Train names them by time)."""
    import pyarrow.fs

    checkpoints = [c.path for c in fs.get_file_info(pyarrow.fs.FileSelector(trial_dir))
                   if c.type == pyarrow.fs.FileType.Directory and c.base_name.startswith("checkpoint_")]
    final = [c for c in checkpoints if fs.get_file_info(f"{c}/{RESULTS_FILE}").type == pyarrow.fs.FileType.File]
    return max(final) if final else None


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and standard deviation of the values that are numbers (NaN: no validation score); the
    deviation of one value is NaN (nothing measured it), not 0."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else float("nan")


def usable(t: TrialOutcome, validated: bool) -> bool:
    """A trial that did not fail and saved a model (a validated one, where trials validate)."""
    return t.error is None and bool(t.checkpoint) and (not validated or not math.isnan(t.val_value_acc))


def choose(trials: list[TrialOutcome], validated: bool = True) -> list[TrialOutcome]:
    """The replicates of the arm's configuration with the best mean validation value accuracy,
    among the ``usable`` trials; none when no trial is. Only the configurations with the most usable
    replicates compete, on the replicates all of them have (one that lost a fold is neither ranked
    on the folds it kept nor tested on fewer); where they share none, those holding the replicate
    most of them hold, on the replicates they all hold. Without validation (one configuration),
    every usable trial."""
    usable_trials = [t for t in trials if usable(t, validated)]
    if not usable_trials:
        return []
    by_sample: dict[int, list[TrialOutcome]] = {}
    for t in usable_trials:
        by_sample.setdefault(t.sample, []).append(t)
    if not validated:
        if len(by_sample) > 1:
            raise ValueError(f"configurations {sorted(by_sample)} without validation: nothing chooses among them")
        return sorted(usable_trials, key=lambda t: t.replicate)
    most = max(len(ts) for ts in by_sample.values())
    complete = {s: ts for s, ts in by_sample.items() if len(ts) == most}
    common = set.intersection(*({t.replicate for t in ts} for ts in complete.values()))
    if not common:
        # No replicate that all of them have: those holding the replicate most of them hold (the
        # first such) compete on the replicates they all hold, never one fold's score against another's.
        held = collections.Counter(t.replicate for ts in complete.values() for t in ts)
        most_held = max(sorted(held), key=lambda r: held[r])
        complete = {s: ts for s, ts in complete.items() if any(t.replicate == most_held for t in ts)}
        common = set.intersection(*({t.replicate for t in ts} for ts in complete.values()))

    def mean(s: int) -> float:
        return statistics.fmean(t.val_value_acc for t in complete[s] if t.replicate in common)

    best_sample = max(complete, key=lambda s: (mean(s), -s))
    return sorted(by_sample[best_sample], key=lambda t: t.replicate)


def _checkpoint_dir(spec: SweepSpec, path: str):
    """A local folder for a trial's checkpoint path (downloaded when the storage is remote)."""
    if not storage.is_uri(spec.storage):
        return contextlib.nullcontext(path)
    from ray.train import Checkpoint

    return Checkpoint(path=path, filesystem=storage.filesystem(spec.storage)[0]).as_directory()


def evaluate_on_test(spec: SweepSpec, t: TrialOutcome, tracker, directory: Path, reuse: bool = False):
    """A chosen trial's best model evaluated on its fold's test split; the report and predictions
    written under ``directory/best/<arm>/replicate<r>`` with the checkpoint they are of, and logged.
    ``reuse``: predictions written there of the same checkpoint are read back instead; a recorded
    trial's (``t.record``) always are. Returns the report and the scored problems."""
    out = directory / "best" / t.arm / f"replicate{t.replicate}"
    kept = t.record or (out if reuse else None)
    if kept is not None and (kept / "checkpoint.txt").exists() \
            and (kept / "checkpoint.txt").read_text(encoding="utf-8") == t.checkpoint:
        try:
            scored = [E.Scored(**p) for p in E.read_predictions(kept / "predictions_test.jsonl")]
            report = E.summarise(scored)
            if kept != out:
                E.write_report(out, "test", report, scored)
                write_text(out / "checkpoint.txt", t.checkpoint)
                write_text(out / RECORD_FILE, (kept / RECORD_FILE).read_text(encoding="utf-8"))
            return report, scored
        except (OSError, TypeError, ValueError):  # written by another version: tested again below
            if t.record is not None:
                raise ValueError(f"{t.record}: a trial record this version cannot read, and its checkpoint "
                                 "is gone") from None
    cfg = Config.from_flat(spec.trial_flat(t.arm, t.sample, t.replicate))
    rows = load_rows(spec.shards[cfg.data.fold], "test")
    with _checkpoint_dir(spec, t.checkpoint) as folder:
        solver = Solver.load(Path(folder) / "best")
    report, scored = E.evaluate(solver, rows, solver.vocab, variant=cfg.data.graph, beam_size=cfg.model.beam_size,
                                batch_size=cfg.train.batch_size)
    E.write_report(out, "test", report, scored)
    write_text(out / "checkpoint.txt", t.checkpoint)
    write_text(out / RECORD_FILE, json.dumps({"sample": t.sample, "val_value_acc": t.val_value_acc,
                                              "epochs": t.epochs, "config": cfg.to_flat()}, indent=1))
    print(f"[sweep] {t.arm} replicate {t.replicate} tested: value accuracy {M.percent(report.value_acc)}%", flush=True)
    tracker.log_predictions(f"predictions/{t.arm}/replicate{t.replicate}", scored)
    return report, scored


def select_and_test(spec: SweepSpec, arm: str, trials: list[TrialOutcome], tracker, directory: Path,
                    reuse: bool = False) -> tuple[dict, tables.ArmTest]:
    """The arm's row of the table: its chosen configuration, validation and test mean ± std, how
    many of its replicates stopped before their last epoch (and of how many that is unknown: records
    older than the count), how many trials ran, failed and left no model (no configuration and NaN
    scores when no trial finished), one entry per replicate; and its test verdicts for the paper's
    tables (``evaluate_on_test``)."""
    chosen = choose(trials, spec.validated)
    tested = [evaluate_on_test(spec, t, tracker, directory, reuse) for t in chosen]
    reports = [report for report, _ in tested]
    test = tables.ArmTest(arm, {t.replicate: scored for t, (_, scored) in zip(chosen, tested)})
    val_mean, val_std = mean_std([t.val_value_acc for t in chosen])
    tv_mean, tv_std = mean_std([r.value_acc for r in reports])
    te_mean, te_std = mean_std([r.equation_acc for r in reports])
    config = describe(spec.arm_params(arm, chosen[0].sample)) if chosen else "no trial finished"
    replicates = [{"arm": arm, "config": config, "replicate": t.replicate, **_fold_seed(spec.replicates[t.replicate]),
                   "epochs": t.epochs, "problems": r.n, "val_value_acc": t.val_value_acc, "test_value_acc": r.value_acc,
                   "test_equation_acc": r.equation_acc, "model": _model(t)}
                  for t, r in zip(chosen, reports)]
    # A chosen trial that trained fewer epochs than its settings say (the scheduler stopped it, or
    # a time budget): tested all the same, and counted so that the table says so.
    short = [t for t in chosen if t.epochs is not None
             and t.epochs < Config.from_flat(spec.trial_flat(arm, t.sample, t.replicate)).train.epochs]
    return {"arm": arm, "config": config, "runs": len(chosen), "stopped_early": len(short),
            "epochs_unknown": sum(t.epochs is None for t in chosen),
            "trials": len(trials), "failed": sum(t.error is not None for t in trials),
            "without_model": sum(t.error is None and not usable(t, spec.validated) for t in trials),
            "val_value_acc_mean": val_mean, "val_value_acc_std": val_std,
            "test_value_acc_mean": tv_mean, "test_value_acc_std": tv_std,
            "test_equation_acc_mean": te_mean, "test_equation_acc_std": te_std,
            "checkpoints": [r["model"] for r in replicates], "replicates": replicates}, test


def _model(t: TrialOutcome) -> str:
    """Where a chosen trial's model is; a recorded trial's is gone."""
    if t.record is not None:
        return f"none: only the test predictions were kept ({t.record})"
    return str(Path(t.checkpoint) / "best")


def _fold_seed(replicate: dict) -> dict:
    return {"fold": replicate.get("data.fold"), "seed": replicate.get("train.seed")}


def _pct(mean: float, std: float) -> str:
    if math.isnan(mean):
        return "-"
    return M.percent(mean) if math.isnan(std) else f"{M.percent(mean)} ± {M.percent(std)}"


def results_markdown(rows: list[dict], replicate_kind: str) -> str:
    """The table: per arm, its chosen configuration's scores over its replicates (``replicate_kind``)
    and how many of those stopped before their last epoch; how many of the arm's trials ran, failed,
    and ended without a model to choose (no checkpoint, or no validation score)."""
    lines = [f"| arm | config | val value acc (%) | test value acc (%) | test equation acc (%) | {replicate_kind} "
             "| of them stopped early | trials | failed | without a model |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['config']} | {_pct(r['val_value_acc_mean'], r['val_value_acc_std'])} "
                     f"| {_pct(r['test_value_acc_mean'], r['test_value_acc_std'])} "
                     f"| {_pct(r['test_equation_acc_mean'], r['test_equation_acc_std'])} | {r['runs']} "
                     f"| {_stopped(r)} | {r['trials']} | {r['failed']} | {r['without_model']} |")
    return "\n".join(lines) + "\n"


def _stopped(row: dict) -> str:
    unknown = row.get("epochs_unknown", 0)
    return f"{row['stopped_early']} ({unknown} unknown)" if unknown else str(row["stopped_early"])


def best_models_markdown(rows: list[dict]) -> str:
    """Where each arm's chosen models are, one per replicate: what ``hlgt.solve`` and
    ``hlgt.train.evaluate`` take as ``--model``."""
    lines = [f"- {r['arm']}: {path}" for r in rows for path in r["checkpoints"]] or ["- none: no trial finished"]
    return ("Best models (`python -m hlgt.solve --model PATH \"...\"`, `python -m hlgt.train.evaluate --model PATH "
            "--split test`):\n\n" + "\n".join(lines) + "\n")


def chart_range(values: list[float]) -> tuple[float, float]:
    """The chart's accuracy axis (%): the figures it shows with a margin, on multiples of 5 within
    0-100, so that arms a point apart look a point apart (the chart draws points, not bars, so an
    axis that does not start at 0 misleads no one)."""
    shown = [v for v in values if not math.isnan(v)]
    if not shown:
        return 0.0, 100.0
    low = max(0.0, 5 * math.floor((min(shown) - 2) / 5))
    high = min(100.0, 5 * math.ceil((max(shown) + 2) / 5))
    return low, max(high, low + 5)


def _chart(path: Path, rows: list[dict], title: str, dataset: str) -> None:
    """Validation and test value accuracy per arm (mean ± std over the replicates, as points with
    error bars, the test mean written beside its point), the paper's figure marked and the
    reference arm's test mean drawn across; the arms in the order of the paper's tables."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = [a for _, arms in tables.TABLES for a in arms if a != tables.REFERENCE] + [tables.REFERENCE]
    rows = sorted(rows, key=lambda r: order.index(r["arm"]) if r["arm"] in order else len(order))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(rows) + 1.5), 3.8))
    x = list(range(len(rows)))
    series = [(key, label) for key, label in (("val_value_acc", "validation"), ("test_value_acc", "test"))
              if not all(math.isnan(r[f"{key}_mean"]) for r in rows)]  # no validation split: test alone
    shift = 0.15 if len(series) == 2 else 0.0
    shown: list[float] = []
    for key, label in series:
        offset = shift if key == "test_value_acc" else -shift
        means = [100 * r[f"{key}_mean"] for r in rows]
        stds = [100 * r[f"{key}_std"] for r in rows]
        ax.errorbar([i + offset for i in x], means, yerr=stds, fmt="o", capsize=3, label=label)
        shown += [m + sign * (0 if math.isnan(sd) else sd) for m, sd in zip(means, stds) for sign in (-1, 1)]
    test = [100 * r["test_value_acc_mean"] for r in rows]
    for i, m in zip(x, test):
        if not math.isnan(m):
            ax.annotate(f"{m:.1f}", (i + shift, m), xytext=(5, 0), textcoords="offset points", va="center", fontsize=7)
    reference = next((m for r, m in zip(rows, test) if r["arm"] == tables.REFERENCE and not math.isnan(m)), None)
    if reference is not None:
        ax.axhline(reference, color="grey", linestyle=":", linewidth=1, zorder=0, label=f"{tables.REFERENCE} (test)")
    paper = tables.PAPER.get(dataset, {})
    marked = [(i, paper[r["arm"]]) for i, r in zip(x, rows) if r["arm"] in paper]
    if marked:
        ax.scatter([i + shift for i, _ in marked], [v for _, v in marked], marker="_", s=300, color="black",
                   zorder=3, label="paper (test)")
        shown += [v for _, v in marked]
    ax.set_xticks(x, [r["arm"] for r in rows], rotation=20, ha="right")
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_ylabel("value accuracy (%)")
    ax.set_ylim(*chart_range(shown))
    ax.grid(axis="y", linewidth=0.3)
    ax.set_title(title, fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="lower left")
    else:  # every arm failed, and the dataset has no paper figure to mark
        ax.text(0.5, 0.5, "no arm has a figure", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    with storage.replacing(path, binary=True) as f:
        fig.savefig(f, dpi=120, format="png")
    plt.close(fig)


def write_results(directory: Path, rows: list[dict], replicate_kind: str, title: str, dataset: str = "",
                  paper_tables: str = "") -> dict[str, Path]:
    """results.md (the arms' table, ``paper_tables``, the best models) / .csv (one row per arm and
    replicate) / .json and the chart results.png (no chart, and a note saying so, where
    matplotlib is not installed: an offline GPU node may lack it)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"md": directory / "results.md", "csv": directory / "results.csv",
             "json": directory / "results.json", "png": directory / "results.png"}
    write_text(paths["md"], f"## {title.replace(chr(10), ' — ')}\n\n" + results_markdown(rows, replicate_kind)
               + "\n" + (paper_tables + "\n" if paper_tables else "") + best_models_markdown(rows))
    with storage.replacing(paths["csv"]) as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rep for r in rows for rep in r.get("replicates", []))
    write_text(paths["json"], json.dumps(_no_nan(rows), indent=1, allow_nan=False))
    if importlib.util.find_spec("matplotlib") is None:
        print("[sweep] matplotlib is not installed: no results.png (the table has every number)", flush=True)
        del paths["png"]
    else:
        _chart(paths["png"], rows, title, dataset)
    return paths


def _no_nan(value):
    """``value`` with every NaN (a score nothing measured) as None: strict JSON, which jq and
    JavaScript read."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    return value


def _copy_results(directory: Path, copy: str) -> None:
    """Copy a results folder to the sweep's URI storage; a failed copy is said, not raised: the
    tables are written and about to be printed."""
    try:
        print(f"[sweep] copied {storage.copy_folder(directory, copy)} file(s) of {directory} to {copy}", flush=True)
    except OSError as e:
        print(f"[sweep] could not copy {directory} to {copy} ({e}): the results are only in {directory}", flush=True)


def summarise(spec: SweepSpec, trials: dict[str, list[TrialOutcome]],
              so_far: str = "") -> tuple[list[dict], str, dict[str, Path]]:
    """Every arm's row (selection and test) and the paper's tables, written with the chart and
    logged to one W&B summary run; returns the rows, the paper's tables and the files written.
    ``so_far``: the tables of the trials finished so far, so described in the title, written into
    ``spec.so_far_dir`` (test predictions of a model already tested there are read back), no W&B."""
    centre = spec.centre
    enabled = spec.wandb and not so_far
    mode = tracking.prepare_environment(enabled)
    tracker = tracking.start({"sweep": spec.name, "arms": spec.arms, **spec.base}, enabled=enabled,
                             project=centre.train.wandb_project, name=f"{spec.name}-results",
                             group=spec.name, directory=spec.wandb_dir, job_type="summary", mode=mode,
                             start_id=uuid.uuid4().hex[:8])  # its own W&B run each time, a --fresh sweep's too
    directory = spec.so_far_dir if so_far else spec.local_dir
    try:
        selected = [select_and_test(spec, arm, trials[arm], tracker, directory, reuse=bool(so_far))
                    for arm in spec.arms]
        rows = [row for row, _ in selected]
        tests = {test.arm: test for _, test in selected if test.n}
        dataset = centre.data.dataset
        pooled_over = (f"the {spec.replicate_kind} finished so far (of {len(spec.replicates)})" if so_far
                       else f"{len(spec.replicates)} {spec.replicate_kind}")
        paper_tables = tables.tables_markdown(tests, dataset, pooled_over=pooled_over, replicates=spec.replicates)
        name = f"{spec.name} ({so_far})" if so_far else spec.name
        title = f"{name}\n{dataset}: value accuracy, mean ± std over {spec.replicate_kind}"
        paths = write_results(directory, rows, spec.replicate_kind, title, dataset, paper_tables)
        if storage.is_uri(spec.root):  # ``directory`` is in the job's working directory: it goes with the cluster
            _copy_results(directory, "/".join([spec.root, RESULTS_COPY, *directory.relative_to(spec.local_dir).parts]))
        tracker.log_table("results", ROW_COLUMNS, [[r[c] for c in ROW_COLUMNS] for r in rows])
        tracker.log_table("paper_tables", tables.TABLE_COLUMNS, tables.table_rows(tests, dataset))
        noise = tables.seed_rows(tests, spec.replicates)
        if noise:
            tracker.log_table("seed_noise", tables.SEED_COLUMNS, noise)
        tracker.log_table("results_by_replicate", CSV_COLUMNS,
                          [[rep[c] for c in CSV_COLUMNS] for r in rows for rep in r["replicates"]])
    finally:
        tracker.finish()
    return rows, paper_tables, paths


def report_so_far(spec: SweepSpec) -> tuple[list[dict], str, dict[str, Path], list[str]]:
    """``summarise`` for the trials finished so far (``finished_trials``), while the sweep runs or
    after it stopped: the rows, the paper's tables, the files written and notes on trial folders
    passed over. The sweep's own files are only read."""
    notes: list[str] = []
    trials = finished_trials(spec, notes)
    failed = sum(t.error is not None for ts in trials.values() for t in ts)
    done = sum(len(ts) for ts in trials.values()) - failed
    total = sum(len(spec.arm_samples(arm)) for arm in spec.arms) * len(spec.replicates)
    title = f"so far: {done} of {total} trials finished" + (f", {failed} failed" if failed else "")
    rows, paper_tables, paths = summarise(spec, trials, so_far=title)
    return rows, paper_tables, paths, notes
