"""Measurements of a training step and of decoding, for the benchmark command (``hlgt-bench``,
``hlgt.commands.bench``, whose docstring says what each mode prints).

``measure``: training problems/s over a pass of batches (the first a warm-up) and beam-search
decoding problems/s, as training and evaluation run them (on a GPU the batches planned ahead by a
thread, as training plans them; ``train.cuda_graphs``: the step as training replays it, its shapes
learned and captured first; ``train.compile``: every measured batch run once before).
``profile_steps``: the aten operators and host synchronisation points per training step
(``SYNC_OPS``), the CPU BiGRUs' operators apart (on a GPU cuDNN's fused GRU replaces them).
``time_steps``: wall time per step against the GPU's kernel time, under torch.profiler, the step
as training runs it (``train.cuda_graphs``: replayed).
``replay_steps``: one batch's step eager, then captured as a CUDA graph and replayed (GPU only).
``recurrence_steps``: the encoder's BiGRUs alone, eager over each batch's packing, and captured
over it or as causal passes over padded lengths (``hlgt.model.gru.Reversal``; GPU only).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

import torch
from torch import nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from hlgt.config import Config
from hlgt.data.collate import encode, iter_batches
from hlgt.inference import predict
from hlgt.model.gru import CPU_GRU, Packing, Reversal
from hlgt.model.solver import Solver
from hlgt.train.cuda_graphs import GraphedSteps
from hlgt.train.step import OPTIMIZER_STEP, EpochStats, make_optimizer, planned, train_step


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def sync_place(stack: list[traceback.FrameSummary]) -> str:
    """Where a host sync was made, from the stack at its warning: the innermost frame of this
    package (the model's line, or the training step's ``backward()`` for a sync in the backward)
    and, when another file's frame is deeper, that one too (the library that synchronised)."""
    frames = [f for f in stack if not f.filename.endswith(f"{os.sep}warnings.py")]
    ours = [f for f in frames if f"{os.sep}hlgt{os.sep}" in f.filename]

    def place(f: traceback.FrameSummary) -> str:
        return f"{Path(f.filename).name}:{f.lineno}"

    where = place(ours[-1]) if ours else "?"
    return where if not frames or (ours and frames[-1] is ours[-1]) else f"{where} ({place(frames[-1])})"


