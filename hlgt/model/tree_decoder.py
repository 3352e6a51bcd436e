"""The goal-driven tree decoder (GTS, Xie & Sun 2019), batched.

The modules and their math are GTS's (``models.py`` of ShichaoSun/math_seq2tree): a goal vector
per tree node (Prediction's concat_l / concat_r gates), additive attention of the goal over the
encoder memory (TreeAttn), a score of [goal; context] against every output (ops by a linear layer,
constants and the problem's numbers by Score against their embeddings, eq. 7 of the paper: a
number's embedding is the memory vector at its token), GenerateNode for the two child goals of an
operator, and Merge for the embedding of a finished subtree. Output ids follow ``Vocab``:
operators, then constants, then the problem's slots ``N0..Nk``.

What differs from GTS is only how the work is batched (the gold trees' layout: ``hlgt.model.tree_layout``;
the beams' state: ``hlgt.model.beams``):

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
  PyTorch's CPU sigmoid runs much faster than its tanh on these, decoding's largest tensors.
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

import torch
import torch.nn.functional as F
from torch import nn

from hlgt.model.beams import Beams, Pool
from hlgt.model.tree_layout import IGNORE, TreeLayout, tree_layout

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
    gold: torch.Tensor  # [N] gold output id (a row's problem and target position: the layout's
    # goal_batch and goal_node % S)


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
        # since tanh(a) = 2 sigmoid(2a) - 1, but PyTorch's CPU sigmoid runs much faster than its
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
            # graph for unused ones (DDP's find_unused_parameters costs time every step).
            logits = logits + 0.0 * sum(p.sum() for m in idle for p in m.parameters())
        return TreeOutput(logits=logits, gold=trees.goal_gold)

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

    def _search(self, memory, mask, problem, num_pos, num_mask, beam_size: int, max_len: int) -> Beams:
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
        beams = Beams.start(K, memory, max_len)
        R = beams.score.numel()
        nodes, subs = Pool(H, memory, capacity=4 * R), Pool(H, memory, capacity=4 * R)
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

    def _live_outputs(self, beams: Beams, rows, K: int, nodes: Pool, subs: Pool, src: Sources, max_len: int):
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
    def _push_operator(beams: Beams, r, op_ids, left, right) -> None:
        """Rows ``r`` chose operators: their children's node ids ``left`` and ``right`` become the
        top open slots (the left on top: decoded first), the operators pending."""
        beams.goal_stack[r, beams.goal_top[r]] = right
        beams.goal_stack[r, beams.goal_top[r] + 1] = left
        beams.goal_top[r] += 2
        beams.op_stack[r, beams.op_top[r]] = op_ids
        beams.op_left[r, beams.op_top[r]] = -1
        beams.op_top[r] += 1

    def _complete_subtrees(self, beams: Beams, r, tree, subs: Pool, merge_table) -> None:
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
