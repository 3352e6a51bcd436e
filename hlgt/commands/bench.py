"""hlgt-bench (python -m hlgt.train.bench): training and beam-search decoding speed of the
ablation arms, against the no-graph GTS arm (the measurements: ``hlgt.train.bench``).

    hlgt-bench --dataset mawps --fold 0 --limit 1600
    hlgt-bench --dataset math23k --limit 1600 --device cuda --shards datasets/processed/math23k-offline

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

``--time-steps N`` instead times N training steps under torch.profiler, as the training loop runs
them (its gradient-norm bookkeeping included): wall time per step against the time the GPU ran
kernels (a step whose GPU idles is bound by the host), and the operators that take the most host
and device time; on the CPU, the host time outside the CPU BiGRUs.

``--replay N`` instead runs one batch's training step N times eagerly, then captures it as a CUDA
graph and replays it N times: the replay's time is the floor a step without host work could
reach (GPU only); with the GPU kernels per step of each and the kernels that take the most time.

``--recurrence N`` instead times the encoder's BiGRUs alone (forward and backward) over N
batches padded as ``train.capture_bigrus`` pads them (GPU only): eagerly as a step runs them, over
each batch's packing; captured over that packing, one graph per batch (the floor of those
kernels); and as causal passes, one per direction and layer, captured over the shape's padded
length (as ``train.capture_bigrus`` replays them for every batch of the shape) and over the
batch's own longest sequence (the floor of finer buckets): whether capturing the BiGRUs pays.

``--set train.cuda_graphs=true`` (GPU) times the step as training runs it from its second epoch:
the batches' shapes learned from their plans, one eager step (the one-time set-up), then a pass
that captures them (``hlgt.train.cuda_graphs``), timed apart: its time beyond the timed pass's,
over its captures, is printed as what a capture costs at most beyond its step; with ``--set
train.capture_bigrus=true`` too, from the embedding on.
With ``--time-steps``, the profile is of that replayed step, and it says how many of the profiled
batches replayed.

``--set train.compile=true`` measures the model as training then builds it, its decoder levels
and graph layers compiled (``Solver.compile_parts``); every measured batch is run once before,
so that no compilation is timed or counted.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass

import torch

from hlgt.commands.cli import device, non_negative_int, positive_int, refuse_flag_keys, run_command
from hlgt.config import ABLATIONS, Config, ablation_arms, parse_overrides
from hlgt.data.build import ensure_shards
from hlgt.data.shards import load_rows, load_vocab, use_shards
from hlgt.train import cuda_graphs
from hlgt.train.bench import measure, profile_steps, recurrence_steps, replay_steps, time_steps

PROG = "hlgt-bench"

# The config keys this command's flags set: ``--set`` may not name them.
FLAG_KEYS = {"data.dataset": "--dataset", "data.fold": "--fold", "data.data_dir": "--data-dir",
             "train.batch_size": "--batch-size", "model.embedding_size": "--embedding", "model.hidden_size": "--hidden",
             "model.beam_size": "--beam-size", "train.threads": "--threads", "train.use_gpu": "--device"}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                allow_abbrev=False)
    p.add_argument("--dataset", default="mawps")
    p.add_argument("--fold", type=non_negative_int, default=0)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--shards", default=None, help="a prebuilt shard folder (no raw data needed)")
    p.add_argument("--ablation", default="full,gts",
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
    mode.add_argument("--recurrence", type=positive_int, default=None, metavar="BATCHES",
                      help="the BiGRUs alone over BATCHES padded batches: eager, and captured over each packing or "
                           "as causal passes over padded lengths (GPU only); nothing else")
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
    base = {"data.dataset": args.dataset, "data.fold": args.fold, "train.batch_size": args.batch_size,
            "model.embedding_size": args.embedding, "model.hidden_size": args.hidden, "model.beam_size": args.beam_size,
            **({"data.data_dir": args.data_dir} if args.data_dir else {})}
    overrides = parse_overrides(args.set)
    refuse_flag_keys(overrides, FLAG_KEYS)
    arms = ablation_arms(args.ablation)
    cfg = Config.from_flat({**base, **overrides})
    with contextlib.ExitStack() as held:  # the vocabulary and rows of the folder as it was checked
        shards = use_shards(cfg, args.shards, held) if args.shards else ensure_shards(cfg, held=held)
        vocab = load_vocab(shards)
        train_rows = [r for r in load_rows(shards, "train") if r["prefix"] is not None]
        decode_rows = train_rows[args.limit: args.limit + args.decode_limit]
        held_out = len(decode_rows)
        if held_out < args.decode_limit:
            decode_rows += load_rows(shards, "valid")[: args.decode_limit - held_out]
    rows = train_rows[: args.limit]
    if len(rows) < 2 * args.batch_size:
        raise ValueError(f"only {len(rows)} training rows: need at least two batches to time")
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
    elif args.recurrence is not None:
        _print_recurrence(run, device)
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
        print(f"| {arm} | {r['ops_per_step']:.0f} | {r['top_level_ops_per_step']:.0f} "
              f"| {r['cpu_gru_ops_per_step']:.0f} "
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
              f"loss at the last eager step {r['eager_loss']:.4f}, at the last replay {r['replay_loss']:.4f}",
              flush=True)


def _print_recurrence(run: _Inputs, device: torch.device) -> None:
    a = run.args
    print(f"[bench] {a.dataset}: the encoder's BiGRUs alone (forward and backward), {a.recurrence} batches of "
          f"{a.batch_size} padded as train.capture_bigrus pads them, device {device}", flush=True)
    for arm in run.arms:
        r = recurrence_steps(run.arm_cfg(arm), run.rows, run.vocab, device, a.recurrence)
        print(f"[bench] {arm}: lengths: padded {r['padded_length']:.1f}, own longest {r['own_length']:.1f} on average; "
              f"causal states differ from packed by at most {r['max_state_difference']:.2e}", flush=True)
        print(f"[bench] {arm}: ms per batch: eager over the packing {r['eager_ms']:.2f} "
              f"({r['eager_kernels']:.0f} kernels); replayed: packed {r['packed_replay_ms']:.2f} "
              f"({r['packed_replay_kernels']:.0f}), causal over the padded length {r['causal_padded_replay_ms']:.2f} "
              f"({r['causal_padded_replay_kernels']:.0f}), causal over its own longest {r['causal_own_replay_ms']:.2f} "
              f"({r['causal_own_replay_kernels']:.0f})", flush=True)


def _print_time_steps(run: _Inputs, device: torch.device) -> None:
    a = run.args
    print(f"[bench] {a.dataset}: wall time per training step against the GPU's kernel time, batch "
          f"{a.batch_size}, {a.time_steps} steps after a warm-up, device {device}", flush=True)

    def timed(arm: str) -> dict:
        cfg = run.arm_cfg(arm)
        if cfg.train.cuda_graphs:
            cuda_graphs.require_gpu(device)
        return time_steps(cfg, run.rows, run.vocab, device, a.time_steps)

    for arm in run.arms:
        r = timed(arm)
        for side, table in r["tables"].items():
            print(f"\n[bench] {arm}: operators by {side} time\n{table}", flush=True)
        gpu, gru = r["device_ms_per_step"], r["cpu_gru_ms_per_step"]
        busy = (f", GPU running kernels {gpu:.1f} ms ({100 * gpu / r['wall_ms_per_step']:.0f}%)" if gpu is not None
                else ", no GPU kernels recorded" if device.type == "cuda"
                else f", {r['wall_ms_per_step'] - gru:.1f} ms outside the CPU BiGRUs ({gru:.1f} ms in them)")
        if r["note"]:
            print(f"[bench] {arm}: profiled steps: {r['note']}", flush=True)
        print(f"[bench] {arm}: {r['wall_ms_per_step']:.1f} ms per step (profiled){busy}", flush=True)


def _print_speed(run: _Inputs, device: torch.device) -> None:
    """Training and decoding problems/s of each arm, a line each as it is measured, then the table."""
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
        if r.get("captures"):
            print(f"[bench] {arm}: the pass before it: {r['capture_pass_s']:.2f} s, {r['captures']} shapes "
                  f"captured at their first batches: at most {r['capture_s_each']:.3f} s a capture beyond "
                  f"its step", flush=True)
        ahead = ", by a thread ahead of the steps" if device.type == "cuda" else ""
        print(f"[bench] {arm}: train {r['train_problems_per_s']:.1f} problems/s{syncs}, "
              f"mean training loss {r['train_loss']:.4f}, host per batch: collating {r['collate_ms_per_batch']:.1f} ms "
              f"(not in the timed pass), planning {r['plan_ms_per_batch']:.1f} ms (in it{ahead}), "
              f"decode {r['decode_problems_per_s']:.1f} problems/s{low}, {r['parameters']:,} parameters", flush=True)
    _print_speed_table(results, a.beam_size, a.bf16)


def _print_speed_table(results: dict[str, dict], beam: int, bf16: bool) -> None:
    ref = results.get("gts")
    extra = " bf16 decode problems/s | bf16 predictions changed |" if bf16 else ""
    print(f"\n| arm | parameters | train problems/s | beam-{beam} decode problems/s "
          f"| train × gts | decode × gts |{extra}")
    print("|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if bf16 else ""))
    for arm, r in results.items():
        ratio = (lambda k: f"{r[k] / ref[k]:.2f}") if ref else (lambda k: "n/a")
        low = f" {r['decode_bf16_problems_per_s']:.1f} | {r['decode_bf16_changed']} |" if bf16 else ""
        print(f"| {arm} | {r['parameters']:,} | {r['train_problems_per_s']:.1f} | {r['decode_problems_per_s']:.1f} "
              f"| {ratio('train_problems_per_s')} | {ratio('decode_problems_per_s')} |{low}")


def run() -> None:
    sys.exit(run_command(main, PROG))
