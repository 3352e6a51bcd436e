"""Benchmark: training and beam-search decoding speed of HLGT against the no-graph GTS arm.

    python -m hlgt.train.bench --dataset mawps --fold 0 --limit 1600
    python -m hlgt.train.bench --dataset math23k --limit 1600 --device cuda --shards datasets/processed/math23k-offline

Both arms in the same process, on the same problems, with the same sizes (batch 64, embedding
128, hidden 512 by default): one timed training pass over the first ``--limit`` training rows
(problems/s; the first batch is a warm-up, not timed), then one timed beam-``--beam-size`` decoding
pass over the next ``--decode-limit`` training rows, problems the model has not trained on, as
the GTS reference's own timing does (topped up from the validation split when the training split
is too small) (problems/s). The timed pass's batches are collated before it, as the reference's
are; the host's time to collate one, which training spends between steps, is printed beside it,
with its time to plan one (``Solver.plan``, with CUDA graphs also padded), a part of each step.
``--bf16`` times a second decoding pass with ``model.bf16_inference`` and counts the problems
whose prediction differs from float32's. Prints a table with each arm's ratio to GTS. A
measurement, not a test.

``--profile N`` instead counts, per training step (forward, backward, Adam step; averaged over N
steps after a warm-up), the aten operators dispatched (all, and the top-level ones the Python code
calls) and the host synchronisation points: operators that, on a GPU, make the CPU wait for the
device (``SYNC_OPS``: reading a value back with ``.item()``/``int()``/``bool()``, ``nonzero``,
``unique``, ``masked_select``, ``repeat_interleave`` without an output size): what the CPU can
count of the launches and waits a GPU step would make. The CPU BiGRUs' operators
(``hlgt.model.gru``) are counted apart: on a GPU cuDNN's fused GRU replaces them. On a GPU the
timed pass itself counts the host syncs (torch.cuda's sync debug mode), including those the CPU
cannot see, and names the line that makes each.

``--time-steps N`` instead times N training steps under torch.profiler: wall time per step against
the time the GPU ran kernels (a step whose GPU idles is bound by the host), and the operators that
take the most host and device time; on the CPU, the host time outside the CPU BiGRUs.

``--replay N`` instead runs one batch's training step N times eagerly, then captures it as a CUDA
graph and replays it N times: the replay's time is the floor a step without host work could
reach (GPU only); with the GPU kernels per step of each and the kernels that take the most time.

``--set train.cuda_graphs=true`` (GPU) times the step as training runs it from its second epoch:
the batches' shapes learned from their plans, an untimed pass captures them
(``hlgt.train.cuda_graphs``).

``--set train.compile=true`` measures the model as training then builds it, its decoder levels
and graph layers compiled (``Solver.compile_parts``); every measured batch is run once before,
so that no compilation is timed or counted.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from hlgt.cli import device, non_negative_int, positive_int, refuse_flag_keys
from hlgt.config import ABLATIONS, Config, ablation_arms, parse_overrides
from hlgt.train.loop import OPTIMIZER_STEP, train_step


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
    from hlgt.data.collate import encode
    from hlgt.inference import predict
    from hlgt.train.cuda_graphs import GraphedSteps

    encoded = encode(rows, vocab)  # as training does, once
    solver, opt, batches = _training(cfg, vocab, encoded, device)
    collate_ms = _collate_ms(cfg, vocab, encoded)
    steps = GraphedSteps(solver) if cfg.train.cuda_graphs else None
    plan, forward = (steps.plan, steps.forward) if steps is not None else (solver.plan, solver)
    # Untimed: _warm_up's batches; with CUDA graphs, as training does, the shapes learned from
    # the batches, then a pass that captures them.
    if steps is not None:
        steps.learn(batches)
    for batch in (batches if steps is not None else _warm_up(cfg, batches)):
        train_step(forward, opt, plan(batch).to(device))
    if steps is not None:
        steps.epoch_note()
    _sync(device)
    timed, start, syncs, losses = 0, time.perf_counter(), [], []
    for batch in batches[1:]:
        with _syncs_counted(device, syncs):
            losses.append(train_step(forward, opt, plan(batch).to(device)))
        timed += len(batch)
    _sync(device)
    train_s = time.perf_counter() - start
    note = steps.epoch_note() if steps is not None else ""
    start = time.perf_counter()
    for batch in batches[1:]:
        plan(batch)
    plan_ms = 1000 * (time.perf_counter() - start) / max(len(batches) - 1, 1)

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

    steps = max(len(batches) - 1, 1)
    result = {"train_problems_per_s": timed / max(train_s, 1e-9), "train_problems": timed,
              "train_syncs_per_step": len(syncs) / steps if device.type == "cuda" else None,
              "train_syncs_by_place": {k: v / steps for k, v in Counter(syncs).most_common()},
              "decode_problems": len(decode_rows), "parameters": sum(p.numel() for p in solver.parameters()),
              "note": note, "train_loss": float(torch.stack(losses).mean()) if losses else float("nan"),
              "collate_ms_per_batch": collate_ms, "plan_ms_per_batch": plan_ms}
    result["decode_problems_per_s"], fp32 = decode(False)
    if bf16:
        result["decode_bf16_problems_per_s"], low = decode(True)
        result["decode_bf16_changed"] = sum(a != b for a, b in zip(fp32, low))
    return result


def _training(cfg: Config, vocab, rows: list, device: torch.device) -> tuple:
    """``(solver, optimizer, batches)`` as training builds them (``train.compile``:
    ``Solver.compile_parts``), the model on ``device`` in training mode; ``rows`` as they are
    stored or ``encode``d."""
    from hlgt.data.collate import iter_batches
    from hlgt.model.solver import Solver
    from hlgt.train.loop import make_optimizer

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
    from hlgt.data.collate import iter_batches

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
    from torch.profiler import ProfilerActivity, profile

    from hlgt.model.gru import CPU_GRU
    from hlgt.train.loop import EpochStats

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
    launches = sum(not g and e.name not in NO_KERNEL_OPS and not any(c.name.startswith("aten::") for c in e.cpu_children)
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
    """Wall time per training step (plan, copy to the device, forward, backward, Adam) against
    the time the GPU ran kernels, over ``steps`` steps after a warm-up (torch.profiler, CPU and
    CUDA activity), with the operators that take the most device and host time. A step whose GPU
    idles most of its wall time is bound by the host. On the CPU, the time in the CPU BiGRUs'
    loop, which a GPU does not run: the rest, at small sizes (``--embedding 8 --hidden 8``), is
    the host's own work per step (Python, dispatch, autograd), which a GPU step pays before its
    kernels launch."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from hlgt.model.gru import CPU_GRU

    solver, opt, batches = _training_steps(cfg, vocab, rows, device, steps, "--time-steps")
    for batch in _warm_up(cfg, batches):
        train_step(solver, opt, solver.plan(batch).to(device))
    _sync(device)
    cuda = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        start = time.perf_counter()
        for batch in batches[1:]:
            train_step(solver, opt, solver.plan(batch).to(device))
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

    side = torch.cuda.Stream(device)  # warm-up off the default stream, as capture requires
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream(device).wait_stream(side)

    def eager() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        return step()

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


