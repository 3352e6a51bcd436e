"""The sweep on Ray Tune: one experiment per ablation arm, each trial one Ray Train run.

Each arm is its own Tune experiment (``<storage>/<name>/<arm>``) so that the scheduler (ASHA by
default) compares configurations within an arm, never prunes one arm against another, and within
it on the same replicate only (``hlgt.sweep.schedulers``). A sweep
without validation (a table: one configuration per arm, fifo) compares nothing, and runs every
arm's trials in one experiment (``<storage>/<name>/arms``), replicate after replicate, so that no
CPU idles between arms while an arm's last replicates finish. An interrupted sweep resumes
when re-run with the same name and storage: finished trials are kept, unfinished ones continue
from their last checkpoint. A failed trial (its actor or a training worker lost) is retried within
the run ``max_failures`` times, from its last checkpoint, before it counts as failed. ``run`` is
the whole sweep: the experiments, then ``hlgt.sweep.results``.
"""
from __future__ import annotations

import math
import os
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from hlgt import metrics as M
from hlgt.config import Config
from hlgt.data.collate import collate, encode
from hlgt.data.shards import load_rows, load_vocab
from hlgt.model.solver import Solver
from hlgt.ray_session import start_ray
from hlgt.sweep import results
from hlgt.sweep.space import describe
from hlgt.sweep.spec import SweepSpec, experiments, trial_folder
from hlgt.train import launch
from hlgt.train.cuda_graphs import GraphedSteps
from hlgt.train.step import epoch_batches, make_optimizer, train_step

# Ray is imported where it is used: the sweep command's flags and data are checked before its seconds
# of import.


def trial(config: dict, spec: SweepSpec) -> None:
    """The Tune trainable: one TorchTrainer for the trial's configuration, whose metrics and
    checkpoint paths reach Tune through ``TuneReportCallback`` (a TorchTrainer handed straight to a
    Tuner fails under Ray Train's new engine).

    ``config`` holds what varies (arm, sample, replicate); ``spec`` what does not (``with_parameters``).
    """
    import ray.tune
    from ray.tune.integration.ray_train import TuneReportCallback

    recorded = spec.recorded.get((config["arm"], config["sample"], config["replicate"]))
    if recorded is not None:
        # Tested before the sweep's storage was lost: its record stands for it (results.with_records),
        # and the scheduler gets the metric it ranks by.
        ray.tune.report({M.EPOCH: spec.centre.train.epochs, M.VAL_VALUE_ACC: recorded.val_value_acc})
        return

    cfg = Config.from_flat(spec.trial_flat(config["arm"], config["sample"], config["replicate"]))
    with trial_slot(spec):
        # The test split is left to the sweep, which evaluates each arm's chosen configuration once.
        # A worker's failure fails the run and so the trial, which Tune retries (max_failures), each
        # time resuming the run from its last checkpoint: retried at both levels, a failure that
        # repeats would run (max_failures + 1)^2 times.
        launch.fit(cfg, spec.shards[cfg.data.fold], name=ray.tune.get_context().get_trial_name(),
                   storage=spec.train_storage, workers=spec.workers, cpus_per_worker=spec.cpus_per_worker,
                   gpus_per_worker=spec.gpus_per_worker or None, keep=1, max_failures=0,
                   callbacks=[TuneReportCallback()], group=spec.name, wandb_dir=spec.wandb_dir,
                   evaluate_test=False)


SLOT_LEASE_S = 60.0  # a slot whose trial has not renewed it for this long is free again


class TrialSlots:
    """An experiment's slots: at most ``slots`` trials train at once, however many Tune starts.

    Tune's ``max_concurrent_trials`` caps only the trials it creates: a restored experiment starts
    every unfinished trial at once (those that were running, and the errored ones it resumes).
    Trials beyond what the cluster fits take the CPUs that Ray Data's reads need, and then no trial
    trains, with no error. A trial holds its slot through its retries (slots are keyed by trial
    id) and gives it back when it ends; one whose actor died without giving it back loses it
    when its lease runs out. One named Ray actor per experiment (``slots_actor``).
    """

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.leases: dict[str, float] = {}  # trial id → when its lease runs out

    def take(self, trial_id: str) -> bool:
        """Whether ``trial_id`` holds a slot now (renewing its lease when it held one already)."""
        now = time.monotonic()
        self.leases = {t: end for t, end in self.leases.items() if end > now}
        if trial_id not in self.leases and len(self.leases) >= self.slots:
            return False
        self.leases[trial_id] = now + SLOT_LEASE_S
        return True

    def give_back(self, trial_id: str) -> None:
        self.leases.pop(trial_id, None)


