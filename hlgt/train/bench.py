"""Benchmark: training and beam-search decoding speed of HLGT against the no-graph GTS arm.

    python -m hlgt.train.bench --dataset mawps --fold 0 --limit 1600
    python -m hlgt.train.bench --dataset math23k --limit 1600 --device cuda --shards datasets/processed/math23k-offline

Both arms in the same process, on the same problems (the first ``--limit`` training rows), with
the same sizes (batch 64, embedding 128, hidden 512 by default): one timed training pass
(problems/s; the first batch is a warm-up, not timed) and one timed beam-``--beam`` decoding pass
(problems/s). Prints a table with each arm's ratio to GTS. A measurement, not a test.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from hlgt.config import ABLATIONS, Config, parse_overrides


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(cfg: Config, rows: list[dict], vocab, device: torch.device, decode_limit: int) -> dict:
    """Training problems/s over ``rows`` and decoding problems/s over the first ``decode_limit``."""
    from hlgt.data.collate import iter_batches
    from hlgt.model.solver import Solver
    from hlgt.train.evaluate import predict

    torch.manual_seed(cfg.train.seed)
    solver = Solver(cfg.model, vocab).to(device)
    opt = torch.optim.Adam(solver.parameters(), lr=cfg.train.lr)
    solver.train()
    batches = list(iter_batches(rows, vocab, cfg.train.batch_size, shuffle=True, seed=cfg.train.seed,
                                variant=cfg.data.graph))
    timed, start = 0, 0.0
    for i, batch in enumerate(batches):
        if i == 1:
            _sync(device)
            start = time.perf_counter()
        out = solver(batch.to(device))
        opt.zero_grad(set_to_none=True)
        out["loss"].backward()
        opt.step()
        if i >= 1:
            timed += len(batch)
    _sync(device)
    train_s = time.perf_counter() - start
    decode_rows = rows[:decode_limit]
    predict(solver, decode_rows[: cfg.train.batch_size], vocab, variant=cfg.data.graph, beam_size=cfg.model.beam_size,
            batch_size=cfg.train.batch_size, device=device)  # warm-up
    _sync(device)
    start = time.perf_counter()
    predict(solver, decode_rows, vocab, variant=cfg.data.graph, beam_size=cfg.model.beam_size,
            batch_size=cfg.train.batch_size, device=device)
    _sync(device)
    decode_s = time.perf_counter() - start
    return {"train_problems_per_s": timed / max(train_s, 1e-9), "train_problems": timed,
            "decode_problems_per_s": len(decode_rows) / max(decode_s, 1e-9), "decode_problems": len(decode_rows),
            "parameters": sum(p.numel() for p in solver.parameters())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hlgt.train.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="mawps")
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--shards", default=None, help="a prebuilt shard folder (no raw data needed)")
    p.add_argument("--arms", default="full,gts", help="arms to time (the last one named gts is the reference)")
    p.add_argument("--limit", type=int, default=1600, help="training problems timed")
    p.add_argument("--decode-limit", type=int, default=None, help="problems decoded (default: --limit)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--embedding", type=int, default=128)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)

    from hlgt.data.build import ensure_shards, load_rows, load_vocab, use_shards

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    base = {"data.dataset": args.dataset, "data.fold": args.fold, "train.batch_size": args.batch_size,
            "model.embedding_size": args.embedding, "model.hidden_size": args.hidden, "model.beam_size": args.beam,
            **({"data.data_dir": args.data_dir} if args.data_dir else {}), **parse_overrides(args.set)}
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    for arm in arms:
        if arm not in ABLATIONS:
            raise SystemExit(f"unknown arm {arm!r}; choose from {list(ABLATIONS)}")
    cfg = Config.from_flat(base)
    shards = use_shards(cfg, args.shards) if args.shards else ensure_shards(cfg)
    vocab = load_vocab(shards)
    rows = [r for r in load_rows(shards, "train") if r["prefix"] is not None][: args.limit]
    if len(rows) < 2 * args.batch_size:
        raise SystemExit(f"only {len(rows)} training rows: need at least two batches to time")
    device = torch.device(args.device)
    decode_limit = args.decode_limit or len(rows)
    print(f"[bench] {args.dataset} fold {args.fold}: {len(rows)} training problems, batch {args.batch_size}, "
          f"embedding {args.embedding}, hidden {args.hidden}, beam {args.beam}, device {device}, "
          f"{torch.get_num_threads()} threads", flush=True)
    results = {}
    for arm in arms:
        results[arm] = measure(cfg.override(ABLATIONS[arm]), rows, vocab, device, decode_limit)
        r = results[arm]
        print(f"[bench] {arm}: train {r['train_problems_per_s']:.1f} problems/s, "
              f"decode {r['decode_problems_per_s']:.1f} problems/s, {r['parameters']:,} parameters", flush=True)
    ref = results.get("gts")
    print("\n| arm | parameters | train problems/s | beam-%d decode problems/s | train × gts | decode × gts |" % args.beam)
    print("|---|---:|---:|---:|---:|---:|")
    for arm, r in results.items():
        ratio = (lambda k: f"{r[k] / ref[k]:.2f}") if ref else (lambda k: "n/a")
        print(f"| {arm} | {r['parameters']:,} | {r['train_problems_per_s']:.1f} | {r['decode_problems_per_s']:.1f} "
              f"| {ratio('train_problems_per_s')} | {ratio('decode_problems_per_s')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
