"""HLGTConv (eq. 4) and LineGraphConv (eq. 5) against literal, loop-per-node implementations of the
paper's equations, plus the PyG layer conventions: batched == separate, softmax over incoming edges,
nodes without messages, empty graphs, reset_parameters, gradients."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hlgt.tensors import tensors_to
from hlgt.data.graph import line_graph
from hlgt.model.hlgt_conv import GraphLayout, HLGTConv, LineGraphConv, TypeGroups

D_MODEL, HEADS, N_TYPES, N_REL = 8, 2, 7, 10


def random_graph(seed: int, n: int, e: int):
    """n nodes, up to e directed edges (no self loops, no duplicates), its line graph, random types."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n, (e,), generator=g)
    dst = torch.randint(0, n, (e,), generator=g)
    keep = src != dst
    pairs = torch.unique(torch.stack([src[keep], dst[keep]]), dim=1)              # [2, E]
    ls, ld = line_graph(pairs[0].numpy(), pairs[1].numpy())
    return {
        "x": torch.randn(n, D_MODEL, generator=g, dtype=torch.float64),
        "node_type": torch.randint(0, N_TYPES, (n,), generator=g),
        "edge_index": pairs,
        "edge_type": torch.randint(0, N_REL, (pairs.size(1),), generator=g),
        "z": torch.randn(pairs.size(1), D_MODEL, generator=g, dtype=torch.float64),
        "line_index": torch.as_tensor(np.stack([ls, ld])).long().view(2, -1),
    }


def concat(graphs):
    """One disconnected graph from several, PyG style (node and edge offsets)."""
    n_off = np.cumsum([0] + [g["x"].size(0) for g in graphs])
    e_off = np.cumsum([0] + [g["edge_index"].size(1) for g in graphs])
    out = {k: torch.cat([g[k] for g in graphs]) for k in ("x", "node_type", "edge_type", "z")}
    out["edge_index"] = torch.cat([g["edge_index"] + int(o) for g, o in zip(graphs, n_off)], dim=1)
    out["line_index"] = torch.cat([g["line_index"] + int(o) for g, o in zip(graphs, e_off)], dim=1)
    return out, n_off, e_off


def hlgt(seed=0, types=N_TYPES):
    torch.manual_seed(seed)
    return HLGTConv(D_MODEL, HEADS, types).double()


def lgc(seed=0):
    torch.manual_seed(seed)
    return LineGraphConv(D_MODEL, HEADS).double()


def literal_eq4(conv: HLGTConv, x, edge_index, node_type, z):
    """Eq. 4 node by node, edge by edge, straight from the paper (with the query and the
    edge-modulated key normalised per head)."""
    d, M = conv.channels, conv.heads
    D = d // M
    t_of = node_type if conv.num_node_types > 1 else torch.zeros_like(node_type)
    psi_w, phi_w = conv.psi_phi.weight.split(d, dim=0)
    rows = []
    for i in range(x.size(0)):
        ti = int(t_of[i])
        w_q = conv.w_qkv[ti][:, :d]
        incoming = (edge_index[1] == i).nonzero().view(-1).tolist()
        h_tilde = torch.zeros(d, dtype=x.dtype)
        if incoming:
            q = F.layer_norm((x[i] @ w_q).view(M, D), (D,))                      # QK-norm, per head
            scores, values = [], []
            for e in incoming:
                j, tj = int(edge_index[0, e]), int(t_of[edge_index[0, e]])
                k = (x[j] @ conv.w_qkv[tj][:, d:2 * d]) * (psi_w @ z[e])
                v = (x[j] @ conv.w_qkv[tj][:, 2 * d:]) * (phi_w @ z[e])
                scores.append((q * F.layer_norm(k.view(M, D), (D,))).sum(-1) / math.sqrt(D))
                values.append(v.view(M, D))
            a = torch.softmax(torch.stack(scores), dim=0)                         # [deg, M]
            h_tilde = (a.unsqueeze(-1) * torch.stack(values)).sum(0).reshape(d)
        delta = torch.sigmoid(conv.skip[ti])
        rows.append(conv.norm(delta * x[i] + (1 - delta) * (h_tilde @ conv.u_o[ti])))
    return torch.stack(rows)


