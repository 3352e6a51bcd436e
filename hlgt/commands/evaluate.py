"""hlgt-evaluate (python -m hlgt.train.evaluate): a trained model on a split of its shards or on a
problem file (``hlgt.train.evaluate``): both accuracies, Table 4, the predictions file, and with
``--explain-wrong N`` pages for N wrongly solved problems.

    hlgt-evaluate --model runs/<run>/best --split test [--out DIR] [--explain-wrong N]
    hlgt-evaluate --model runs/<run>/best --data problems.jsonl --out DIR
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch

from hlgt import metrics as M
from hlgt.commands.cli import beam_size, device, non_negative_int, positive_int, run_command
from hlgt.config import Config
from hlgt.data.annotate import FileCounts, file_chunks
from hlgt.data.build import ensure_shards
from hlgt.data.shards import load_rows, use_shards
from hlgt.inference import load_model
from hlgt.pages import PageFolder
from hlgt.progress import Progress
from hlgt.solve import model_lang
from hlgt.storage import replacing
from hlgt.train.evaluate import (
    by_reason,
    check_out_folder,
    evaluate_chunks,
    explain_wrong,
    file_summary,
    table4_markdown,
    write_tables,
)

PROG = "hlgt-evaluate"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, allow_abbrev=False,
                                description="Evaluate a trained model on one split of its dataset.")
    p.add_argument("--model", required=True,
                   help="a trained model folder (<run>/best; the last epoch's: <run>/checkpoint/model)")
    p.add_argument("--split", default=None, choices=["train", "valid", "test"],
                   help="a split of the model's dataset (default test)")
    p.add_argument("--data", default=None, metavar="FILE",
                   help="evaluate on this problem file instead (benchmark format, or JSON/JSONL of id, "
                        "original_text, equation and/or ans)")
    p.add_argument("--shards", default=None,
                   help="a prebuilt shard folder (default: built or reused from the run config)")
    p.add_argument("--data-dir", default=None, help="benchmark files (default: the run config's)")
    p.add_argument("--beam-size", type=beam_size, default=None, help="default: the model's")
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                   help="bfloat16 GRU products while decoding, or not (--no-bf16); default: the model's "
                        "model.bf16_inference")
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--threads", type=non_negative_int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--device", type=device, default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default=None, help="write predictions_<split>.jsonl and the Table-4 files here")
    p.add_argument("--explain-wrong", type=positive_int, default=None, metavar="N",
                   help="with --out: the pages of the first N wrongly solved problems, in OUT/explain_<split>/ "
                        "(with --data: OUT/explain_<file name without suffix>/)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.data and (args.split or args.shards or args.data_dir):
        p.error("--data evaluates a file: it takes no --split, --shards or --data-dir")
    if args.explain_wrong and not args.out:
        p.error("--explain-wrong N writes its pages under --out DIR: give --out")
    name = Path(args.data).stem if args.data else args.split or "test"
    out = check_out_folder(args.out) if args.out else None
    pages = PageFolder(out / f"explain_{name}", option="--out") if args.explain_wrong else None  # before any work
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    solver, flat = load_model(args.model, device=args.device)
    cfg = Config.from_flat({k: v for k, v in flat.items() if k.startswith("data.")})
    counts = FileCounts()
    # A file's chunks are read as they are used, within the time measured.
    chunks, what, progress = _problems(args, cfg, solver, counts, name, model_lang(flat))
    started = time.perf_counter()  # after the split's shards are read (or built)
    beam = args.beam_size or solver.cfg.beam_size
    bf16 = solver.cfg.bf16_inference if args.bf16 is None else args.bf16
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    with replacing(out / f"predictions_{name}.jsonl") if out else contextlib.nullcontext() as sink:
        tally, wrong = evaluate_chunks(solver, chunks, variant=cfg.data.graph, beam_size=beam,
                                       batch_size=args.batch_size, device=args.device, bf16_inference=bf16,
                                       sink=sink, progress=progress, keep_wrong=args.explain_wrong or 0)
        if not tally.n:
            reasons = by_reason(counts.not_scored)
            first = counts.read.notes[0] if counts.read.notes else ""
            raise ValueError(f"{what}: no problem can be scored" + (f" (not scored: {reasons})" if reasons else "")
                             + (f"; the first: {first}" if first else ""))
    seconds = time.perf_counter() - started
    report = tally.report()
    timed = "end to end (read, prepared, decoded and scored)" if args.data else "(decoded and scored)"
    print(f"[evaluate] {args.model} on {what} ({report.n} problems scored, "
          f"{'bfloat16' if bf16 else 'float32'} GRU products, {args.device}): value accuracy "
          f"{M.percent(report.value_acc)}%, equation accuracy {M.percent(report.equation_acc)}%, "
          f"{report.n / max(seconds, 1e-9):.1f} problems/s {timed}")
    not_scored = sum(counts.not_scored.values())
    if args.data:
        print(file_summary(tally, counts))
    print(table4_markdown(report, title=f"{name}: accuracy by number of numbers", not_scored=not_scored))
    if out is not None:
        write_tables(out, name, report, not_scored=not_scored)
        print(f"[evaluate] wrote {out / f'predictions_{name}.jsonl'}")
    if pages is not None:
        with pages:
            index = explain_wrong(pages, args.model, solver, flat, wrong, report, beam_size=beam,
                                  device=args.device, bf16_inference=bf16)
        print(f"[evaluate] wrote {len(pages.pages)} pages of wrongly solved problems: {index}")
    return 0


def _problems(args: argparse.Namespace, cfg: Config, solver, counts: FileCounts, name: str, lang: str | None):
    """The rows to evaluate (chunks of a --data file as they are prepared, its raw texts read in
    ``lang`` as ``solve`` reads them, or a split of the shards), what they are, and their progress line."""
    if args.data:
        chunks = file_chunks(args.data, solver.vocab.constants, cfg.data.annotator, cfg.data.annotator_model, counts,
                             lang=lang)
        return chunks, args.data, Progress(None, "evaluate")
    if args.data_dir:
        cfg = cfg.override({"data.data_dir": args.data_dir})
    with contextlib.ExitStack() as held:  # the rows of the folder as it was checked
        shards = use_shards(cfg, args.shards, held) if args.shards else ensure_shards(cfg, held=held)
        rows = load_rows(shards, name)
    return iter([rows]), f"{cfg.data.dataset} {name}", Progress(len(rows), "evaluate") if len(rows) >= 1000 else None


def run() -> None:
    sys.exit(run_command(main, PROG))
