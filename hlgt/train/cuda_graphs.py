"""Training steps whose part after the BiGRUs, or whole forward and backward, is captured as CUDA
graphs (``train.cuda_graphs``, ``train.capture_bigrus``).

On a GPU a training step is thousands of small operators, each launched by the host one after
another: the host, not the GPU, sets the pace (``bench --replay`` measures how much). Batches
padded to one ``Shape`` (``Solver.plan(batch, shape)``, ``hlgt.model.plan``) run the same operators on the same shapes
after the encoder's BiGRUs, so that part, forward and backward, is captured once
(``torch.cuda.make_graphed_callables``) and replayed for every batch of the shape. The embedding
and the BiGRUs, which run over each batch's own lengths (cuDNN, over a packing that differs from
batch to batch), stay eager, as do the gradient bookkeeping and Adam. With ``bigrus`` the BiGRUs
run as causal passes over the shape's padded tokens instead (``hlgt.model.gru.Reversal``: the same
states), so the whole forward and backward from the embedding on is captured; batches are then
bucketed by their longest text too (``TOKENS``), so that the passes run few steps past it.

The shapes are learned, not configured, one per bucket of tree depths (``DEPTHS``, and with
``bigrus`` token lengths): before the first epoch, its batches are planned (no step runs) and each
bucket gets a shape covering the sizes of its full batches (``Solver.shape_of``) with room
(``Shape.rounded``; with ``bigrus`` the tokens are the bucket's bound: ``learn``). A batch that
fits its bucket's shape is padded to it and replayed, else padded to the least other shape it fits;
one that fits none (a larger batch of another shuffle, the short last batch, a tree deeper than the
buckets) runs eagerly, and its bucket's shape grows at the epoch's end and is captured anew. A
capture that fails (the step does something a capture forbids) leaves every later step eager, with
the reason; with ``bigrus``, it first leaves the BiGRUs eager and the rest captured, as without.
``epoch_note`` says how many batches ran which way.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from hlgt.data.collate import Batch
from hlgt.model.gru import Reversal
from hlgt.model.plan import Planned, Shape
from hlgt.model.solver import Solver
from hlgt.tensors import tensors_of, with_tensors


def require_gpu(device: torch.device) -> None:
    if device.type != "cuda":
        raise ValueError(f"train.cuda_graphs captures CUDA graphs: it needs a GPU, not {device.type} (hlgt-train's "
                         "--gpu, curve's and bench's --device cuda)")


class _Captured(nn.Module):
    """The captured part of a training step as a function of tensors only, as graph capture wants:
    ``Solver.after_recurrence`` of the BiGRU states, then the tensors of a planned batch laid out
    as ``template`` (its packing left out: the BiGRUs read it, not this part); with no states (a
    ``Reversal`` in the plan: ``bigrus``), ``Solver.forward`` of the batch's tensors alone.
    Returns the losses, then the activation scales."""

    def __init__(self, solver: Solver, template: Planned, n_states: int):
        super().__init__()
        self.solver, self.n_states = solver, n_states
        self.template = _without_packing(template) if n_states else template
        self.scale_names: list[str] = []

    def forward(self, *args: Tensor) -> tuple[Tensor, ...]:
        states, tensors = args[: self.n_states], iter(args[self.n_states:])
        planned = with_tensors(self.template, tensors)
        # Rebuilt, the batch counts as unchecked; it was checked when collated (no host sync here).
        planned.batch.checked = self.template.batch.checked
        out = self.solver.after_recurrence(planned, states) if states else self.solver(planned)
        self.scale_names = list(out["scales"])
        return (out["loss"], out["tree_loss"], out["com_loss"], *out["scales"].values())


def _without_packing(planned: Planned) -> Planned:
    return dataclasses.replace(planned, plan=dataclasses.replace(planned.plan, packing=None))


def _graph_inputs(planned: Planned) -> list[Tensor]:
    """The tensors a captured step reads: a ``Reversal``'s are of the shape's sizes, a packing's not."""
    return tensors_of(planned if isinstance(planned.plan.packing, Reversal) else _without_packing(planned))


