"""The bidirectional GRU of the encoder (eq. 2-3 and 6) on the CPU, with a hand-written backward.

``bigru(gru, x, lengths)`` computes what ``nn.GRU(..., bidirectional=True, batch_first=True)``
computes over a packed batch, with the module's own parameters (the same ``state_dict``), and
returns what the encoder uses of it: the sum of the two directions' outputs ``[B, T, H]`` (zeros
on padding) and the final states ``[2 * layers, B, H]``.

Why not ``nn.GRU`` on the CPU: over a packed batch it projects the inputs one time step at a time
(small matrix products) and its autograd graph has one node per step and gate, whose backward
materialises a full-size gradient of the packed input projection at every step and adds them up,
a large share of a training step of the GTS arm. Here:

* rows are sorted by length and packed time-major (as ``PackedSequence`` does), the reverse
  direction packed from each sequence reversed within its length, so both directions share the
  per-step batch sizes and advance together (one ``baddbmm`` per step for both);
* the input projection of every token and both directions is one matrix product, before the loop,
  without its bias: the bias is added inside the loop, on data already in cache (a bias in the
  product would first be copied over the whole [2, P, 3H] output);
* ``_Recurrence`` is an ``autograd.Function``: its forward saves the gates, its backward runs
  backpropagation through time over the packed steps and forms the hidden-weight gradient as one
  matrix product over all steps at the end.

On CUDA, cuDNN's fused GRU is faster than any Python loop: there ``nn.GRU`` itself runs, over
the same packing (``Packing``, made ahead on the CPU, so that no value is read back in the step).

A packing differs from batch to batch, so cuDNN's launches over it cannot be captured as one CUDA
graph for many batches. Given a ``Reversal`` instead, each direction of each layer runs as one
causal pass over the whole padded batch (the reverse one over each sequence reversed within its
length): the same states on every token, on fixed shapes ``[B, T]`` whatever the lengths, so a
step captured with them serves every batch padded alike (``train.capture_bigrus``; ``hlgt.train.bench
--recurrence`` measures what the passes cost on a GPU).

``low_precision=True`` (inference only, CPU): the matrix products take bfloat16 operands, the
state, gates and sums stay float32. On a CPU with bfloat16 dot-product instructions (AVX512-BF16,
AMX) the products run faster (BENCHMARKS.md); outputs differ from float32 by about 1e-3, so a
prediction can change. Off by default (``model.bf16_inference``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence
from torch.profiler import record_function

from hlgt.tensors import tensors_to

# The profiler's name for the CPU recurrence (forward and backward): on a GPU, cuDNN's fused GRU
# runs instead, so operator counts meant for the GPU leave these out (hlgt.train.bench --profile).
CPU_GRU = "hlgt::cpu_bigru"


def bigru(gru: nn.GRU, x: Tensor, lengths: Tensor, low_precision: bool = False,
          packing: Packing | Reversal | None = None) -> tuple[Tensor, Tensor]:
    """x [B, T, I], lengths [B] (1..T) -> forward + backward state per token [B, T, H] (zeros on
    padding; GTS sums the two directions), final states h_n [2*layers, B, H].
    ``packing``: ``Packing.of(lengths, T)``, made here when not given (on a GPU that reads the
    lengths back: a host synchronisation); a ``Reversal`` runs the causal passes instead."""
    if not (gru.bidirectional and gru.batch_first and gru.bias):
        raise ValueError("bigru expects nn.GRU(..., bias=True, batch_first=True, bidirectional=True)")
    if low_precision and torch.is_grad_enabled():
        raise ValueError("bfloat16 products are for inference only: call under torch.no_grad()")
    low = torch.bfloat16 if low_precision and not x.is_cuda else None
    T = x.size(1)
    if isinstance(packing, Reversal):
        if low is not None:
            raise ValueError("bfloat16 products are for the CPU recurrence over a Packing, not a Reversal")
        return _causal_bigru(gru, x, packing)
    if x.is_cuda:
        return _nn_bigru(gru, x, packing if packing is not None else Packing.of(lengths, T).to(x.device))
    with record_function(CPU_GRU):
        return _cpu_bigru(gru, x, packing if packing is not None else Packing.of(lengths, T), low)


def _nn_bigru(gru: nn.GRU, x: Tensor, packing: Packing) -> tuple[Tensor, Tensor]:
    """``bigru`` by ``nn.GRU`` itself (cuDNN's fused GRU on a GPU) over the batch packed as
    ``pack_padded_sequence`` packs it, from ``packing``'s indices: no value is read back."""
    B, T, _ = x.shape
    H = gru.hidden_size
    if len({w.untyped_storage().data_ptr() for ws in gru.all_weights for w in ws}) > 1:
        # cuDNN wants the weights in one chunk; a deep-copied module (the best model) has one per
        # weight. Only then: flattening allocates a new chunk and moves every weight into it,
        # which a step captured as a CUDA graph cannot do.
        gru.flatten_parameters()
    data = x.reshape(B * T, -1).index_select(0, packing.fwd_src)                # [P, I] time-major
    batch_sizes = torch.tensor(packing.batch_sizes, dtype=torch.long)           # on the CPU, as nn.GRU wants
    out, h_n = gru(PackedSequence(data, batch_sizes, packing.order, packing.unsort))  # h_n in batch order
    padded = out.data.new_zeros(B * T, 2 * H).index_copy(0, packing.fwd_src, out.data)  # [B*T, 2H]
    return (padded[:, :H] + padded[:, H:]).view(B, T, H), h_n


def _causal_bigru(gru: nn.GRU, x: Tensor, reversal: Reversal) -> tuple[Tensor, Tensor]:
    """``bigru`` as causal passes over the padded batch, one per direction and layer (``nn.GRU``'s
    own kernels, its weights one direction at a time). A token's state depends only on the tokens
    before it in its pass, and padding comes after every real token in both passes (the reversal
    leaves it in place): the real tokens' states are exact whatever the padding holds."""
    B, T, _ = x.shape
    H = gru.hidden_size
    index = reversal.index.unsqueeze(-1)                                      # [B, T, 1]
    last = (reversal.lengths - 1).view(B, 1, 1).expand(B, 1, H)               # [B, 1, H] each row's last token
    h0 = x.new_zeros(1, B, H)
    fwd_in, rev_in = x, x.gather(1, index.expand_as(x))                       # [B, T, I] x 2
    finals = []
    for layer in range(gru.num_layers):
        # cuDNN takes a weight list as one chunk only where it starts its storage (ATen's
        # try_get_weight_buf reads the storage from offset 0): here the first layer's forward
        # weights at most. Every other pass warns ("not part of single contiguous chunk") and
        # copies its weights into a fresh chunk: up to 9.5 MB at paper sizes, microseconds on a GPU.
        fwd, rev = (torch._VF.gru(inp, h0, [getattr(gru, f"{name}_l{layer}{sfx}") for name in
                                            ("weight_ih", "weight_hh", "bias_ih", "bias_hh")],
                                  True, 1, 0.0, gru.training, False, True)[0]
                    for inp, sfx in ((fwd_in, ""), (rev_in, "_reverse")))     # [B, T, H] x 2, rev reversed
        finals += [fwd.gather(1, last), rev.gather(1, last)]                  # [B, 1, H] x 2
        rev = rev.gather(1, index.expand_as(rev))                             # [B, T, H] in token order
        if layer + 1 < gru.num_layers:
            nxt = torch.cat([fwd, rev], -1)                                   # [B, T, 2H]
            nxt = F.dropout(nxt, gru.dropout, gru.training) if gru.dropout > 0 else nxt
            fwd_in, rev_in = nxt, nxt.gather(1, index.expand_as(nxt))
    summed = (fwd + rev) * reversal.mask.unsqueeze(-1)                        # [B, T, H], zeros on padding
    return summed, torch.cat(finals, 1).transpose(0, 1)                       # [2*layers, B, H]


def _cpu_bigru(gru: nn.GRU, x: Tensor, packing: Packing, low: torch.dtype | None) -> tuple[Tensor, Tensor]:
    """``bigru`` on the CPU: input projections, then ``_Recurrence`` per layer, in ``packing``'s order."""
    B, T, _ = x.shape
    H = gru.hidden_size
    flat = x.reshape(B * T, -1)
    # Layer input in packed order: [2, P, I], forward direction then reverse direction.
    inp = torch.stack([flat.index_select(0, packing.fwd_src), flat.index_select(0, packing.rev_src)])   # [2, P, I]
    finals = []
    for layer in range(gru.num_layers):
        w_ih, w_hh, b_ih, b_hh = (torch.stack([getattr(gru, f"{name}_l{layer}{sfx}") for sfx in ("", "_reverse")])
                                  for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
        gi = _product(inp, w_ih.transpose(1, 2), low)                         # [2, P, 3H] without b_ih
        out, h_n = _Recurrence.apply(gi, w_hh, b_hh, b_ih, packing.batch_sizes, low)  # [2, P, H], [2, B, H]
        finals.append(h_n)
        fwd, rev = out[0], out[1]                                             # [P, H] x 2
        if layer + 1 < gru.num_layers:
            # Next input per token: [its forward : its reverse state], dropped out once (as nn.GRU
            # does: both directions see the same mask), then laid out in both packings.
            nxt = torch.cat([fwd, rev.index_select(0, packing.rev_of_fwd)], -1)  # [P, 2H] forward packing
            nxt = F.dropout(nxt, gru.dropout, gru.training) if gru.dropout > 0 else nxt
            inp = torch.stack([nxt, nxt.index_select(0, packing.fwd_of_rev)])    # [2, P, 2H]
    summed = fwd + rev.index_select(0, packing.rev_of_fwd)                       # [P, H] forward packing
    padded = summed.new_zeros(B * T, H).index_copy(0, packing.fwd_src, summed)  # [B*T, H]
    h_n = torch.cat(finals).index_select(1, packing.unsort)                      # [2*layers, B, H]
    return padded.view(B, T, H), h_n


def _product(x: Tensor, w: Tensor, low: torch.dtype | None) -> Tensor:
    """x @ w per direction: [2, n, I] x [2, I, O] -> [2, n, O] in x's dtype, in ``low`` precision
    when given."""
    if low is None:
        return torch.bmm(x, w)
    return torch.bmm(x.to(low), w.to(low)).to(x.dtype)


def _affine(x: Tensor, w: Tensor, b: Tensor, low: torch.dtype | None) -> Tensor:
    """b + x @ w per direction: [2, n, I] x [2, I, O] (+ [2, 1, O]) -> [2, n, O] in x's dtype,
    the product in ``low`` precision when given."""
    if low is None:
        return torch.baddbmm(b, x, w)
    return _product(x, w, low).add_(b)


@dataclass
class Packing:
    """Index bookkeeping of one batch's lengths: sorted by length, packed time-major (as
    ``PackedSequence`` packs), each sequence also reversed within its length. Made on the CPU
    (``Packing.of``: it reads the lengths), before the batch moves to a GPU (``Solver.plan``)."""

    batch_sizes: list[int]  # rows per time step (non-increasing)
    order: Tensor           # [B] rows sorted by length, longest first (stable)
    unsort: Tensor          # [B] each row's place in order
    fwd_src: Tensor         # [P] token row * T + t of each packed position
    rev_src: Tensor         # [P] token row * T + (length - 1 - t): the reversed packing
    rev_of_fwd: Tensor      # [P] a forward position's token in the reversed packing
    fwd_of_rev: Tensor      # [P] a reversed position's token in the forward packing

    @classmethod
    def of(cls, lengths: Tensor, T: int) -> "Packing":
        lengths = lengths.cpu().long()
        if lengths.numel() == 0 or int(lengths.min()) < 1 or int(lengths.max()) > T:
            raise ValueError(f"lengths must lie in [1, {T}], got {lengths.tolist()}")
        sorted_len, order = torch.sort(lengths, descending=True, stable=True)
        unsort = torch.empty_like(order).scatter_(0, order, torch.arange(len(order)))
        steps = torch.arange(int(sorted_len[0]))
        active = steps.unsqueeze(1) < sorted_len.unsqueeze(0)                 # [Tmax, B] time-major
        t, i = active.nonzero(as_tuple=True)                                  # packed order: by t, then i
        row = order[i]                                                        # original batch row
        fwd_src = row * T + t                                                 # token (row, t)
        rev_src = row * T + (sorted_len[i] - 1 - t)                           # token (row, len-1-t)
        # The same token's position in the other packing: forward position of (row, s) is where
        # fwd_src == row*T + s. Map token id -> packed position, then look the partner up.
        pos = torch.full((len(lengths) * T,), -1, dtype=torch.long)
        pos[fwd_src] = torch.arange(len(t))
        rev_of_fwd = torch.empty_like(pos[: len(t)])
        rev_of_fwd[pos[rev_src]] = torch.arange(len(t))                       # fwd position -> rev position
        return cls(active.sum(1).tolist(), order, unsort, fwd_src, rev_src, rev_of_fwd, pos[rev_src])

    def to(self, device: torch.device | str) -> "Packing":
        return tensors_to(self, device)


@dataclass
class Reversal:
    """The causal passes' layout of one batch (``bigru``): every row's tokens reversed within its
    length, padding left in place. Shapes ``[B, T]`` whatever the lengths; made on the CPU
    (``Reversal.of``) or wherever the lengths are, without reading them back."""

    lengths: Tensor  # [B]
    index: Tensor    # [B, T] the token at each place of the reversed row: length - 1 - t, or t on padding
    mask: Tensor     # [B, T] real tokens

    @classmethod
    def of(cls, lengths: Tensor, T: int) -> "Reversal":
        t = torch.arange(T, device=lengths.device)
        mask = t < lengths.unsqueeze(1)                                       # [B, T]
        return cls(lengths, torch.where(mask, lengths.unsqueeze(1) - 1 - t, t), mask)

    def to(self, device: torch.device | str) -> "Reversal":
        return tensors_to(self, device)


class _Recurrence(torch.autograd.Function):
    """GRU recurrence of both directions over packed steps (PyTorch's gate equations).

    gi [2, P, 3H] input projections without their bias, w_hh [2, 3H, H], b_hh [2, 3H], b_ih [2, 3H],
    batch_sizes: rows per step (non-increasing), low: product precision or None
    -> out [2, P, H], h_n [2, B, H] (sorted rows).
    """

    @staticmethod
    def forward(ctx, gi: Tensor, w_hh: Tensor, b_hh: Tensor, b_ih: Tensor, batch_sizes: list[int],
                low: torch.dtype | None):
        D, P, H3 = gi.shape
        H = H3 // 3
        B = batch_sizes[0]
        h = gi.new_zeros(D, B, H)                                             # running state
        out = gi.new_empty(D, P, H)
        save = any(ctx.needs_input_grad[:4])
        gates = gi.new_empty(D, P, 4 * H) if save else None                   # r, z, n, gh_n per token
        w_t = w_hh.transpose(1, 2).to(low or w_hh.dtype)                     # [2, H, 3H], cast once
        # r and z see b_ih + b_hh, so both join the hidden product's bias; n sees b_hh inside
        # r * (W h + b_hh), and b_ih outside it.
        bias = torch.cat([b_ih[:, : 2 * H] + b_hh[:, : 2 * H], b_hh[:, 2 * H:]], 1).unsqueeze(1)  # [2, 1, 3H]
        b_in = b_ih[:, 2 * H:].unsqueeze(1)                                   # [2, 1, H]
        o = 0
        for n in batch_sizes:
            h_prev = h[:, :n]                                                 # [2, n, H]
            gh = _affine(h_prev, w_t, bias, low)                              # [2, n, 3H]
            g = gi[:, o:o + n]
            rz = torch.sigmoid(g[..., : 2 * H] + gh[..., : 2 * H])            # [2, n, 2H]
            r, z = rz[..., :H], rz[..., H:]
            # tanh(x) = 2 sigmoid(2x) - 1: PyTorch's CPU sigmoid is much faster than its tanh; cand is [2, n, H]
            cand = torch.addcmul(g[..., 2 * H:], r, gh[..., 2 * H:]).add_(b_in).mul_(2).sigmoid_().mul_(2).sub_(1)
            h_new = cand + z * (h_prev - cand)                                # (1-z)*n + z*h
            out[:, o:o + n] = h_new
            h[:, :n] = h_new
            if save:
                gates[:, o:o + n, : 2 * H] = rz
                gates[:, o:o + n, 2 * H: 3 * H] = cand
                gates[:, o:o + n, 3 * H:] = gh[..., 2 * H:]                   # W h + b_hh of n
            o += n
        if save:
            ctx.save_for_backward(w_hh, out, gates)
            ctx.batch_sizes = batch_sizes
        return out, h

    @staticmethod
    def backward(ctx, grad_out: Tensor, grad_h: Tensor):
        with record_function(CPU_GRU):
            return _Recurrence._backward(ctx, grad_out, grad_h)

    @staticmethod
    def _backward(ctx, grad_out: Tensor, grad_h: Tensor):
        w_hh, out, gates = ctx.saved_tensors
        batch_sizes = ctx.batch_sizes
        D, P, H = out.shape
        B = batch_sizes[0]
        starts = [0]
        for n in batch_sizes[:-1]:
            starts.append(starts[-1] + n)
        dh = grad_h.clone() if grad_h is not None else out.new_zeros(D, B, H)  # [2, B, H]
        grad_out = grad_out if grad_out is not None else torch.zeros_like(out)
        dgi = out.new_empty(D, P, 3 * H)                                      # d(input projection)
        dgh = out.new_empty(D, P, 3 * H)                                      # d(hidden projection)
        for step in range(len(batch_sizes) - 1, -1, -1):
            n, o = batch_sizes[step], starts[step]
            d = dh[:, :n] + grad_out[:, o:o + n]                              # [2, n, H]
            rz, cand, ghn = (gates[:, o:o + n, : 2 * H], gates[:, o:o + n, 2 * H: 3 * H],
                             gates[:, o:o + n, 3 * H:])
            r, z = rz[..., :H], rz[..., H:]
            h_prev = out[:, starts[step - 1]: starts[step - 1] + n] if step else out.new_zeros(D, n, H)
            d_an = d * (1 - z) * (1 - cand * cand)                            # through tanh
            d_az = d * (h_prev - cand) * z * (1 - z)                          # through sigmoid(z)
            d_ar = d_an * ghn * r * (1 - r)                                   # through sigmoid(r)
            dgi[:, o:o + n, :H] = d_ar
            dgi[:, o:o + n, H: 2 * H] = d_az
            dgi[:, o:o + n, 2 * H:] = d_an
            dgh[:, o:o + n, : 2 * H] = dgi[:, o:o + n, : 2 * H]
            dgh[:, o:o + n, 2 * H:] = d_an * r
            dh[:, :n] = torch.baddbmm(d * z, dgh[:, o:o + n], w_hh)           # [2, n, H]
        # Hidden-weight gradients over all steps at once: h_prev of every packed token.
        first = batch_sizes[0]
        prev = torch.cat([out.new_zeros(D, first, H),
                          torch.cat([out[:, starts[s - 1]: starts[s - 1] + batch_sizes[s]]
                                     for s in range(1, len(batch_sizes))], 1) if len(batch_sizes) > 1
                          else out.new_zeros(D, 0, H)], 1)                    # [2, P, H]
        grad_w = torch.bmm(dgh.transpose(1, 2), prev)                         # [2, 3H, H]
        grad_b = dgh.sum(1)                                                   # [2, 3H]
        return dgi, grad_w, grad_b, dgi.sum(1), None, None
