"""The encoder, Batch -> EncoderOutput (paper eqs. 2-6), for every encoder arm.

Path of one batch:
  tokens -> embedding -> dropout -> 2-layer BiGRU (GTS's encoder, packed)   h_b = fwd + bwd  (eqs. 2-3)
  "none" (the GTS baseline) stops here: the decoder memory is h_b.
  Graph arms add, in parallel:
    sequence encoder: dropout -> 1-layer BiGRU over h_b                   h_seq = fwd + bwd (eq. 6)
    structure encoder over the batch's concatenated graph:
      h^0 = dropout(h_b) at the node positions (row node_batch * T + node_pos of h_b as [B*T, H]),
      L graph layers ("hlgt": LineGraphConv then HLGTConv per layer; "hgt"; "rgat"),
      h_str = h^L scattered back to the node's token (the mean when several nodes share a token,
      e.g. a ratio "3:7"); a token that is no node keeps h_b.
    h_f = [h_seq : h_str] (2H) enters the decoder's width H as a normalised residual on h_b:
    tokens = h_b + LayerNorm(Linear(2H, H)(h_f)), the LayerNorm's gain starting at FUSION_GAIN
    (0.1). The memory thus starts close to GTS's (h_b, a sum of GRU states bounded by their tanh)
    and takes in the sequence and graph encoders as the gain grows; the normalisation bounds what
    they add, so that the memory cannot grow until the decoder's tanh units (attention, scores)
    saturate. The gain does not start at zero: there the Linear gets no gradient and the gain's
    gradient, over the Linear's random features, has no steady sign, so the gain stays near zero
    and the two encoders go unused.
  problem = forward final state + backward final state of the memory's BiGRU (the word BiGRU's
  top layer for "none", the sequence BiGRU otherwise). With packed sequences this is the forward
  state at the last REAL token (GTS reads the padded last position, zeros for shorter problems).

Dropout as in GTS: cfg.dropout on the embeddings, between the word BiGRU's layers, and on the
input of each encoder above the word BiGRU (the sequence BiGRU's h_b and the graph's h^0), as
GTS drops out every recurrent layer's input. Eqs. 4-5 have none inside the graph layers.

Batched: one graph for the whole batch, no Python loop over problems; every problem's output is
the one it would get alone (tests check it). Node types: with model.node_type False every node
uses type 0's parameters. Baselines: "hgt" is PyG's HGTConv with relation matrices per edge type
(EdgeTypeHGTConv), wrapped with a LayerNorm per layer like HLGT; "rgat" is RAT-SQL's
relation-aware self-attention over the graph's edges (RelationAwareConv), a Transformer layer
whose keys and values carry an edge-type term. Neither uses the line graph; "rgat" has no node
types.

Letters in shape comments (the paper's where it has one): B problems, T tokens, H hidden size (the
paper's d), M heads, D = H / M per head, N nodes, E edges, R edge types.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch_geometric.nn import HGTConv
from torch_geometric.utils import softmax

from hlgt.config import ENCODERS, ModelConfig
from hlgt.data.collate import Batch
from hlgt.data.graph import EDGE_TYPES, NODE_TYPES
from hlgt.model.gru import Packing, Reversal, bigru
from hlgt.model.hlgt_conv import GraphLayout, HLGTConv, LineGraphConv

FUSION_GAIN = 0.1  # the fusion LayerNorm's starting gain (module docstring)


@dataclass
class EncoderOutput:
    tokens: Tensor   # [B, T, H] decoder memory (graph arms: h_b + LayerNorm(Linear(h_f)); "none": h_b)
    h_f: Tensor      # [B, T, 2H] [h_seq : h_str] for the comparison head ([B, T, H] = h_b for "none")
    h_b: Tensor      # [B, T, H] word representations (eq. 3)
    problem: Tensor  # [B, H] GTS problem vector (final forward + final backward state)
    mask: Tensor     # [B, T] True on real tokens
    # Asked for (``return_attention``) of the "hlgt" arm: each HLGT layer's node attention, [E, M]
    # per edge of batch.edge_index and head (HLGTConv's a_ij for the edge j -> i); None otherwise.
    attention: list[Tensor] | None = None

    def scales(self) -> dict[str, Tensor]:
        """Standard deviation of each activation's elements over the real tokens, detached, with no
        host synchronisation: h_b, h_seq and h_str (graph arms: the two halves of h_f) and the
        decoder memory."""
        acts = {"h_b": self.h_b, "memory": self.tokens}
        if self.h_f.size(-1) == 2 * self.h_b.size(-1):
            acts["h_seq"], acts["h_str"] = self.h_f.chunk(2, dim=-1)
        m = self.mask.unsqueeze(-1).to(self.h_b.dtype)                           # [B, T, 1]
        out = {}
        for name, x in acts.items():
            x = x.detach()
            n = m.sum() * x.size(-1)
            mean = (x * m).sum() / n
            out[name] = (((x - mean) * m).square().sum() / (n - 1).clamp(min=1)).sqrt()
        return out


class Encoder(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int):
        super().__init__()
        if cfg.encoder not in ENCODERS:
            raise ValueError(f"model.encoder must be one of {ENCODERS}, got {cfg.encoder!r}")
        if cfg.hidden_size % cfg.heads:
            raise ValueError(f"model.hidden_size ({cfg.hidden_size}) must be divisible by model.heads ({cfg.heads})")
        H = cfg.hidden_size
        self.kind = cfg.encoder
        self.num_node_types = len(NODE_TYPES) if cfg.node_type else 1
        self.embedding = nn.Embedding(vocab_size, cfg.embedding_size, padding_idx=0)
        self.dropout = nn.Dropout(cfg.dropout)
        self.word_gru = nn.GRU(cfg.embedding_size, H, num_layers=2, dropout=cfg.dropout,
                               bidirectional=True, batch_first=True)
        if self.kind == "none":
            return
        self.seq_gru = nn.GRU(H, H, bidirectional=True, batch_first=True)
        if self.kind == "hlgt":
            self.graph = HLGTGraphEncoder(H, cfg.heads, cfg.layers, self.num_node_types, cfg.line_graph)
        elif self.kind == "hgt":
            self.graph = HGTGraphEncoder(H, cfg.heads, cfg.layers, NODE_TYPES if cfg.node_type else ("node",))
        else:
            self.graph = RGATGraphEncoder(H, cfg.heads, cfg.layers)
        self.fusion = nn.Sequential(nn.Linear(2 * H, H), nn.LayerNorm(H))
        self._init_fusion_gain()

    def reset_parameters(self) -> None:
        for module in self.children():  # the graph stacks reset their layers (PyG's convention)
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
        if self.kind != "none":
            for layer in self.fusion:
                layer.reset_parameters()
            self._init_fusion_gain()

    def _init_fusion_gain(self) -> None:
        if self.kind != "none":
            nn.init.constant_(self.fusion[1].weight, FUSION_GAIN)

    def forward(self, batch: Batch, low_precision: bool = False, return_attention: bool = False) -> EncoderOutput:
        """``low_precision``: bfloat16 products in the CPU GRUs (inference only, see ``gru.py``);
        ``return_attention``: keep the HLGT layers' attention (``EncoderOutput.attention``)."""
        return self.after_recurrence(batch, self.recurrence(batch, low_precision=low_precision),
                                     return_attention=return_attention)

    def recurrence(self, batch: Batch, packing: Packing | Reversal | None = None,
                   low_precision: bool = False) -> tuple[Tensor, ...]:
        """The BiGRUs, which run over each batch's own lengths: (h_b [B, T, H], problem [B, H]),
        and h_seq [B, T, H] for the graph arms. ``packing``: the lengths packed beforehand
        (``Solver.plan``), else here; a ``Reversal``: causal passes over the padded tokens."""
        if not batch.checked:  # a batch from collate was checked there, on the CPU: no host sync here
            batch.check()
        tokens, lengths = batch.tokens, batch.lengths
        emb = self.dropout(self.embedding(tokens))                                # [B, T, E]
        # Solver.plan packs the lengths on the CPU; an unplanned batch is packed here, once for both BiGRUs.
        packing = packing if packing is not None else Packing.of(lengths, tokens.size(1)).to(tokens.device)
        h_b, h_n = bigru(self.word_gru, emb, lengths, low_precision, packing)    # [B, T, H], [4, B, H]
        if self.kind == "none":
            return h_b, h_n[-2] + h_n[-1]
        h_seq, h_n = bigru(self.seq_gru, self.dropout(h_b), lengths, low_precision, packing)  # [B, T, H], [2, B, H]
        return h_b, h_n[0] + h_n[1], h_seq

    def after_recurrence(self, batch: Batch, states: tuple[Tensor, ...],
                         graph_layout: GraphLayout | None = None, return_attention: bool = False) -> EncoderOutput:
        """The rest of the encoder over ``recurrence``'s states: shapes that depend only on the
        batch's padded sizes (``Solver.plan`` with a ``Shape``). ``graph_layout``: the HLGT layers'
        layout made beforehand (``Solver.plan``), else here."""
        h_b, problem = states[:2]
        B, T, _ = h_b.shape
        mask = torch.arange(T, device=h_b.device) < batch.lengths.unsqueeze(1)    # [B, T]
        if self.kind == "none":
            return EncoderOutput(tokens=h_b, h_f=h_b, h_b=h_b, problem=problem, mask=mask)
        h_str, attention = self._structure(h_b, batch, graph_layout, return_attention)  # [B, T, H]
        h_f = torch.cat([states[2], h_str], dim=-1)                               # [B, T, 2H] [h_seq : h_str]
        memory = h_b + self.fusion(h_f)                                           # [B, T, H]
        return EncoderOutput(tokens=memory, h_f=h_f, h_b=h_b, problem=problem, mask=mask, attention=attention)

    def graph_layout(self, batch: Batch, group_sizes: tuple[int, ...] | None = None) -> GraphLayout | None:
        """The HLGT layers' ``GraphLayout`` of the batch's graph (its type groups padded to
        ``group_sizes``, when given); None for the other arms."""
        if self.kind != "hlgt":
            return None
        return self.graph.layout(self._node_type(batch), batch.edge_index, group_sizes)

    def _node_type(self, batch: Batch) -> Tensor:
        return batch.node_type if self.num_node_types > 1 else torch.zeros_like(batch.node_type)

    def _structure(self, h_b: Tensor, batch: Batch, graph_layout: GraphLayout | None,
                   return_attention: bool = False) -> tuple[Tensor, list | None]:
        """h_b [B, T, H] -> (h_str [B, T, H], the HLGT layers' attention when asked, else None):
        graph layers over the nodes, scattered back to tokens."""
        B, T, H = h_b.shape
        # Row B*T, after the tokens, is where a padding node (node_batch B) reads and writes.
        flat = torch.cat([h_b.reshape(B * T, H), h_b.new_zeros(1, H)])           # [B*T+1, H]
        row = batch.node_batch * T + batch.node_pos                               # [N]
        h0 = self.dropout(flat.index_select(0, row))                              # [N, H]
        graph = (h0, self._node_type(batch), batch.edge_index, batch.edge_type, batch.line_index)
        attention = None
        if self.kind != "hlgt":
            h = self.graph(*graph)                                                # [N, H]
        elif return_attention:
            h, attention = self.graph(*graph, layout=graph_layout, return_attention=True)
        else:
            h = self.graph(*graph, layout=graph_layout)                           # [N, H]
        count = torch.zeros(B * T + 1, 1, dtype=h.dtype, device=h.device).index_add_(
            0, row, torch.ones(len(row), 1, dtype=h.dtype, device=h.device))      # [B*T+1, 1] nodes per token
        summed = torch.zeros_like(flat).index_add(0, row, h)                      # [B*T+1, H]
        h_str = torch.where(count > 0, summed / count.clamp(min=1), flat)         # [B*T+1, H]
        return h_str[: B * T].view(B, T, H), attention