# Gold trees of a batch are as deep as its deepest problem's, from 4 to 21 levels on Math23K; a
# shape for the deepest would run the decoder's loop 3-4 times longer than most batches need, so
# batches get one shape (and one captured graph) per depth bucket. Deeper trees run eagerly.
DEPTHS = (5, 6, 8, 12, 16, 24, 32, 48)
# With the BiGRUs captured, the causal passes run over every padded token: a shape per depth alone
# would pad Math23K's batches to 136-144 tokens where their longest texts have 61 on average;
# buckets of these longest lengths pad them to 69.
TOKENS = (48, 64, 80, 96, 128, 192, 256, 512)


@dataclass
class _Bucket:
    seen: Shape | None = None  # covering every full batch's own shape so far
    shape: Shape | None = None  # what its batches are padded to; None until learned (``learn``, an epoch's end)
    graphed: nn.Module | None = None  # captured at its first padded batch


class GraphedSteps:
    """``plan`` and ``forward`` for the training loop, replaying the captured part of the step
    for batches that fit their bucket's learned shape; ``bigrus``: from the embedding on (module
    docstring)."""

    def __init__(self, solver: Solver, bigrus: bool = False):
        self.solver, self.bigrus, self.by_tokens = solver, bigrus, bigrus
        self.problems: int | None = None  # a full batch's size: the first batch's
        self.buckets: dict[tuple[int, int | None], _Bucket] = {}  # by (depth bound, token bound with bigrus)
        self.counts = {"replayed": 0, "eager": 0}
        self.failed: str | None = None  # why a capture failed: every later step runs eagerly
        self.bigrus_failed: str | None = None  # why a capture with the BiGRUs failed: they run eagerly

    def learn(self, batches: Iterable[Batch]) -> str:
        """Shapes for the buckets from the batches of the coming epoch, planned only: that epoch
        pads and replays from its first batch. Says how many shapes it learned."""
        for batch in batches:
            self.plan(batch)
        lengths = " and longest texts" if self.by_tokens else ""
        return f"cuda graphs: {self._grow()} shapes learned for the batches' depths{lengths}"

    def plan(self, batch: Batch) -> Planned:
        """The batch planned, padded to its bucket's shape when it fits, else to the least other
        shape it fits; if none, eager, its sizes recorded for its bucket to grow."""
        planned = self.solver.plan(batch)
        self.problems = self.problems or len(batch)
        key = self._bucket_key(planned)
        if key is None or len(batch) != self.problems:
            return planned  # too deep or too long, or the short last batch: eager
        own = self.solver.shape_of(planned)
        shape = self._fitting(own, self.buckets.get(key))
        if shape is not None:
            return self.solver.plan(planned, shape, causal=self.bigrus)
        bucket = self.buckets.setdefault(key, _Bucket())
        bucket.seen = own if bucket.seen is None else bucket.seen.covering(own)
        return planned

    def _fitting(self, own: Shape, bucket: _Bucket | None) -> Shape | None:
        """The bucket's shape if ``own`` fits it, else the one of fewest tokens (then levels) that
        ``own`` fits: a batch of a rare depth and length replays padded further, rather than
        eagerly and its bucket captured anew for it (with the BiGRUs captured, a few of Math23K's
        batches each epoch)."""
        if bucket is not None and bucket.shape is not None and own.fits(bucket.shape):
            return bucket.shape
        shapes = [b.shape for b in tuple(self.buckets.values()) if b.shape is not None and own.fits(b.shape)]
        return min(shapes, key=lambda s: (s.tokens, len(s.tree.goals)), default=None)

    def _bucket_key(self, planned: Planned) -> tuple[int, int | None] | None:
        depth = next((d for d in DEPTHS if planned.plan.trees.n_levels <= d), None)
        tokens = next((t for t in TOKENS if planned.batch.tokens.size(1) <= t), None) if self.by_tokens else None
        return None if depth is None or (self.by_tokens and tokens is None) else (depth, tokens)

    def forward(self, planned: Planned) -> dict[str, Tensor]:
        """The solver's training outputs for a planned batch on the GPU: replayed when it was
        padded to a shape, else eager."""
        shape = planned.plan.shape
        whole = isinstance(planned.plan.packing, Reversal)  # the BiGRUs captured too
        # (A batch laid out for them, planned ahead before capturing them failed, runs eagerly.)
        if shape is None or self.failed or (whole and not self.bigrus):
            self.counts["eager"] += 1
            return self.solver(planned)
        # Planned.to copies the shape. A snapshot of the buckets: the planning thread (``planned``)
        # may add one meanwhile.
        bucket = next(b for b in tuple(self.buckets.values()) if b.shape == shape)
        states = () if whole else self.solver.encoder.recurrence(planned.batch, planned.plan.packing)
        if bucket.graphed is None:
            try:
                bucket.graphed = self._capture(planned, states)
            except RuntimeError as e:  # something in the step a capture forbids (a host sync, ...)
                self._capture_failed(str(e).splitlines()[0], whole)
                self.counts["eager"] += 1
                return self.solver(planned) if whole else self.solver.after_recurrence(planned, states)
        self.counts["replayed"] += 1
        # A replay writes its outputs into the tensors the capture made and returns views of them:
        # copies, so that a step's losses outlive the next replay (the bench keeps them all).
        outs = [o.clone() for o in bucket.graphed(*states, *_graph_inputs(planned))]
        names = bucket.graphed.scale_names
        # Every output of a graphed callable requires grad: the scales are detached, as eager ones
        # are, so that summing them over an epoch keeps no chain of autograd nodes alive.
        scales = {name: o.detach() for name, o in zip(names, outs[3:])}
        return {"loss": outs[0], "tree_loss": outs[1], "com_loss": outs[2], "scales": scales}

    def _capture_failed(self, reason: str, whole: bool) -> None:
        """A failed capture with the BiGRUs leaves them eager from the next plan on, each shape
        captured anew without them; any other leaves every step eager."""
        if not whole:
            self.failed = reason
            return
        self.bigrus, self.bigrus_failed = False, reason
        for bucket in tuple(self.buckets.values()):
            bucket.graphed = None

    def _capture(self, planned: Planned, states: tuple[Tensor, ...]) -> nn.Module:
        # The capture's own warm-up runs the module (and names the scales); without the BiGRUs in
        # it, their weights are among its parameters but unused.
        module = _Captured(self.solver, planned, len(states))
        args = tuple(s.detach().requires_grad_(s.requires_grad) for s in states) + tuple(_graph_inputs(planned))
        return torch.cuda.make_graphed_callables(module, args, allow_unused_input=True)

    def _grow(self) -> int:
        """Each bucket whose batches outgrew its shape (or had none) gets one covering them, with
        room (``Shape.rounded``), captured anew at its next batch. -> how many grew."""
        grown = 0
        for (_, tokens), bucket in self.buckets.items():
            if bucket.shape is None or not bucket.seen.fits(bucket.shape):
                room = bucket.seen.rounded()
                if tokens is not None:  # its batches' texts are at most that long
                    room = dataclasses.replace(room, tokens=tokens)
                bucket.shape = room if bucket.shape is None else bucket.shape.covering(room)
                bucket.graphed = None
                grown += 1
        return grown

    def epoch_note(self) -> str:
        """How this epoch's batches ran; at its end, the shapes its batches outgrew grow."""
        replayed, eager = self.counts["replayed"], self.counts["eager"]
        self.counts = {"replayed": 0, "eager": 0}
        grown = self._grow()
        note = f"cuda graphs: {replayed} batches replayed, {eager} eager"
        if self.failed:
            return note + f"; capture failed, every step eager: {self.failed}"
        if self.bigrus_failed:
            note += f"; capturing the BiGRUs failed, they run eagerly: {self.bigrus_failed}"
        return note + (f"; {grown} of {len(self.buckets)} shapes grown, captured anew" if grown else "")
