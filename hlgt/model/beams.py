"""The beam search's state (``TreeDecoder.beam_search``): every problem's beams at once, as rows.

A beam's goal stack and pending-operator stack are index tensors into ``Pool``s of node vectors, so
that reordering beams moves integers, not vectors; finished beams compete with live ones as in GTS.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


class Pool:
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
class Beams:
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
    def start(cls, beam_size: int, memory: torch.Tensor, max_len: int) -> Beams:
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

    def kept(self, parent: torch.Tensor, score: torch.Tensor) -> Beams:
        """Each row a copy of its ``parent`` row, scored ``score``."""
        rows = {name: value[parent] for name, value in vars(self).items() if name != "score"}
        return Beams(**rows, score=score)

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