@contextlib.contextmanager
def recorded_syncs(places: list[str]):
    """Append to ``places`` the place (``sync_place``) of each synchronisation warning raised in
    the block (torch.cuda's sync debug mode raises one at each host sync)."""
    shown = warnings.showwarning

    def record(message, category, filename, lineno, file=None, line=None):
        if "synchronizing" in str(message):
            places.append(sync_place(traceback.extract_stack()[:-1]))
        else:
            shown(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        yield


@contextlib.contextmanager
def _syncs_counted(device: torch.device, places: list[str]):
    """On a GPU, append to ``places`` where each host synchronisation of the block is made;
    elsewhere nothing is counted."""
    if device.type != "cuda":
        yield
        return
    with recorded_syncs(places):
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")


def measure(cfg: Config, rows: list[dict], decode_rows: list[dict], vocab, device: torch.device,
            bf16: bool = False) -> dict:
    """Training problems/s over ``rows``, then decoding problems/s over ``decode_rows`` (float32,
    and with ``bf16`` also bfloat16 GRU products, with the number of predictions that differ)."""

    encoded = encode(rows, vocab)  # as training does, once
    solver, opt, batches = _training(cfg, vocab, encoded, device)
    collate_ms = _collate_ms(cfg, vocab, encoded)
    plan, forward, steps, capturing = _as_trained(cfg, solver, opt, batches, device)
    timed_steps = max(len(batches) - 1, 1)
    timed, start, syncs, losses = sum(map(len, batches[1:])), time.perf_counter(), [], []
    for batch in planned(batches[1:], plan, device):  # as training plans them
        with _syncs_counted(device, syncs):
            losses.append(train_step(forward, opt, batch.to(device)) * len(batch))  # weighted as training weighs it
    _sync(device)
    train_s = time.perf_counter() - start
    note = steps.epoch_note() if steps is not None else ""
    start = time.perf_counter()
    for batch in batches[1:]:
        plan(batch)
    plan_ms = 1000 * (time.perf_counter() - start) / timed_steps

    def decode(bf16_inference: bool) -> tuple[float, list[list[str]]]:
        predict(solver, decode_rows[: cfg.train.batch_size], vocab, variant=cfg.data.graph,
                beam_size=cfg.model.beam_size, batch_size=cfg.train.batch_size, device=device,
                bf16_inference=bf16_inference)  # warm-up
        _sync(device)
        start = time.perf_counter()
        out = predict(solver, decode_rows, vocab, variant=cfg.data.graph, beam_size=cfg.model.beam_size,
                      batch_size=cfg.train.batch_size, device=device, bf16_inference=bf16_inference)
        _sync(device)
        return len(decode_rows) / max(time.perf_counter() - start, 1e-9), out

    result = {"train_problems_per_s": timed / max(train_s, 1e-9), "train_problems": timed,
              "train_syncs_per_step": len(syncs) / timed_steps if device.type == "cuda" else None,
              "train_syncs_by_place": {k: v / timed_steps for k, v in Counter(syncs).most_common()},
              "decode_problems": len(decode_rows), "parameters": sum(p.numel() for p in solver.parameters()),
              "note": note, "train_loss": float(torch.stack(losses).sum()) / timed if losses else float("nan"),
              "collate_ms_per_batch": collate_ms, "plan_ms_per_batch": plan_ms,
              **_capture_cost(capturing, train_s * len(batches) / timed_steps)}
    result["decode_problems_per_s"], fp32 = decode(False)
    if bf16:
        result["decode_bf16_problems_per_s"], low = decode(True)
        result["decode_bf16_changed"] = sum(a != b for a, b in zip(fp32, low))
    return result


def _capture_cost(capturing: tuple[float, int] | None, replayed_s: float) -> dict:
    """What capturing the shapes cost: the capturing pass's seconds and captures, and per capture
    that pass's time beyond ``replayed_s`` (the same batches replayed: the timed pass's time,
    scaled). Its planning (inline, where the timed pass plans ahead on a GPU) falls on the captures
    too: the per-capture figure is an upper bound. {} without ``train.cuda_graphs``."""
    if capturing is None:
        return {}
    seconds, captures = capturing
    return {"capture_pass_s": seconds, "captures": captures,
            "capture_s_each": (seconds - replayed_s) / captures if captures else None}


def _training(cfg: Config, vocab, rows: list, device: torch.device) -> tuple:
    """``(solver, optimizer, batches)`` as training builds them (``train.compile``:
    ``Solver.compile_parts``), the model on ``device`` in training mode; ``rows`` as they are
    stored or ``encode``d."""

    torch.manual_seed(cfg.train.seed)
    solver = Solver(cfg.model, vocab).to(device)
    if cfg.train.compile:
        solver.compile_parts()
    opt, _ = make_optimizer(cfg, solver)
    solver.train()
    batches = list(iter_batches(rows, vocab, cfg.train.batch_size, shuffle=True, seed=cfg.train.seed,
                                variant=cfg.data.graph))
    return solver, opt, batches


def _collate_ms(cfg: Config, vocab, encoded: list) -> float:
    """Host milliseconds to collate one batch of ``encode``d rows, as training does between steps
    (the timed pass's batches are collated before it)."""

    start = time.perf_counter()
    n = sum(1 for _ in iter_batches(encoded, vocab, cfg.train.batch_size, shuffle=True, seed=cfg.train.seed,
                                    variant=cfg.data.graph))
    return 1000 * (time.perf_counter() - start) / max(n, 1)


def _training_steps(cfg: Config, vocab, rows: list[dict], device: torch.device, steps: int, option: str) -> tuple:
    """``_training`` with the first ``steps + 1`` batches: a warm-up and the measured steps."""
    solver, opt, batches = _training(cfg, vocab, rows, device)
    if len(batches) < steps + 1:
        raise ValueError(f"{len(batches)} batches: {option} {steps} needs {steps + 1} (raise --limit)")
    return solver, opt, batches[: steps + 1]


def _as_trained(cfg: Config, solver: Solver, opt, batches: list, device: torch.device) -> tuple:
    """``(plan, forward, steps, capturing)``: the training step's planning and forward as training
    runs them, after a warm-up outside the timed pass: ``_warm_up``'s batches; with
    ``train.cuda_graphs``, as training does, the shapes learned from ``batches``, then (after one
    eager step) a pass over them that captures the shapes (``steps``: their ``GraphedSteps``, else
    None; ``capturing``: that pass's seconds and captures, else None)."""
    steps = GraphedSteps(solver, cfg.train.capture_bigrus) if cfg.train.cuda_graphs else None
    plan, forward = (steps.plan, steps.forward) if steps is not None else (solver.plan, solver)
    if steps is not None:
        steps.learn(batches)
        # One eager step first: the one-time set-up (libraries' handles, Adam's state) stays out
        # of the capturing pass's time.
        train_step(solver, opt, solver.plan(batches[0]).to(device))
        _sync(device)
    start = time.perf_counter()
    for batch in (batches if steps is not None else _warm_up(cfg, batches)):
        train_step(forward, opt, plan(batch).to(device))
    _sync(device)
    capturing = None
    if steps is not None:
        capturing = (time.perf_counter() - start, sum(b.graphed is not None for b in steps.buckets.values()))
        steps.epoch_note()
    return plan, forward, steps, capturing


def _warm_up(cfg: Config, batches: list) -> list:
    """The batches to run before measuring: the first (Adam's state, allocator), or with
    ``train.compile`` all of them, so that no compilation falls inside the measurement."""
    return batches if cfg.train.compile else batches[:1]


# On a GPU each of these waits for the device: the value (or the output's size) is needed on the host.
SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::_unique2", "aten::unique_consecutive",
            "aten::unique_dim", "aten::masked_select", "aten::repeat_interleave")