def kernel_profile(run, steps: int, device: torch.device) -> dict:
    """``run()`` ``steps`` times under torch.profiler's CUDA activity: kernels per step, the time
    the GPU ran some kernel per step, and the kernels that took the most of it (a table)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = [ProfilerActivity.CUDA] if device.type == "cuda" else []
    with profile(activities=[ProfilerActivity.CPU] + cuda) as prof:
        for _ in range(steps):
            run()
        _sync(device)
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    return {"per_step": len(kernels) / steps,
            "busy_ms_per_step": busy_us([(e.time_range.start, e.time_range.end) for e in kernels]) / 1000 / steps,
            "table": prof.key_averages().table(sort_by="self_device_time_total", row_limit=15)}


# The config keys this command's flags set: ``--set`` may not name them.
FLAG_KEYS = {"data.dataset": "--dataset", "data.fold": "--fold", "data.data_dir": "--data-dir",
             "train.batch_size": "--batch-size", "model.embedding_size": "--embedding", "model.hidden_size": "--hidden",
             "model.beam_size": "--beam-size"}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hlgt.train.bench", description=__doc__.split("\n\n")[0],
                                allow_abbrev=False)
    p.add_argument("--dataset", default="mawps")
    p.add_argument("--fold", type=non_negative_int, default=0)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--shards", default=None, help="a prebuilt shard folder (no raw data needed)")
    p.add_argument("--ablation", "--arms", dest="ablation", default="full,gts",
                   help="ablation arms to time, comma-separated, or 'all' (gts, when named, is the reference)")
    p.add_argument("--limit", type=positive_int, default=1600, help="training problems timed")
    p.add_argument("--decode-limit", type=positive_int, default=200, help="held-out problems decoded")
    p.add_argument("--bf16", action="store_true", help="also time decoding with bfloat16 GRU products")
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--embedding", type=positive_int, default=128)
    p.add_argument("--hidden", type=positive_int, default=512)
    p.add_argument("--beam-size", type=positive_int, default=5)
    p.add_argument("--threads", type=non_negative_int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--device", type=device, default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override over every arm (repeatable); not of a key one of these flags sets")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--profile", type=positive_int, default=None, metavar="STEPS",
                      help="count operators and host syncs per training step over STEPS steps (CPU), time nothing")
    mode.add_argument("--time-steps", type=positive_int, default=None, metavar="STEPS",
                      help="wall time per training step against the GPU's kernel time over STEPS steps "
                           "(torch.profiler), with the operators that take the most of each; nothing else")
    mode.add_argument("--replay", type=positive_int, default=None, metavar="STEPS",
                      help="one batch's training step run STEPS times eagerly, then captured as a CUDA graph and "
                           "replayed STEPS times: the floor of a step without host work (GPU only); nothing else")
    return p


@dataclass
class _Inputs:
    """What every mode of the command measures: the arms, their settings and the problems."""
    args: argparse.Namespace
    arms: list[str]
    cfg: Config  # the command's settings, before any arm's
    overrides: dict  # --set, over each arm's own settings, as in `python -m hlgt.train`
    vocab: object
    rows: list[dict]  # the training rows timed
    decode_rows: list[dict]  # held out: training rows after them, topped up from validation
    held_out: int  # how many of decode_rows are training rows

    def arm_cfg(self, arm: str) -> Config:
        return self.cfg.override({**ABLATIONS[arm], **self.overrides})


def _inputs(args: argparse.Namespace) -> _Inputs:
    from hlgt.data.build import ensure_shards
    from hlgt.data.shards import load_rows, load_vocab, use_shards

    base = {"data.dataset": args.dataset, "data.fold": args.fold, "train.batch_size": args.batch_size,
            "model.embedding_size": args.embedding, "model.hidden_size": args.hidden, "model.beam_size": args.beam_size,
            **({"data.data_dir": args.data_dir} if args.data_dir else {})}
    overrides = parse_overrides(args.set)
    refuse_flag_keys(overrides, FLAG_KEYS)
    arms = ablation_arms(args.ablation)
    cfg = Config.from_flat({**base, **overrides})
    shards = use_shards(cfg, args.shards) if args.shards else ensure_shards(cfg)
    vocab = load_vocab(shards)
    train_rows = [r for r in load_rows(shards, "train") if r["prefix"] is not None]
    rows = train_rows[: args.limit]
    if len(rows) < 2 * args.batch_size:
        raise ValueError(f"only {len(rows)} training rows: need at least two batches to time")
    decode_rows = train_rows[args.limit: args.limit + args.decode_limit]
    held_out = len(decode_rows)
    if held_out < args.decode_limit:
        decode_rows += load_rows(shards, "valid")[: args.decode_limit - held_out]
    if not decode_rows:
        raise ValueError("no held-out rows to decode")
    return _Inputs(args, arms, cfg, overrides, vocab, rows, decode_rows, held_out)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    run, device = _inputs(args), torch.device(args.device)
    if args.profile is not None:
        _print_profile(run)
    elif args.replay is not None:
        _print_replay(run, device)
    elif args.time_steps is not None:
        _print_time_steps(run, device)
    else:
        _print_speed(run, device)
    return 0


def _print_profile(run: _Inputs) -> None:
    a = run.args
    print(f"[bench] {a.dataset}: operators and host syncs per training step, batch {a.batch_size}, "
          f"embedding {a.embedding}, hidden {a.hidden}, {a.profile} steps after a warm-up, CPU", flush=True)
    print("\n| arm | aten ops / step | top-level | in the CPU BiGRUs | the rest (a GPU's share) | its top-level "
          "| of it launching a kernel | in the optimizer | host syncs / step | syncs by operator |"
          "\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for arm in run.arms:
        r = profile_steps(run.arm_cfg(arm), run.rows, run.vocab, a.profile)
        by_op = ", ".join(f"{k.removeprefix('aten::')} {v:g}" for k, v in r["syncs"].items())
        print(f"| {arm} | {r['ops_per_step']:.0f} | {r['top_level_ops_per_step']:.0f} | {r['cpu_gru_ops_per_step']:.0f} "
              f"| {r['other_ops_per_step']:.0f} | {r['other_top_level_ops_per_step']:.0f} "
              f"| {r['launching_ops_per_step']:.0f} "
              f"| {r['optimizer_ops_per_step']:.0f} | {r['syncs_per_step']:.1f} | {by_op} |",
              flush=True)


def _print_replay(run: _Inputs, device: torch.device) -> None:
    a = run.args
    print(f"[bench] {a.dataset}: one batch's training step, eager and replayed as a CUDA graph, batch "
          f"{a.batch_size}, {a.replay} steps each, device {device}", flush=True)

    def replayed(arm: str) -> dict:
        try:
            return replay_steps(run.arm_cfg(arm), run.rows, run.vocab, device, a.replay)
        except RuntimeError as e:  # the step does what a capture forbids (a host sync, a CPU tensor read)
            return {"failed": str(e).splitlines()[0]}

    for arm in run.arms:
        r = replayed(arm)
        if "failed" in r:
            print(f"[bench] {arm}: capture failed: {r['failed']}", flush=True)
            continue
        for side in ("eager", "replay"):
            print(f"\n[bench] {arm}: {side} kernels by device time\n{r[side + '_kernels']['table']}", flush=True)
        for side in ("eager", "replay"):
            k = r[side + "_kernels"]
            print(f"[bench] {arm}: {side}: {k['per_step']:.0f} GPU kernels per step, GPU busy "
                  f"{k['busy_ms_per_step']:.1f} ms per step (profiled)", flush=True)
        print(f"[bench] {arm}: eager {r['eager_ms_per_step']:.1f} ms per step, replayed "
              f"{r['replay_ms_per_step']:.1f} ms ({r['eager_ms_per_step'] / r['replay_ms_per_step']:.1f}x); "
              f"loss at the last eager step {r['eager_loss']:.4f}, at the last replay {r['replay_loss']:.4f}", flush=True)


def _print_time_steps(run: _Inputs, device: torch.device) -> None:
    a = run.args
    print(f"[bench] {a.dataset}: wall time per training step against the GPU's kernel time, batch "
          f"{a.batch_size}, {a.time_steps} steps after a warm-up, device {device}", flush=True)

    def timed(arm: str) -> dict:
        return time_steps(run.arm_cfg(arm), run.rows, run.vocab, device, a.time_steps)

    for arm in run.arms:
        r = timed(arm)
        for side, table in r["tables"].items():
            print(f"\n[bench] {arm}: operators by {side} time\n{table}", flush=True)
        gpu, gru = r["device_ms_per_step"], r["cpu_gru_ms_per_step"]
        busy = (f", GPU running kernels {gpu:.1f} ms ({100 * gpu / r['wall_ms_per_step']:.0f}%)" if gpu is not None
                else ", no GPU kernels recorded" if device.type == "cuda"
                else f", {r['wall_ms_per_step'] - gru:.1f} ms outside the CPU BiGRUs ({gru:.1f} ms in them)")
        print(f"[bench] {arm}: {r['wall_ms_per_step']:.1f} ms per step (profiled){busy}", flush=True)


def _print_speed(run: _Inputs, device: torch.device) -> None:
    """Training and decoding problems/s of each arm, a line each as it is measured, then the table."""
    from hlgt.train import cuda_graphs

    a = run.args
    print(f"[bench] {a.dataset} fold {a.fold}: {len(run.rows)} training problems, "
          f"{len(run.decode_rows)} held-out problems decoded ({run.held_out} training, "
          f"{len(run.decode_rows) - run.held_out} validation), batch {a.batch_size}, "
          f"embedding {a.embedding}, hidden {a.hidden}, beam {a.beam_size}, device {device}, "
          f"{torch.get_num_threads()} threads", flush=True)

    def measured(arm: str) -> dict:
        cfg = run.arm_cfg(arm)
        if cfg.train.cuda_graphs:
            cuda_graphs.require_gpu(device)
        return measure(cfg, run.rows, run.decode_rows, run.vocab, device, a.bf16)

    results = {}
    for arm in run.arms:
        r = measured(arm)
        results[arm] = r
        low = (f", bf16 decode {r['decode_bf16_problems_per_s']:.1f} problems/s "
               f"({r['decode_bf16_changed']} of {r['decode_problems']} predictions differ)") if a.bf16 else ""
        places = ", ".join(f"{k} {v:g}" for k, v in r["train_syncs_by_place"].items())
        syncs = ("" if r["train_syncs_per_step"] is None else
                 f" ({r['train_syncs_per_step']:g} host syncs per step{': ' + places if places else ''})")
        if r["note"]:
            print(f"[bench] {arm}: timed pass: {r['note']}", flush=True)
        print(f"[bench] {arm}: train {r['train_problems_per_s']:.1f} problems/s{syncs}, "
              f"mean training loss {r['train_loss']:.4f}, host per batch: collating {r['collate_ms_per_batch']:.1f} ms "
              f"(not in the timed pass), planning {r['plan_ms_per_batch']:.1f} ms (in it), "
              f"decode {r['decode_problems_per_s']:.1f} problems/s{low}, {r['parameters']:,} parameters", flush=True)
    _print_speed_table(results, a.beam_size, a.bf16)


def _print_speed_table(results: dict[str, dict], beam: int, bf16: bool) -> None:
    ref = results.get("gts")
    extra = " bf16 decode problems/s | bf16 predictions changed |" if bf16 else ""
    print(f"\n| arm | parameters | train problems/s | beam-{beam} decode problems/s | train × gts | decode × gts |{extra}")
    print("|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if bf16 else ""))
    for arm, r in results.items():
        ratio = (lambda k: f"{r[k] / ref[k]:.2f}") if ref else (lambda k: "n/a")
        low = f" {r['decode_bf16_problems_per_s']:.1f} | {r['decode_bf16_changed']} |" if bf16 else ""
        print(f"| {arm} | {r['parameters']:,} | {r['train_problems_per_s']:.1f} | {r['decode_problems_per_s']:.1f} "
              f"| {ratio('train_problems_per_s')} | {ratio('decode_problems_per_s')} |{low}")


if __name__ == "__main__":
    from hlgt.cli import run_command

    sys.exit(run_command(main, "python -m hlgt.train.bench"))
