"""The model's plan of a batch: what a training step reads besides the batch's own tensors.

``Solver.plan`` makes it on the CPU, where the batch is collated, before the batch moves to a
GPU: the gold trees laid out for the decoder (``TreeLayout``), the graph laid out for the HLGT
layers (``GraphLayout``) and the lengths packed for the BiGRUs (``Packing``; for a step that
captures the BiGRUs too, their causal passes' layout, ``Reversal``). Making each reads sizes back,
which on a GPU would make every step wait. With a ``Shape`` the batch and its plan are padded to
fixed sizes, so that every batch padded alike runs the same operators on the same shapes (what a
step captured as a CUDA graph needs). A ``Planned`` batch is the batch and its plan, moved
to a device together.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from hlgt.data.collate import Batch
from hlgt.model.gru import Packing, Reversal
from hlgt.model.hlgt_conv import GraphLayout
from hlgt.model.tree_layout import TreeLayout, TreeSizes
from hlgt.tensors import tensors_to


@dataclass(frozen=True)
class Shape:
    """Fixed sizes for a planned batch (``Solver.plan``): its problems, tokens, quantities and
    target tokens, its graph's nodes, edges and line edges, the HLGT layers' type groups and the
    decoder's tree levels. ``Solver.shape_of`` gives a batch's own; ``covering`` the least that
    holds two."""

    problems: int
    tokens: int
    quantities: int
    targets: int
    nodes: int
    edges: int
    line_edges: int
    groups: tuple[int, ...]  # touched nodes per type group (empty for arms without HLGT layers)
    tree: TreeSizes

    def covering(self, other: Shape) -> Shape:
        if self.problems != other.problems or len(self.groups) != len(other.groups):
            raise ValueError("shapes of different batch sizes or node typings cannot be covered by one")
        sizes = {f.name: max(getattr(self, f.name), getattr(other, f.name)) for f in dataclasses.fields(self)
                 if f.name not in ("groups", "tree")}
        return Shape(**sizes, groups=tuple(map(max, self.groups, other.groups)), tree=self.tree.covering(other.tree))

    def rounded(self) -> Shape:
        """Room for somewhat larger batches: each count grown by a quarter, up to a multiple of 8
        (graph sizes of 64), so that fewer batches of another shuffle outgrow a shape seen once."""
        def up(n: int, k: int = 8) -> int:
            return -(-(n + n // 4) // k) * k
        tree = TreeSizes(tuple((up(a), up(b)) for a, b in self.tree.goals), tuple(map(up, self.tree.ops)),
                         tuple((up(a), up(b)) for a, b in self.tree.subs))
        return dataclasses.replace(self, tokens=up(self.tokens), quantities=up(self.quantities),
                                   targets=up(self.targets), nodes=up(self.nodes, 64), edges=up(self.edges, 64),
                                   line_edges=up(self.line_edges, 64), groups=tuple(map(up, self.groups)), tree=tree)

    def fits(self, to: Shape) -> bool:
        """Whether a batch of this shape can be padded to ``to``."""
        try:
            return self.covering(to) == to
        except ValueError:
            return False


@dataclass
class BatchPlan:
    trees: TreeLayout  # the gold trees laid out for the decoder
    graph: GraphLayout | None  # the HLGT layers' graph layout (None for the other arms)
    packing: Packing | Reversal  # the lengths packed for the BiGRUs, or laid out for causal passes
    shape: Shape | None = None  # the fixed sizes the batch and its plan were padded to, if any


@dataclass
class Planned:
    """A batch and the model's plan of it: what a training step takes (``Solver.forward``)."""

    batch: Batch
    plan: BatchPlan

    def to(self, device: torch.device | str) -> Planned:
        """The batch and its plan on ``device``, in one transfer per dtype (``tensors_to``)."""
        moved = tensors_to(self, device)
        moved.batch.checked = self.batch.checked
        return moved

    def __len__(self) -> int:
        return len(self.batch)
