"""THE training loop, run as is in one process and on every Ray Train worker.

What differs between the two is injected through ``Runtime`` (rank, device, DDP wrapping, where
the training batches and evaluation rows come from) and the ``report`` callback (console and a
local folder in one process; ``ray.train.report`` under Ray); nothing here imports Ray.

Per epoch: Adam(lr, weight_decay) steps over this worker's batches, StepLR halves the learning
rate every ``train.lr_step`` epochs, the whole validation split is evaluated every
``train.eval_every`` epochs (and on the first and last) with beam ``model.beam_size`` (each rank
decodes every world_size-th problem, rank 0 gathers and scores them all: a problem's prediction
does not depend on which rank or batch decodes it), rank 0 keeps the best model by validation
value accuracy (test is never looked at) and writes a checkpoint that every rank then reports.
``train.max_minutes`` ends training early, after the epoch that crosses it (all ranks agree through
the all-reduce; that epoch is validated for its own report, the best model being chosen among the
scheduled validations alone), and the best model is evaluated as after the last epoch; the run is
not finished, though: run again, it goes on from the epoch it stopped after (one schedule over
several time-limited calls, keeping the model one call would). After the last epoch rank 0
evaluates the best model once on test and writes the predictions files and the Table-4 breakdown
into the final checkpoint.

``train`` reads top to bottom: a ``Trainer`` is set up (model, optimizer, fresh or resumed
state), ``fit`` runs the epochs (``train_epoch``, ``validate``, ``report_epoch``), ``finish``
evaluates the best model once and reports the outputs.

Checkpoints and the single-process run folder: ``hlgt.train.checkpoint``; the step itself and
the epoch's batch order: ``hlgt.train.step``.
"""
from __future__ import annotations

import copy
import json
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch
from torch import nn

from hlgt import metrics as M
from hlgt.config import Config
from hlgt.data.collate import encode
from hlgt.data.shards import load_rows, load_vocab
from hlgt.data.vocab import read_word_vectors
from hlgt.inference import predict
from hlgt.model.solver import Solver
from hlgt.train import cuda_graphs, tracking
from hlgt.train import evaluate as E
from hlgt.train.checkpoint import RESULTS_FILE, LocalReporter, fresh_state, publish, read_checkpoint, write_checkpoint
from hlgt.train.step import EpochStats, epoch_batches, make_optimizer, planned, seed_everything, train_step

SPLIT_METRICS = {"valid": (M.VAL_VALUE_ACC, M.VAL_EQUATION_ACC), "test": (M.TEST_VALUE_ACC, M.TEST_EQUATION_ACC)}
# What every epoch's report carries, validated or not (``Trainer.validate``).
CARRIED = SPLIT_METRICS["valid"]

Report = Callable[[dict, "Path | None"], None]


