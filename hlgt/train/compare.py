"""Paired comparison of two models on the same problems: each one's accuracy, the problems only
one of them solves, and the exact McNemar test, per pair of runs (one per fold, say) and pooled
(the command ``hlgt-compare``, ``hlgt.commands.compare``).

``compare`` takes run folders (their ``predictions_<split>.jsonl``), model folders
(``<run>/best``: the run's file) or predictions files (``hlgt.train.evaluate --out``), paired by
position. Each pair must hold the same problems: predictions are matched by problem id, and a
problem in one file only is an error, not a silent drop. Two models trained with the same seed
on the same folds differ in a few dozen problems per fold; only those problems inform the
comparison, which is why the test counts them (McNemar) instead of comparing two accuracies.
Pairs that share problems (two seeds on one test set) are pooled by problem: the p takes each
problem once, with its count over the pairs (``sign_flip_exact``, McNemar's test where each problem
counts once), where McNemar over the pooled counts would take a repeat for another problem.
Cochran's Q extends McNemar to more than two models on the same problems: whether they differ at
all; where problems repeat (seeds on one test set), its p is by permutation by problem
(``cochran_q_by_problem``).

``curves`` lays two runs' learning curves side by side, epoch by epoch (training tree loss, and
validation value and equation accuracy where validation ran), from each run's latest checkpoint,
with the settings the two runs differ in (all but where their files went, how they logged and
their CPU threads): the curve says how the end points were reached, and the settings line whether
the runs were trained alike but for what is compared. Runs are read from local folders.
"""
from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import combinations
from math import comb, erfc, exp, lgamma, log, sqrt
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import torch

from hlgt import metrics as M
from hlgt.inference import RUN_CONFIG_FILE
from hlgt.train.checkpoint import RESULTS_FILE, STATE_FILE, changed_settings, holds_run
from hlgt.train.evaluate import read_predictions

METRICS = {"value": "value_correct", "equation": "equation_correct"}
PERMUTATIONS = 10_000  # draws of Cochran's Q's permutation p by problem: its standard error <= 0.005


def p_text(p: float) -> str:
    """A p value to two significant digits; one below 1e-300, where a float loses its digits (and
    0, where it underflowed), as "< 1e-300"."""
    if p != p:
        return "n/a"
    return f"{p:.2g}" if p >= 1e-300 else "< 1e-300"


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p: the chance, under a fair coin for each discordant problem, of a
    split at least as uneven as ``only_a`` against ``only_b``."""
    n, k = only_a + only_b, min(only_a, only_b)
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(k + 1))
    return min(1.0, 2 * tail / 2 ** n)  # exact integers: no overflow for thousands of problems


def sign_flip_exact(differences: Iterable[int]) -> float:
    """Two-sided exact p of the paired sign-flip test on each problem's difference (runs A solved
    it in but B did not, less the reverse): under the hypothesis that A and B are exchangeable on
    every problem, each difference is as likely negated. Where each problem counts once
    (differences of -1, 0, 1) it is the exact McNemar p; where a problem is in several pairs (two
    seeds on one test set) it stays one problem, where McNemar over the pooled counts would take
    its repeats for independent problems."""
    differences = list(differences)
    steps = [abs(d) for d in differences if d]
    observed, top = abs(sum(differences)), sum(steps)
    # The distribution of the signed sum, index = sum + top, convolved one problem at a time:
    # float64 sums of non-negative terms (relative error ~1e-15 even at p ~ 1e-40), much faster
    # than exact integers over thousands of problems.
    chance = np.zeros(2 * top + 1)
    chance[top] = 1.0
    for step in steps:
        moved = np.zeros_like(chance)
        moved[step:] += 0.5 * chance[:-step]
        moved[:-step] += 0.5 * chance[step:]
        chance = moved
    totals = np.abs(np.arange(-top, top + 1))
    return min(1.0, float(chance[totals >= observed].sum()))


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X chi-square with ``df`` degrees of freedom, by the recurrence
    sf(x; k + 2) = sf(x; k) + (x/2)^(k/2) e^(-x/2) / Gamma(k/2 + 1) from sf(x; 1) or sf(x; 2)."""
    if x <= 0:
        return 1.0
    k, sf = (1, erfc(sqrt(x / 2))) if df % 2 else (2, exp(-x / 2))
    while k < df:
        sf += exp((k / 2) * log(x / 2) - x / 2 - lgamma(k / 2 + 1))
        k += 2
    return min(1.0, sf)