class HLGTGraphEncoder(nn.Module):
    """L HLGT layers. Layer l: z^{l+1} = LineGraphConv(z^l, h^l), then h^{l+1} = HLGTConv(h^l, z^{l+1}):
    the edges first read the current nodes, the nodes then read the updated edges, so the last
    node layer sees edge states that already carry line-graph context.
    z^0 = E_e(edge type). line_graph False: no LineGraphConv, z = E_e(edge type) in every layer."""

    def __init__(self, hidden: int, heads: int, layers: int, num_node_types: int, line_graph: bool):
        super().__init__()
        self.num_node_types = num_node_types
        self.edge_embedding = nn.Embedding(len(EDGE_TYPES), hidden)              # E_e
        self.node_layers = nn.ModuleList(HLGTConv(hidden, heads, num_node_types) for _ in range(layers))
        self.edge_layers = (nn.ModuleList(LineGraphConv(hidden, heads) for _ in range(layers))
                            if line_graph else None)

    def reset_parameters(self) -> None:
        self.edge_embedding.reset_parameters()
        for layer in [*self.node_layers, *(self.edge_layers or [])]:
            layer.reset_parameters()

    def layout(self, node_type: Tensor, edge_index: Tensor, group_sizes: tuple[int, ...] | None = None) -> GraphLayout:
        """The layout every layer of a forward shares (``GraphLayout``), for this encoder's node types."""
        return GraphLayout.of(edge_index, node_type, self.num_node_types, group_sizes)

    def forward(self, x: Tensor, node_type: Tensor, edge_index: Tensor, edge_type: Tensor,
                line_index: Tensor, layout: GraphLayout | None = None, return_attention: bool = False):
        """-> x [N, H], and with ``return_attention`` each node layer's attention ([E, M] per
        layer, HLGTConv's). layout: ``self.layout(node_type, edge_index)``, made here when not given."""
        layout = layout if layout is not None else self.layout(node_type, edge_index)
        static = self.edge_embedding.weight                                       # [R, H]
        # With the line graph, z^0 = E_e(edge type) [E, H], updated by each layer; without, the
        # node layers look the static table [R, H] up by edge type.
        z, types = (static, edge_type) if self.edge_layers is None else (static.index_select(0, edge_type), None)
        attention = []
        for i, node_layer in enumerate(self.node_layers):
            if self.edge_layers is not None:
                z = self.edge_layers[i](z, x, edge_index, line_index, edge_type, static, layout=layout)  # [E, H]
            out = node_layer(x, edge_index, node_type, z, edge_type=types, layout=layout,
                             return_attention=return_attention)
            x, alpha = out if return_attention else (out, None)                  # [N, H], [E, M]
            attention.append(alpha)
        return (x, attention) if return_attention else x