def slots_name(spec: SweepSpec) -> str:
    return f"hlgt-trial-slots:{spec.root}"


def slots_actor(spec: SweepSpec, slots: int):
    """The ``TrialSlots`` actor of the experiment that is running."""
    import ray

    return ray.remote(num_cpus=0)(TrialSlots).options(name=slots_name(spec), get_if_exists=True).remote(slots)


@contextmanager
def trial_slot(spec: SweepSpec, wait_s: float = 5.0):
    """Inside a Tune trial: wait for one of the sweep's slots, keep its lease while the body runs,
    give it back after."""
    import ray
    import ray.tune

    slots, trial_id = ray.get_actor(slots_name(spec)), ray.tune.get_context().get_trial_id()
    while not ray.get(slots.take.remote(trial_id)):
        time.sleep(wait_s)
    done = threading.Event()

    def renew():
        while not done.wait(SLOT_LEASE_S / 3):
            ray.get(slots.take.remote(trial_id))

    renewing = threading.Thread(target=renew, daemon=True)
    renewing.start()
    try:
        yield
    finally:
        done.set()
        renewing.join()
        ray.get(slots.give_back.remote(trial_id))


def trial_name(t) -> str:
    """W&B runs and folders named by arm and trial (``hlgt.sweep.spec.trial_folder``)."""
    return trial_folder(t.config["arm"], t.config["sample"], t.config["replicate"], t.trial_id)


# Packing trials on one GPU: memory kept free, and what one process holds beyond the caching
# allocator's reserve (its CUDA context, cuBLAS and cuDNN workspaces), which the probe's step does
# not see: a training process holds about 1 GiB more than the probe's peak (BENCHMARKS.md).
GPU_MEMORY_MARGIN = 0.2
CUDA_CONTEXT_BYTES = 2**30


