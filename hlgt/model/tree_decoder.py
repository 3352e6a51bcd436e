"""The goal-driven tree decoder (GTS, Xie & Sun 2019), batched.

The modules and their math are GTS's (``models.py`` of ShichaoSun/math_seq2tree): a goal vector
per tree node (Prediction's concat_l / concat_r gates), additive attention of the goal over the
encoder memory (TreeAttn), a score of [goal; context] against every output (ops by a linear layer,
constants and the problem's numbers by Score against their embeddings, eq. 7 of the paper: a
number's embedding is the memory vector at its token), GenerateNode for the two child goals of an
operator, and Merge for the embedding of a finished subtree. Output ids follow ``Vocab``:
operators, then constants, then the problem's slots ``N0..Nk``.

What differs from GTS is only how the work is batched:

* Paired linear layers that always see the same input are stored as one layer with stacked
  outputs (``concat_l``+``concat_lg`` -> ``goal_left``, the four ``generate_*`` -> ``generate``,
  ``merge``+``merge_g`` -> ``merge``): one matmul instead of two or four, identical math.
  Linear layers over a concatenation whose one part is fixed for the whole problem (the memory
  in TreeAttn, the candidate embeddings in Score) are split, and the fixed part is projected once
  per problem instead of once per node: identical math, since ``W[a; b] = W_a a + W_b b``.
* Teacher forcing: the gold prefix fixes the tree, so parent, side and depth of every target
  position are computed up front from the [B, S] target with tensor ops (``tree_layout``; the
  training loop makes it on the CPU before the batch moves, ``Solver.plan``, as it reads
  sizes back).
  Subtree embeddings (Merge) depend only on gold tokens and the memory, never on goals, so they
  are computed bottom-up first, one batched Merge per tree depth; then goals are computed
  top-down, one batched step per depth over every node of that depth in the whole batch.
  GTS's sequential loop over target positions becomes a loop over tree depth. Merges whose
  result GTS computes but never reads (the root's right spine) are skipped.
* Beam search runs every problem and beam at once ([B*K] rows) with goal stacks and
  pending-operator stacks held as index tensors into pools of node vectors, so that reordering
  beams moves integers, not vectors. Finished beams compete with live ones as in GTS. Children
  of one beam share the [goal; context] part of GenerateNode; the operator label's parts of
  GenerateNode and Merge are one table row per operator, computed once per search; a beam that
  completes its tree skips the merges nobody reads. Unlike GTS, choices that cannot complete within
  ``max_output_len`` are masked, so the best beam is always a finished, well-formed expression
  (GTS returns an unfinished one when it hits the length limit).
* TreeAttn's and Score's ``v . tanh(a) + c`` over every (node, token) and (node, candidate) pair
  is computed as ``2v . sigmoid(2a) + (c - sum(v))``: the same function up to float rounding, and
  PyTorch's CPU sigmoid runs about 5x faster than its tanh on these, decoding's largest tensors.
* Dropout is GTS's, placed where GTS places it, with one exception: GTS draws a new dropout mask
  on the candidate embeddings at every decoding step; here one mask is drawn per problem per
  forward pass, which is what lets their projection be computed once.

``LEVEL_FUNCTIONS`` are what one tree level runs (goals, Prediction, GenerateNode, Merge):
``Solver.compile_parts`` hands them to ``torch.compile`` with dynamic shapes, since the levels run
one after another with different node counts, each a few dozen small operators.

GTS's ``num_stack`` (a gold number whose value several quantities share is scored as whichever
of them the model prefers) is not implemented: the data pipeline resolves every gold number to
one slot and the decoder is trained towards that slot.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

NEG = -1e12  # GTS's mask value for logits of padded numbers and padded tokens


def _gated(x: torch.Tensor) -> torch.Tensor:
    """GTS's ``tanh(W x) * sigmoid(W_g x)`` with the two layers stacked on the last dim."""
    value, gate = x.chunk(2, dim=-1)
    return torch.tanh(value) * torch.sigmoid(gate)