def literal_eq5(conv: LineGraphConv, z, h, edge_index, line_index, edge_type, static):
    """Eq. 5 line node by line node: target i dynamic z_i, neighbour j static E_e(type_j),
    rho(h_ji) = W_rho [h_a || h_b || h_c] for j = (a -> b), i = (b -> c)."""
    d, M = conv.channels, conv.heads
    D = d // M
    rows = []
    for i in range(z.size(0)):
        incoming = (line_index[1] == i).nonzero().view(-1).tolist()
        agg = torch.zeros(d, dtype=z.dtype)
        if incoming:
            scores, values = [], []
            for ell in incoming:
                j = int(line_index[0, ell])
                a, b = edge_index[:, j].tolist()
                assert b == int(edge_index[0, i])
                c = int(edge_index[1, i])
                zj = static[edge_type[j]]
                rho = conv.rho(torch.cat([h[a], h[b], h[c]]))
                cat = torch.cat([conv.S(z[i]).view(M, D), conv.S(zj).view(M, D), rho.view(M, D)], dim=1)
                att = torch.cat(list(conv.att), dim=1)                            # [M, 3D]
                scores.append(F.leaky_relu((cat * att).sum(-1), 0.2))
                values.append(conv.S_v(torch.cat([zj, rho])).view(M, D))
            b_ij = torch.softmax(torch.stack(scores), dim=0)                      # [deg, M]
            agg = (b_ij.unsqueeze(-1) * torch.stack(values)).sum(0).reshape(d)
        zt = conv.norm1(z[i] + agg)
        rows.append(conv.norm2(zt + conv.ffn(zt)))
    return torch.stack(rows)


@pytest.mark.parametrize("types", [N_TYPES, 1])
def test_hlgt_conv_is_equation_4(types):
    g = random_graph(1, 9, 25)
    conv = hlgt(types=types)
    out = conv(g["x"], g["edge_index"], g["node_type"], g["z"])
    assert out.shape == (9, D_MODEL)
    torch.testing.assert_close(out, literal_eq4(conv, g["x"], g["edge_index"], g["node_type"], g["z"]))


def test_line_graph_conv_is_equation_5():
    g = random_graph(2, 8, 30)
    assert g["line_index"].size(1) > 10
    conv = lgc()
    static = torch.randn(N_REL, D_MODEL, dtype=torch.float64)
    h = torch.randn(8, D_MODEL, dtype=torch.float64)
    args = (g["z"], h, g["edge_index"], g["line_index"], g["edge_type"], static)
    out = conv(*args)
    assert out.shape == g["z"].shape
    torch.testing.assert_close(out, literal_eq5(conv, *args))


def test_static_edge_table_equals_per_edge_features():
    g = random_graph(3, 9, 25)
    conv = hlgt()
    table = torch.randn(N_REL, D_MODEL, dtype=torch.float64)
    per_edge = conv(g["x"], g["edge_index"], g["node_type"], table[g["edge_type"]])
    looked_up = conv(g["x"], g["edge_index"], g["node_type"], table, edge_type=g["edge_type"])
    torch.testing.assert_close(per_edge, looked_up)