@dataclass
class Runtime:
    """What one process and a Ray Train worker do differently: injected, never forked."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    # Wraps the model for data parallelism (Ray: prepare_model → DDP); must leave .module or the model.
    wrap_model: Callable[[nn.Module], nn.Module] | None = None
    # epoch → this worker's training batches; None: every training row, shuffled in process.
    train_batches: Callable[[int], Iterable[Any]] | None = None
    # split → all rows of that split (every rank); None: hlgt.data.shards.load_rows.
    eval_rows: Callable[[str], list[dict]] | None = None
    # sum a tensor over workers (None: one worker)
    all_reduce: Callable[[torch.Tensor], torch.Tensor] | None = None
    # every worker's object, in rank order (None: one worker)
    gather: Callable[[Any], list[Any]] | None = None
    log: Callable[[str], None] = print


@dataclass
class TrainResult:
    metrics: dict  # final: best validation and test metrics, epochs run (rank 0; empty elsewhere)
    history: list[dict]  # per-epoch metrics, the resumed part included
    checkpoint: Path | None  # the final checkpoint folder as written (in process) or None


def _load_word_vectors(solver, vocab, path: str, log: Callable[[str], None]) -> None:
    """Start the word embedding from a pretrained vector file (words it lacks keep their init)."""
    embedding = solver.encoder.embedding.weight
    found = read_word_vectors(path, vocab, embedding.size(1))
    if found.ids:
        with torch.no_grad():
            embedding[torch.tensor(found.ids, device=embedding.device)] = torch.tensor(
                found.vectors, dtype=embedding.dtype, device=embedding.device)
    log(f"word vectors: {len(found.ids)} of {len(vocab.words) - 3} vocabulary words from {path} "
        f"({found.lines} vectors read, {found.malformed} malformed lines skipped)")


def _progress(epoch: int, epochs: int, m: Mapping[str, Any], evaluated: bool, seconds: float) -> str:
    val = (f" | val value {M.percent(m[M.VAL_VALUE_ACC])}% eq {M.percent(m[M.VAL_EQUATION_ACC])}%"
           + (f" tree loss {m[M.VAL_TREE_LOSS]:.4f}" if M.VAL_TREE_LOSS in m else "") if evaluated else "")
    parts = " ".join(f"{p} {m[M.grad_norm_metric(p)]:.3g}" for p in M.MODEL_PARTS if M.grad_norm_metric(p) in m)
    scales = " ".join(f"{a} {m[M.scale_metric(a)]:.3g}" for a in M.ACTIVATIONS if M.scale_metric(a) in m)
    return (f"epoch {epoch}/{epochs} | loss {m[M.TRAIN_LOSS]:.4f} (tree {m[M.TRAIN_TREE_LOSS]:.4f} "
            f"com {m[M.TRAIN_COM_LOSS]:.4f}) | grad norm max {m[M.TRAIN_GRAD_NORM_MAX]:.3g} | lr {m[M.LR]:.2e} | "
            f"{m[M.TRAIN_PROBLEMS_PER_S]:.1f} problems/s"
            f"{val} | {seconds:.1f}s\n"
            f"    grad norm max by part: {parts} | activation scale: {scales}")


def train(
    cfg: Config,
    shards_dir: str | Path,
    *,
    report: Report | None = None,
    run_dir: str | Path | None = None,
    resume_from: str | Path | None = None,
    runtime: Runtime | None = None,
    vocab=None,
    evaluate_test: bool = True,
    run_name: str = "run",
    group: str | None = None,
    wandb_dir: str | Path | None = None,
    wandb_mode: str | None = None,
) -> TrainResult:
    """Train ``cfg`` on the shards in ``shards_dir``; return the final metrics on rank 0.

    ``report(metrics, checkpoint_dir)`` is called by every rank after every epoch and once after
    the test evaluation (rank 0 passes the checkpoint folder, the others None); by default a
    ``LocalReporter`` on ``run_dir``. ``resume_from``: a checkpoint folder to continue from
    (a finished one returns its results without training). ``vocab``: the shards' vocabulary
    when the caller has it (Ray workers), else read from ``shards_dir``. ``evaluate_test=False``
    (sweep trials) leaves the test split untouched: the sweep evaluates each arm's best once.
    """
    rt = runtime or Runtime()
    cfg.check()  # a Config built field by field has not been through from_flat's check
    if report is None:
        if run_dir is None:
            raise ValueError("train needs a report callback or a run_dir for the local one")
        report = LocalReporter(run_dir)
    trainer = Trainer(cfg, shards_dir, rt, vocab, resume_from)
    if trainer.state["finished"]:
        if isinstance(report, LocalReporter) and rt.rank == 0:
            publish(resume_from, report.run_dir)  # a kill may have come before the outputs were copied
        return trainer.finished_result(resume_from)
    if isinstance(report, LocalReporter):
        report.restart(trainer.state["epoch"])
    trainer.prepare_training()
    tracker = tracking.start(cfg.to_flat(), enabled=cfg.train.wandb, project=cfg.train.wandb_project,
                             name=run_name, group=group, rank=rt.rank, mode=wandb_mode,
                             start_id=trainer.state["wandb_id"],
                             directory=wandb_dir or run_dir or tempfile.gettempdir())
    try:
        trainer.fit(report, tracker)
        final = trainer.finish(report, tracker, evaluate_test)
    finally:
        tracker.finish()
    checkpoint = report.checkpoint if isinstance(report, LocalReporter) else None
    return TrainResult(metrics=final, history=trainer.state["history"], checkpoint=checkpoint)


def _rank_seed(cfg: Config, rank: int, epoch: int) -> int:
    """The seed of a rank past 0's generators when it starts, or resumes after ``epoch``."""
    return cfg.train.seed + 1_000_003 * rank + 7_919 * epoch