# Operators that launch no kernel: views and metadata, allocations, conversions to what a tensor already is.
NO_KERNEL_OPS = frozenset("aten::" + name for name in (
    "view", "reshape", "_reshape_alias", "_unsafe_view", "view_as", "t", "transpose", "permute", "expand",
    "expand_as", "narrow", "slice", "select", "squeeze", "unsqueeze", "as_strided", "detach", "alias",
    "unbind", "split", "split_with_sizes", "chunk", "unflatten", "flatten", "diagonal", "numpy_T", "lift_fresh",
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_", "to", "contiguous",
    "result_type", "is_nonzero", "_has_compatible_shallow_copy_type", "set_"))


def profile_steps(cfg: Config, rows: list[dict], vocab, steps: int) -> dict:
    """aten operators and host-sync points per training step (see the module docstring)."""


    solver, opt, batches = _training_steps(cfg, vocab, rows, torch.device("cpu"), steps, "--profile")
    stats = EpochStats(solver.parts(), torch.device("cpu"))
    batches = [solver.plan(b) for b in batches]  # as the training loop does, before the step
    for batch in _warm_up(cfg, batches):
        train_step(solver, opt, batch, stats)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches[1:]:
            train_step(solver, opt, batch, stats)
    events = [e for e in prof.events() if e.name.startswith("aten::")]

    def ancestors(e) -> set[str]:
        names, parent = set(), e.cpu_parent
        while parent is not None:
            names.add(parent.name)
            parent = parent.cpu_parent
        return names

    lineage = [ancestors(e) for e in events]  # walked once per event
    nested = [any(a.startswith("aten::") for a in up) for up in lineage]
    # The CPU recurrence is replaced by cuDNN's fused GRU on a GPU: counted apart (both run over the
    # batch's Packing, made ahead by Solver.plan).
    in_gru = [CPU_GRU in up for up in lineage]
    syncs: dict[str, int] = {}
    for e, up, g in zip(events, lineage, in_gru):
        # Adam reads its step counters with .item(), but they live on the CPU: no device wait.
        if not g and e.name in SYNC_OPS and OPTIMIZER_STEP not in up:
            syncs[e.name] = syncs.get(e.name, 0) + 1
    # What would launch a kernel: operators that call no other (leaves), less views, allocations
    # and no-op conversions, outside the CPU BiGRUs; on a GPU a fused optimizer, cuBLAS or a
    # fused dropout may launch more or fewer.
    launches = sum(not g and e.name not in NO_KERNEL_OPS
                   and not any(c.name.startswith("aten::") for c in e.cpu_children)
                   for e, g in zip(events, in_gru))
    return {"ops_per_step": len(events) / steps, "top_level_ops_per_step": nested.count(False) / steps,
            "launching_ops_per_step": launches / steps,
            "cpu_gru_ops_per_step": sum(in_gru) / steps, "other_ops_per_step": in_gru.count(False) / steps,
            "other_top_level_ops_per_step": sum(not g and not n for g, n in zip(in_gru, nested)) / steps,
            "optimizer_ops_per_step": sum(OPTIMIZER_STEP in up for up in lineage) / steps,
            "syncs_per_step": sum(syncs.values()) / steps, "syncs": {k: v / steps for k, v in sorted(syncs.items())}}