def _children(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GenerateNode's left and right child vectors from its stacked layer output
    [..., 4H] = generate_l | generate_lg | generate_r | generate_rg -> ([..., H], [..., H])."""
    left, right = x.chunk(2, dim=-1)
    return _gated(left), _gated(right)


def _tanh_folded(weight: torch.Tensor, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``v . tanh(a) + c`` as ``v2 . sigmoid(2a) + c2``: tanh(a) = 2 sigmoid(2a) - 1, so the affine
    map folds into its weights. weight v [1, H], bias c [1] or None -> (v2 [1, H], c2 [1])."""
    return 2 * weight, (-weight.sum(-1) if bias is None else bias - weight.sum(-1))


@dataclass
class Sources:
    """What every decoding step reads of the batch's problems and of the layers' fixed parts, made
    once per forward pass or search (``TreeDecoder.sources``)."""

    memory: torch.Tensor  # [B, T, H]
    pad: torch.Tensor  # [B, T] True on padded tokens
    keys: torch.Tensor  # [B, T, H] the memory's part of TreeAttn's layer, doubled (see ``attend``)
    cands: torch.Tensor  # [B, O, H] constants then the problem's numbers, zero on padded numbers
    cand_pad: torch.Tensor  # [B, O] True on padded numbers
    cand_keys: torch.Tensor  # [B, O, H] the candidates' part of Score's layer, doubled
    goal_weight: torch.Tensor  # [H, H] the goal's part of TreeAttn's layer, doubled
    leaf_weight: torch.Tensor  # [H, 2H] the [goal; context] part of Score's layer, doubled
    attn_out: tuple[torch.Tensor, torch.Tensor]  # TreeAttn.score folded (``_tanh_folded``)
    score_out: tuple[torch.Tensor, torch.Tensor]  # Score.score folded


@dataclass
class TreeOutput:
    """Teacher-forced decoder output, one row per real target token (rows in level order)."""

    logits: torch.Tensor  # [N, V] V = ops + constants + max quantities of the batch
    gold: torch.Tensor  # [N] gold output id
    batch_index: torch.Tensor  # [N] problem of each row
    position: torch.Tensor  # [N] target position of each row


@dataclass
class TreeLayout:
    """The gold trees of a batch, arranged for level-by-level processing (see ``tree_layout``).

    Goal order: every node, sorted by (depth, right child?, flat id). Sub order: the nodes whose
    subtree embedding is ever used, sorted by (depth, operator?, flat id). ``*_starts`` are the
    Python offsets of each depth level in these orders.
    """

    n_levels: int
    goal_starts: list[int]  # [n_levels + 1]
    goal_n_left: list[int]  # per level: left children (and the root) come first
    goal_op_starts: list[int]  # [n_levels + 1] offsets into goal_op_rows
    sub_starts: list[int]  # [n_levels + 1]
    sub_n_leaf: list[int]  # per level: leaves come first
    goal_node: torch.Tensor  # [N] flat id b*S+t of each node in goal order
    goal_batch: torch.Tensor  # [N] problem index
    goal_gold: torch.Tensor  # [N] gold id
    goal_parent_row: torch.Tensor  # [N] row of the parent among the previous level's operators
    goal_sib_row: torch.Tensor  # [N] row of the left sibling in the same level's sub order (right children)
    goal_op_rows: torch.Tensor  # [N_ops] in-level row of each operator node, level by level
    goal_op_ids: torch.Tensor  # [N_ops] its operator id
    sub_ids: torch.Tensor  # [M] gold id of each node in sub order
    sub_batch: torch.Tensor  # [M] problem index in sub order
    sub_left_row: torch.Tensor  # [M] row of the left child in the next level's sub order (operators)
    sub_right_row: torch.Tensor  # [M] row of the right child in the next level's sub order (operators)

    def sizes(self) -> TreeSizes:
        """Rows of each part of each level: what ``padded`` pads to."""
        goals = tuple((n_left, hi - lo - n_left) for lo, hi, n_left in
                      zip(self.goal_starts, self.goal_starts[1:], self.goal_n_left))
        ops = tuple(hi - lo for lo, hi in zip(self.goal_op_starts, self.goal_op_starts[1:]))
        subs = tuple((n_leaf, hi - lo - n_leaf) for lo, hi, n_leaf in
                     zip(self.sub_starts, self.sub_starts[1:], self.sub_n_leaf))
        return TreeSizes(goals, ops, subs)

    def padded(self, to: TreeSizes, n_ops: int, widths: tuple[int, int]) -> TreeLayout:
        """This layout with every part of every level grown to ``to``'s rows (each at least this
        layout's, ``TreeSizes.covering``), so that the decoder's loop runs the same operators on the
        same shapes for every layout padded alike, for the batch's targets padded from ``widths[0]``
        to ``widths[1]`` tokens (``goal_node`` counts b*S+t). A padding row computes from row 0 of
        what it reads (or the first candidate, for a leaf) and its gold is -100, the loss's ignore
        index: no real row reads it and the loss leaves it out, so the real rows' logits and the
        loss are the unpadded layout's."""
        have = self.sizes()
        if not have.fits(to):
            raise ValueError(f"tree sizes {have} do not fit {to}")
        sib_row, op_rows, left_row, right_row = self._rows_past_padding(have, to)
        ops_want = [(n, 0) for n in to.ops]
        goal, sub = _grower(have.goals, to.goals), _grower(have.subs, to.subs)
        op = _grower([(n, 0) for n in have.ops], ops_want)

        def starts(parts) -> list[int]:
            return list(accumulate((a + b for a, b in parts), initial=0))

        return TreeLayout(
            n_levels=len(to.goals),
            goal_starts=starts(to.goals),
            goal_n_left=[a for a, _ in to.goals],
            goal_op_starts=starts(ops_want),
            sub_starts=starts(to.subs),
            sub_n_leaf=[a for a, _ in to.subs],
            goal_node=goal(self.goal_node // widths[0] * widths[1] + self.goal_node % widths[0], 0),
            goal_batch=goal(self.goal_batch, 0),
            goal_gold=goal(self.goal_gold, IGNORE),
            goal_parent_row=goal(self.goal_parent_row, 0),
            goal_sib_row=goal(sib_row, 0),
            goal_op_rows=op(op_rows, 0),
            goal_op_ids=op(self.goal_op_ids, 0),
            sub_ids=sub(self.sub_ids, (n_ops, 0)),  # a padding leaf reads the first candidate
            sub_batch=sub(self.sub_batch, 0),
            sub_left_row=sub(left_row, 0),
            sub_right_row=sub(right_row, 0),
        )

    def _rows_past_padding(self, have: TreeSizes, to: TreeSizes) -> tuple[torch.Tensor, ...]:
        """The in-level rows a row points at (``goal_sib_row``, ``goal_op_rows``, and, in the next
        level, ``sub_left_row``, ``sub_right_row``), moved past the padding that ``padded`` puts
        after the first part of the level they point into."""
        def level_of(counts) -> torch.Tensor:  # each row's level
            return torch.repeat_interleave(torch.arange(self.n_levels), torch.tensor(counts))

        goal_level, sub_level = level_of([a + b for a, b in have.goals]), level_of([a + b for a, b in have.subs])
        op_level = level_of(list(have.ops))
        n_left = torch.tensor([a for a, _ in have.goals])
        g_shift = torch.tensor([to_l - l for (l, _), (to_l, _) in zip(have.goals, to.goals)])
        # One more level of subtrees: a leaf of the deepest level has no children, its rows unread.
        n_leaf = torch.tensor([a for a, _ in have.subs] + [0])
        s_shift = torch.tensor([to_l - l for (l, _), (to_l, _) in zip(have.subs, to.subs)] + [0])
        return (_shifted(self.goal_sib_row, n_leaf[goal_level], s_shift[goal_level]),
                _shifted(self.goal_op_rows, n_left[op_level], g_shift[op_level]),
                _shifted(self.sub_left_row, n_leaf[sub_level + 1], s_shift[sub_level + 1]),
                _shifted(self.sub_right_row, n_leaf[sub_level + 1], s_shift[sub_level + 1]))


def _shifted(rows: torch.Tensor, first: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """In-level rows moved past the padding of their level's first part (``first`` rows long)."""
    return rows + torch.where(rows >= first, shift, 0)


def _grower(parts, want):
    """For tensors in level order whose levels have ``parts`` (first, second) rows: a function that
    pads each part to ``want``'s rows with ``fill`` (a value, or a pair: one per part)."""
    dest, first_pad, base = [], [], 0  # each row's row in the padded order; padding of first parts
    for d, (w_first, w_second) in enumerate(want):
        first, second = parts[d] if d < len(parts) else (0, 0)
        dest += [np.arange(base, base + first), np.arange(base + w_first, base + w_first + second)]
        first_pad.append(np.arange(base + first, base + w_first))
        base += w_first + w_second
    dest, first_pad = torch.from_numpy(np.concatenate(dest)), torch.from_numpy(np.concatenate(first_pad))

    def grow(x: torch.Tensor, fill) -> torch.Tensor:
        fills = fill if isinstance(fill, tuple) else (fill, fill)
        out = x.new_full((base,), fills[1])
        if fills[0] != fills[1]:
            out[first_pad] = fills[0]
        return out.index_copy_(0, dest, x)
    return grow

IGNORE = -100  # F.cross_entropy's ignore_index: the gold of a padding row


@dataclass(frozen=True)
class TreeSizes:
    """Rows per level of a ``TreeLayout``: goals (left children and the root, right children), the
    operators among them, and the subtree embeddings (leaves, operators)."""

    goals: tuple[tuple[int, int], ...]
    ops: tuple[int, ...]
    subs: tuple[tuple[int, int], ...]

    def covering(self, other: TreeSizes) -> TreeSizes:
        """The least sizes that both fit: the larger of each part, over the deeper of the two."""
        def wider(a: tuple, b: tuple, empty):
            n = max(len(a), len(b))
            a, b = a + (empty,) * (n - len(a)), b + (empty,) * (n - len(b))
            return tuple(tuple(map(max, x, y)) if isinstance(x, tuple) else max(x, y) for x, y in zip(a, b))
        return TreeSizes(wider(self.goals, other.goals, (0, 0)), wider(self.ops, other.ops, 0),
                         wider(self.subs, other.subs, (0, 0)))

    def fits(self, to: TreeSizes) -> bool:
        return self.covering(to) == to


def tree_layout(target: torch.Tensor, target_mask: torch.Tensor, n_ops: int) -> TreeLayout:
    """Parent, side, depth and children of every gold prefix token, without a per-problem loop.

    With ``open[t]`` the number of open slots before token t (1 at the root, +1 per operator, -1 per
    leaf), a left child is a token right after an operator; a right child's parent is the last
    earlier token with the same ``open`` value; the subtree of p ends at the first u >= p after
    which ``open`` drops below ``open[p]``; the depth of t counts operators whose subtree strictly
    contains it. A subtree embedding is used only as the left sibling of a right child or inside
    its parent's, so the nodes on the root's right spine (the root, its right child, ...) need
    none: GTS computes those merges and never reads them; they are skipped here.
    Raises ``ValueError`` naming the rows whose target is not one complete prefix tree.
    """
    B, S = target.shape
    device = target.device
    real = target_mask.bool()
    is_op = real & (target < n_ops)  # [B, S]
    open_before, open_after = _open_slots(real, is_op)
    parent, is_right, depth, used, right_child = _tree_structure(real, is_op, open_before, open_after)

    BS = B * S
    flat = torch.arange(BS, device=device).view(B, S)
    batch_of = (flat // S).view(-1)
    depth, is_op, is_right = depth.view(-1), is_op.view(-1), is_right.view(-1)
    n_levels = int(depth.max()) + 1
    goal_node, goal_row, goal_starts, goal_n_left = _level_order(flat[real], is_right, depth, n_levels)
    sub_node, sub_row, sub_starts, sub_n_leaf = _level_order(flat[used], is_op, depth, n_levels)

    goal_is_op = is_op[goal_node]  # [N]
    goal_op_pos = goal_is_op.nonzero().squeeze(1)  # [N_ops] position in goal order
    ops_per_level = torch.bincount(depth[goal_node[goal_op_pos]], minlength=n_levels)
    op_rank = torch.zeros(BS, dtype=torch.long, device=device)  # row among its level's operators
    ops_before_level = torch.cumsum(ops_per_level, 0) - ops_per_level
    op_rank[goal_node] = torch.cumsum(goal_is_op.long(), 0) - 1 - ops_before_level[depth[goal_node]]
    goal_parent = (batch_of * S + parent.view(-1).clamp(min=0))[goal_node]
    right_flat = (flat // S * S + right_child).view(-1)
    left_flat = (flat.view(-1) + 1).clamp(max=BS - 1)
    return TreeLayout(
        n_levels=n_levels,
        goal_starts=goal_starts,
        goal_n_left=goal_n_left,
        goal_op_starts=[0] + torch.cumsum(ops_per_level, 0).tolist(),
        sub_starts=sub_starts,
        sub_n_leaf=sub_n_leaf,
        goal_node=goal_node,
        goal_batch=batch_of[goal_node],
        goal_gold=target.view(-1)[goal_node],
        goal_parent_row=op_rank[goal_parent],
        goal_sib_row=sub_row[(goal_parent + 1).clamp(max=BS - 1)],
        goal_op_rows=goal_row[goal_node[goal_op_pos]],
        goal_op_ids=target.view(-1)[goal_node[goal_op_pos]],
        sub_ids=target.view(-1)[sub_node],
        sub_batch=batch_of[sub_node],
        sub_left_row=sub_row[left_flat[sub_node]],
        sub_right_row=sub_row[right_flat[sub_node]],
    )


def _open_slots(real: torch.Tensor, is_op: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Open slots before and after every token [B, S] each (``tree_layout``). Raises ``ValueError``
    naming the rows whose real tokens are not one contiguous, complete prefix tree."""
    S = real.size(1)
    lengths = real.sum(1)  # [B]
    pos = torch.arange(S, device=real.device)
    contiguous = (real == (pos[None, :] < lengths[:, None])).all(1)
    delta = torch.where(is_op, 1, -1) * real  # [B, S]
    open_after = 1 + delta.cumsum(1)  # [B, S]
    open_before = open_after - delta  # [B, S]
    last = open_after.gather(1, (lengths - 1).clamp(min=0)[:, None]).squeeze(1)  # [B]
    ok = contiguous & (lengths > 0) & (last == 0) & ~(real & (open_before < 1)).any(1)
    if not bool(ok.all()):
        bad = (~ok).nonzero().squeeze(1).tolist()
        raise ValueError(f"target rows {bad} are not complete prefix expressions (op count vs leaf count)")
    return open_before, open_after


def _tree_structure(real, is_op, open_before, open_after) -> tuple[torch.Tensor, ...]:
    """Per token [B, S] (``tree_layout``'s rules): its parent's position (-1 at the root), whether it is
    a right child, its depth, whether its subtree embedding is used (off the root's right spine),
    and, for an operator, its right child's position."""
    S = real.size(1)
    pos = torch.arange(S, device=real.device)
    earlier = pos[None, :] < pos[:, None]  # [t, p] p < t
    is_left = torch.zeros_like(real)
    is_left[:, 1:] = is_op[:, :-1]  # a token right after an operator is its left child
    same_open = (open_before[:, :, None] == open_before[:, None, :]) & earlier[None] & real[:, None, :]  # [B, t, p]
    parent = torch.where(is_left, pos - 1, torch.where(same_open, pos, -1).amax(-1))  # [B, S]
    is_right = real & ~is_left & (pos > 0)  # [B, S]
    closes = (open_after[:, None, :] == open_before[:, :, None] - 1) & ~earlier[None] & real[:, None, :]  # [B, p, u>=p]
    end = torch.where(closes, pos, S).amin(-1)  # [B, S] last position of the subtree rooted at p
    contains = is_op[:, :, None] & earlier.T[None] & (pos[None, None, :] <= end[:, :, None])  # [B, p, t]
    depth = contains.sum(1)  # [B, S]
    used = real & (is_left | (contains & is_left[:, :, None]).any(1))  # [B, S] off the right spine
    right_child = (end.roll(-1, dims=1) + 1).clamp(max=S - 1)  # [B, S] for an operator p: end(p+1) + 1
    return parent, is_right, depth, used, right_child


def _level_order(nodes: torch.Tensor, second: torch.Tensor, depth: torch.Tensor, n_levels: int):
    """Flat node ids sorted by (depth, second key, id) -> (that order, each node's row within its
    level [B*S], level offsets, rows per level before the second key's)."""
    BS = depth.numel()
    counts = torch.bincount(depth[nodes], minlength=n_levels)  # [n_levels]
    order = nodes[torch.argsort(depth[nodes] * 2 * BS + second[nodes] * BS + nodes)]
    row = torch.zeros(BS, dtype=torch.long, device=depth.device)
    row[order] = torch.arange(order.numel(), device=depth.device) - (torch.cumsum(counts, 0) - counts)[depth[order]]
    n_first = counts - torch.bincount(depth[nodes][second[nodes]], minlength=n_levels)
    return order, row, [0] + torch.cumsum(counts, 0).tolist(), n_first.tolist()

class _Pool:
    """A growing [n, H] store of vectors addressed by integer ids (beam search, no autograd)."""

    def __init__(self, width: int, like: torch.Tensor, capacity: int = 256):
        self.data = like.new_empty(capacity, width)
        self.size = 0

    def add(self, rows: torch.Tensor) -> torch.Tensor:
        n = rows.size(0)
        if self.size + n > self.data.size(0):
            grown = self.data.new_empty(max(2 * self.data.size(0), self.size + n), self.data.size(1))
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size : self.size + n] = rows
        ids = torch.arange(self.size, self.size + n, device=rows.device)
        self.size += n
        return ids



@dataclass
class _Beams:
    """Beam search's rows, one per (problem, beam), problem-major ([B*K]): each row's prefix so far,
    its open goal slots and pending operators as stacks of ids into the search's pools of vectors,
    and its score."""

    goal_stack: torch.Tensor  # [R, depth] node ids (nodes pool) of the open slots, the top last
    goal_top: torch.Tensor  # [R] open slots
    op_stack: torch.Tensor  # [R, depth] pending operators
    op_left: torch.Tensor  # [R, depth] their left subtree's id (subs pool); -1: not yet
    op_top: torch.Tensor  # [R] pending operators
    tokens: torch.Tensor  # [R, max_len] the prefix
    length: torch.Tensor  # [R]
    finished: torch.Tensor  # [R] a complete expression
    score: torch.Tensor  # [R] its log-probability; -inf: no beam

    @classmethod
    def start(cls, beam_size: int, memory: torch.Tensor, max_len: int) -> _Beams:
        """One live beam per problem, its one open slot the problem's root (node id b)."""
        B, K, device = memory.size(0), beam_size, memory.device
        R, ids = B * K, {"dtype": torch.long, "device": device}
        depth = (max_len + 1) // 2 + 1  # the most open slots / pending operators a completable prefix can have
        goal_stack = torch.zeros(R, depth, **ids)
        goal_stack[:, 0] = torch.arange(R, device=device) // K
        score = torch.full((B, K), float("-inf"), device=device, dtype=memory.dtype)
        score[:, 0] = 0.0
        return cls(goal_stack=goal_stack, goal_top=torch.ones(R, **ids), op_stack=torch.zeros(R, depth, **ids),
                   op_left=torch.full((R, depth), -1, **ids), op_top=torch.zeros(R, **ids),
                   tokens=torch.zeros(R, max(max_len, 1), **ids), length=torch.zeros(R, **ids),
                   finished=torch.zeros(R, dtype=torch.bool, device=device), score=score.view(-1))

    def kept(self, parent: torch.Tensor, score: torch.Tensor) -> _Beams:
        """Each row a copy of its ``parent`` row, scored ``score``."""
        rows = {name: value[parent] for name, value in vars(self).items() if name != "score"}
        return _Beams(**rows, score=score)

    def drop_decided(self, beam_size: int) -> None:
        """Scores only fall as beams grow (log-probabilities <= 0): a problem whose best finished
        beam beats all its live ones is decided, and its live beams are dropped (the answer is the
        same; the search just stops once every problem is decided)."""
        finished, score = self.finished.view(-1, beam_size), self.score.view(-1, beam_size)
        done_best = torch.where(finished, score, float("-inf")).amax(1)  # [B]
        live_best = torch.where(finished, float("-inf"), score).amax(1)  # [B]
        self.score = torch.where(~finished & (done_best > live_best)[:, None], float("-inf"), score).view(-1)

    def best(self, beam_size: int) -> list[list[int]]:
        """Each problem's best finished prefix; [] when it has none."""
        score = torch.where(self.finished, self.score, float("-inf")).view(-1, beam_size)
        best_score, best_beam = score.max(1)
        best_row = torch.arange(score.size(0), device=score.device) * beam_size + best_beam
        out_tokens, out_len = self.tokens[best_row].tolist(), self.length[best_row].tolist()
        ok = torch.isfinite(best_score).tolist()
        return [toks[:n] if good else [] for toks, n, good in zip(out_tokens, out_len, ok)]

    def candidates(self, beam_size: int) -> list[list[tuple[list[int], float]]]:
        """Each problem's finished prefixes with their log-probabilities, best first (ties in
        ``best``'s order, so the first is ``best``'s)."""
        score = torch.where(self.finished, self.score, float("-inf")).view(-1, beam_size)
        ranked, order = torch.sort(score, dim=1, descending=True, stable=True)
        tokens, length = self.tokens.tolist(), self.length.tolist()
        out = []
        for b, (scores, beams) in enumerate(zip(ranked.tolist(), order.tolist())):
            rows = [b * beam_size + k for k, s in zip(beams, scores) if s != float("-inf")]
            out.append([(tokens[r][:length[r]], s) for r, s in zip(rows, scores)])
        return out


class TreeDecoder(nn.Module):
    """GTS's Prediction + GenerateNode + Merge over a memory of H-dim token vectors."""

    # What one tree level of teacher forcing runs: each maps a batch of n nodes to n nodes, so one
    # compiled graph serves every level and batch (``Solver.compile_parts``).
    LEVEL_FUNCTIONS = ("left_goal", "right_goal", "predict", "child_nodes", "merge_tree")

    def __init__(self, hidden_size: int, embedding_size: int, n_ops: int, n_consts: int, dropout: float = 0.5):
        super().__init__()
        H, E = hidden_size, embedding_size
        self.hidden_size, self.n_ops, self.n_consts = H, n_ops, n_consts
        self.dropout = nn.Dropout(dropout)
        # Prediction
        self.const_embedding = nn.Parameter(torch.randn(n_consts, H))  # GTS embedding_weight (randn init)
        self.goal_left = nn.Linear(H, 2 * H)  # concat_l | concat_lg
        self.goal_right = nn.Linear(2 * H, 2 * H)  # concat_r | concat_rg over [left subtree; node]
        self.attn = nn.Linear(2 * H, H)  # TreeAttn.attn over [goal; memory token]
        self.attn_score = nn.Linear(H, 1)  # TreeAttn.score
        self.ops = nn.Linear(2 * H, n_ops)  # over [goal; context]
        self.score = nn.Linear(3 * H, H)  # Score.attn over [goal; context; candidate]
        self.score_out = nn.Linear(H, 1, bias=False)  # Score.score
        # GenerateNode
        self.op_embedding = nn.Embedding(n_ops, E)
        self.generate = nn.Linear(2 * H + E, 4 * H)  # generate_l | generate_lg | generate_r | generate_rg
        # Merge
        self.merge = nn.Linear(2 * H + E, 2 * H)  # merge | merge_g over [op; left; right]

    # ---- the GTS pieces, each on a batch of nodes -------------------------------------------
    def left_goal(self, node: torch.Tensor) -> torch.Tensor:
        """Goal of a node with no left sibling (the root, a left child). [n, H] -> [n, H]"""
        return _gated(self.goal_left(self.dropout(node)))

    def right_goal(self, left_tree: torch.Tensor, node: torch.Tensor) -> torch.Tensor:
        """Goal of a right child from its left sibling's subtree embedding. [n, H] x2 -> [n, H]"""
        return _gated(self.goal_right(torch.cat([self.dropout(left_tree), self.dropout(node)], -1)))

    def sources(self, memory: torch.Tensor, mask: torch.Tensor, num_pos: torch.Tensor,
                num_mask: torch.Tensor) -> Sources:
        """``Sources`` of a batch: memory [B, T, H], mask [B, T] True on real tokens, num_pos /
        num_mask [B, Q]. The candidates are the constants' embeddings, then the memory vector at
        each number's token (eq. 7); one dropout mask on them per pass (module docstring)."""
        B, _, H = memory.shape
        nums = memory.gather(1, num_pos[:, :, None].expand(-1, -1, H)) * num_mask[:, :, None]  # [B, Q, H]
        cands = torch.cat([self.const_embedding[None].expand(B, -1, -1), nums], 1)  # [B, O, H]
        cand_pad = torch.cat([num_mask.new_zeros(B, self.n_consts), ~num_mask], 1)  # [B, O]
        return Sources(
            memory=memory,
            pad=~mask,
            keys=F.linear(memory, self.attn.weight[:, H:], self.attn.bias).mul_(2),
            cands=cands,
            cand_pad=cand_pad,
            cand_keys=F.linear(self.dropout(cands), self.score.weight[:, 2 * H :], self.score.bias).mul_(2),
            goal_weight=2 * self.attn.weight[:, :H],
            leaf_weight=2 * self.score.weight[:, : 2 * H],
            attn_out=_tanh_folded(self.attn_score.weight, self.attn_score.bias),
            score_out=_tanh_folded(self.score_out.weight, None),
        )

    def attend(self, goal, batch, src: Sources):
        """TreeAttn: weights [n, T] of n (dropped-out) goals over their problems' memory tokens."""
        # GTS's v . tanh(a) + c is computed as (2v) . sigmoid(2a) + (c - sum(v)): the same function,
        # since tanh(a) = 2 sigmoid(2a) - 1, but PyTorch's CPU sigmoid runs about 5x faster than its
        # tanh, and this [n, T, H] elementwise op is the largest of decoding (keys hold 2a's memory
        # part). In place on the gathered copy: the biggest tensors of the decoder, allocated once
        # (index_select, whose backward is an index_add, not an accumulating index_put).
        # [n, T, H]
        energy = src.keys.index_select(0, batch).add_(F.linear(goal, src.goal_weight)[:, None, :]).sigmoid_()
        energy = F.linear(energy, *src.attn_out).squeeze(-1)  # [n, T]
        return torch.softmax(energy.masked_fill(src.pad.index_select(0, batch), NEG), -1)

    def outputs(self, goal, context, batch, src: Sources):
        """Logits [n, ops+C+Q] from [goal; context]: ops by a linear layer, the rest by Score."""
        leaf = self.dropout(torch.cat([goal, context], -1))  # [n, 2H]
        # [n, O, H]
        hidden = src.cand_keys.index_select(0, batch).add_(F.linear(leaf, src.leaf_weight)[:, None, :]).sigmoid_()
        # [n, O]
        num_score = F.linear(hidden, *src.score_out).squeeze(-1).masked_fill(src.cand_pad.index_select(0, batch), NEG)
        return torch.cat([self.ops(leaf), num_score], -1)

    def predict(self, goal, batch, src: Sources):
        """Prediction for n nodes of problems ``batch``: (logits [n, ops+C+Q], context [n, H])."""
        weights = self.attend(self.dropout(goal), batch, src)  # [n, T]
        context = torch.bmm(weights[:, None, :], src.memory.index_select(0, batch)).squeeze(1)  # [n, H]
        return self.outputs(goal, context, batch, src), context

    def child_nodes(self, goal, context, op_ids):
        """GenerateNode: the left and right child node vectors of operators. -> ([n, H], [n, H])"""
        label = self.op_embedding(op_ids)  # [n, E]
        x = torch.cat([self.dropout(goal), self.dropout(context), self.dropout(label)], -1)
        return _children(self.generate(x))

    def _operator_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Eval mode: the operator label's part of GenerateNode's and Merge's layers, per operator
        (their only input is the label embedding, so each is a row lookup during beam search).
        -> ([ops, 4H] with GenerateNode's bias, [ops, 2H] with Merge's bias)"""
        H, label = self.hidden_size, self.op_embedding.weight  # [ops, E]
        generate = F.linear(label, self.generate.weight[:, 2 * H :], self.generate.bias)  # [ops, 4H]
        merge = F.linear(label, self.merge.weight[:, : label.size(1)], self.merge.bias)  # [ops, 2H]
        return generate, merge

    def _shared_child_nodes(self, goal, context, parent, op_ids, generate_table):
        """``child_nodes`` (eval mode) for children of rows ``parent`` of goal/context: the
        [goal; context] part of GenerateNode's layer is computed once per distinct parent, the
        label's part is looked up in ``generate_table`` (``_operator_tables``)."""
        H = self.hidden_size
        distinct, inverse = torch.unique(parent, return_inverse=True)
        # [u, 4H]
        shared = F.linear(torch.cat([goal[distinct], context[distinct]], -1), self.generate.weight[:, : 2 * H])
        return _children(shared[inverse] + generate_table[op_ids])  # from [m, 4H]

    def _looked_up_merge(self, op_ids, left_tree, right_tree, merge_table):
        """``merge_tree`` (eval mode) with the label's part looked up in ``merge_table``. -> [n, H]"""
        E = self.op_embedding.embedding_dim
        merged = F.linear(torch.cat([left_tree, right_tree], -1), self.merge.weight[:, E:])
        return _gated(merged.add_(merge_table[op_ids]))

    def merge_tree(self, op_ids, left_tree, right_tree):
        """Merge: embedding of a finished operator subtree. -> [n, H]"""
        label = self.op_embedding(op_ids)  # [n, E]
        x = torch.cat([self.dropout(label), self.dropout(left_tree), self.dropout(right_tree)], -1)
        return _gated(self.merge(x))

    # ---- teacher forcing ------------------------------------------------------------------------
    def forward(self, memory, mask, problem, num_pos, num_mask, target, target_mask,
                trees: TreeLayout | None = None) -> TreeOutput:
        """Teacher-forced logits of every gold token.

        memory [B, T, H] token vectors; mask [B, T] True on real tokens; problem [B, H] root goal
        input; num_pos / num_mask [B, Q]; target / target_mask [B, S] gold prefix ids; ``trees``:
        their ``tree_layout``, made beforehand on the CPU (it reads sizes back: host syncs on a GPU),
        else made here.
        """
        trees = trees if trees is not None else tree_layout(target, target_mask, self.n_ops)
        src = self.sources(memory, mask, num_pos, num_mask)
        subs, merged = self._subtrees(trees, src)
        logits, expanded = self._level_logits(trees, src, problem, subs)
        idle = ([self.merge] if not merged else []) + ([self.generate, self.op_embedding, self.goal_right]
                                                       if not expanded else [])
        if idle and torch.is_grad_enabled():
            # A zero term keeps the layers this batch did not use in the graph, so every parameter
            # gets a gradient every step and data-parallel training need not search the autograd
            # graph for unused ones (DDP's find_unused_parameters costs ~4% of a CPU step).
            logits = logits + 0.0 * sum(p.sum() for m in idle for p in m.parameters())
        S = target.size(1)
        return TreeOutput(
            logits=logits,
            gold=trees.goal_gold,
            batch_index=trees.goal_batch,
            position=trees.goal_node % S,
        )

    def _subtrees(self, trees: TreeLayout, src: Sources) -> tuple[list[torch.Tensor], bool]:
        """Subtree embeddings of every level in sub order, deepest level first: leaves are candidate
        embeddings, operators merge their children from the level below. -> (per level [M_d, H],
        whether any Merge ran)"""
        B, O, H = src.cands.shape
        leaf_table = src.cands.reshape(B * O, H)
        subs: list[torch.Tensor] = [src.memory.new_zeros(0, H)] * (trees.n_levels + 1)
        merged = False
        for d in reversed(range(trees.n_levels)):
            lo, hi, mid = trees.sub_starts[d], trees.sub_starts[d + 1], trees.sub_starts[d] + trees.sub_n_leaf[d]
            parts = [leaf_table[trees.sub_batch[lo:mid] * O + trees.sub_ids[lo:mid] - self.n_ops]]
            if hi > mid:
                below = subs[d + 1]
                left, right = below[trees.sub_left_row[mid:hi]], below[trees.sub_right_row[mid:hi]]
                parts.append(self.merge_tree(trees.sub_ids[mid:hi], left, right))
                merged = True
            subs[d] = torch.cat(parts)
        return subs, merged

    def _level_logits(self, trees: TreeLayout, src: Sources, problem,
                      subs: list[torch.Tensor]) -> tuple[torch.Tensor, bool]:
        """Goals, root level first: a level's node vectors come from its parents' GenerateNode.
        -> (logits of every node in goal order [N, V], whether any GenerateNode ran)"""
        H = src.memory.size(-1)
        logits = []
        left_nodes = right_nodes = src.memory.new_zeros(0, H)
        expanded = False
        for d in range(trees.n_levels):
            lo, hi, mid = trees.goal_starts[d], trees.goal_starts[d + 1], trees.goal_starts[d] + trees.goal_n_left[d]
            batch = trees.goal_batch[lo:hi]
            if d == 0:
                goal = self.left_goal(problem[batch])
            else:
                parent = trees.goal_parent_row[lo:hi]
                goal = torch.cat(
                    [
                        self.left_goal(left_nodes[parent[: mid - lo]]),
                        self.right_goal(subs[d][trees.goal_sib_row[mid:hi]], right_nodes[parent[mid - lo :]]),
                    ]
                )
            level_logits, context = self.predict(goal, batch, src)
            logits.append(level_logits)
            ops = trees.goal_op_rows[trees.goal_op_starts[d] : trees.goal_op_starts[d + 1]]
            if ops.numel():
                op_ids = trees.goal_op_ids[trees.goal_op_starts[d] : trees.goal_op_starts[d + 1]]
                left_nodes, right_nodes = self.child_nodes(goal[ops], context[ops], op_ids)
                expanded = True  # an operator: GenerateNode ran, and its right child will need goal_right
        return torch.cat(logits), expanded

    @staticmethod
    def loss(out: TreeOutput) -> torch.Tensor:
        """GTS's masked_cross_entropy: summed token NLL / number of target tokens in the batch
        (a padded layout's padding rows have the gold ``IGNORE``: left out of both)."""
        return F.cross_entropy(out.logits, out.gold, reduction="mean", ignore_index=IGNORE)

    # ---- beam search ----------------------------------------------------------------------------
    @torch.no_grad()
    def beam_search(self, memory, mask, problem, num_pos, num_mask, beam_size: int = 5,
                    max_len: int = 45) -> list[list[int]]:
        """Best finished prefix expression (output ids) per problem; [] when none can be formed
        (the search: ``_search``)."""
        return self._search(memory, mask, problem, num_pos, num_mask, beam_size, max_len).best(beam_size)

    @torch.no_grad()
    def beam_candidates(self, memory, mask, problem, num_pos, num_mask, beam_size: int = 5,
                        max_len: int = 45) -> list[list[tuple[list[int], float]]]:
        """``beam_search``'s final candidates: each problem's finished prefixes (output ids) with
        their log-probabilities, best first; the first is ``beam_search``'s answer."""
        return self._search(memory, mask, problem, num_pos, num_mask, beam_size, max_len).candidates(beam_size)

    def _search(self, memory, mask, problem, num_pos, num_mask, beam_size: int, max_len: int) -> _Beams:
        """The beams at the end of the search.

        Rows are (problem, beam) pairs. Each step scores every live row, adds the log-probabilities
        to the beam scores and keeps the top ``beam_size`` of (beams x (outputs + "stay finished"))
        per problem, so finished beams compete with live ones as in GTS. Choices that could not
        complete within ``max_len`` tokens (an operator when the open slots would not fit) and
        padded slots are masked, so every beam is always completable and every output parses.
        A problem stops early once a finished beam outscores all its live ones, which no longer
        can catch up. Beam size 1 is greedy decoding. Call in eval mode (dropout off).
        """
        K, H, n_ops = beam_size, self.hidden_size, self.n_ops
        src = self.sources(memory, mask, num_pos, num_mask)
        V = n_ops + src.cands.size(1)
        generate_table, merge_table = self._operator_tables()
        beams = _Beams.start(K, memory, max_len)
        R = beams.score.numel()
        nodes, subs = _Pool(H, memory, capacity=4 * R), _Pool(H, memory, capacity=4 * R)
        nodes.add(problem)  # node id b = root of problem b
        live_index = torch.zeros(R, dtype=torch.long, device=memory.device)  # a live row's place among them

        for _ in range(max_len):
            live = ~beams.finished & torch.isfinite(beams.score)
            if not bool(live.any()):
                break
            rows = live.nonzero().squeeze(1)  # [n]
            live_index[rows] = torch.arange(rows.numel(), device=memory.device)
            goal, context, logp = self._live_outputs(beams, rows, K, nodes, subs, src, max_len)
            total = torch.full((R, V + 1), float("-inf"), device=memory.device, dtype=logp.dtype)
            total[rows, :V] = beams.score[rows, None] + logp
            total[:, V] = torch.where(beams.finished, beams.score, float("-inf"))  # column V: a finished beam stays
            best, choice = total.view(-1, K * (V + 1)).topk(K, dim=1)  # [B, K]
            parent = (choice // (V + 1) + torch.arange(best.size(0), device=memory.device)[:, None] * K).view(-1)  # [R]
            token = (choice % (V + 1)).view(-1)  # [R]
            beams = beams.kept(parent, best.view(-1))

            emit = torch.isfinite(beams.score) & (token < V)
            r = emit.nonzero().squeeze(1)
            beams.tokens[r, beams.length[r]] = token[r]
            beams.length += emit
            beams.goal_top -= emit.long()  # the current node is decided
            is_op = emit & (token < n_ops)
            if bool(is_op.any()):
                r = is_op.nonzero().squeeze(1)
                left, right = self._shared_child_nodes(goal, context, live_index[parent[r]], token[r], generate_table)
                self._push_operator(beams, r, token[r], nodes.add(left), nodes.add(right))
            is_leaf = emit & (token >= n_ops) & (beams.goal_top > 0)  # a completed tree's embedding is never used
            if bool(is_leaf.any()):
                r = is_leaf.nonzero().squeeze(1)
                self._complete_subtrees(beams, r, src.cands[r // K, token[r] - n_ops], subs, merge_table)
            beams.finished |= emit & (beams.goal_top == 0)
            beams.drop_decided(K)
        return beams

    def _live_outputs(self, beams: _Beams, rows, K: int, nodes: _Pool, subs: _Pool, src: Sources, max_len: int):
        """For the live ``rows``: goal [n, H], context [n, H] and the log-probabilities of every
        output [n, V], with padded slots and the operators that could not complete within
        ``max_len`` at -inf."""
        B, T, _ = src.memory.shape
        batch, n_ops = rows // K, self.n_ops
        node = nodes.data[beams.goal_stack[rows, beams.goal_top[rows] - 1]]  # [n, H]
        top_op = (beams.op_top[rows] - 1).clamp(min=0)
        left_id = torch.where(beams.op_top[rows] > 0, beams.op_left[rows, top_op], -1)
        has_left = left_id >= 0
        goal = torch.empty_like(node)
        goal[~has_left] = self.left_goal(node[~has_left])
        goal[has_left] = self.right_goal(subs.data[left_id[has_left]], node[has_left])
        # Attention weights laid out [problems with a live row, K, T]: one bmm over their memory.
        problems, slot = torch.unique_consecutive(batch, return_inverse=True)  # rows are sorted
        beam = rows % K
        spread = src.memory.new_zeros(problems.numel(), K, T)
        spread[slot, beam] = self.attend(goal, batch, src)
        live_memory = src.memory if problems.numel() == B else src.memory.index_select(0, problems)
        context = torch.bmm(spread, live_memory)[slot, beam]  # [n, H]
        logp = torch.log_softmax(self.outputs(goal, context, batch, src), -1)  # [n, V]
        logp[:, n_ops:] = logp[:, n_ops:].masked_fill(src.cand_pad[batch], float("-inf"))
        op_fits = beams.length[rows] + beams.goal_top[rows] + 2 <= max_len
        logp[:, :n_ops] = logp[:, :n_ops].masked_fill(~op_fits[:, None], float("-inf"))
        return goal, context, logp

    @staticmethod
    def _push_operator(beams: _Beams, r, op_ids, left, right) -> None:
        """Rows ``r`` chose operators: their children's node ids ``left`` and ``right`` become the
        top open slots (the left on top: decoded first), the operators pending."""
        beams.goal_stack[r, beams.goal_top[r]] = right
        beams.goal_stack[r, beams.goal_top[r] + 1] = left
        beams.goal_top[r] += 2
        beams.op_stack[r, beams.op_top[r]] = op_ids
        beams.op_left[r, beams.op_top[r]] = -1
        beams.op_top[r] += 1

    def _complete_subtrees(self, beams: _Beams, r, tree, subs: _Pool, merge_table) -> None:
        """Rows ``r`` chose a leaf (embeddings ``tree`` [m, H]) with a slot still open: merged upwards
        while the pending operator's left subtree is done, it becomes the left subtree of the operator
        left pending (an open slot means one is)."""
        while True:
            top = (beams.op_top[r] - 1).clamp(min=0)
            can = (beams.op_top[r] > 0) & (beams.op_left[r, top] >= 0)
            if not bool(can.any()):
                break
            rm, tm = r[can], top[can]
            tree[can] = self._looked_up_merge(beams.op_stack[rm, tm], subs.data[beams.op_left[rm, tm]], tree[can],
                                              merge_table)
            beams.op_top[rm] -= 1
        beams.op_left[r, beams.op_top[r] - 1] = subs.add(tree)