def placed_by_id(rows: list[dict], parts: list[list[tuple[str, Any]]]) -> list[Any]:
    """The ranks' gathered ``(id, prediction)`` pairs in the order of ``rows``. A rank that read the
    rows in another order would have decoded its slice of that order, some problems twice and
    others never: ``RuntimeError`` then, never a prediction paired with the wrong problem."""
    by_id = {pid: p for part in parts for pid, p in part}
    if sum(map(len, parts)) != len(rows) or len(by_id) != len(rows) or any(str(r["id"]) not in by_id for r in rows):
        raise RuntimeError("the workers read the validation rows in different orders: each decoded its slice of "
                           "another order (Ray Data's ingest must keep the files' order)")
    return [by_id[str(r["id"])] for r in rows]


class Trainer:
    """One run on one worker: the model, its optimizer and scheduler, the best weights so far, the
    trainer state that checkpoints hold, the rows read for evaluation, and the steps of ``train``."""

    def __init__(self, cfg: Config, shards_dir: str | Path, rt: Runtime, vocab, resume_from: str | Path | None):
        """Seed, build the model and its optimizer, then start fresh or from ``resume_from``."""
        if cfg.train.threads > 0:
            torch.set_num_threads(cfg.train.threads)
        self.cfg, self.shards_dir, self.rt = cfg, shards_dir, rt
        self.main = rt.rank == 0
        self.log = rt.log if self.main else (lambda _msg: None)
        seed_everything(cfg.train.seed)
        self.vocab = vocab if vocab is not None else load_vocab(shards_dir)
        self.solver = Solver(cfg.model, self.vocab).to(rt.device)
        if rt.rank:  # one initialisation on every rank, then dropout masks of their own
            seed_everything(_rank_seed(cfg, rt.rank, epoch=0))
        if cfg.train.word_vectors and self.main and resume_from is None:
            # Rank 0 only: DDP broadcasts rank 0's weights to the others.
            _load_word_vectors(self.solver, self.vocab, cfg.train.word_vectors, self.log)
        self.opt, self.sched = make_optimizer(cfg, self.solver)
        self.state = fresh_state()
        if resume_from is None:
            self.best_weights = copy.deepcopy(self.solver.state_dict())
        else:
            self._resume(resume_from)
        self._rows: dict[str, list[dict]] = {}

    def _resume(self, checkpoint: str | Path) -> None:
        """Weights, best weights, optimizer, scheduler, RNG and trainer state of a checkpoint."""
        saved = read_checkpoint(checkpoint)
        self.solver.load_state_dict(Solver.load(Path(checkpoint) / "model").state_dict())
        best = Solver.load(Path(checkpoint) / "best").state_dict()
        self.best_weights = {k: v.to(self.rt.device) for k, v in best.items()}
        self.opt.load_state_dict(saved["optimizer"])
        self.sched.load_state_dict(saved["scheduler"])
        if self.main:  # the checkpoint holds rank 0's generators
            torch.set_rng_state(saved["rng"])
            if saved.get("cuda_rng") is not None and self.rt.device.type == "cuda":  # dropout on a GPU draws there
                torch.cuda.set_rng_state(saved["cuda_rng"], self.rt.device)
        else:  # the others draw on from a seed of their rank and the epoch, not their first masks again
            seed_everything(_rank_seed(self.cfg, self.rt.rank, saved["epoch"]))
        # A checkpoint written before runs drew W&B ids goes on writing to its name's W&B run (None).
        self.state = {k: saved[k] if k != "wandb_id" else saved.get(k) for k in fresh_state()}
        self.state["starts"] = list(self.state["starts"]) + [self.state["epoch"]]  # where each (re)start began
        self.log(f"resuming from {checkpoint} after epoch {self.state['epoch']}")

    def finished_result(self, checkpoint: str | Path) -> TrainResult:
        """What a finished run returned, read back from its final checkpoint."""
        metrics = json.loads((Path(checkpoint) / RESULTS_FILE).read_text()) if self.main else {}
        return TrainResult(metrics=metrics, history=self.state["history"], checkpoint=Path(checkpoint))

    def rows(self, split: str) -> list[dict]:
        """Every row of ``split``, read once (from the runtime's source, else the shards)."""
        if split not in self._rows:
            self._rows[split] = self.rt.eval_rows(split) if self.rt.eval_rows else load_rows(self.shards_dir, split)
        return self._rows[split]

    def prepare_training(self) -> None:
        """Compile and wrap the model for data parallelism, and settle where the training batches
        come from."""
        if self.cfg.train.compile:
            self.solver.compile_parts()
        self.model = self.rt.wrap_model(self.solver) if self.rt.wrap_model else self.solver
        self.parts = self.solver.parts()
        self.steps = None
        if self.cfg.train.cuda_graphs:  # Config.check: the hlgt and none encoders, one worker
            cuda_graphs.require_gpu(self.rt.device)
            if self.model is not self.solver:
                raise ValueError("train.cuda_graphs trains in one process: "
                                 "data parallelism's wrapper would be bypassed")
            self.steps = cuda_graphs.GraphedSteps(self.solver, self.cfg.train.capture_bigrus)
        # What a training step plans its batch with and runs it through.
        self.plan, self.forward = ((self.steps.plan, self.steps.forward) if self.steps is not None
                                   else (self.solver.plan, self.model))
        if self.rt.train_batches is None:
            self._train_rows = encode(self._usable_train_rows(), self.vocab)  # collated every epoch
            self.train_batches = self._shuffled_batches
        else:
            self.train_batches = self.rt.train_batches
        if self.steps is not None:  # the next epoch's batches, planned only, give the shapes
            self.log(self.steps.learn(self.train_batches(self.state["epoch"] + 1)))

    def _usable_train_rows(self) -> list[dict]:
        train_rows = self.rows("train")
        unusable = sum(r["prefix"] is None for r in train_rows)
        if unusable:
            self.log(f"skipping {unusable} training rows without a representable gold equation")
            train_rows = [r for r in train_rows if r["prefix"] is not None]
        if not train_rows:
            raise ValueError(f"no training rows in {self.shards_dir}")
        return train_rows

    def _shuffled_batches(self, epoch: int):
        return epoch_batches(self._train_rows, self.vocab, self.cfg, epoch)

    def fit(self, report: Report, tracker: tracking.Tracker) -> None:
        """The remaining epochs, each trained, validated when due, logged and reported with a
        checkpoint; ``train.max_minutes`` ends them after the epoch that crosses it."""
        epochs = self.cfg.train.epochs
        run_started = time.perf_counter()
        for epoch in range(self.state["epoch"] + 1, epochs + 1):
            started = time.perf_counter()
            metrics, out_of_time = self.train_epoch(epoch, run_started)
            # The same on every rank.
            scheduled = epoch == 1 or epoch == epochs or epoch % max(self.cfg.train.eval_every, 1) == 0
            evaluated = self.validate(epoch, metrics, scheduled or out_of_time, scheduled)
            self.state["epoch"] = epoch
            self.state["history"].append(metrics)
            self.log(_progress(epoch, epochs, metrics, evaluated, time.perf_counter() - started))
            # The report carries the last validation forward (Ray ranks checkpoints and schedulers
            # read it every epoch); a chart draws only the epochs that validated.
            tracker.log(metrics if evaluated else {k: v for k, v in metrics.items() if k not in CARRIED},
                        step=epoch)
            self.report_epoch(report, metrics)
            if out_of_time and epoch < epochs:
                self.log(f"train.max_minutes={self.cfg.train.max_minutes:g} reached after epoch {epoch}/{epochs}: "
                         f"stopping (run again, it goes on from here)")
                break

    def train_epoch(self, epoch: int, run_started: float) -> tuple[dict, bool]:
        """One pass over this worker's batches and a scheduler step: the epoch's training metrics
        (over every worker) and whether the time budget is spent."""
        started = time.perf_counter()
        self.model.train()
        stats = EpochStats(self.parts, self.rt.device)
        lr = self.opt.param_groups[0]["lr"]
        for batch in planned(self.train_batches(epoch), self.plan, self.rt.device):
            train_step(self.forward, self.opt, batch.to(self.rt.device), stats, self.cfg.train.grad_clip,
                       self.solver.parameters())
        if self.steps is not None:
            self.log(self.steps.epoch_note())
        self.sched.step()
        elapsed = time.perf_counter() - started
        # Time budget: every rank votes, so that all stop after the same epoch.
        minutes = self.cfg.train.max_minutes
        out_of_time = minutes > 0 and time.perf_counter() - run_started >= 60 * minutes
        sums = torch.cat([torch.tensor([float(out_of_time)], dtype=torch.float64), stats.sums()])
        if self.rt.all_reduce is not None:
            sums = self.rt.all_reduce(sums)
        return _epoch_metrics(epoch, sums[1:], lr, elapsed, stats), bool(sums[0] > 0)

    def validate(self, epoch: int, metrics: dict, due: bool, scheduled: bool) -> bool:
        """When ``due``, evaluate on validation; either way add the latest validation metrics to
        ``metrics``. A ``scheduled`` validation keeps the model if it is the best so far (rank 0
        decides) and is carried into later epochs' metrics; one due only to the time budget is this
        epoch's alone, so that a schedule stopped and resumed keeps the best model and carries the
        metrics of one trained straight through. Returns whether this rank scored a validation split."""
        valid = self.validation_report() if due else None
        val_loss = self.validation_loss() if due else None
        evaluated = self.main and due
        if evaluated and (scheduled or valid is None):  # without a validation split: the latest model
            self._keep_if_best(epoch, valid)
        # Every report carries validation metrics (the latest evaluation; 0 before the first or
        # without a validation split) so that schedulers and checkpoint ranking always find them.
        metrics.update(self.state["last_val"] or {M.VAL_VALUE_ACC: 0.0, M.VAL_EQUATION_ACC: 0.0})
        if evaluated and valid is not None and not scheduled:
            metrics.update({M.VAL_VALUE_ACC: valid.value_acc, M.VAL_EQUATION_ACC: valid.equation_acc})
        if val_loss is not None:
            metrics[M.VAL_TREE_LOSS] = val_loss
        return evaluated and valid is not None

    def _keep_if_best(self, epoch: int, valid) -> None:
        if valid is None:  # no validation split: the last epoch is the one kept, with no score
            if epoch == 1:
                self.log("no validation split: each epoch's model replaces the last, the final epoch is kept")
            self.state["last_val"] = {}
            improved = True
        else:
            self.state["last_val"] = {M.VAL_VALUE_ACC: valid.value_acc, M.VAL_EQUATION_ACC: valid.equation_acc}
            improved = valid.value_acc > self.state["best"][M.VAL_VALUE_ACC]
        if improved:
            self.state["best"] = dict(self.state["last_val"])
            self.state["best_epoch"] = epoch
            self.best_weights = copy.deepcopy(self.solver.state_dict())

    def validation_report(self):
        """The validation report on rank 0 (None elsewhere, or without a validation split): every
        rank decodes its slice, so that no rank idles while another validates."""
        rt = self.rt
        if rt.world_size == 1 or rt.gather is None:
            return self.evaluate_split("valid", self.solver)[0]
        split_rows = self.rows("valid")
        slice_rows = split_rows[rt.rank::rt.world_size]
        mine = predict(self.solver, slice_rows, self.vocab, variant=self.cfg.data.graph,
                       beam_size=self.cfg.model.beam_size, batch_size=self.cfg.train.batch_size, device=rt.device)
        parts = rt.gather([(str(r["id"]), p) for r, p in zip(slice_rows, mine)])
        if not self.main or not split_rows:
            return None
        return E.score_predictions(split_rows, placed_by_id(split_rows, parts))[0]

    def validation_loss(self) -> float | None:
        """The teacher-forced tree loss on validation (every rank its slice, summed over ranks)."""
        mine = self.rows("valid")[self.rt.rank::self.rt.world_size]
        total, n = E.tree_loss_sum(self.solver, mine, self.vocab, variant=self.cfg.data.graph,
                                   batch_size=self.cfg.train.batch_size, device=self.rt.device)
        sums = torch.tensor([total, n], dtype=torch.float64)
        if self.rt.all_reduce is not None:
            sums = self.rt.all_reduce(sums)
        return float(sums[0] / sums[1]) if sums[1] > 0 else None

    def evaluate_split(self, split: str, net: nn.Module):
        """``(report, scored)`` of ``net`` on every row of ``split``; ``(None, [])`` when it has none."""
        split_rows = self.rows(split)
        if not split_rows:
            return None, []
        return E.evaluate(net, split_rows, self.vocab, variant=self.cfg.data.graph, beam_size=self.cfg.model.beam_size,
                          batch_size=self.cfg.train.batch_size, device=self.rt.device)

    def report_epoch(self, report: Report, metrics: dict) -> None:
        """Every rank reports the epoch's metrics, rank 0 with a checkpoint of this epoch."""
        if not self.main:
            report(metrics, None)
            return
        with tempfile.TemporaryDirectory(prefix="hlgt-ckpt-") as tmp:
            self._write_checkpoint(Path(tmp))
            report(metrics, Path(tmp))

    def _write_checkpoint(self, directory: Path) -> None:
        write_checkpoint(directory, self.cfg, self.solver, self.best_weights, self.opt, self.sched, self.state)

    def finish(self, report: Report, tracker: tracking.Tracker, evaluate_test: bool) -> dict:
        """The best model, evaluated once on validation and (with ``evaluate_test``) on test, which
        is never used for selection; rank 0 reports the results with a final checkpoint that holds
        the outputs, the other ranks report the last epoch. Returns the results (rank 0)."""
        if not self.main:
            report({M.EPOCH: self.state["epoch"]}, None)
            return {}
        best = copy.deepcopy(self.solver)
        best.load_state_dict(self.best_weights)
        with tempfile.TemporaryDirectory(prefix="hlgt-final-") as tmp:
            self.state["finished"] = self.state["epoch"] >= self.cfg.train.epochs  # not after a time budget's stop
            self._write_checkpoint(Path(tmp))
            final = {M.EPOCH: self.state["epoch"], M.BEST_EPOCH: self.state["best_epoch"], **self.state["best"]}
            for split in ("valid", "test") if evaluate_test else ("valid",):
                final.update(self._final_evaluation(split, best, tmp, tracker))
            (Path(tmp) / RESULTS_FILE).write_text(json.dumps(final, indent=1), encoding="utf-8")
            # W&B's summary holds the last logged value of every key; the validation loss beside the
            # best model's accuracies is the best epoch's.
            best_row = next((m for m in self.state["history"] if m[M.EPOCH] == self.state["best_epoch"]), {})
            tracker.summary({**final, **{k: best_row[k] for k in (M.VAL_TREE_LOSS,) if k in best_row}})
            report(final, Path(tmp))
        return final

    def _final_evaluation(self, split: str, best: nn.Module, directory: str, tracker: tracking.Tracker) -> dict:
        """The best model on ``split``: predictions and Table-4 breakdown written to ``directory``,
        logged and tracked; its two accuracies under the split's metric names ({} without the split)."""
        rep, scored = self.evaluate_split(split, best)
        if rep is None:
            self.log(f"no {split} split: nothing to evaluate")
            return {}
        E.write_report(directory, split, rep, scored)
        self.log(E.table4_markdown(rep, title=f"{split} (best epoch {self.state['best_epoch']})"))
        tracker.log_predictions(f"predictions/{split}", scored)
        tracker.log_table(f"numbers/{split}", ["numbers", "problems", "proportion", "value_acc", "equation_acc"],
                          [[r.bucket, r.count, r.proportion, r.value_acc, r.equation_acc] for r in rep.by_numbers])
        value_key, equation_key = SPLIT_METRICS[split]
        return {value_key: rep.value_acc, equation_key: rep.equation_acc}


def _epoch_metrics(epoch: int, sums: torch.Tensor, lr: float, elapsed: float, stats: EpochStats) -> dict:
    """An epoch's training metrics from ``sums`` (``EpochStats.sums``, over workers)."""
    if sums[3] == 0:
        raise RuntimeError(f"epoch {epoch}: no training batches")
    loss = float(sums[0] / sums[3])
    if not math.isfinite(loss):
        raise FloatingPointError(f"epoch {epoch}: training loss is {loss}")
    return {M.EPOCH: epoch, M.TRAIN_LOSS: loss, M.TRAIN_TREE_LOSS: float(sums[1] / sums[3]),
            M.TRAIN_COM_LOSS: float(sums[2] / sums[3]), M.LR: lr,
            M.TRAIN_PROBLEMS: int(sums[3]), M.TRAIN_PROBLEMS_PER_S: float(sums[3]) / max(elapsed, 1e-9),
            **stats.norms(), **stats.scale_means(sums)}
