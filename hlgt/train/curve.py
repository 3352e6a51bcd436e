"""The learning-curve diagnostic (the command ``hlgt-curve``, ``hlgt.commands.curve``): ablation arms
trained side by side on the same problems, seed and budget, compared epoch by epoch.

Every arm runs THE training loop (``hlgt.train.loop.train``) on the first ``limit`` training rows
of the shards (the same rows, shuffled the same way, for every arm) and validates after every
epoch on the first ``val_limit`` validation rows; test is never looked at. Arms run in parallel
processes or one after the other (``train_arms``); an arm's result does not depend on which.
``curve_table`` and ``curves_side_by_side`` lay the per-epoch metrics out: validation value
accuracy, tree and comparison loss, the largest gradient norm of the whole model and of each part
(``hlgt.metrics.MODEL_PARTS``) and the activation scales (``hlgt.metrics.ACTIVATIONS``).
"""
from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import torch

from hlgt import metrics as M
from hlgt.config import Config
from hlgt.data.shards import load_rows
from hlgt.train import loop


def progress(arm: str, message: str) -> None:
    """The loop's per-epoch lines (and, with ``train.cuda_graphs``, how the epoch's batches ran),
    tagged with the arm (its final tables are in the run folder)."""
    if message.startswith(("epoch ", "cuda graphs:")):
        print(f"[{arm}] {message}", flush=True)


def curve_rows(shards: str, limit: int, val_limit: int) -> tuple[list[dict], list[dict]]:
    """The rows every arm trains and validates on: the first ``limit`` training rows with a gold
    equation, the first ``val_limit`` validation rows."""
    return ([r for r in load_rows(shards, "train") if r["prefix"] is not None][:limit],
            load_rows(shards, "valid")[:val_limit])


def run_arm(arm: str, cfg: Config, shards: str, limit: int, val_limit: int, run_dir: str, device: str) -> list[dict]:
    """Train one arm (in this process), printing its progress lines, and return its per-epoch metrics."""
    train_rows, valid_rows = curve_rows(shards, limit, val_limit)
    eval_rows = {"train": train_rows, "valid": valid_rows, "test": []}
    runtime = loop.Runtime(device=torch.device(device), eval_rows=eval_rows.__getitem__, log=lambda m: progress(arm, m))
    return loop.train(cfg, shards, run_dir=run_dir, runtime=runtime, evaluate_test=False).history


def _validation(m: dict, key: str) -> str:
    """An epoch's validation figure (%), "–" where the epoch did not validate (``hlgt.metrics.validated``)."""
    return M.percent(m[key]) if M.validated(m) else "–"


def curve_table(histories: dict[str, list[dict]]) -> str:
    """Markdown: one row per epoch and arm."""
    parts = [p for p in M.MODEL_PARTS if any(M.grad_norm_metric(p) in m for h in histories.values() for m in h)]
    acts = [a for a in M.ACTIVATIONS if any(M.scale_metric(a) in m for h in histories.values() for m in h)]
    head = (["epoch", "arm", "val value acc", "val tree loss", "tree loss", "com loss", "grad norm max"]
            + [f"∇ {p}" for p in parts] + [f"std {a}" for a in acts])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    epochs = max(len(h) for h in histories.values())
    for e in range(epochs):
        for arm, history in histories.items():
            if e >= len(history):
                continue
            m = history[e]
            cells = [str(m[M.EPOCH]), arm, _validation(m, M.VAL_VALUE_ACC),
                     f"{m[M.VAL_TREE_LOSS]:.3f}" if M.validated(m) else "–", f"{m[M.TRAIN_TREE_LOSS]:.3f}",
                     f"{m[M.TRAIN_COM_LOSS]:.3f}", f"{m[M.TRAIN_GRAD_NORM_MAX]:.3g}"]
            cells += [f"{m[M.grad_norm_metric(p)]:.3g}" if M.grad_norm_metric(p) in m else "–" for p in parts]
            cells += [f"{m[M.scale_metric(a)]:.3g}" if M.scale_metric(a) in m else "–" for a in acts]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def curves_side_by_side(histories: dict[str, list[dict]]) -> str:
    """Validation value accuracy per epoch, one column per arm."""
    arms = list(histories)
    lines = ["| epoch | " + " | ".join(arms) + " |", "|---|" + "---:|" * len(arms)]
    for e in range(max(len(h) for h in histories.values())):
        cells = [_validation(h[e], M.VAL_VALUE_ACC) if e < len(h) else "–" for h in histories.values()]
        lines.append(f"| {e + 1} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def train_arms(jobs_args: dict[str, tuple], jobs: int) -> dict[str, list[dict]]:
    """Every arm's per-epoch metrics (``run_arm(*jobs_args[arm])``), ``jobs`` arms at a time, each
    in a process of its own (spawned: a fork would share torch's threads), or in this process when
    ``jobs`` is 1."""
    if jobs == 1:
        return {arm: run_arm(*a) for arm, a in jobs_args.items()}
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = {arm: pool.submit(run_arm, *a) for arm, a in jobs_args.items()}
        return {arm: f.result() for arm, f in futures.items()}


if __name__ == "__main__":  # python -m hlgt.train.curve: the command hlgt-curve
    from hlgt.commands.curve import run

    run()
