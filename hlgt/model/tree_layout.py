"""The gold trees of a batch laid out for teacher forcing level by level (``tree_layout``).

The gold prefix fixes each tree, so parent, side and depth of every target position are computed
up front from the [B, S] target with tensor ops, on the CPU before the batch moves (the training
loop's ``Solver.plan``, which reads sizes back). ``TreeLayout.padded`` pads a layout to fixed
``TreeSizes`` (for CUDA graphs), its padding rows' gold ``IGNORE``.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import numpy as np
import torch


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