def busy_us(ranges: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals: the time a device ran some kernel."""
    busy, reach = 0.0, float("-inf")
    for start, end in sorted(ranges):
        if end > reach:
            busy += end - max(start, reach)
            reach = end
    return busy


def time_steps(cfg: Config, rows: list[dict], vocab, device: torch.device, steps: int) -> dict:
    """Wall time per training step (plan, copy to the device, forward, backward, the gradient-norm
    bookkeeping, Adam) as the training loop runs it (on a GPU the batches planned ahead by a thread;
    ``train.cuda_graphs``: replayed, ``_as_trained``) against the time the GPU ran kernels, over
    ``steps`` steps after a warm-up (torch.profiler, CPU and CUDA activity), with the operators that
    take the most device and host time, and with CUDA graphs how the profiled batches ran. A step
    whose GPU idles most of its wall time is bound by the host. On the CPU, the time in the CPU
    BiGRUs' loop, which a GPU does not run: the rest, at small sizes (``--embedding 8 --hidden
    8``), is the host's own work per step (Python, dispatch, autograd), which a GPU step pays before
    its kernels launch."""


    solver, opt, batches = _training_steps(cfg, vocab, rows, device, steps, "--time-steps")
    plan, forward, graphed, _ = _as_trained(cfg, solver, opt, batches, device)
    stats = EpochStats(solver.parts(), device)
    cuda = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        start = time.perf_counter()
        for batch in planned(batches[1:], plan, device):
            train_step(forward, opt, batch.to(device), stats)
        _sync(device)
        wall = time.perf_counter() - start
    events = prof.events()
    kernels = [e.time_range for e in events if e.device_type == DeviceType.CUDA]
    averages = prof.key_averages()
    tables = {"host": averages.table(sort_by="self_cpu_time_total", row_limit=12)}
    if cuda:
        tables["device"] = averages.table(sort_by="self_device_time_total", row_limit=12)
    # The CPU BiGRUs' loop (forward and backward), which a GPU replaces by cuDNN's fused GRU.
    gru_us = busy_us([(e.time_range.start, e.time_range.end) for e in events if e.name == CPU_GRU])
    return {"wall_ms_per_step": 1000 * wall / steps,
            # None where no kernel was recorded (the CPU, or a profiler without CUDA activity).
            "device_ms_per_step": busy_us([(r.start, r.end) for r in kernels]) / 1000 / steps if kernels else None,
            "cpu_gru_ms_per_step": gru_us / 1000 / steps if not cuda else None,
            "note": graphed.epoch_note() if graphed is not None else "",
            "tables": tables}


def replay_steps(cfg: Config, rows: list[dict], vocab, device: torch.device, steps: int) -> dict:
    """The first batch's training step (forward, backward, Adam) run ``steps`` times eagerly, then
    captured as one CUDA graph and replayed ``steps`` times (both train on that batch over and
    over). A replay runs the step's kernels with no host work between them (no Python, dispatch
    or launches one by one): its time is the floor a step captured as a graph could reach, and
    eager minus replay is what the host adds. -> ms per step of each, and the loss at the last
    step of each (the replays go on training from where the eager steps stopped)."""
    if device.type != "cuda":
        raise ValueError("--replay captures a CUDA graph: it needs a GPU (--device cuda)")
    solver, opt, batches = _training_steps(cfg, vocab, rows, device, 0, "--replay")
    for group in opt.param_groups:
        group["capturable"] = True  # Adam's step counters stay on the GPU, inside the graph
    batch = solver.plan(batches[0]).to(device)

    def step() -> torch.Tensor:
        loss = solver(batch)["loss"]
        loss.backward()
        opt.step()
        return loss.detach()

    def timed(run) -> tuple[float, torch.Tensor]:
        _sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            loss = run()
        _sync(device)
        return 1000 * (time.perf_counter() - start) / steps, loss

    def eager() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        return step()

    _warmed_up(eager, 3, device)
    eager_ms, eager_loss = timed(eager)
    eager_kernels = kernel_profile(eager, steps, device)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)  # the gradients are allocated inside the graph's own memory
    with torch.cuda.graph(graph):
        captured = step()
    replay_ms, _ = timed(graph.replay)
    replay_kernels = kernel_profile(graph.replay, steps, device)
    return {"eager_ms_per_step": eager_ms, "replay_ms_per_step": replay_ms,
            "eager_loss": float(eager_loss), "replay_loss": float(captured),
            "eager_kernels": eager_kernels, "replay_kernels": replay_kernels}


def recurrence_steps(cfg: Config, rows: list[dict], vocab, device: torch.device, steps: int,
                     reps: int = 20) -> dict:
    """The encoder's BiGRUs (the embedding before them, forward and backward) over the first
    ``steps`` training batches that ``train.capture_bigrus`` pads to a shape, each run four ways:
    eagerly over its ``Packing``, as a step runs them (cuDNN launches kernels per time step, and
    the packing differs from batch to batch); the same captured as a CUDA graph for that batch
    alone and replayed ``reps`` times (those kernels' floor); as causal passes (``Reversal``) over
    the shape's padded length, replayed (what ``train.capture_bigrus`` replays for every batch of
    the shape); and the same over the batch's own longest sequence (the floor of finer buckets).
    -> ms per batch of each, the GPU kernels per batch of each replay, the mean padded and own
    lengths, and the largest difference between the causal passes' states and the packed ones
    (dropout off)."""
    if device.type != "cuda":
        raise ValueError("--recurrence captures CUDA graphs: it needs a GPU (--device cuda)")
    solver, _, batches = _training(cfg, vocab, rows, device)
    encoder, (ways, lengths) = solver.encoder, recurrence_ways(solver, batches, steps, device)
    gap = ways_gap(encoder, ways)
    params = [p for name, p in encoder.named_parameters() if name.split(".")[0] in ("embedding", "word_gru", "seq_gru")]

    def recurrence(batch, layout) -> tuple[torch.Tensor, ...]:
        states = encoder.recurrence(batch, layout)
        torch.autograd.grad(sum(s.sum() for s in states), params)
        return states

    for args in ways["packed"]:
        recurrence(*args)  # warm-up: cuDNN's plans, the allocator
    _sync(device)
    start = time.perf_counter()
    for args in ways["packed"]:
        recurrence(*args)
    _sync(device)
    eager_ms = 1000 * (time.perf_counter() - start) / steps
    kernels = kernel_profile(lambda: [recurrence(*args) for args in ways["packed"]], 1, device)["per_step"]
    result = {"eager_ms": eager_ms, "eager_kernels": kernels / steps, "max_state_difference": gap,
              **{name + "_length": sum(n) / steps for name, n in lengths.items()}}
    for name, way in ways.items():
        timed = [_replayed(lambda: recurrence(*args), reps, device) for args in way]
        result[name + "_replay_ms"] = sum(ms for ms, _ in timed) / steps
        result[name + "_replay_kernels"] = sum(k for _, k in timed) / steps
    return result


def recurrence_ways(solver: Solver, batches: list, steps: int, device: torch.device) -> tuple[dict, dict]:
    """The first ``steps`` of ``batches`` that ``train.capture_bigrus`` pads to a shape (the shapes
    learned from ``batches``), each laid out for the BiGRUs three ways, on ``device``: ``packed``
    (its ``Packing``), ``causal_padded`` (the ``Reversal`` over the shape's padded length that the
    capture runs) and ``causal_own`` (its tokens cut to its longest sequence) -> (the ways, each a
    list of ``(batch, layout)``; the padded and own lengths of the batches)."""
    graphed = GraphedSteps(solver, bigrus=True)
    graphed.learn(batches)
    padded = [p for p in map(graphed.plan, batches) if p.plan.shape is not None][:steps]
    if len(padded) < steps:
        raise ValueError(f"{len(padded)} batches fit a learned shape: --recurrence {steps} needs {steps} "
                         "(raise --limit)")
    lengths = {"padded": [p.batch.tokens.size(1) for p in padded], "own": [int(p.batch.lengths.max()) for p in padded]}
    ways = {"packed": [(p.batch.to(device), Packing.of(p.batch.lengths, n).to(device))
                       for p, n in zip(padded, lengths["padded"])],
            "causal_padded": [(p.batch.to(device), p.plan.packing.to(device)) for p in padded],
            "causal_own": [(_tokens_cut(p.batch, n).to(device), Reversal.of(p.batch.lengths, n).to(device))
                           for p, n in zip(padded, lengths["own"])]}
    return ways, lengths


def ways_gap(encoder: nn.Module, ways: dict) -> float:
    """The largest difference between the causal ways' BiGRU states and the packed way's, dropout
    off (the per-token states over the causal way's tokens)."""
    training = encoder.training
    encoder.eval()
    with torch.no_grad():
        gap = max(float((a[:, : b.size(1)] if a.dim() == 3 else a).sub(b).abs().max())
                  for name in ("causal_padded", "causal_own") for packed, causal in zip(ways["packed"], ways[name])
                  for a, b in zip(encoder.recurrence(*packed), encoder.recurrence(*causal)))
    encoder.train(training)
    return gap


def _tokens_cut(batch, length: int):
    """``batch`` with its token rows cut to ``length``, at least its longest: every sequence and
    every node's token kept, so it stays as checked as it was."""
    cut = dataclasses.replace(batch, tokens=batch.tokens[:, :length].contiguous())
    cut.checked = batch.checked
    return cut


def _replayed(run, reps: int, device: torch.device) -> tuple[float, float]:
    """``run()`` captured as a CUDA graph (after two runs on a side stream, as capture wants) and
    replayed ``reps`` times -> (ms per replay, GPU kernels per replay)."""
    _warmed_up(run, 2, device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    _sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        graph.replay()
    _sync(device)
    ms = 1000 * (time.perf_counter() - start) / reps
    return ms, kernel_profile(graph.replay, 1, device)["per_step"]


def _warmed_up(run, times: int, device: torch.device) -> None:
    """``run()`` ``times`` times off the default stream, as a CUDA graph capture wants before it."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(times):
            run()
    torch.cuda.current_stream(device).wait_stream(side)


def kernel_profile(run, steps: int, device: torch.device) -> dict:
    """``run()`` ``steps`` times under torch.profiler's CUDA activity: kernels per step, the time
    the GPU ran some kernel per step, and the kernels that took the most of it (a table)."""

    cuda = [ProfilerActivity.CUDA] if device.type == "cuda" else []
    with profile(activities=[ProfilerActivity.CPU] + cuda) as prof:
        for _ in range(steps):
            run()
        _sync(device)
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    return {"per_step": len(kernels) / steps,
            "busy_ms_per_step": busy_us([(e.time_range.start, e.time_range.end) for e in kernels]) / 1000 / steps,
            "table": prof.key_averages().table(sort_by="self_device_time_total", row_limit=15)}


if __name__ == "__main__":  # python -m hlgt.train.bench: the command hlgt-bench
    from hlgt.commands.bench import run

    run()
