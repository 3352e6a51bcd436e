"""The two graph layers of the Heterogeneous Line Graph Transformer (paper section 3.3).

HLGTConv       eq. 4, a layer on the node-centred graph G_n: type-specific heterogeneous attention
               whose keys and values are modulated by the dynamic edge features z of the line graph.
LineGraphConv  eq. 5, a layer on the edge-centred line graph G_e: GAT-style attention between
               edges with the paper's mixed static-dynamic embedding, then a feed-forward network.

Both follow PyG conventions (MessagePassing, reset_parameters(), node_dim=0, shape comments) and
are batch-agnostic: a batch is one big disconnected graph, so batched forward equals separate
forwards. Neither layer has biases where the paper writes plain matrices (W, U_o, psi, phi, S, S_v,
rho); a node that receives no message therefore gets exactly LayerNorm(delta * h) from eq. 4, and an
edge with no line-graph neighbour gets LayerNorm(z) before its FFN (see LineGraphConv).

Speed (CPU training is the target): type-specific matrices are stacked [n_types, d_in, d_out] and
applied to nodes grouped by type, one matmul per type (TypeGroups), which beats computing all
types for all nodes 7-fold. Node projections are computed for the nodes on some edge only (a
problem's graph leaves many tokens isolated; their result is known in closed form), listed with
the type groups once per batch in a ``GraphLayout`` that every layer of the forward shares. In
eq. 5 every projection is linear, so the per-line-edge terms are rewritten exactly, by
linearity, as gathers of per-node, per-edge or per-edge-type projections: no [L, d] x [d, d]
matmul is ever done over line edges (test_hlgt_conv checks this rewriting against a literal,
per-line-edge implementation of the equation).

Letters as in the paper: d channels (the encoder's H), M heads, D = d / M per head; N nodes, E edges
of G_n, L line edges, R edge types.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.utils import softmax


def glorot_(weight: Tensor, fan_in: int, fan_out: int) -> None:
    """Glorot-uniform for a (possibly stacked) weight whose blocks are fan_in x fan_out maps."""
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        weight.uniform_(-bound, bound)


@dataclass
class TypeGroups:
    """Rows grouped by type once, reused by every type-specific projection of one forward."""

    num_types: int
    perm: Tensor | None = None                                                    # [N] rows sorted by type
    inv: Tensor | None = None                                                     # [N] each row's place in perm
    counts: list[int] | None = None                                               # rows per type

    @classmethod
    def of(cls, types: Tensor, num_types: int) -> "TypeGroups":
        """types [N] (not read when num_types is 1: every row shares type 0's weights)."""
        if num_types == 1:
            return cls(1)
        perm = torch.argsort(types, stable=True)                                  # [N]
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(len(types), device=types.device)                # [N]
        return cls(num_types, perm, inv, torch.bincount(types, minlength=num_types).tolist())

    def linear(self, x: Tensor, weight: Tensor) -> Tensor:
        """x [N, a] times weight[type] with weight [num_types, a, b] -> [N, b]."""
        if self.num_types == 1:
            return x @ weight[0]                                                  # [N, b]
        parts = x.index_select(0, self.perm).split(self.counts)                   # num_types x [N_t, a]
        # unbind, not weight[t]: the backward of one select per type would zero-fill all of weight each time.
        out = torch.cat([p @ w for p, w in zip(parts, weight.unbind(0))])         # [N, b] sorted by type
        return out.index_select(0, self.inv)                                      # [N, b]


@dataclass
class GraphLayout:
    """What every graph layer of one forward reads from the graph alone: the nodes on some edge of
    G_n (only they need projections: a problem's graph leaves many tokens isolated), the edges in
    their local ids, and those nodes grouped by type. Making it reads sizes back (``unique``, the
    group sizes), a host synchronisation on a GPU: the training loop makes it once per batch on the
    CPU (``hlgt.model.solver.Solver.plan``), and the layers of one forward share it."""

    touched: Tensor                                                               # [Nt] node ids
    local: Tensor                                                                 # [2, E] edge_index in touched ids
    groups: TypeGroups                                                            # the touched nodes by type

    @classmethod
    def of(cls, edge_index: Tensor, node_type: Tensor | None = None, num_types: int = 1,
           group_sizes: tuple[int, ...] | None = None) -> "GraphLayout":
        """edge_index [2, E], node_type [N] (read only when num_types > 1). ``group_sizes`` (one per
        type, each at least the type's touched nodes: ``group_counts``) pads every type group to
        its size with copies of the last node, N - 1 (a padding node, ``Batch.padded``), so
        that the layers' shapes are these sizes whatever the graph."""
        touched, local = torch.unique(edge_index, return_inverse=True)            # [Nt], [2, E]
        types = node_type.index_select(0, touched) if num_types > 1 else torch.zeros_like(touched)  # [Nt]
        if group_sizes is not None:
            counts = torch.bincount(types, minlength=num_types)                  # [num_types]
            missing = torch.tensor(group_sizes) - counts                          # [num_types]
            if bool((missing < 0).any()):
                raise ValueError(f"touched nodes per type {counts.tolist()} exceed the group sizes {list(group_sizes)}")
            fill = torch.repeat_interleave(torch.arange(num_types), missing)       # a group label per padding row
            touched = torch.cat([touched, touched.new_full(fill.shape, node_type.numel() - 1)])
            types = torch.cat([types, fill])
        return cls(touched, local, TypeGroups.of(types, num_types))

    def group_counts(self) -> tuple[int, ...]:
        """Touched nodes per type group."""
        return tuple(self.groups.counts) if self.groups.counts is not None else (len(self.touched),)


class HLGTConv(MessagePassing):
    r"""Eq. 4: heterogeneous mutual attention with dynamic edge features.

    .. math::
        \tilde a_{ij} = \mathrm{LN}(h_i W_q^{\tau(i)}) \cdot \mathrm{LN}((h_j W_k^{\tau(j)}) \odot \psi(z_{ji}))
        a_{ij} = \mathrm{softmax}_{j \in N(i)}(\tilde a_{ij} / \sqrt{d/M})      (per head)
        \tilde h_i = \Vert_m \sum_j a^m_{ij} (h_j W_v^{\tau(j)} \odot \varphi(z_{ji}))^m
        h_i' = \mathrm{LayerNorm}(\delta^{\tau(i)} h_i + (1 - \delta^{\tau(i)}) \tilde h_i U_o^{\tau(i)})

    with delta^tau = sigmoid(s_tau) a learned per-type gate (as HGT's skip; s initialised to 1 as
    in PyG's HGTConv). An edge j -> i is column (j, i) of edge_index (source row 0, target row 1).
    A node with no incoming edge has h~ = 0, hence h' = LayerNorm(delta h) (U_o has no bias).

    LN (per head, over its d/M channels, without gain or bias) is this implementation's: eq. 4
    scores the raw product of three learned projections (W_q, W_k, psi), which Adam grows until
    the softmax saturates and the gradients through it spike. Normalising the query and the
    edge-modulated key (QK-norm, Dehghani et al. 2023) bounds every score by sqrt(d/M).
    num_node_types = 1 gives every node the same parameters (the "w/o node type" arm).
    """

    def __init__(self, channels: int, heads: int, num_node_types: int, edge_channels: int | None = None):
        super().__init__(aggr="add", node_dim=0)
        if channels % heads:
            raise ValueError(f"channels ({channels}) must be divisible by heads ({heads})")
        self.channels, self.heads, self.num_node_types = channels, heads, num_node_types
        self.edge_channels = edge_channels or channels
        d = channels
        self.w_qkv = nn.Parameter(torch.empty(num_node_types, d, 3 * d))  # [W_q | W_k | W_v] per type
        self.psi_phi = nn.Linear(self.edge_channels, 2 * d, bias=False)     # [psi | phi]
        self.u_o = nn.Parameter(torch.empty(num_node_types, d, d))
        self.skip = nn.Parameter(torch.empty(num_node_types))              # delta = sigmoid(skip)
        self.norm = nn.LayerNorm(d)
        self._alpha: Tensor | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        d = self.channels
        glorot_(self.w_qkv, d, d)
        glorot_(self.psi_phi.weight, self.edge_channels, d)
        glorot_(self.u_o, d, d)
        nn.init.ones_(self.skip)
        self.norm.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, node_type: Tensor, edge_attr: Tensor,
                edge_type: Tensor | None = None, layout: GraphLayout | None = None,
                return_attention: bool = False):
        """x [N, d], edge_index [2, E], node_type [N] -> [N, d] (and attention [E, M] if asked).

        edge_attr is z: either [E, d_z] per edge, or, when edge_type [E] is given, a table
        [R, d_z] looked up by edge_type (static edge embeddings: psi and phi then run on R rows).
        layout: ``GraphLayout.of(edge_index, node_type, num_node_types)``, made here when not given.
        """
        N, d, M = x.size(0), self.channels, self.heads
        D = d // M
        if layout is None:
            layout = GraphLayout.of(edge_index, node_type, self.num_node_types)
        elif layout.groups.num_types != self.num_node_types:
            raise ValueError(f"layout groups {layout.groups.num_types} node types, the layer has {self.num_node_types}")
        # Only nodes on some edge need projections: elsewhere h~ = 0, so h~ U_o = 0 (no bias).
        touched, local, groups = layout.touched, layout.local, layout.groups      # [Nt], [2, E]
        xt = x.index_select(0, touched)                                           # [Nt, d]
        qkv = groups.linear(xt, self.w_qkv)                                       # [Nt, 3d]
        q, k, v = (t.reshape(-1, M, D) for t in qkv.split(d, dim=1))              # 3 x [Nt, M, D]
        q = F.layer_norm(q, (D,))                                                 # [Nt, M, D]
        kz, vz = self.psi_phi(edge_attr).split(d, dim=1)                          # 2 x [E or R, d]
        if edge_type is not None:
            kz, vz = kz.index_select(0, edge_type), vz.index_select(0, edge_type)  # 2 x [E, d]
        kz, vz = kz.reshape(-1, M, D), vz.reshape(-1, M, D)                       # 2 x [E, M, D]
        msg = self.propagate(local, q=q, k=k, v=v, kz=kz, vz=vz, size=(len(touched), len(touched)))  # [Nt, d]
        alpha = self._alpha
        self._alpha = None
        update = torch.zeros_like(x).index_copy(0, touched, groups.linear(msg, self.u_o))  # [N, d] h~ U_o
        gate = torch.sigmoid(self.skip)                                           # [n_types]
        delta = (gate[node_type] if self.num_node_types > 1 else gate.expand(N)).unsqueeze(-1)  # [N, 1]
        out = self.norm(delta * x + (1 - delta) * update)                         # [N, d]
        return (out, alpha) if return_attention else out

    def message(self, q_i: Tensor, k_j: Tensor, v_j: Tensor, kz: Tensor, vz: Tensor,
                index: Tensor, ptr: Tensor | None, size_i: int | None) -> Tensor:
        D = q_i.size(-1)
        key = F.layer_norm(k_j * kz, (D,))                                        # [E, M, D]
        score = (q_i * key).sum(-1) / math.sqrt(D)                                # [E, M]
        alpha = softmax(score, index, ptr, size_i)                                # [E, M] sums to 1 per target
        self._alpha = alpha
        return (v_j * vz * alpha.unsqueeze(-1)).reshape(-1, self.channels)       # [E, d]

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
                f"node_types={self.num_node_types})")


