"""The numerical-comparison auxiliary task (paper section 3.5, eqs. 8-9).

For every ordered pair (q1, q2) of a problem's quantities a biaffine classifier predicts whether
value(q1) >= value(q2):

    Biaffine(q1, q2) = h_f[q1] U_s h_f[q2]^T + [h_b[q1]; h_b[q2]] W_s + b_s,   p = sigmoid(Biaffine)

with h_f the fused encoder output (eq. 6) and h_b the word BiGRU output (eq. 3) at each
quantity's token. U_s is stored as F * U_s (F = width of h_f): the same function, trained at a
step F times smaller. Adam moves every one of U_s's F x F entries by about the learning rate per
step, all in the direction of the gradient's outer product of features, so a plain U_s moves a
logit by lr * |h_f|_1^2 (hundreds at F = 1024) in one step; stored as F * U_s, by about lr * F
times the features' mean square, as a linear layer's logit moves.

Eq. 9 as printed averages the probabilities p over the K x K pairs, which has no label in it;
what it means, and what is trained here, is the binary cross-entropy of p against the label
y = 1 if value(q1) >= value(q2) else 0, averaged over the K x K ordered pairs of a problem (the
diagonal included, label 1), then over the problems of the batch that have at least one
quantity. Values equal within ``hlgt.expr.values_match``'s tolerance count as ">=".
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from hlgt.config import COMPARISON_INITS


class Comparison(nn.Module):
    """``init`` (``model.comparison_init``): "zeros" (the default) starts U_s, W_s and b_s at zero,
    every pair's logit at 0, as Dozat & Manning's biaffine classifier does (and SuPar's, Stanza's).
    "uniform" draws U_s as nn.Bilinear does (±1/sqrt(F)) and W_s, b_s as nn.Linear; over
    unit-scale F-dim features that gives initial logits of standard deviation sqrt(F/3), about 18
    at F = 2H = 1024, large enough to dominate the loss at the start."""

    def __init__(self, fused_size: int, base_size: int, init: str = "zeros"):
        super().__init__()
        if init not in COMPARISON_INITS:
            raise ValueError(f"model.comparison_init must be one of {COMPARISON_INITS}, got {init!r}")
        self.init = init
        self.U = nn.Parameter(torch.empty(fused_size, fused_size))  # F * U_s
        self.linear = nn.Linear(2 * base_size, 1)  # W_s, b_s over [h_b[q1]; h_b[q2]]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.init == "zeros":
            for p in (self.U, self.linear.weight, self.linear.bias):
                nn.init.zeros_(p)
            return
        bound = math.sqrt(self.U.size(0))  # nn.Bilinear's draw of U_s, ±1/sqrt(F), stored times F
        nn.init.uniform_(self.U, -bound, bound)
        self.linear.reset_parameters()

    def forward(self, h_f: torch.Tensor, h_b: torch.Tensor, num_pos: torch.Tensor) -> torch.Tensor:
        """Pair logits [B, Q, Q]: entry (i, j) scores value(q_i) >= value(q_j).

        h_f [B, T, F], h_b [B, T, H], num_pos [B, Q] (padded entries give padded logits)."""
        F_, H = h_f.size(-1), h_b.size(-1)
        f = h_f.gather(1, num_pos[:, :, None].expand(-1, -1, F_))  # [B, Q, F]
        b = h_b.gather(1, num_pos[:, :, None].expand(-1, -1, H))  # [B, Q, H]
        bilinear = (f @ self.U) @ f.transpose(1, 2) / F_  # [B, Q, Q] U_s = U / F (module docstring)
        w = self.linear.weight[0]  # [2H]
        first, second = b @ w[:H], b @ w[H:]  # [B, Q] each
        return bilinear + first[:, :, None] + second[:, None, :] + self.linear.bias  # [B, Q, Q]

    @staticmethod
    def labels(num_values: torch.Tensor) -> torch.Tensor:
        """[B, Q] values -> [B, Q, Q] float labels, 1 where value_i >= value_j (within tolerance)."""
        vi, vj = num_values[:, :, None].double(), num_values[:, None, :].double()
        close = (vi - vj).abs() <= torch.maximum(torch.full_like(vi, 1e-4), 1e-4 * torch.maximum(vi.abs(), vj.abs()))
        return ((vi >= vj) | close).to(num_values.dtype)

    def loss(self, h_f, h_b, num_pos, num_mask, num_values) -> torch.Tensor:
        """Eq. 9 as BCE: mean over each problem's K x K pairs, then over problems with K >= 1."""
        logits = self(h_f, h_b, num_pos)  # [B, Q, Q]
        pair_mask = (num_mask[:, :, None] & num_mask[:, None, :]).to(logits.dtype)  # [B, Q, Q]
        bce = F.binary_cross_entropy_with_logits(logits, self.labels(num_values).to(logits.dtype), reduction="none")
        k2 = pair_mask.sum((1, 2))  # [B] K^2
        per_problem = (bce * pair_mask).sum((1, 2)) / k2.clamp(min=1)  # [B]
        has = (k2 > 0).to(logits.dtype)
        return (per_problem * has).sum() / has.sum().clamp(min=1)