def test_batched_equals_separate():
    graphs = [random_graph(s, n, e) for s, n, e in ((4, 7, 20), (5, 3, 4), (6, 10, 40))]
    big, n_off, e_off = concat(graphs)
    node, line = hlgt().eval(), lgc().eval()
    static = torch.randn(N_REL, D_MODEL, dtype=torch.float64)
    out_n = node(big["x"], big["edge_index"], big["node_type"], big["z"])
    out_l = line(big["z"], big["x"], big["edge_index"], big["line_index"], big["edge_type"], static)
    for k, g in enumerate(graphs):
        alone_n = node(g["x"], g["edge_index"], g["node_type"], g["z"])
        alone_l = line(g["z"], g["x"], g["edge_index"], g["line_index"], g["edge_type"], static)
        torch.testing.assert_close(out_n[n_off[k]:n_off[k + 1]], alone_n, atol=1e-5, rtol=0)
        torch.testing.assert_close(out_l[e_off[k]:e_off[k + 1]], alone_l, atol=1e-5, rtol=0)


def test_softmax_over_incoming_edges_sums_to_one():
    g = random_graph(7, 8, 30)
    static = torch.randn(N_REL, D_MODEL, dtype=torch.float64)
    _, alpha = hlgt()(g["x"], g["edge_index"], g["node_type"], g["z"], return_attention=True)
    sums = torch.zeros(8, HEADS, dtype=alpha.dtype).index_add_(0, g["edge_index"][1], alpha)
    has_in = torch.bincount(g["edge_index"][1], minlength=8) > 0
    torch.testing.assert_close(sums[has_in], torch.ones_like(sums[has_in]))
    _, beta = lgc()(g["z"], g["x"], g["edge_index"], g["line_index"], g["edge_type"], static,
                    return_attention=True)
    E = g["z"].size(0)
    sums = torch.zeros(E, HEADS, dtype=beta.dtype).index_add_(0, g["line_index"][1], beta)
    has_in = torch.bincount(g["line_index"][1], minlength=E) > 0
    torch.testing.assert_close(sums[has_in], torch.ones_like(sums[has_in]))


def test_node_without_incoming_edge_keeps_gated_self():
    x = torch.randn(3, D_MODEL, dtype=torch.float64)
    edge_index = torch.tensor([[0, 1], [1, 0]])                                   # node 2 receives nothing
    node_type = torch.tensor([0, 4, 6])
    conv = hlgt()
    with torch.no_grad():
        conv.skip.copy_(torch.linspace(-1, 2, N_TYPES))
    out = conv(x, edge_index, node_type, torch.randn(2, D_MODEL, dtype=torch.float64))
    delta = torch.sigmoid(conv.skip[6])
    torch.testing.assert_close(out[2], conv.norm(delta * x[2]))


@pytest.mark.parametrize("n", [0, 4])
def test_empty_graph(n):
    x = torch.randn(n, D_MODEL, dtype=torch.float64, requires_grad=True)
    no_edges = torch.zeros(2, 0, dtype=torch.long)
    node_type = torch.arange(n) % N_TYPES
    conv = hlgt()
    out = conv(x, no_edges, node_type, torch.zeros(0, D_MODEL, dtype=torch.float64))
    delta = torch.sigmoid(conv.skip[node_type]).unsqueeze(-1)
    torch.testing.assert_close(out, conv.norm(delta * x))
    z = lgc()(torch.zeros(0, D_MODEL, dtype=torch.float64), x, no_edges, no_edges,
              torch.zeros(0, dtype=torch.long), torch.randn(N_REL, D_MODEL, dtype=torch.float64))
    assert z.shape == (0, D_MODEL)
    (out.sum() + z.sum()).backward()


def test_line_graph_edge_without_neighbours():
    edge_index = torch.tensor([[0], [1]])                                         # one edge, no line edges
    z = torch.randn(1, D_MODEL, dtype=torch.float64)
    conv = lgc()
    out = conv(z, torch.randn(2, D_MODEL, dtype=torch.float64), edge_index, torch.zeros(2, 0, dtype=torch.long),
               torch.tensor([3]), torch.randn(N_REL, D_MODEL, dtype=torch.float64))
    zt = conv.norm1(z)
    torch.testing.assert_close(out, conv.norm2(zt + conv.ffn(zt)))


