"""The solver, Encoder + TreeDecoder + Comparison behind one ``Batch`` interface.

``forward(batch)`` returns the training losses (paper eq. 10) and the encoder's activation scales
(``EncoderOutput.scales``):

    loss = tree_loss + beta_com * com_loss

* ``tree_loss`` (L_q) is GTS's ``masked_cross_entropy``: the summed NLL of every gold token under
  teacher forcing divided by the number of gold tokens in the batch (a per-token mean, not the
  per-problem sum eq. 10 prints; it is what GTS optimises and keeps the learning rate independent
  of the batch's equation lengths).
* ``com_loss`` (L_com) is the comparison head's BCE (see ``comparison.py``); with
  ``model.aux_task`` False there is no head and ``com_loss`` is 0.

``solve(batch)`` beam-searches (``model.beam_size``, ``model.max_output_len``) in eval mode and
returns prefix tokens (with ``model.bf16_inference``, the encoder's CPU GRUs multiply in
bfloat16); with ``beam_batch`` the search runs over slices of the encoded batch, side by side on
the CPU's torch threads. ``inspect(batch)`` is the same decoding seen from inside, for the
explain pages (``hlgt.explain``): the beam's final candidates with their scores, and the HLGT
layers' attention. ``save``/``load`` write and read a folder that rebuilds the model alone:
``config.json`` (the flat ``model.*`` keys plus the caller's extras), ``vocab.json`` and
``model.pt`` (a state_dict that ``torch.load(weights_only=True)`` reads). The model never moves
itself to a device except through ``load``'s ``map_location``. ``compile_parts`` hands the parts
whose shapes change from batch to batch but whose operators do not to ``torch.compile``.
"""
from __future__ import annotations

import dataclasses
import json
import pickle
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hlgt.config import MODEL_KEYS, Config, ModelConfig
from hlgt.data.collate import Batch
from hlgt.data.vocab import Vocab
from hlgt.model.comparison import Comparison
from hlgt.model.encoder import Encoder
from hlgt.model.gru import Packing, Reversal
from hlgt.model.plan import BatchPlan, Planned, Shape
from hlgt.model.tree_decoder import TreeDecoder
from hlgt.model.tree_layout import tree_layout

CONFIG_FILE, VOCAB_FILE, WEIGHTS_FILE = "config.json", "vocab.json", "model.pt"
# Bumped whenever the same weights would compute a different function, so that an older folder
# fails to load, not silently predicts something else (the bumps are in git's history).
WEIGHTS_FORMAT = 4


def compile_methods(module: nn.Module, names: tuple[str, ...]) -> None:
    """Run ``module``'s methods ``names`` through ``torch.compile`` (inductor, dynamic shapes).

    The compiled functions live on a subclass made for this, not on the instance, so that a copy of
    the module (the best model kept during training) runs them on its own weights. Same math;
    dropout draws from the compiler's own generator, so a compiled run is not bitwise an eager one.
    """
    cls = type(module)
    compiled = {name: torch.compile(getattr(cls, name), dynamic=True) for name in names}
    module.__class__ = type(f"Compiled{cls.__name__}", (cls,), compiled)


def stored_weights_format(saved_config: dict) -> int:
    """The weights format a saved model folder's config records (folders from before formats: 1)."""
    return saved_config.get("weights_format", 1)


@dataclasses.dataclass
class Inspection:
    """What ``Solver.inspect`` saw of a batch."""

    candidates: list[list[tuple[list[str], float]]]  # per problem: prefix tokens and log-probability, best first
    attention: list[torch.Tensor] | None  # per HLGT layer [E, M]: edge j -> i's a_ij per head; None: other encoders