def trials_per_gpu(total_bytes: int, trial_peak_bytes: int) -> int:
    """How many training processes share one GPU: as many as fit in its memory less the margin,
    each with its CUDA context; at least 1."""
    usable = total_bytes * (1 - GPU_MEMORY_MARGIN)
    return max(1, int(usable // (trial_peak_bytes + CUDA_CONTEXT_BYTES)))


def gpu_share(n: int) -> float:
    """The share of a GPU that packs ``n`` processes on it in Ray, which counts a resource in units
    of 1e-4 rounded to the nearest (``ray_units``): 1 / 7 would be 0.1429, seven of which overfill
    the GPU."""
    if not 1 <= n <= 10_000:
        raise ValueError(f"a GPU shared by {n} processes: Ray holds 1 to 10,000 on one")
    return math.floor(1e4 / n) / 1e4


def ray_units(amount: float) -> int:
    """A resource amount as Ray counts it: units of 1e-4, rounded to the nearest."""
    return int(amount * 1e4 + 0.5)


def probe_gpu_memory(spec: SweepSpec) -> tuple[int, int]:
    """(the largest peak GPU memory the caching allocator reserved for a trial's training steps
    over the spec's arms (``probe_steps``); the GPU's total memory). Runs on a GPU worker."""
    shards = next(iter(spec.shards.values()))
    vocab = load_vocab(shards)
    cfgs = [Config.from_flat(spec.trial_flat(arm, spec.arm_samples(arm)[0], 0)) for arm in spec.arms]
    rows = [r for r in load_rows(shards, "train") if r["prefix"] is not None]
    peak = 0
    for cfg in cfgs:
        torch.cuda.reset_peak_memory_stats()
        probe_steps(cfg, vocab, rows, torch.device("cuda"))
        peak = max(peak, torch.cuda.max_memory_reserved())
        torch.cuda.empty_cache()
    return peak, torch.cuda.get_device_properties(0).total_memory


def probe_steps(cfg: Config, vocab, rows: list[dict], device) -> int:
    """Training steps as a trial of ``cfg`` runs them, for their memory: one on the batch of the
    longest problems; with ``train.cuda_graphs``, also one per shape learned from a shuffle of
    ``rows``, each captured, since every captured graph keeps its own memory. -> how many shapes
    it ran a step of."""
    solver = Solver(cfg.model, vocab).to(device)
    opt, _ = make_optimizer(cfg, solver)
    longest = sorted(rows, key=lambda r: -len(r["tokens"]))[: cfg.train.batch_size]
    train_step(solver, opt, solver.plan(collate(longest, vocab, variant=cfg.data.graph)).to(device))
    if not cfg.train.cuda_graphs:
        return 0
    steps = GraphedSteps(solver, cfg.train.capture_bigrus)
    batches = list(epoch_batches(encode(rows, vocab), vocab, cfg, epoch=1))
    steps.learn(batches)
    captured = set()
    for batch in batches:  # every shape learned fits some full batch of these
        if len(captured) == len(steps.buckets):
            break
        planned = steps.plan(batch)
        if planned.plan.shape is not None and planned.plan.shape not in captured:
            captured.add(planned.plan.shape)
            train_step(steps.forward, opt, planned.to(device))
    return len(captured)


def resolve_gpus(spec: SweepSpec) -> None:
    """``--gpus-per-worker`` not given: CPUs on a cluster without GPUs; on one with GPUs, the share
    of a GPU that packs ``trials_per_gpu`` trials on it, from each arm's probe steps (``probe_steps``)."""
    import ray

    if spec.gpus_per_worker is not None:
        return
    if ray.cluster_resources().get("GPU", 0.0) < 1:
        spec.gpus_per_worker = 0.0
        return
    peak, total = ray.get(ray.remote(num_gpus=1)(probe_gpu_memory).remote(spec))
    n = trials_per_gpu(total, peak)  # training processes per GPU: a trial's workers count one each
    spec.gpus_per_worker = gpu_share(n)
    spec.base = {**spec.base, "train.use_gpu": True}
    print(f"[sweep] one training process peaks at {peak / 2**30:.2f} GiB of a GPU's {total / 2**30:.1f} GiB: "
          f"{n} per GPU ({spec.gpus_per_worker:g} GPU per worker)", flush=True)


def concurrency(spec: SweepSpec) -> int:
    """Trials that fit the cluster at once, one CPU left free for Ray Data's read tasks; or
    ``--max-concurrent``, which may ask for more than the cluster holds now (an autoscaler adds
    nodes for the pending trials: the way to grow a cluster), with a note when it does."""
    import ray

    res = ray.cluster_resources()
    fit = trials_that_fit(spec, res)
    if spec.max_concurrent > 0:
        if spec.max_concurrent > fit:
            print(f"[sweep] --max-concurrent {spec.max_concurrent}: this cluster fits {fit} trial(s) now; the others "
                  f"wait for nodes from an autoscaler. Without one, lower it: trials beyond what fits hold the CPUs "
                  f"that Ray Data's reads need, and the running trials stall", flush=True)
        return spec.max_concurrent
    launch.worker_cpus(spec.workers, spec.cpus_per_worker)  # raises when even one trial would starve Ray Data
    if fit < 1 and spec.gpus_per_worker > 0:
        raise ValueError(f"the cluster has {res.get('GPU', 0):g} GPUs; a trial needs "
                           f"{spec.workers * spec.gpus_per_worker:g}")
    return max(fit, 1)


def trials_that_fit(spec: SweepSpec, res: dict) -> int:
    """Trials that the cluster resources ``res`` hold at once, one CPU left free for Ray Data."""
    fit = int((res.get("CPU", 0.0) - 1.0 + 1e-9) // (spec.workers * spec.cpus_per_worker))
    if spec.gpus_per_worker > 0:  # in Ray's units, as it places them (1.0 // 0.2 is 4.0 in floats)
        fit = min(fit, ray_units(res.get("GPU", 0.0)) // (spec.workers * ray_units(spec.gpus_per_worker)))
    return max(fit, 0)


def epoch_lines(validated: bool):
    """A Tune callback printing one line per trial per epoch (with its validation score on the epochs
    that validated, when trials hold out validation), one when a trial ends, and the error of a
    failed one, retried or not: the sweep's console unless ``--verbose`` (then Tune's and the
    workers' own)."""
    from ray.tune import Callback

    class EpochLines(Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            if M.EPOCH not in result or M.TRAIN_LOSS not in result:  # the final report repeats the last epoch
                return
            val = f" | val value {M.percent(result[M.VAL_VALUE_ACC])}%" if validated and M.validated(result) else ""
            print(f"[sweep] {trial} epoch {result[M.EPOCH]} | loss {result.get(M.TRAIN_LOSS, float('nan')):.4f}{val} | "
                  f"{result.get(M.TRAIN_PROBLEMS_PER_S, float('nan')):.1f} problems/s", flush=True)

        def on_trial_complete(self, iteration, trials, trial, **info):
            print(f"[sweep] {trial} finished", flush=True)

        def on_trial_recover(self, iteration, trials, trial, **info):
            of = f" of {trial.max_failures}" if trial.max_failures >= 0 else ""  # below 0: no limit
            print(f"[sweep] {trial} failed ({last_error(trial)}); retry {trial.num_failures}{of}, from its last "
                  "checkpoint", flush=True)

        def on_trial_error(self, iteration, trials, trial, **info):
            print(f"[sweep] {trial} FAILED: {last_error(trial)} ({trial.error_file or 'see Ray logs'}; --verbose "
                  "shows the workers' output)", flush=True)

    return EpochLines()


def last_error(trial) -> str:
    """The last line of a failed trial's error. The error file is on this machine now; Tune's
    get_error reads the copy in the storage, which is written later."""
    where = trial.error_file
    lines = Path(where).read_text(encoding="utf-8").split("\n") if where and Path(where).is_file() else []
    return next((line.strip() for line in reversed(lines) if line.strip()), "?")


def run_experiment(spec: SweepSpec, name: str, arms: list[str]):
    """One Tune experiment for ``arms`` (restored when it exists); returns its ResultGrid."""
    import ray
    import ray.tune

    from hlgt.sweep.schedulers import by_replicate

    path = f"{spec.root}/{name}"
    # The trial function only waits on its TorchTrainer, whose workers hold the CPUs (GPUs). It asks
    # for memory, not CPU: a fraction of a CPU would leave Ray Data's 1-CPU read tasks unschedulable.
    trainable = ray.tune.with_resources(ray.tune.with_parameters(trial, spec=spec), {"CPU": 0, "memory": 64 * 1024**2})
    # At most this many trials at once: Tune creates no more, and the slots hold the trials of a
    # restored experiment to it too.
    at_once = concurrency(spec)
    if ray.tune.Tuner.can_restore(path):
        print(f"[sweep] {name}: resuming {path}", flush=True)
        tuner = ray.tune.Tuner.restore(path, trainable=trainable, resume_errored=True)
        kept = restored_limits(tuner, at_once, spec.max_failures)
        if kept:
            print(f"[sweep] {name}: Tune resumes with what the experiment started with: {kept} (--fresh starts "
                  "it over with this run's)", flush=True)
    else:
        tuner = ray.tune.Tuner(
            trainable,
            # Tune's grid varies its keys in sorted order, the first fastest: each replicate's trials of
            # every arm before the next replicate's, so that a table stopped early pairs the arms on
            # the same folds.
            param_space={"arm": ray.tune.grid_search(arms),
                         "sample": ray.tune.grid_search(spec.arm_samples(arms[0])),
                         "replicate": ray.tune.grid_search(list(range(len(spec.replicates))))},
            # Without validation there is no metric to rank by: every trial runs to its last epoch (fifo).
            tune_config=ray.tune.TuneConfig(metric=M.VAL_VALUE_ACC if spec.validated else None,
                                            mode="max" if spec.validated else None,
                                            scheduler=by_replicate(spec.scheduler, spec.centre.train.epochs),
                                            max_concurrent_trials=at_once, trial_name_creator=trial_name,
                                            trial_dirname_creator=trial_name),
            # A trial whose actor dies (a node lost, a worker killed while Ray clears a finished trial's)
            # starts again at once, and its Ray Train run resumes from its last checkpoint.
            run_config=ray.tune.RunConfig(name=name, storage_path=spec.root, verbose=2 if spec.verbose else 0,
                                          failure_config=ray.tune.FailureConfig(max_failures=spec.max_failures),
                                          callbacks=[] if spec.verbose else [epoch_lines(spec.validated)]),
        )
    slots = slots_actor(spec, at_once)
    try:
        return fit_unless_interrupted(tuner, name)
    finally:
        ray.kill(slots)


def restored_limits(tuner, at_once: int, max_failures: int) -> str:
    """Where a restored experiment keeps its first start's settings against this run's: Tune
    restores its TuneConfig and RunConfig from the experiment's folder (each trial keeps its
    failure limit too), so a new ``--max-failures``, more trials at once (fewer: this run's trial
    slots hold them) or the per-replicate scheduler do not reach it. "" when nothing differs."""
    from ray.tune.schedulers import FIFOScheduler

    from hlgt.sweep.schedulers import ByReplicate

    internal = getattr(tuner, "_local_tuner", None)  # Tune's own copy; no public reader
    tune_config = getattr(internal, "_tune_config", None)
    restored_at_once = getattr(tune_config, "max_concurrent_trials", None)
    restored_failures = getattr(getattr(getattr(internal, "_run_config", None), "failure_config", None),
                                "max_failures", None)
    scheduler = getattr(tune_config, "scheduler", None)
    kept = []
    if restored_at_once is not None and restored_at_once < at_once:
        kept.append(f"at most {restored_at_once} trial(s) at once (this run: {at_once})")
    if restored_failures is not None and restored_failures != max_failures:
        kept.append(f"--max-failures {restored_failures} (this run: {max_failures})")
    if scheduler is not None and type(scheduler) not in (ByReplicate, FIFOScheduler):
        kept.append(f"one {type(scheduler).__name__} over every replicate (a sweep started before schedulers "
                    "ran per replicate)")
    return "; ".join(kept)


def fit_unless_interrupted(tuner, name: str):
    """``tuner.fit()``'s ResultGrid, or ``KeyboardInterrupt`` when Ctrl-C stopped it. Tune catches
    the signal, saves its state and returns as if done (its stopped trials read as terminated);
    its handler puts back the one it replaced, so finding ours back in place means a signal came."""

    def ours(sig, frame):  # a second Ctrl-C, once Tune has let go of the signal
        signal.default_int_handler(sig, frame)

    previous = signal.signal(signal.SIGINT, ours)
    try:
        grid = tuner.fit()
    finally:
        interrupted = signal.getsignal(signal.SIGINT) is ours
        signal.signal(signal.SIGINT, previous)
    if interrupted:
        raise KeyboardInterrupt(f"sweep interrupted in experiment {name}; re-run the same command to resume it")
    return grid


def announce(spec: SweepSpec) -> None:
    """The sweep's shape on the console: arms, configurations, replicates, where results go."""
    print(f"[sweep] {spec.name}: arms {', '.join(spec.arms)}; {len(spec.samples)} configuration(s) × "
          f"{len(spec.replicates)} replicate(s) per arm; scheduler {spec.scheduler}; results in {spec.root}",
          flush=True)
    for i, s in enumerate(spec.samples):
        print(f"[sweep]   configuration {i}: {describe(s)}", flush=True)
    for arm in spec.arms:
        kept = spec.arm_samples(arm)
        if len(kept) < len(spec.samples):
            print(f"[sweep]   {arm}: configuration(s) {kept} only (the others differ in settings {arm} does not read)",
                  flush=True)


def run(spec: SweepSpec, address: str | None = None) -> list[dict]:
    """The whole sweep: every arm's experiment, then selection, test evaluation, table, chart and
    W&B summary; returns the table's rows."""
    start_ray(address, console=spec.verbose)
    resolve_gpus(spec)
    if not spec.verbose:
        os.environ["RAY_AIR_NEW_OUTPUT"] = "0"  # with verbose=0, Tune's legacy reporter prints nothing at all
    started = time.perf_counter()
    announce(spec)
    notes: list[str] = []
    spec.recorded = results.recorded_trials(spec, notes)
    for note in notes:
        print(f"[sweep] {note}", flush=True)
    if spec.recorded:
        print(f"[sweep] {len(spec.recorded)} trial(s) recorded as tested in {spec.so_far_dir / 'best'}: not trained "
              "again", flush=True)
    trials = {}
    for name, arms in experiments(spec).items():
        grid = run_experiment(spec, name, arms)
        trials.update({arm: results.with_records(spec, results.outcomes(spec, arm, [r for r in grid
                                                                               if r.config["arm"] == arm]))
                       for arm in arms})
    rows, paper_tables, paths = results.summarise(spec, trials)
    chosen = ("selection on validation, test evaluated once per arm's best configuration" if spec.validated
              else "no validation: each arm's one configuration, every replicate's last epoch tested")
    print(f"\n[sweep] done in {time.perf_counter() - started:.0f} s; {chosen}\n", flush=True)
    print(results.results_markdown(rows, spec.replicate_kind), flush=True)
    print(paper_tables, flush=True)
    print(results.best_models_markdown(rows), flush=True)
    print(f"[sweep] wrote {', '.join(str(p) for p in paths.values())}", flush=True)
    for r in rows:
        if r["failed"] or r["without_model"] or not r["runs"]:
            print(f"[sweep] {r['arm']}: {r['failed']} of {r['trials']} trial(s) failed, {r['without_model']} left "
                  "no model to choose" + ("; no trial finished, so the arm has no scores" if not r["runs"] else ""),
                  flush=True)
        if r["stopped_early"]:
            print(f"[sweep] {r['arm']}: {r['stopped_early']} of its {r['runs']} chosen {spec.replicate_kind} stopped "
                  "before their last epoch (the scheduler, or a time budget) and were tested as they were: their "
                  "epochs are in results.csv", flush=True)
    return rows
