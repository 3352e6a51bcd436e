"""Encoder: shapes for every arm and switch, batched == separate, gradients, the GTS problem vector,
the decoder memory (h_b plus the normalised fusion), token <-> node scattering, the PyG
baselines against PyG's own layers, bad input."""
import dataclasses

import numpy as np
import pytest
import torch
from torch_geometric.nn import HGTConv

from hlgt.config import ModelConfig
from hlgt.data.collate import Batch
from hlgt.data.graph import EDGE_TYPES, NODE_TYPES, line_graph
from hlgt.model.encoder import ENCODERS, FUSION_GAIN, EdgeTypeHGTConv, Encoder, RelationAwareConv
from hlgt.model.hlgt_conv import LineGraphConv

VOCAB, EMB, HID, HEADS = 40, 8, 16, 4
ARMS = {
    "hlgt": {},
    "hlgt_no_node_type": {"node_type": False},
    "hlgt_no_line_graph": {"line_graph": False},
    "hgt": {"encoder": "hgt"},
    "hgt_no_node_type": {"encoder": "hgt", "node_type": False},
    "rgat": {"encoder": "rgat"},
    "none": {"encoder": "none"},
}
GRAPH_ARMS = [a for a in ARMS if a != "none"]


def make_encoder(seed=0, **kw) -> Encoder:
    torch.manual_seed(seed)
    cfg = ModelConfig(embedding_size=EMB, hidden_size=HID, heads=HEADS, layers=2, dropout=0.5, **kw)
    return Encoder(cfg, VOCAB)


def problem(seed: int, length: int, n_nodes: int, n_edges: int, types=None):
    """One problem: token ids, node positions/types, local edges (no self loops or duplicates)."""
    g = torch.Generator().manual_seed(seed)
    pos = torch.randperm(length, generator=g)[:n_nodes]
    if types is None:
        types = torch.randint(0, len(NODE_TYPES), (len(pos),), generator=g)
    src = torch.randint(0, max(len(pos), 1), (n_edges,), generator=g)
    dst = torch.randint(0, max(len(pos), 1), (n_edges,), generator=g)
    keep = src != dst
    edges = torch.unique(torch.stack([src[keep], dst[keep]]), dim=1)
    return {"tokens": torch.randint(3, VOCAB, (length,), generator=g), "node_pos": pos,
            "node_type": torch.as_tensor(types), "edge_index": edges,
            "edge_type": torch.randint(0, len(EDGE_TYPES), (edges.size(1),), generator=g)}


def make_batch(problems, extra_pad: int = 0) -> Batch:
    """Problems -> Batch, concatenated PyG style, line graph from hlgt.data.graph.line_graph."""
    B = len(problems)
    T = max(len(p["tokens"]) for p in problems) + extra_pad
    tokens = torch.zeros(B, T, dtype=torch.long)
    node_batch, node_off = [], 0
    edge_index = []
    for b, p in enumerate(problems):
        tokens[b, :len(p["tokens"])] = p["tokens"]
        node_batch.append(torch.full((len(p["node_pos"]),), b))
        edge_index.append(p["edge_index"] + node_off)
        node_off += len(p["node_pos"])
    edge_index = torch.cat(edge_index, dim=1)
    ls, ld = line_graph(edge_index[0].numpy(), edge_index[1].numpy())
    return Batch(
        ids=[str(b) for b in range(B)], tokens=tokens,
        lengths=torch.tensor([len(p["tokens"]) for p in problems]),
        num_pos=torch.zeros(B, 1, dtype=torch.long), num_mask=torch.ones(B, 1, dtype=torch.bool),
        num_values=torch.zeros(B, 1), node_batch=torch.cat(node_batch),
        node_pos=torch.cat([p["node_pos"] for p in problems]),
        node_type=torch.cat([p["node_type"] for p in problems]), edge_index=edge_index,
        edge_type=torch.cat([p["edge_type"] for p in problems]),
        line_index=torch.as_tensor(np.stack([ls, ld])).long().view(2, -1),
        target=torch.zeros(B, 1, dtype=torch.long), target_mask=torch.ones(B, 1, dtype=torch.bool))