class EdgeTypeHGTConv(HGTConv):
    """PyG's HGTConv with its relation matrices (k_rel, v_rel) per EDGE TYPE, as in the HGT paper
    (W^ATT_phi(e), W^MSG_phi(e)); the prior p_rel stays per meta relation (src type, edge, dst type),
    as the paper's mu. PyG keys all three by the triple: with all 7 x 10 x 7 = 490 triples allowed that
    is 64M relation parameters per layer at d = 512 (1.3M per edge type). Every triple is allowed (no
    list of "possible" triples to keep in sync with graph.py's rules), and
    every node type is a destination, so HGTConv never drops a node type from its output.
    Only `_construct_src_node_feat` differs from PyG: source features are projected once per
    (source type, edge type) and shared by the triples with that source and edge type.
    (A ParameterDict of 490 priors: a triple absent from a batch gets no gradient in that batch.)"""

    def __init__(self, channels: int, heads: int, node_types: tuple[str, ...], edge_types: tuple[str, ...]):
        base = [(node_types[0], rel, node_types[0]) for rel in edge_types]       # one triple per relation
        super().__init__(channels, channels, (list(node_types), base), heads=heads)  # k_rel: heads x R types
        self.num_relations = len(edge_types)
        self.edge_types = [(s, rel, d) for rel in edge_types for s in node_types for d in node_types]
        self.edge_types_map = {t: edge_types.index(t[1]) for t in self.edge_types}
        self.dst_node_types = set(node_types)
        for s, rel, d in self.edge_types:
            self.p_rel["__".join((s, rel, d))] = nn.Parameter(torch.ones(1, heads))

    def _construct_src_node_feat(self, k_dict, v_dict, edge_index_dict):
        M, D, R = self.heads, self.out_channels // self.heads, self.num_relations
        # k_rel's type h * R + r is head h of relation r (PyG's layout); applied per block with one bmm
        # per block (PyG's HeteroLinear loop zero-fills its whole output once per type in backward).
        w_k = self.k_rel.weight.view(M, R, D, D)                                  # [M, R, D, D]
        w_v = self.v_rel.weight.view(M, R, D, D)                                  # [M, R, D, D]
        ks, vs, offset, block = [], [], {}, {}
        cumsum = 0
        for edge_type in edge_index_dict:
            src, rel = edge_type[0], self.edge_types_map[edge_type]
            if (src, rel) not in block:
                block[(src, rel)] = cumsum
                cumsum += k_dict[src].size(0)
                ks.append(torch.einsum("nhd,hde->nhe", k_dict[src], w_k[:, rel]))  # [N_src, M, D]
                vs.append(torch.einsum("nhd,hde->nhe", v_dict[src], w_v[:, rel]))  # [N_src, M, D]
            offset[edge_type] = block[(src, rel)]
        return torch.cat(ks), torch.cat(vs), offset                               # [rows, M, D] x 2


