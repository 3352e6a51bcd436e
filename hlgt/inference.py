"""Inference with a trained model: loading its folder, batched prediction.

Owns what solving one new text (``hlgt.solve``) and scoring a split (``hlgt.train.evaluate``)
share:

* ``load_model``: a ``best/`` folder written by training (``Solver.save`` plus
  ``run_config.json``) → the solver in eval mode and the flat run config it was trained with;
* ``predict``: a solver's prefix equation for every shard row, decoded in batches.

A loaded model is shared by every caller in the process, so nothing here writes into it; the
decoding settings a caller may change (beam size, ``bf16_inference``) are arguments.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from hlgt.config import MODEL_KEYS, Config
from hlgt.data.collate import collate
from hlgt.model.solver import Solver, even_step, read_json_object

RUN_CONFIG_FILE = "run_config.json"
# ``predict`` encodes up to ENCODE_BATCHES x batch_size problems at once and beam-searches slices
# of up to BEAM_BATCHES x batch_size (``Solver.solve``'s ``beam_batch``): on the CPU the encoder's
# step-by-step products are more efficient over more rows, while the beam search's attention
# tensors outgrow the caches sooner. The decoding rates behind these values are in BENCHMARKS.md.
ENCODE_BATCHES = 4
BEAM_BATCHES = 2


def load_model(model_dir: str | Path, device: torch.device | str = "cpu") -> tuple[Solver, dict[str, Any]]:
    """The solver (eval mode, on ``device``) and the flat config it was trained with
    (``run_config.json``'s ``config``). The solver is loaded once per folder and device and shared
    by every caller: treat it as read-only."""
    solver, flat = _load(str(Path(model_dir).resolve()), str(device))
    return solver, dict(flat)


def run_config(model_dir: str | Path) -> dict[str, Any]:
    """The flat config a model folder was trained with, read without loading the model."""
    path = Path(model_dir) / RUN_CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: --model must be a model folder written by training "
                                "(<run>/best, or <run>/checkpoint/model for the last epoch's)")
    return read_json_object(path, _checked_config)


def _checked_config(content: dict) -> dict[str, Any]:
    """The run's flat config, every key there: a training or data key the training code did not
    have yet takes its default; the keys that say what the model reads, and every model key, must
    have been written."""
    flat = content.get("config")
    if not isinstance(flat, dict):
        raise ValueError('no "config" object')
    missing = [key for key in ("data.dataset", "data.graph", "data.annotator", *MODEL_KEYS) if key not in flat]
    if missing:
        raise ValueError(f'its "config" lacks {", ".join(missing)}')
    return Config.from_flat(flat).to_flat()  # unknown keys or bad values: a hand-edited file


@lru_cache(maxsize=4)
def _load(directory: str, device: str) -> tuple[Solver, dict[str, Any]]:
    flat = run_config(directory)
    solver = Solver.load(directory, map_location=device)
    differ = sorted(k for k, v in Config(model=solver.cfg).to_flat().items() if k.startswith("model.") and flat[k] != v)
    if differ:  # the pages and solve read run_config.json, the weights come with config.json
        raise ValueError(f"{directory}: {RUN_CONFIG_FILE} and the model's config.json describe different models "
                         f"({', '.join(differ)}): a folder put together from two runs? Use a folder as training "
                         "wrote it")
    solver.eval()
    return solver, flat


@torch.no_grad()
def predict(solver, rows: Sequence[Mapping[str, Any]], vocab, *, variant: str, beam_size: int,
            batch_size: int, device: torch.device | str = "cpu", bf16_inference: bool | None = None,
            progress: Callable[[int], None] | None = None) -> list[list[str]]:
    """The solver's prefix equation for every row, in row order (eval mode, restored afterwards).

    Rows are decoded in order of text length, so a batch pads little (a problem's prediction does
    not depend on its batch-mates), and put back in row order. The encoder runs on up to
    ``ENCODE_BATCHES * batch_size`` problems at once, the beam search on up to
    ``BEAM_BATCHES * batch_size``. ``bf16_inference``: bfloat16 GRU products while decoding
    (None: the solver's ``model.bf16_inference``). ``progress(done)`` after every chunk."""
    was_training = solver.training
    solver.eval()
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]["tokens"]))
    out: list[list[str]] = [[] for _ in rows]
    step = even_step(len(order), ENCODE_BATCHES * batch_size) if order else 1
    try:
        for start in range(0, len(order), step):
            chunk_ids = order[start:start + step]
            chunk = [rows[i] for i in chunk_ids]
            batch = collate(chunk, vocab, variant=variant).to(device)
            if list(batch.ids) != [str(r["id"]) for r in chunk]:
                raise RuntimeError("collate reordered or dropped evaluation rows; evaluation needs every row in order")
            predictions = solver.solve(batch, beam_size=beam_size, beam_batch=BEAM_BATCHES * batch_size,
                                       bf16_inference=bf16_inference)
            for i, p in zip(chunk_ids, predictions):
                out[i] = list(p)
            if progress is not None:
                progress(start + len(chunk_ids))
    finally:
        solver.train(was_training)
    return out