PROBLEMS = [problem(1, 12, 7, 18), problem(2, 5, 3, 5), problem(3, 9, 9, 30)]


@pytest.mark.parametrize("arm", list(ARMS))
def test_shapes(arm):
    enc = make_encoder(**ARMS[arm])
    out = enc(make_batch(PROBLEMS, extra_pad=2))
    B, T = 3, 14
    width = HID if arm == "none" else 2 * HID
    assert out.tokens.shape == (B, T, HID) and out.h_b.shape == (B, T, HID)
    assert out.h_f.shape == (B, T, width) and out.problem.shape == (B, HID)
    assert out.mask.dtype == torch.bool and out.mask.sum(1).tolist() == [12, 5, 9]
    assert set(ENCODERS) == {"hlgt", "hgt", "rgat", "none"}


@pytest.mark.parametrize("arm", list(ARMS))
def test_batched_equals_separate(arm):
    enc = make_encoder(**ARMS[arm]).eval()
    with torch.no_grad():
        together = enc(make_batch(PROBLEMS))
        for b, p in enumerate(PROBLEMS):
            alone = enc(make_batch([p]))
            n = len(p["tokens"])
            for field in ("tokens", "h_f", "h_b"):
                torch.testing.assert_close(getattr(together, field)[b, :n], getattr(alone, field)[0],
                                           atol=1e-5, rtol=0)
            torch.testing.assert_close(together.problem[b], alone.problem[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("arm", list(ARMS))
def test_gradient_reaches_every_parameter(arm):
    all_types = [problem(10 + t, 10, len(NODE_TYPES), 40, types=torch.arange(len(NODE_TYPES)))
                 for t in range(2)]
    batch = make_batch(all_types + PROBLEMS)
    assert set(batch.edge_type.tolist()) == set(range(len(EDGE_TYPES)))
    enc = make_encoder(**ARMS[arm])
    out = enc(batch)
    (out.tokens.sum() + out.h_f.sum() + out.problem.sum()).backward()
    present = set()
    if arm.startswith("hgt"):  # HGTConv's prior mu exists per (src type, edge type, dst type)
        names = NODE_TYPES if ARMS[arm].get("node_type", True) else ("node",) * len(NODE_TYPES)
        t = batch.node_type
        for s, d, r in zip(t[batch.edge_index[0]].tolist(), t[batch.edge_index[1]].tolist(),
                           batch.edge_type.tolist()):
            present.add(f"{names[s]}__{EDGE_TYPES[r]}__{names[d]}")
    for name, p in enc.named_parameters():
        if ".p_rel." in name:  # its gradient is 0 where every target has one edge of the triple
            assert (p.grad is not None) == (name.split(".p_rel.")[1] in present), name
            continue
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_line_graph_switch_removes_line_graph_parameters():
    full = make_encoder()
    flat = make_encoder(line_graph=False)
    assert any(isinstance(m, LineGraphConv) for m in full.modules())
    assert not any(isinstance(m, LineGraphConv) for m in flat.modules())
    assert not any("edge_layers" in n for n, _ in flat.named_parameters())
    assert sum(p.numel() for p in flat.parameters()) < sum(p.numel() for p in full.parameters())
    # z is the static E_e(type): the line graph's edges do not change anything.
    flat.eval()
    batch = make_batch(PROBLEMS)
    with torch.no_grad():
        a = flat(batch).tokens
        b = flat(dataclasses.replace(batch, line_index=torch.zeros(2, 0, dtype=torch.long))).tokens
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("encoder", ["hlgt", "hgt"])
def test_node_type_switch_uses_one_type(encoder):
    enc = make_encoder(encoder=encoder, node_type=False).eval()
    if encoder == "hlgt":
        assert all(c.w_qkv.size(0) == 1 and c.u_o.size(0) == 1 for c in enc.graph.node_layers)
    batch = make_batch(PROBLEMS)
    with torch.no_grad():
        a = enc(batch).h_f
        b = enc(dataclasses.replace(batch, node_type=torch.randint(0, 7, batch.node_type.shape))).h_f
    torch.testing.assert_close(a, b)
    typed = make_encoder(encoder=encoder).eval()
    with torch.no_grad():
        c = typed(batch).h_f
        d = typed(dataclasses.replace(batch, node_type=(batch.node_type + 1) % 7)).h_f
    assert not torch.allclose(c, d)


@pytest.mark.parametrize("arm", GRAPH_ARMS)
@pytest.mark.parametrize("nodes", [0, 4])
def test_graph_without_edges(arm, nodes):
    empty = [problem(20, 8, nodes, 0), problem(21, 6, min(nodes, 2), 0)]
    batch = make_batch(empty)
    assert batch.edge_index.shape == (2, 0) and batch.line_index.shape == (2, 0)
    enc = make_encoder(**ARMS[arm])
    out = enc(batch)
    out.tokens.sum().backward()
    assert torch.isfinite(out.tokens).all()


@pytest.mark.parametrize("arm", GRAPH_ARMS)
def test_graph_arms_memory_starts_near_gts(arm):
    enc = make_encoder(**ARMS[arm]).eval()
    with torch.no_grad():
        out = enc(make_batch(PROBLEMS))
    added = (out.tokens - out.h_b)[out.mask]                                      # FUSION_GAIN * LayerNorm(...)
    assert abs(added.std().item() - FUSION_GAIN) < 0.01 * FUSION_GAIN


@pytest.mark.parametrize("arm", GRAPH_ARMS)
def test_graph_arms_memory_adds_the_normalised_fusion(arm):
    enc = make_encoder(**ARMS[arm]).eval()
    linear, norm = enc.fusion
    with torch.no_grad():
        norm.weight.fill_(1.0)
        linear.weight.mul_(50.0)  # a fusion grown large still adds a unit-scale term
        out = enc(make_batch(PROBLEMS))
        fused = linear(out.h_f)
    expected = (fused - fused.mean(-1, keepdim=True)) / (fused.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
    torch.testing.assert_close(out.tokens - out.h_b, expected, atol=1e-4, rtol=1e-4)
    assert abs((out.tokens - out.h_b)[out.mask].std().item() - 1.0) < 0.01


def test_graph_encoders_change_only_node_tokens():
    enc = make_encoder().eval()
    batch = make_batch(PROBLEMS)
    with torch.no_grad():
        out = enc(batch)
    h_str = out.h_f[..., HID:]
    is_node = torch.zeros_like(out.mask)
    is_node[batch.node_batch, batch.node_pos] = True
    torch.testing.assert_close(h_str[~is_node], out.h_b[~is_node])
    assert not torch.allclose(h_str[is_node], out.h_b[is_node])


def test_nodes_sharing_a_token_are_averaged():
    p = problem(30, 6, 3, 6, types=torch.tensor([6, 6, 0]))
    p["node_pos"] = torch.tensor([2, 2, 4])                                        # a ratio: two nodes, one token
    batch = make_batch([p])
    enc = make_encoder().eval()
    captured = {}
    enc.graph.register_forward_hook(lambda m, i, o: captured.setdefault("h", o))
    with torch.no_grad():
        out = enc(batch)
    torch.testing.assert_close(out.h_f[0, 2, HID:], captured["h"][:2].mean(0))
    torch.testing.assert_close(out.h_f[0, 4, HID:], captured["h"][2])


@pytest.mark.parametrize("arm", ["hlgt", "none"])
def test_problem_vector_uses_last_real_token(arm):
    enc = make_encoder(**ARMS[arm]).eval()
    p = PROBLEMS[1]
    with torch.no_grad():
        padded = enc(make_batch([p], extra_pad=4))
        alone = enc(make_batch([p]))
        torch.testing.assert_close(padded.problem, alone.problem, atol=1e-6, rtol=0)
        torch.testing.assert_close(padded.tokens[:, :5], alone.tokens, atol=1e-6, rtol=0)
        gru = enc.word_gru if arm == "none" else enc.seq_gru
        x = enc.embedding(p["tokens"]).unsqueeze(0) if arm == "none" else alone.h_b
        out, _ = gru(x)                                                           # [1, n, 2H], no padding
    torch.testing.assert_close(alone.problem[0], out[0, -1, :HID] + out[0, 0, HID:], atol=1e-6, rtol=0)
    if arm == "none":
        torch.testing.assert_close(alone.h_b[0], out[0, :, :HID] + out[0, :, HID:], atol=1e-6, rtol=0)


@pytest.mark.parametrize("arm", ["hlgt", "hlgt_no_node_type", "hlgt_no_line_graph"])
def test_attention_is_kept_only_when_asked_and_changes_nothing(arm):
    enc = make_encoder(**ARMS[arm]).eval()
    batch = make_batch([problem(1, 9, 6, 12), problem(2, 7, 5, 9)])
    plain, seen = enc(batch), enc(batch, return_attention=True)
    assert plain.attention is None and torch.equal(seen.tokens, plain.tokens)
    assert len(seen.attention) == 2 and all(conv._alpha is None for conv in enc.graph.node_layers)
    E = batch.edge_index.size(1)
    into = torch.bincount(batch.edge_index[1], minlength=batch.node_pos.numel()) > 0
    for alpha in seen.attention:  # each layer's softmax over the edges into a node, per head
        assert alpha.shape == (E, HEADS)
        sums = torch.zeros(batch.node_pos.numel(), HEADS).index_add_(0, batch.edge_index[1], alpha)
        torch.testing.assert_close(sums[into], torch.ones(int(into.sum()), HEADS))


@pytest.mark.parametrize("arm", ["hgt", "rgat", "none"])
def test_other_encoders_have_no_attention_to_return(arm):
    enc = make_encoder(**ARMS[arm]).eval()
    assert enc(make_batch([problem(1, 9, 6, 12)]), return_attention=True).attention is None


def test_reset_parameters_is_seeded():
    enc = make_encoder()
    torch.manual_seed(7)
    enc.reset_parameters()
    first = {k: v.clone() for k, v in enc.state_dict().items()}
    torch.manual_seed(7)
    enc.reset_parameters()
    assert all(torch.equal(v, first[k]) for k, v in enc.state_dict().items())
    torch.manual_seed(8)
    enc.reset_parameters()
    assert not torch.equal(enc.state_dict()["graph.node_layers.0.w_qkv"], first["graph.node_layers.0.w_qkv"])
    assert torch.equal(enc.embedding.weight[0], torch.zeros(EMB))                 # padding row stays zero


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_reset_parameters_redraws_every_parameter(arm):
    # Each graph stack resets its own layers (PyG's convention): none is left with stale values.
    enc = make_encoder(**ARMS[arm])
    with torch.no_grad():
        for p in enc.parameters():
            p.fill_(123.0)
    enc.reset_parameters()
    stale = [name for name, p in enc.named_parameters() if (p == 123.0).any()]
    assert not stale


def literal_relation_aware_attention(conv: RelationAwareConv, x, edge_index, edge_type):
    """RAT-SQL's layer written node by node: each node's softmax over itself and its in-edges."""
    M, D = conv.heads, conv.head_dim
    q, k, v = conv.qkv(x).view(len(x), 3, M, D).unbind(1)
    rows = []
    for i in range(len(x)):
        into = (edge_index[1] == i).nonzero().flatten().tolist()
        pairs = [(int(edge_index[0, e]), int(edge_type[e])) for e in into] + [(i, conv.self_relation)]
        heads = []
        for m in range(M):
            keys = torch.stack([k[j, m] + conv.rel_k.weight[r] for j, r in pairs])
            values = torch.stack([v[j, m] + conv.rel_v.weight[r] for j, r in pairs])
            a = torch.softmax(keys @ q[i, m] / D ** 0.5, dim=0)
            heads.append(a @ values)
        rows.append(torch.cat(heads))
    y = conv.norm1(x + conv.out(torch.stack(rows)))
    return conv.norm2(y + conv.ffn(y))


def test_relation_aware_attention_is_rat_sqls_formula():
    torch.manual_seed(0)
    conv = RelationAwareConv(HID, HEADS, len(EDGE_TYPES))
    x = torch.randn(9, HID)
    edge_index = torch.randint(0, 9, (2, 30))
    edge_index[:, 0] = torch.tensor([3, 3])                                       # a self loop, and node 8 has no edge
    edge_index[edge_index == 8] = 7
    edge_type = torch.randint(0, len(EDGE_TYPES), (30,))
    torch.testing.assert_close(conv(x, edge_index, edge_type),
                               literal_relation_aware_attention(conv, x, edge_index, edge_type))


def test_relation_aware_attention_reads_the_edge_type():
    torch.manual_seed(0)
    conv = RelationAwareConv(HID, HEADS, len(EDGE_TYPES))
    x = torch.randn(4, HID)
    edge_index = torch.tensor([[0, 1, 2], [3, 3, 3]])
    a = conv(x, edge_index, torch.tensor([0, 1, 2]))
    b = conv(x, edge_index, torch.tensor([0, 1, 5]))
    assert torch.equal(a[:3], b[:3]) and not torch.allclose(a[3], b[3])


def test_edge_type_hgt_equals_pyg_hgt_with_one_node_type():
    """With one node type there is one triple per edge type, so PyG's per-triple relation matrices
    are exactly our per-edge-type ones."""
    torch.manual_seed(0)
    ours = EdgeTypeHGTConv(HID, HEADS, ("node",), EDGE_TYPES)
    pyg = HGTConv(HID, HID, (["node"], [("node", r, "node") for r in EDGE_TYPES]), heads=HEADS)
    pyg.load_state_dict(ours.state_dict())
    with torch.no_grad():
        for p in ours.p_rel.values():
            p.uniform_(0.5, 1.5)
        pyg.load_state_dict(ours.state_dict())
    x = {"node": torch.randn(8, HID)}
    ei = {("node", r, "node"): torch.randint(0, 8, (2, 5)) for r in EDGE_TYPES[::3]}
    torch.testing.assert_close(ours(x, ei)["node"], pyg(x, ei)["node"])


def test_edge_type_hgt_shares_relations_across_node_types():
    conv = EdgeTypeHGTConv(HID, HEADS, NODE_TYPES, EDGE_TYPES)
    assert conv.k_rel.weight.size(0) == HEADS * len(EDGE_TYPES)
    assert len(conv.p_rel) == len(NODE_TYPES) ** 2 * len(EDGE_TYPES)


@pytest.mark.parametrize("field, value, message", [
    ("node_pos", lambda b: b.node_pos + 20, "node_pos"),
    ("edge_index", lambda b: torch.tensor([[0], [len(b.node_pos) - 1]]), "different problems"),
    ("node_type", lambda b: b.node_type + 7, "node_type"),
    ("lengths", lambda b: b.lengths * 0, "lengths"),
])
def test_bad_batches_raise(field, value, message):
    batch = make_batch(PROBLEMS)
    if field == "edge_index":
        batch = dataclasses.replace(batch, edge_type=torch.tensor([0]), line_index=torch.zeros(2, 0, dtype=torch.long))
    batch = dataclasses.replace(batch, **{field: value(batch)})
    with pytest.raises(ValueError, match=message):
        make_encoder()(batch)


def test_unknown_encoder_raises():
    with pytest.raises(ValueError, match="model.encoder"):
        make_encoder(encoder="gcn")