@pytest.mark.parametrize("make", [hlgt, lgc])
def test_reset_parameters_is_seeded(make):
    conv = make()
    before = {k: v.clone() for k, v in conv.state_dict().items()}
    torch.manual_seed(123)
    conv.reset_parameters()
    first = {k: v.clone() for k, v in conv.state_dict().items()}
    torch.manual_seed(123)
    conv.reset_parameters()
    for k, v in conv.state_dict().items():
        torch.testing.assert_close(v, first[k])
    changed = [k for k in before if not torch.equal(before[k], first[k])]
    assert any("weight" in k or "w_qkv" in k for k in changed)


def test_every_parameter_gets_a_gradient():
    g = random_graph(8, 9, 30)
    g["node_type"] = torch.arange(9) % N_TYPES
    node, line = hlgt(), lgc()
    static = torch.randn(N_REL, D_MODEL, dtype=torch.float64)
    z = line(g["z"], g["x"], g["edge_index"], g["line_index"], g["edge_type"], static)
    out = node(g["x"], g["edge_index"], g["node_type"], z)
    (out * torch.randn_like(out)).sum().backward()
    for name, p in list(node.named_parameters()) + list(line.named_parameters()):
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_type_groups_equal_gathered_weights():
    x = torch.randn(11, 5)
    types = torch.tensor([3, 0, 3, 1, 6, 6, 0, 2, 3, 5, 4])
    w = torch.randn(7, 5, 4)
    expected = torch.bmm(x.unsqueeze(1), w[types]).squeeze(1)
    torch.testing.assert_close(TypeGroups.of(types, 7).linear(x, w), expected)
    torch.testing.assert_close(TypeGroups.of(types, 1).linear(x, w[:1]), x @ w[0])


def test_a_layout_made_ahead_on_another_device_gives_the_same_outputs():
    # The training loop makes the layout once per batch on the CPU and moves it with the batch;
    # every layer of the forward then reads it instead of making its own.
    g = random_graph(3, 12, 12)  # 3 nodes on no edge, 11 line edges
    static = torch.randn(N_REL, D_MODEL, dtype=torch.float64)
    layout = GraphLayout.of(g["edge_index"], g["node_type"], N_TYPES)
    assert layout.touched.numel() < 12
    moved = tensors_to(layout, "meta")  # as Batch.to moves it
    assert all(t.is_meta for t in (moved.touched, moved.local, moved.groups.perm, moved.groups.inv))
    assert moved.groups.counts == layout.groups.counts and layout.groups.perm.device.type == "cpu"
    node, line = hlgt(), lgc()
    node_args = (g["x"], g["edge_index"], g["node_type"], g["z"])
    line_args = (g["z"], g["x"], g["edge_index"], g["line_index"], g["edge_type"], static)
    torch.testing.assert_close(node(*node_args, layout=layout), node(*node_args), atol=0, rtol=0)
    torch.testing.assert_close(line(*line_args, layout=layout), line(*line_args), atol=0, rtol=0)
    with pytest.raises(ValueError, match="layout groups 7 node types, the layer has 1"):
        hlgt(types=1)(*node_args, layout=layout)


def test_scores_do_not_grow_with_the_projections():
    """QK-norm: scaling W_q, W_k or psi up leaves the attention as it is, so Adam cannot saturate
    the softmax by growing them (the literal eq. 4 scores grow with the product of all three)."""
    g = random_graph(3, 9, 20)
    conv = hlgt()
    args = (g["x"], g["edge_index"], g["node_type"], g["z"])
    _, before = conv(*args, return_attention=True)
    d = conv.channels
    with torch.no_grad():
        conv.w_qkv[:, :, : 2 * d] *= 50.0
        conv.psi_phi.weight[:d] *= 50.0
    _, after = conv(*args, return_attention=True)
    assert torch.allclose(before, after, atol=1e-3)  # up to LayerNorm's epsilon