def cochran_q(models: Sequence[Mapping[str, bool]]) -> tuple[float, int, float]:
    """Cochran's Q over three or more models' verdicts on the same problems: (Q, degrees of freedom,
    p under the chi-square approximation) for the hypothesis that all solve as many problems in
    expectation. Problems all solve or none solves carry no information and drop out of Q."""
    if len(models) < 3 or any(m.keys() != models[0].keys() for m in models):
        raise ValueError("Cochran's Q needs three or more models' verdicts on the same problems")
    k = len(models)
    right = [sum(m.values()) for m in models]
    per_problem = [sum(m[i] for m in models) for i in models[0]]
    n = sum(right)
    denominator = k * n - sum(r * r for r in per_problem)
    if denominator == 0:  # every problem solved by all or by none: no model differs from another
        return 0.0, k - 1, 1.0
    q = (k - 1) * (k * sum(c * c for c in right) - n * n) / denominator
    return q, k - 1, chi2_sf(q, k - 1)


def cochran_q_by_problem(models: Sequence[Mapping[tuple, bool]], draws: int = PERMUTATIONS,
                         seed: int = 0) -> tuple[float, int, float]:
    """Cochran's Q where a problem is in several rows (keys ``(replicate, problem)``: seeds on one
    test set): Q over every row, as ``cochran_q``, its p by permutation by problem. Under the
    hypothesis that the models are exchangeable on every problem, the models' labels are shuffled
    alike in all of a problem's rows (one shuffle per problem, not per row: a problem's repeats are
    not independent evidence); p = (1 + draws at least as large as Q) / (1 + ``draws``), seeded,
    so the same verdicts give the same p."""
    q, df, _ = cochran_q(models)
    if q == 0.0:  # every model's total alike: the least any shuffle gives
        return q, df, 1.0
    keys = list(models[0])
    problems = {problem: i for i, problem in enumerate(dict.fromkeys(key[1] for key in keys))}
    # Row totals and the grand total do not move under a shuffle within rows, so Q moves only with
    # the sum of the squared model totals, and a model's total is its sum over problems of the
    # problem's count of rows it solved (``solved``: [problems, models]).
    solved = np.zeros((len(problems), len(models)), dtype=np.int64)
    for key in keys:
        solved[problems[key[1]]] += [m[key] for m in models]
    # The problems some shuffle moves: those alike on every model add the same to each total.
    split = solved[(solved != solved[:, :1]).any(axis=1)].astype(np.int16)  # counts <= replicates
    fixed = solved.sum(axis=0) - split.sum(axis=0)
    observed = (solved.sum(axis=0) ** 2).sum()
    rng = np.random.default_rng(seed)
    at_least, rest = 0, draws
    while rest:
        chunk = min(rest, max(1, 2 ** 22 // split.size))  # a few MB of shuffled counts at a time
        shuffled = rng.permuted(np.broadcast_to(split, (chunk, *split.shape)), axis=2)  # one shuffle per problem
        totals = shuffled.sum(axis=1, dtype=np.int64) + fixed
        at_least += int(((totals ** 2).sum(axis=1) >= observed).sum())
        rest -= chunk
    return q, df, (1 + at_least) / (1 + draws)


@dataclass(frozen=True)
class Paired:
    label: str
    n: int  # problems, each counted once per pair it is in
    right_a: int
    right_b: int
    only_a: int
    only_b: int
    # problem id -> pairs only A solved it in, less pairs only B did (its sign-flip difference);
    # left out of == and repr: two Paired with equal counts are equal, though their p may differ
    differences: Mapping[str | int, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def repeats(self) -> bool:
        """Whether some problem is in more than one of the pooled pairs (seeds, not folds)."""
        return self.n > len(self.differences) > 0

    @cached_property
    def p(self) -> float:
        """The exact McNemar p, by problem where problems repeat (``sign_flip_exact``)."""
        if self.repeats:
            return sign_flip_exact(self.differences.values())
        return mcnemar_exact(self.only_a, self.only_b)

    def __add__(self, other: Paired) -> Paired:
        differences = dict(self.differences)
        for problem, d in other.differences.items():
            differences[problem] = differences.get(problem, 0) + d
        if not (self.differences and other.differences):  # counts without problems: McNemar over them
            differences = {}
        return Paired("pooled", self.n + other.n, self.right_a + other.right_a, self.right_b + other.right_b,
                      self.only_a + other.only_a, self.only_b + other.only_b, differences)


class Unfinished(FileNotFoundError):
    """A run folder without the predictions its run writes when it ends."""


def predictions_file(path: str | Path, split: str) -> Path:
    """A predictions file itself, or the one a run (or its ``best`` model folder, or a checkpoint's
    ``best``) wrote for ``split``. A checkpoint's ``model`` (its last epoch's) is refused: the
    predictions beside it are the best model's."""
    path = Path(path)
    if path.is_file():
        return path
    evaluate_first = (f"evaluate it first (python -m hlgt.train.evaluate --model {path} --split {split} "
                      "--out DIR) and compare DIR")
    if path.name == "model" and (path.parent / STATE_FILE).is_file():
        raise ValueError(f"{path} is a checkpoint's last-epoch model, and the predictions beside it are its run's "
                         f"best model's: {evaluate_first}")
    if path.name == "best" and path.is_dir() and not holds_run(path.parent):
        raise ValueError(f"{path} is a model folder outside its run, and predictions beside it need not be its: "
                         f"{evaluate_first}")
    run = path.parent if path.name == "best" else path
    if not run.exists():
        raise FileNotFoundError(f"{run} does not exist")
    found = run / f"predictions_{split}.jsonl"
    if found.is_file():
        return found
    if run is path and (path / RUN_CONFIG_FILE).is_file():  # not a checkpoint's best/, whose run is training
        raise ValueError(f"{path} is a model folder, without predictions of its own: {evaluate_first}")
    raise Unfinished(f"{path}: no predictions_{split}.jsonl there (has the run finished?)")



def verdicts(path: Path, metric: str) -> dict[str, bool]:
    key = METRICS[metric]
    out: dict[str, bool] = {}
    for record in read_predictions(path):
        if not isinstance(record.get("id"), (str, int)) or key not in record:
            raise ValueError(f"{path}: not a predictions file (a line without an id or {key})")
        if record["id"] in out:
            raise ValueError(f"{path}: problem {record['id']} appears twice")
        out[record["id"]] = bool(record[key])
    return out


def pair(label: str, a: Mapping[str, bool], b: Mapping[str, bool]) -> Paired:
    """Counts over the problems of two verdict maps, which must cover the same problem ids."""
    if a.keys() != b.keys():
        raise ValueError(f"{label}: the two files hold different problems ({len(a.keys() - b.keys())} only in "
                         f"the first, {len(b.keys() - a.keys())} only in the second): compare runs on the "
                         "same split of the same fold")
    if not a:
        raise ValueError(f"{label}: the files hold no predictions")
    return Paired(label, len(a), sum(a.values()), sum(b.values()),
                  sum(a[i] and not b[i] for i in a), sum(b[i] and not a[i] for i in a),
                  {i: int(a[i]) - int(b[i]) for i in a})


def _check_paired(a_paths: Sequence, b_paths: Sequence) -> None:
    if len(a_paths) != len(b_paths):
        raise ValueError(f"--a has {len(a_paths)} runs and --b {len(b_paths)}: they are paired by position")
    for path in (*a_paths, *b_paths):
        if "://" in str(path):
            raise ValueError(f"{path}: runs are compared from local folders; copy it from the storage first "
                             "(for S3: aws s3 sync)")


def compare(a_paths: Sequence[str | Path], b_paths: Sequence[str | Path], *, split: str = "test",
            metric: str = "value") -> list[Paired]:
    """One ``Paired`` per position; with more than one pair, a last row pooling them."""
    _check_paired(a_paths, b_paths)
    rows = []
    for a, b in zip(a_paths, b_paths):
        fa, fb = predictions_file(a, split), predictions_file(b, split)
        rows.append(pair(f"{name(fa)} / {name(fb)}", verdicts(fa, metric), verdicts(fb, metric)))
    for x, y in combinations(rows, 2):
        # Pooling tells problems apart by id: pairs hold the same problems (seeds) or none in common (folds).
        shared = x.differences.keys() & y.differences.keys()
        if shared and (len(shared) < len(x.differences) or len(shared) < len(y.differences)):
            raise ValueError(f"{x.label} and {y.label} share {len(shared)} problem ids but not all: pool pairs "
                             "of one test set (seeds) or of disjoint folds, not files whose ids mean other problems")
    if len(rows) > 1:
        rows.append(sum(rows[1:], rows[0]))
    return rows


def _run_name(folder: Path) -> str:
    """The run a folder belongs to: a checkpoint's (``checkpoint/``, ``checkpoint_<time>/``) parent."""
    return folder.parent.name if folder.name.startswith("checkpoint") else folder.name


def name(predictions: Path) -> str:
    """The run's name for a run's own predictions file (or its final checkpoint's), else the file's
    name; a run that stopped before its last epoch (``train.max_minutes``) says so."""
    if not predictions.name.startswith("predictions_"):
        return predictions.name
    folder = predictions.parent
    label = _run_name(folder)
    try:
        trained = json.loads((folder / RESULTS_FILE).read_text(encoding="utf-8"))[M.EPOCH]
        planned = json.loads((folder / "best" / RUN_CONFIG_FILE).read_text(encoding="utf-8"))["config"]["train.epochs"]
        stopped = trained < planned
    except (OSError, ValueError, KeyError, TypeError):  # a predictions file without its run's records
        return label
    return f"{label} (stopped at epoch {trained} of {planned})" if stopped else label


def markdown(rows: Sequence[Paired], metric: str) -> str:
    lines = [f"| runs (A / B) | problems | A {metric} acc | B {metric} acc | only A / only B | exact McNemar p |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        label = f"{r.label} (problems in several pairs: p by problem)" if r.repeats else r.label
        lines.append(f"| {label} | {r.n} | {M.percent(r.right_a / r.n)}% | {M.percent(r.right_b / r.n)}% "
                     f"| {r.only_a} / {r.only_b} | {p_text(r.p)} |")
    return "\n".join(lines) + "\n"


# Settings that say where a run's files went, how it logged and how many CPU threads it took: left
# out of the settings two curves differ in (threads change no more than the order of float sums;
# workers, GPU, CUDA graphs and compiling stay: they change the batch or the arithmetic).
LOCATION_KEYS = frozenset({"data.data_dir", "data.shards_dir", "train.out_dir", "train.wandb",
                           "train.wandb_project", "train.threads"})


@dataclass(frozen=True)
class Curve:
    label: str
    epoch: int  # the last epoch trained
    passed_over: int  # checkpoints of the run that did not read (half written, damaged)
    history: list[dict]  # one metrics dict per epoch trained (``hlgt.metrics``' names)
    settings: dict  # the run's flat config


def _checkpoint_folders(path: Path) -> list[Path]:
    """The checkpoint folders ``path`` names: itself (a checkpoint folder), the checkpoint of a
    model folder in it (``best``, ``model``), or every checkpoint of a run folder (``checkpoint/``
    of a run trained in process, ``checkpoint_<time>/`` of a Ray run) or of the run of its
    published ``best``."""
    if (path / STATE_FILE).is_file():
        return [path]
    if path.name in ("best", "model") and (path.parent / STATE_FILE).is_file():
        return [path.parent]
    for run in (path, path.parent) if path.name == "best" else (path,):
        found = [c for c in (run / "checkpoint", *run.glob("checkpoint_*")) if (c / STATE_FILE).is_file()]
        if found:
            return found
    return []


def _read_curve(checkpoint: Path) -> Curve:
    """Raises ``ValueError`` for a file that is not what training writes (or not yet all of it)."""
    try:
        # mmap: only the history is read, not the optimizer's state (the bulk of the file).
        state = torch.load(checkpoint / STATE_FILE, map_location="cpu", weights_only=True, mmap=True)
        settings = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
        history = list(state["history"])
        epoch = int(state["epoch"])
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, KeyError, IndexError, TypeError,
            ValueError, ArithmeticError) as error:
        raise ValueError(f"{checkpoint}: not a checkpoint written by hlgt's training, or one still being "
                         f"written ({error})") from None
    if not isinstance(settings, dict) or not all(map(_is_epoch_record, history)):
        raise ValueError(f"{checkpoint}: not a checkpoint written by hlgt's training (its config or its "
                         "per-epoch metrics are not what training writes)")
    return Curve(_run_name(checkpoint), epoch, 0, history, settings)


def _is_epoch_record(m) -> bool:
    number = (int, float)
    return (isinstance(m, dict) and isinstance(m.get(M.EPOCH), int) and isinstance(m.get(M.TRAIN_TREE_LOSS), number)
            and (not M.validated(m) or all(isinstance(m.get(k), number)
                                                  for k in (M.VAL_VALUE_ACC, M.VAL_EQUATION_ACC))))


def curve(path: str | Path) -> Curve:
    """A run's per-epoch metrics and settings, from its latest checkpoint: of a Ray run's
    checkpoints, the one of the most epochs that reads whole (Ray writes a checkpoint's files in
    place, so the newest may be half copied; its folder names are local times). Its trainer
    state's history holds every epoch trained, resumed ones included."""
    path = Path(path)
    named = path.parent if path.name == "best" else path  # a run's best/ appears when it ends
    if not named.exists():
        raise FileNotFoundError(f"{named} does not exist")
    found = _checkpoint_folders(path)
    if not found:
        raise FileNotFoundError(f"{path}: no training checkpoint there (yet?): learning curves are read from a "
                                "run folder, its best/ or a checkpoint folder (a sweep's trial trains in "
                                "<sweep>/train/<trial>)")
    curves, errors = [], []
    for checkpoint in found:
        try:
            curves.append(_read_curve(checkpoint))
        except ValueError as error:
            errors.append(error)
    if not curves:
        raise errors[-1]
    return replace(max(curves, key=lambda c: c.epoch), passed_over=len(errors))


def _cells(m: dict | None) -> tuple[str, str]:
    """(training tree loss, validation value / equation accuracy) of one epoch's metrics; the
    validation cell is empty where the epoch did not validate (``hlgt.metrics.validated``)."""
    if m is None:
        return "–", "–"
    loss = f"{m[M.TRAIN_TREE_LOSS]:.3f}"
    if not M.validated(m):
        return loss, ""
    return loss, f"{M.percent(m[M.VAL_VALUE_ACC])}% / {M.percent(m[M.VAL_EQUATION_ACC])}%"


def curves(a_paths: Sequence[str | Path], b_paths: Sequence[str | Path]) -> str:
    """Markdown: per pair of runs, the settings they differ in (but ``LOCATION_KEYS``), any
    checkpoint passed over, and their learning curves side by side (an epoch one of them has not
    trained shows "–")."""
    _check_paired(a_paths, b_paths)
    out = []
    for a_path, b_path in zip(a_paths, b_paths):
        a, b = curve(a_path), curve(b_path)
        differ = changed_settings(a.settings, b.settings, ignore=LOCATION_KEYS)
        unread = "".join(f"; {c.passed_over} unreadable checkpoint(s) of {side} passed over"
                         for side, c in (("A", a), ("B", b)) if c.passed_over)
        out.append(f"Learning curves: A {a.label}, B {b.label}; settings A -> B: "
                   f"{'; '.join(differ) if differ else 'none differ'}{unread}\n\n")
        out.append("| epoch | A tree loss | B tree loss | A validation value / equation "
                   "| B validation value / equation |\n|---:|---:|---:|---:|---:|\n")
        by_epoch = [{m[M.EPOCH]: m for m in c.history} for c in (a, b)]
        for epoch in sorted(set(by_epoch[0]) | set(by_epoch[1])):
            (la, va), (lb, vb) = (_cells(h.get(epoch)) for h in by_epoch)
            out.append(f"| {epoch} | {la} | {lb} | {va} | {vb} |\n")
        out.append("\n")
    return "".join(out)


if __name__ == "__main__":  # python -m hlgt.train.compare: the command hlgt-compare
    from hlgt.commands.compare import run

    run()