class LineGraphConv(MessagePassing):
    r"""Eq. 5 on the line graph: one line node per directed edge of G_n, a line edge j -> i when
    edge j = (a -> b) is followed by edge i = (b -> c), c != a.

    .. math::
        b_{ij} = \mathrm{softmax}_{j}(\mathrm{LeakyReLU}(a^m \cdot [S(z_i)^m \Vert S(\bar z_j)^m
                 \Vert \rho(h_{ji})^m]))                                       (per head m)
        \tilde z_i = \Vert_m \sum_j b^m_{ij} (S_v [\bar z_j \Vert \rho(h_{ji})])^m
        z_i' = \mathrm{LN}(z_i + \tilde z_i), \quad z_i^{l+1} = \mathrm{LN}(z_i' + \mathrm{FFN}(z_i'))

    Mixed static-dynamic embedding (paper): the target line node i uses its dynamic state z_i, a
    source (neighbour) j uses its static embedding \bar z_j = E_e(type_j), row of `static`.
    rho(h_ji) = W_rho [h_a || h_b || h_c] is the feature of the relation j -> i taken from the node
    representations of G_n: the path a -> b -> c that the line edge stands for (the endpoints of
    both edges, the shared node b once). S, S_v, W_rho are plain matrices ([d, d], [2d, d], [3d, d]);
    a^m = [a_dst^m || a_src^m || a_rel^m] is one GAT scoring vector per head; LeakyReLU slope 0.2.
    FFN = Linear(d, d) -> ReLU -> Linear(d, d). The residual + LayerNorm around the attention and
    around the FFN (a post-norm Transformer block) are this implementation's: eq. 5 writes
    z^{l+1} = FFN(z~); the residual keeps the edge's own state, which an edge without line-graph
    neighbours (z~ = 0) would otherwise lose.
    """

    def __init__(self, channels: int, heads: int, node_channels: int | None = None,
                 negative_slope: float = 0.2):
        super().__init__(aggr="add", node_dim=0)
        if channels % heads:
            raise ValueError(f"channels ({channels}) must be divisible by heads ({heads})")
        self.channels, self.heads, self.negative_slope = channels, heads, negative_slope
        self.node_channels = node_channels or channels
        d = channels
        self.S = nn.Linear(d, d, bias=False)
        self.att = nn.Parameter(torch.empty(3, heads, d // heads))       # a_dst, a_src, a_rel per head
        self.rho = nn.Linear(3 * self.node_channels, d, bias=False)       # W_rho [h_a || h_b || h_c]
        self.S_v = nn.Linear(2 * d, d, bias=False)                        # S_v [z_j || rho]
        self.norm1 = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))
        self.norm2 = nn.LayerNorm(d)
        self._alpha: Tensor | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        d, M = self.channels, self.heads
        glorot_(self.S.weight, d, d)
        glorot_(self.att, 3 * d // M, 1)
        glorot_(self.rho.weight, 3 * self.node_channels, d)
        glorot_(self.S_v.weight, 2 * d, d)
        for layer in (self.norm1, self.ffn[0], self.ffn[2], self.norm2):
            layer.reset_parameters()

    def forward(self, z: Tensor, h: Tensor, edge_index: Tensor, line_index: Tensor, edge_type: Tensor,
                static: Tensor, layout: GraphLayout | None = None, return_attention: bool = False):
        """z [E, d] dynamic edge states, h [N, d_h] node states, edge_index [2, E] (G_n),
        line_index [2, L] (G_e, edge ids), edge_type [E], static [R, d] = E_e's table -> [E, d].
        layout: ``GraphLayout.of(edge_index)`` or one with node types (only its node ids are read)."""
        E, d, M = z.size(0), self.channels, self.heads
        D = d // M
        a_dst, a_src, a_rel = self.att                                            # 3 x [M, D]
        # Scores by linearity: a^m . S(x)^m = x @ u with u [d, M] (S composed with a per head).
        s_w = self.S.weight.view(M, D, d)                                         # [M, D, d]
        u_dst = torch.einsum("mkd,mk->dm", s_w, a_dst)                            # [d, M]
        u_src = torch.einsum("mkd,mk->dm", s_w, a_src)                            # [d, M]
        # rho and S_v's rho half composed, per endpoint of the path a -> b -> c.
        sv_z, sv_rho = self.S_v.weight.split(d, dim=1)                            # 2 x [d, d]
        rho_w = self.rho.weight.split(self.node_channels, dim=1)                  # 3 x [d, d_h]
        node_w = torch.cat(
            [w.t() @ sv_rho.t() for w in rho_w]                                   # 3 x [d_h, d] values
            + [torch.einsum("mkh,mk->hm", w.view(M, D, -1), a_rel) for w in rho_w],  # 3 x [d_h, M] scores
            dim=1)                                                                # [d_h, 3d + 3M]
        layout = layout if layout is not None else GraphLayout.of(edge_index)
        touched, (src, dst) = layout.touched, layout.local                       # [Nt]; [E], [E] local ids
        node_proj = h.index_select(0, touched) @ node_w                           # [Nt, 3d + 3M]
        va, vb, vc, ra, rb, rc = node_proj.split([d, d, d, M, M, M], dim=1)
        # Edge j as a source (neighbour): static embedding, and its source node a = src[j].
        s_static = static @ u_src                                                 # [R, M]
        v_static = static @ sv_z.t()                                              # [R, d]
        s_src = s_static.index_select(0, edge_type) + ra.index_select(0, src)    # [E, M]
        v_src = v_static.index_select(0, edge_type) + va.index_select(0, src)    # [E, d]
        # Edge i as a target: dynamic state, and its nodes b = src[i], c = dst[i].
        s_tgt = z @ u_dst + rb.index_select(0, src) + rc.index_select(0, dst)    # [E, M]
        v_tgt = vb.index_select(0, src) + vc.index_select(0, dst)                # [E, d]
        agg = self.propagate(line_index, s_tgt=s_tgt, s_src=s_src, v_src=v_src.view(E, M, D),
                             size=(E, E))                                         # [E, d]
        alpha = self._alpha
        self._alpha = None
        # sum_j b_ij (S_v rho)_{b,c part} = that part times sum_j b_ij, which is 1 (0 without neighbours).
        # index_fill_, not ``has_in[idx] = 1.0``: on a GPU that assignment copies the scalar from
        # the host, a blocking copy in every step.
        has_in = torch.zeros(E, 1, dtype=z.dtype, device=z.device).index_fill_(0, line_index[1], 1.0)  # [E, 1]
        zt = self.norm1(z + agg + has_in * v_tgt)                                 # [E, d]
        out = self.norm2(zt + self.ffn(zt))                                       # [E, d]
        return (out, alpha) if return_attention else out

    def message(self, s_tgt_i: Tensor, s_src_j: Tensor, v_src_j: Tensor,
                index: Tensor, ptr: Tensor | None, size_i: int | None) -> Tensor:
        score = F.leaky_relu(s_tgt_i + s_src_j, self.negative_slope)              # [L, M]
        alpha = softmax(score, index, ptr, size_i)                                # [L, M]
        self._alpha = alpha
        return (v_src_j * alpha.unsqueeze(-1)).reshape(-1, self.channels)        # [L, d]

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels}, heads={self.heads})"