class HGTGraphEncoder(nn.Module):
    """The "hgt" arm: L EdgeTypeHGTConv layers, each followed by a LayerNorm (HGT's original use_norm).
    Flat batch tensors are converted to HGTConv's dicts once per forward: nodes grouped by type
    (local ids), edges grouped by (edge type, source type, destination type)."""

    def __init__(self, hidden: int, heads: int, layers: int, node_types: tuple[str, ...]):
        super().__init__()
        self.node_types = tuple(node_types)
        self.convs = nn.ModuleList(EdgeTypeHGTConv(hidden, heads, self.node_types, EDGE_TYPES)
                                   for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(layers))

    def reset_parameters(self) -> None:
        for layer in [*self.convs, *self.norms]:
            layer.reset_parameters()

    def forward(self, x: Tensor, node_type: Tensor, edge_index: Tensor, edge_type: Tensor,
                line_index: Tensor) -> Tensor:
        N, K = x.size(0), len(self.node_types)
        if N == 0:
            return x
        names = self.node_types
        order = torch.argsort(node_type, stable=True)                             # [N] nodes by type
        counts = torch.bincount(node_type, minlength=K)                           # [K]
        start = torch.cumsum(counts, 0) - counts                                  # [K]
        local = torch.empty_like(order)
        local[order] = torch.arange(N, device=x.device) - start[node_type[order]]  # [N] id within its type
        src, dst = edge_index                                                     # [E], [E]
        key = (edge_type * K + node_type[src]) * K + node_type[dst]               # [E] triple id
        by_key = torch.argsort(key, stable=True)                                  # [E]
        keys, sizes = torch.unique_consecutive(key[by_key], return_counts=True)
        edge_index_dict = {}
        for k, part in zip(keys.tolist(), by_key.split(sizes.tolist())):
            triple = (names[k // K % K], EDGE_TYPES[k // (K * K)], names[k % K])
            edge_index_dict[triple] = torch.stack([local[src[part]], local[dst[part]]])  # [2, E_t]
        counts = counts.tolist()
        present = [t for t in range(K) if counts[t]]
        if not edge_index_dict:  # HGTConv needs one relation; an empty one gives every node no message
            t = names[present[0]]
            edge_index_dict[(t, EDGE_TYPES[0], t)] = edge_index.new_zeros(2, 0)
        xs = list(x.index_select(0, order).split(counts))                         # K x [N_t, H]
        for conv, norm in zip(self.convs, self.norms):
            out = conv({names[t]: xs[t] for t in present}, edge_index_dict)
            for t in present:
                xs[t] = norm(out[names[t]])                                       # [N_t, H]
        inv = torch.empty_like(order)
        inv[order] = torch.arange(N, device=x.device)
        return torch.cat(xs).index_select(0, inv)                                 # [N, H]


class RelationAwareConv(nn.Module):
    r"""Relation-aware self-attention (RAT-SQL, Wang et al. 2020, the paper's RGAT citation, after
    Shaw et al. 2018), over the graph: node i attends to itself and to the sources of its incoming
    edges, and the edge's type enters the keys and the values as an additional term.

    .. math::
        e_{ij} = (x_i W_Q)^m \cdot (x_j W_K + r^K_{ij})^m / \sqrt{D}      (per head m)
        a_{ij} = \mathrm{softmax}_{j \in N(i) \cup \{i\}}(e_{ij})
        z_i = \Vert_m \sum_j a^m_{ij} (x_j W_V + r^V_{ij})^m
        y_i = \mathrm{LayerNorm}(x_i + z_i W_O), \quad x_i' = \mathrm{LayerNorm}(y_i + \mathrm{FFN}(y_i))

    r^K and r^V: one D-vector per edge type, shared by the heads as in RAT-SQL, plus one for the
    pair (i, i). RAT-SQL attends over every pair of its input, with a relation where one is known;
    here the pairs are the graph's edges (the "graph attention" of the arm's name), so a node of
    no edge attends to itself alone. The FFN is LineGraphConv's (d -> d -> d), and there is no
    dropout inside the layer, as in HLGT's layers. No node types: RAT-SQL has none."""

    def __init__(self, channels: int, heads: int, num_relations: int):
        super().__init__()
        if channels % heads:
            raise ValueError(f"channels ({channels}) must be divisible by heads ({heads})")
        self.heads, self.head_dim, self.self_relation = heads, channels // heads, num_relations
        self.qkv = nn.Linear(channels, 3 * channels)                              # W_Q, W_K, W_V
        self.out = nn.Linear(channels, channels)                                  # W_O
        self.rel_k = nn.Embedding(num_relations + 1, self.head_dim)               # r^K, the last one (i, i)'s
        self.rel_v = nn.Embedding(num_relations + 1, self.head_dim)               # r^V
        self.norm1 = nn.LayerNorm(channels)
        self.ffn = nn.Sequential(nn.Linear(channels, channels), nn.ReLU(), nn.Linear(channels, channels))
        self.norm2 = nn.LayerNorm(channels)

    def reset_parameters(self) -> None:
        for module in (self.qkv, self.out, self.rel_k, self.rel_v, self.norm1, self.ffn[0], self.ffn[2], self.norm2):
            module.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_type: Tensor) -> Tensor:
        """x [N, d], edge_index [2, E] (source -> target), edge_type [E] -> [N, d]."""
        N, M, D = x.size(0), self.heads, self.head_dim
        loops = torch.arange(N, device=x.device)                                  # [N]
        src = torch.cat([edge_index[0], loops])                                   # [E + N]
        dst = torch.cat([edge_index[1], loops])                                   # [E + N]
        rel = torch.cat([edge_type, loops.new_full((N,), self.self_relation)])    # [E + N]
        q, k, v = self.qkv(x).view(N, 3, M, D).unbind(1)                          # 3 x [N, M, D]
        keys = k.index_select(0, src) + self.rel_k(rel).unsqueeze(1)              # [E + N, M, D]
        values = v.index_select(0, src) + self.rel_v(rel).unsqueeze(1)            # [E + N, M, D]
        score = (q.index_select(0, dst) * keys).sum(-1) / math.sqrt(D)           # [E + N, M]
        alpha = softmax(score, dst, num_nodes=N)                                  # [E + N, M]
        z = x.new_zeros(N, M, D).index_add_(0, dst, alpha.unsqueeze(-1) * values)  # [N, M, D]
        y = self.norm1(x + self.out(z.view(N, M * D)))                            # [N, d]
        return self.norm2(y + self.ffn(y))                                        # [N, d]


class RGATGraphEncoder(nn.Module):
    """The "rgat" arm: L RelationAwareConv layers over the edge types, without the line graph and
    without node types."""

    def __init__(self, hidden: int, heads: int, layers: int):
        super().__init__()
        self.convs = nn.ModuleList(RelationAwareConv(hidden, heads, len(EDGE_TYPES)) for _ in range(layers))

    def reset_parameters(self) -> None:
        for conv in self.convs:
            conv.reset_parameters()

    def forward(self, x: Tensor, node_type: Tensor, edge_index: Tensor, edge_type: Tensor,
                line_index: Tensor) -> Tensor:
        for conv in self.convs:
            x = conv(x, edge_index, edge_type)                                    # [N, H]
        return x