class Solver(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab: Vocab):
        super().__init__()
        self.cfg = dataclasses.replace(cfg)
        self.vocab = vocab
        H = cfg.hidden_size
        self.encoder = Encoder(cfg, len(vocab.words))
        self.decoder = TreeDecoder(H, cfg.embedding_size, vocab.n_ops, len(vocab.constants), cfg.dropout)
        fused = H if cfg.encoder == "none" else 2 * H  # width of h_f (eq. 6); h_b for the GTS arm
        self.comparison = Comparison(fused, H, cfg.comparison_init) if cfg.aux_task else None
        # Every parameter gets a gradient from every training batch (the decoder ties its idle
        # layers in), except in PyG's HGTConv, whose per-type weights a batch without that node or
        # edge type leaves out: data parallelism must then look for unused ones.
        self.uses_every_parameter = cfg.encoder != "hgt"

    def forward(self, batch: Batch | Planned) -> dict[str, torch.Tensor]:
        """The training losses of a batch, planned (``plan``) or not (planned here)."""
        planned = batch if isinstance(batch, Planned) else self.plan(batch)
        return self.after_recurrence(planned, self.encoder.recurrence(planned.batch, planned.plan.packing))

    def after_recurrence(self, planned: Planned, states: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
        """``forward`` from the encoder's BiGRU states (``Encoder.recurrence``) on: the part of a
        training step whose shapes a padded batch fixes (``plan`` with a ``Shape``)."""
        batch, plan = planned.batch, planned.plan
        enc = self.encoder.after_recurrence(batch, states, plan.graph)
        out = self.decoder(enc.tokens, enc.mask, enc.problem, batch.num_pos, batch.num_mask,
                           batch.target, batch.target_mask, trees=plan.trees)
        tree = self.decoder.loss(out)
        if self.comparison is None:
            com = tree.new_zeros(())
        else:
            com = self.comparison.loss(enc.h_f, enc.h_b, batch.num_pos, batch.num_mask, batch.num_values)
        return {"loss": tree + self.cfg.beta_com * com, "tree_loss": tree, "com_loss": com, "scales": enc.scales()}

    def compile_parts(self) -> None:
        """Compile the decoder's per-level functions and the HLGT graph layers: small operators by
        the hundred per step, each launched alone on a GPU, which the compiler fuses. (The BiGRUs
        are cuDNN's on a GPU; the HGT and RGAT baselines are left as they are.)"""
        compile_methods(self.decoder, TreeDecoder.LEVEL_FUNCTIONS)
        if self.cfg.encoder == "hlgt":
            compile_methods(self.encoder.graph, ("forward",))

    def plan(self, batch: Batch | Planned, shape: Shape | None = None, causal: bool = False) -> Planned:
        """The batch and the model's plan of it (``hlgt.model.plan``), made here, where the batch is,
        before it moves to a GPU: the layouts and the targets' checks read values back, which on a
        GPU would make every training step wait.

        ``shape`` (at least the batch's own, ``shape_of``): the batch and its plan padded to it, so
        that a training step after the BiGRUs runs the same operators on the same shapes for every
        batch padded alike (what a step captured as a CUDA graph needs), with the same losses and
        gradients as the unpadded batch. A batch planned already (without a shape) is padded, its
        tree layout padded rather than made again. ``causal`` (with a shape): the BiGRUs laid out
        as causal passes over the padded tokens (``Reversal``) instead of packed, so that they too
        run on the shape's sizes whatever the lengths."""
        if isinstance(batch, Planned):
            batch, trees = batch.batch, batch.plan.trees
        else:
            self._check_targets(batch)
            trees = tree_layout(batch.target, batch.target_mask, self.decoder.n_ops)
        if shape is None:
            if causal:
                raise ValueError("causal passes run over a shape's padded tokens: plan with a shape")
            return Planned(batch, BatchPlan(trees, self.encoder.graph_layout(batch),
                                            Packing.of(batch.lengths, batch.tokens.size(1))))
        if len(batch) != shape.problems:
            raise ValueError(f"a batch of {len(batch)} problems cannot be padded to {shape.problems}")
        padded = batch.padded(shape.tokens, shape.quantities, shape.targets, shape.nodes, shape.edges,
                              shape.line_edges)
        trees = trees.padded(shape.tree, self.decoder.n_ops, (batch.target.size(1), shape.targets))
        lengths = (Reversal if causal else Packing).of(padded.lengths, shape.tokens)
        return Planned(padded, BatchPlan(trees, self.encoder.graph_layout(padded, shape.groups), lengths, shape))

    def shape_of(self, planned: Planned) -> Shape:
        """The ``Shape`` of a batch planned without one, with a padding node, edge and line edge
        (their room in its graph layout too): a shape of it, or covering it, leaves room for the
        padding that ``plan`` adds."""
        batch, layout = planned.batch, planned.plan.graph
        groups = layout.group_counts() if layout is not None else ()
        return Shape(problems=len(batch), tokens=batch.tokens.size(1), quantities=batch.num_pos.size(1),
                     targets=batch.target.size(1), nodes=batch.node_batch.numel() + 1,
                     edges=batch.edge_type.numel() + 1, line_edges=batch.line_index.size(1) + 1,
                     groups=(groups[0] + 1, *groups[1:]) if groups else (),  # the padding node is of type 0
                     tree=planned.plan.trees.sizes())

    def parts(self) -> dict[str, list[nn.Parameter]]:
        """The model's parameters by part (``hlgt.metrics.MODEL_PARTS``), for per-part gradient norms;
        a part the model lacks (the GTS arm's graph layers) is absent."""
        modules = {"embedding": self.encoder.embedding, "word_gru": self.encoder.word_gru,
                   "seq_gru": getattr(self.encoder, "seq_gru", None), "graph": getattr(self.encoder, "graph", None),
                   "fusion": getattr(self.encoder, "fusion", None), "decoder": self.decoder,
                   "comparison": self.comparison}
        return {name: list(m.parameters()) for name, m in modules.items() if m is not None}

    def _check_targets(self, batch: Batch) -> None:
        """Every problem needs a gold prefix whose slots exist in it (structure: ``tree_layout``)."""
        empty = ~batch.target_mask.any(1)
        if bool(empty.any()):
            ids = [batch.ids[i] for i in empty.nonzero().squeeze(1).tolist()]
            raise ValueError(f"problems {ids} have no gold equation; the training loss needs one")
        n_fixed = len(self.vocab.outputs)
        n_quantities = batch.num_mask.sum(1, keepdim=True)  # [B, 1]
        bad = (batch.target_mask & ((batch.target < 0) | (batch.target >= n_fixed + n_quantities))).any(1)
        if bool(bad.any()):
            ids = [batch.ids[i] for i in bad.nonzero().squeeze(1).tolist()]
            raise ValueError(f"problems {ids} have a gold token outside the outputs or the problem's quantities")

    @torch.no_grad()
    def solve(self, batch: Batch, beam_size: int | None = None, beam_batch: int | None = None,
              bf16_inference: bool | None = None) -> list[list[str]]:
        """Prefix tokens (ops, constants, "N0".."Nk") per problem; [] if no expression can be formed.

        ``beam_size`` and ``bf16_inference`` (bfloat16 products in the encoder's CPU GRUs) are
        this call's settings; None takes the model config's (``model.beam_size``,
        ``model.bf16_inference``).

        ``beam_batch``: the encoder runs on the whole batch at once, the beam search on
        consecutive slices of at most this many problems (None: all), as even as possible
        (200 problems by 64: four slices of 50, not 64, 64, 64, 8), each trimmed to its
        longest text. On the CPU the encoder's step-by-step products are more efficient over
        more rows, while the beam search's attention tensors ([problems x beams, tokens, H])
        outgrow the caches and pad every problem to the batch's longest text; callers that sort
        problems by length get slices of similar lengths. With several torch threads on the CPU
        the slices are searched side by side, one thread each (``_map_on_cpu_threads``). A
        problem's output does not depend on its batch-mates either way."""
        beam_size = self.cfg.beam_size if beam_size is None else beam_size
        bf16_inference = self.cfg.bf16_inference if bf16_inference is None else bf16_inference
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        if beam_batch is not None and beam_batch < 1:
            raise ValueError(f"beam_batch must be >= 1, got {beam_batch}")
        was_training = self.training
        self.eval()
        try:
            enc = self.encoder(batch, low_precision=bf16_inference)
            step = even_step(len(batch), beam_batch or len(batch))
            slices = [slice(start, start + step) for start in range(0, len(batch), step)]

            def search(rows: slice) -> list[list[int]]:
                T = int(batch.lengths[rows].max())
                return self.decoder.beam_search(enc.tokens[rows, :T], enc.mask[rows, :T], enc.problem[rows],
                                                batch.num_pos[rows], batch.num_mask[rows],
                                                beam_size=beam_size, max_len=self.cfg.max_output_len)

            ids = [seq for part in _map_on_cpu_threads(search, slices, enc.tokens.device) for seq in part]
        finally:
            self.train(was_training)
        return [[self.vocab.output_token(i) for i in seq] for seq in ids]

    @torch.no_grad()
    def inspect(self, batch: Batch, beam_size: int | None = None, bf16_inference: bool | None = None) -> Inspection:
        """``solve``'s decoding seen from inside (``Inspection``): every problem's final beam
        candidates, the first of which ``solve`` returns, and the HLGT layers' attention. The
        batch is encoded and searched whole, in eval mode; settings as in ``solve``."""
        beam_size = self.cfg.beam_size if beam_size is None else beam_size
        bf16_inference = self.cfg.bf16_inference if bf16_inference is None else bf16_inference
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        was_training = self.training
        self.eval()
        try:
            enc = self.encoder(batch, low_precision=bf16_inference, return_attention=True)
            found = self.decoder.beam_candidates(enc.tokens, enc.mask, enc.problem, batch.num_pos, batch.num_mask,
                                                 beam_size=beam_size, max_len=self.cfg.max_output_len)
        finally:
            self.train(was_training)
        candidates = [[([self.vocab.output_token(i) for i in ids], score) for ids, score in problem]
                      for problem in found]
        return Inspection(candidates=candidates, attention=enc.attention)

    def flat_config(self) -> dict[str, Any]:
        """The model config as flat ``model.*`` keys."""
        return {f"model.{f.name}": getattr(self.cfg, f.name) for f in dataclasses.fields(self.cfg)}

    def save(self, directory, extra: dict | None = None) -> None:
        extra = dict(extra or {})
        clash = sorted(k for k in extra if k.startswith("model.") or k == "weights_format")
        if clash:
            raise ValueError(f"extra keys {clash} clash with the model config, which save writes itself")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / CONFIG_FILE).write_text(json.dumps({**self.flat_config(), **extra,
                                                         "weights_format": WEIGHTS_FORMAT}, indent=2, sort_keys=True))
        (directory / VOCAB_FILE).write_text(json.dumps(self.vocab.to_dict(), ensure_ascii=False))
        torch.save(self.state_dict(), directory / WEIGHTS_FILE)

    @classmethod
    def load(cls, directory, map_location="cpu") -> "Solver":
        directory = Path(directory)
        missing = [n for n in (CONFIG_FILE, VOCAB_FILE, WEIGHTS_FILE) if not (directory / n).is_file()]
        if missing:
            raise FileNotFoundError(f"{directory} is not a saved Solver: missing {missing}")
        flat = read_json_object(directory / CONFIG_FILE)
        stored = stored_weights_format(flat)
        if stored != WEIGHTS_FORMAT:
            raise ValueError(f"{directory} holds weights of format {stored}; this "
                             f"version computes format {WEIGHTS_FORMAT} (see WEIGHTS_FORMAT in "
                             f"hlgt/model/solver.py): retrain, or load it with the version that saved it")
        lacking = [k for k in MODEL_KEYS if k not in flat]
        if lacking:
            raise ValueError(f"{directory / CONFIG_FILE} lacks {', '.join(lacking)}: not as training wrote it")
        try:
            cfg = Config.from_flat({k: v for k, v in flat.items() if k.startswith("model.")}).model
        except ValueError as error:  # unknown keys or bad values: a hand-edited file
            raise ValueError(f"{directory / CONFIG_FILE}: {error}") from error
        vocab = read_json_object(directory / VOCAB_FILE, Vocab.from_dict)
        solver = cls(cfg, vocab)
        try:
            solver.load_state_dict(torch.load(directory / WEIGHTS_FILE, map_location=map_location, weights_only=True))
        except (RuntimeError, pickle.UnpicklingError, EOFError) as error:
            # A cut or overwritten file, or weights of other sizes than config.json describes.
            raise ValueError(f"cannot load {directory / WEIGHTS_FILE}: {first_fault(error)}") from error
        if isinstance(map_location, (str, torch.device)):
            solver.to(map_location)
        return solver


