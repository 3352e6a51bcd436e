"""One training step, as the trainer, the benchmark and the sweep's memory probe all take it, and
what it needs: seeding, the optimizer and its schedule, an epoch's batch order and its batches
planned (ahead of the steps on a GPU), the epoch's statistics gathered on the device."""
from __future__ import annotations

import queue
import random
import threading
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np
import torch
from torch import nn
from torch.profiler import record_function

from hlgt import metrics as M
from hlgt.config import Config
from hlgt.data.collate import iter_batches

OPTIMIZER_STEP = "hlgt::optimizer_step"  # the optimizer's part of a step, labelled for torch.profiler (bench)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def make_optimizer(cfg: Config, model: nn.Module):
    """Adam and its step schedule for a model already on its device. Fused: one operator updates
    every parameter (CPU and CUDA alike), where the per-parameter loop dispatches several per parameter."""
    opt = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay, fused=True)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=max(cfg.train.lr_step, 1), gamma=cfg.train.lr_gamma)
    return opt, sched


class EpochStats:
    """One epoch's training statistics, accumulated on the device without a host synchronisation
    per step: problem-weighted losses, each model part's and the whole model's largest gradient
    norm, and the mean of each activation scale (``Solver.forward``'s ``scales``)."""

    def __init__(self, parts: Mapping[str, list[nn.Parameter]], device: torch.device) -> None:
        self.parts = parts
        self.losses = torch.zeros(4, dtype=torch.float64, device=device)  # loss, tree, com, problems
        self.norm_max = torch.zeros(1 + len(parts), device=device)       # whole model, then each part
        self.params = [p for ps in parts.values() for p in ps]
        self.part_of = torch.tensor([i for i, ps in enumerate(parts.values()) for _ in ps],
                                    dtype=torch.long, device=device)     # [params] each one's part
        self.scales: dict[str, torch.Tensor] = {}
        self.batches = 0

    def step(self, out: Mapping[str, Any], n: int) -> torch.Tensor:
        """Record one batch after its backward pass; returns the gradient's global norm."""
        self.losses += torch.stack([out["loss"].detach(), out["tree_loss"].detach(), out["com_loss"].detach(),
                                    torch.ones_like(out["loss"])]).double() * n
        for name, value in out["scales"].items():
            self.scales[name] = self.scales.get(name, 0) + value
        self.batches += 1
        # Every parameter's norm in one multi-tensor kernel (as clip_grad_norm_ takes them), then
        # summed by part: a few operators per step instead of a dozen per part.
        grads = [p.grad for p in self.params]
        given = [g for g in grads if g is not None]
        found, zero = iter(torch._foreach_norm(given) if given else ()), self.norm_max.new_zeros(())
        norms = torch.stack([next(found) if g is not None else zero for g in grads])  # [params]
        part_sq = self.norm_max.new_zeros(len(self.parts)).index_add_(
            0, self.part_of, norms.square().to(self.norm_max.dtype))             # [parts]
        total = part_sq.sum().sqrt()
        self.norm_max = torch.maximum(self.norm_max, torch.cat([total[None], part_sq.sqrt()]))
        return total

    def sums(self) -> torch.Tensor:
        """[loss, tree, com] summed over problems, the number of problems, then the number of
        batches and each activation's scale summed over them (in ``sorted(self.scales)`` order):
        float64, CPU, to be summed over workers."""
        totals = [float(self.scales[name]) for name in sorted(self.scales)]
        return torch.cat([self.losses.cpu(), torch.tensor([float(self.batches), *totals], dtype=torch.float64)])

    def norms(self) -> dict[str, float]:
        """The largest gradient norms: the whole model's, each part's (equal on every worker:
        the gradients are all-reduced)."""
        norm_max = self.norm_max.tolist()
        return {M.TRAIN_GRAD_NORM_MAX: norm_max[0],
                **{M.grad_norm_metric(p): v for p, v in zip(self.parts, norm_max[1:])}}

    def scale_means(self, sums: torch.Tensor) -> dict[str, float]:
        """Each activation's mean scale from ``sums`` (``sums()``, summed over workers)."""
        batches = max(float(sums[4]), 1.0)
        return {M.scale_metric(name): float(total) / batches for name, total in zip(sorted(self.scales), sums[5:])}


def train_step(forward: Callable, opt: torch.optim.Optimizer, batch, stats: EpochStats | None = None,
               grad_clip: float = 0.0, params: Iterable[nn.Parameter] = ()) -> torch.Tensor:
    """One training step, as the trainer, the benchmark and the sweep's memory probe all take it:
    ``forward`` (the solver, its data-parallel wrapper or ``GraphedSteps.forward``) on a planned
    batch on its device, backward, the gradient-norm bookkeeping (``stats``), clipping the global
    norm of ``params`` to ``grad_clip`` (> 0), the optimizer's step. -> the loss, detached (not
    read back)."""
    out = forward(batch)
    opt.zero_grad(set_to_none=True)
    out["loss"].backward()
    # Norms are taken after data parallelism's all-reduce, so every rank clips alike.
    norm = stats.step(out, len(batch)) if stats is not None else None
    if grad_clip > 0:
        if norm is None:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        else:
            torch.nn.utils.clip_grads_with_norm_(params, grad_clip, norm)
    with record_function(OPTIMIZER_STEP):
        opt.step()
    return out["loss"].detach()


def epoch_batches(rows: list[dict], vocab, cfg: Config, epoch: int) -> Iterable:
    """Epoch ``epoch``'s training batches of ``encode``d ``rows``: a shuffle seeded by the run's
    seed and the epoch, so that a resumed run draws the batches it would have drawn."""
    return iter_batches(rows, vocab, cfg.train.batch_size, shuffle=True, seed=cfg.train.seed * 100_003 + epoch,
                        variant=cfg.data.graph)


# Batches planned before the step that takes them, on a GPU (``planned``): enough to cover one
# slow batch, few enough that a stopped epoch leaves little planned for nothing.
AHEAD = 2


def planned(batches: Iterable, plan: Callable, device: torch.device) -> Iterator:
    """``plan(batch)`` for each of ``batches``, in order. On a GPU a thread collates and plans up to
    ``AHEAD`` batches before the step that takes them: that is Python on the host, which inline
    would run between two steps' launches while the GPU's queue drains; a step's own host calls
    (the autograd engine, cuDNN, kernel launches) release the GIL, and the thread's work fits
    beside them. On the CPU the thread would only take a core from the step: planned inline.
    ``plan`` runs on the CPU alone, so the thread makes no CUDA call that could break a graph being
    captured meanwhile."""
    if device.type != "cuda":
        return map(plan, batches)
    return _ahead(map(plan, batches))


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


_END = object()


def _ahead(items: Iterator) -> Iterator:
    """``items`` computed by a thread, ``AHEAD`` at most waiting; its error is raised here, and a
    consumer that stops early stops the thread."""
    waiting: queue.Queue = queue.Queue(maxsize=AHEAD)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                waiting.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def work() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_END)
        except BaseException as e:  # re-raised in the consumer's thread
            put(_Failed(e))

    thread = threading.Thread(target=work, name="hlgt-plan-ahead", daemon=True)
    thread.start()
    try:
        while (item := waiting.get()) is not _END:
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join()
