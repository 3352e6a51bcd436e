"""The Tune schedulers of a sweep's experiments: which trials stop before their last epoch.

ASHA or the median rule compare a trial's validation with other trials' at the same epoch. The
trials of one experiment are an arm's configurations on every replicate (fold, seed), and a
replicate's scores differ from another's by the fold's difficulty and the seed's luck: so each
replicate gets a scheduler of its own (``ByReplicate``), and a configuration is stopped for doing
worse than the others on its own fold and seed only. The median rule compares a trial with at
least 3 others (Tune's default): with 3 configurations or fewer per arm it stops none. Imported
when a sweep starts (it imports Ray Tune).
"""
from __future__ import annotations

from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule

from hlgt import metrics as M
from hlgt.sweep.spec import SCHEDULERS


def scheduler(kind: str, epochs: int):
    """One Tune scheduler over trials that compete: asha, median or fifo (none)."""
    if kind == "asha":
        # max_t one past the last epoch: ASHA stops a trial that reaches max_t, and the last epoch
        # must not be cut short (the trial still has its final report to make).
        return ASHAScheduler(time_attr=M.EPOCH, max_t=max(epochs, 1) + 1, grace_period=max(1, epochs // 4),
                             reduction_factor=3)
    if kind == "median":
        return MedianStoppingRule(time_attr=M.EPOCH, grace_period=max(1, epochs // 4))
    if kind == "fifo":
        return FIFOScheduler()
    raise ValueError(f"unknown scheduler {kind!r}; choose {', '.join(SCHEDULERS)}")


def by_replicate(kind: str, epochs: int):
    """An experiment's scheduler: fifo, or a ``scheduler(kind, epochs)`` per replicate."""
    scheduler(kind, epochs)  # an unknown kind fails here, before any trial
    return FIFOScheduler() if kind == "fifo" else ByReplicate(kind, epochs)


class ByReplicate(FIFOScheduler):
    """``scheduler(kind, epochs)`` for each replicate (``trial.config["replicate"]``), made at its
    first trial; trials run in Tune's order (FIFO's choice), each stopped by its replicate's."""

    def __init__(self, kind: str, epochs: int):
        super().__init__()
        self.kind, self.epochs = kind, epochs
        self._mode = None
        self._by: dict[int, FIFOScheduler] = {}

    def set_search_properties(self, metric, mode, **spec) -> bool:
        self._metric, self._mode = metric or self._metric, mode or self._mode
        return all(s.set_search_properties(metric, mode, **spec) for s in self._by.values())

    def _of(self, trial):
        replicate = trial.config["replicate"]
        if replicate not in self._by:
            self._by[replicate] = scheduler(self.kind, self.epochs)
            self._by[replicate].set_search_properties(self._metric, self._mode)
        return self._by[replicate]

    def on_trial_add(self, tune_controller, trial):
        self._of(trial).on_trial_add(tune_controller, trial)

    def on_trial_error(self, tune_controller, trial):
        self._of(trial).on_trial_error(tune_controller, trial)

    def on_trial_result(self, tune_controller, trial, result):
        return self._of(trial).on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller, trial, result):
        self._of(trial).on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller, trial):
        self._of(trial).on_trial_remove(tune_controller, trial)

    def debug_string(self) -> str:
        return "; ".join(f"replicate {r}: {s.debug_string()}" for r, s in sorted(self._by.items()))