def read_json_object(path: Path, parse=dict) -> Any:
    """``parse`` of the JSON object in ``path``; a file that is not what it should be is a
    ValueError naming it (a model folder copied by hand may hold a cut or edited file)."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(content, dict):
            raise ValueError(f"a JSON object expected, not {type(content).__name__}")
        return parse(content)
    except (ValueError, KeyError) as error:
        raise ValueError(f"{path} is damaged: {error}") from error


def first_fault(error: Exception) -> str:
    """The first line that names a fault in torch's message: load_state_dict heads its list of
    mismatches with a line ending in a colon; the zip reader's first sentence names the fault."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    line = lines[1] if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    return line.split(". ")[0]


def even_step(n: int, most: int) -> int:
    """Size of the slices that cut n items into the fewest slices of at most ``most``, evenly."""
    slices = -(-n // most)
    return -(-n // slices)


def _map_on_cpu_threads(fn, items: list, device: torch.device) -> list:
    """``[fn(x) for x in items]``; on the CPU with N > 1 torch threads, up to N items at a time,
    each on its own Python thread with one torch thread (restored afterwards).

    Why: a beam search is hundreds of small operations per step, which torch does not spread over
    threads (one search takes about as long with 2 threads as with 1), while independent searches
    run side by side. The operations release the GIL; each search sets its own no-grad mode
    (thread-local)."""
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads < 2 or len(items) < 2:
        return [fn(x) for x in items]
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
            return list(pool.map(fn, items))
    finally:
        torch.set_num_threads(threads)
