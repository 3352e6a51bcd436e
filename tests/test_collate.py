"""Tests for hlgt/data/collate.py: padding, NUM tokens, graph offsets, variant selection, targets."""

import numpy as np
import pytest
import torch

from hlgt.data.collate import collate, encode, iter_batches
from hlgt.data.graph import GRAPH_PARTS, GRAPH_VARIANTS, Graph, line_graph, select_variant
from hlgt.data.numbers import Example, Quantity
from hlgt.data.schema import rows_to_table, to_row
from hlgt.data.vocab import NUM, UNK, Vocab
from hlgt.tensors import tensors_of


def random_graph(rng, n_nodes, n_edges, positions):
    src = rng.integers(0, n_nodes, n_edges)
    dst = (src + rng.integers(1, n_nodes, n_edges)) % n_nodes  # no self loops
    ls, ld = line_graph(src, dst)
    return Graph(node_pos=rng.choice(positions, n_nodes), node_type=rng.integers(0, 7, n_nodes),
                 edge_src=src, edge_dst=dst, edge_type=rng.integers(0, 10, n_edges),
                 edge_part=rng.integers(0, len(GRAPH_PARTS), n_edges), line_src=ls, line_dst=ld)


def make_rows():
    rng = np.random.default_rng(0)
    specs = [
        ("a", "Tom has 3 apples and buys 2.5 more .", [2, 6], ["+", "N0", "N1"]),
        ("b", "Ann reads 20% of 150 pages , then 1 more , then 7 zorks .", [2, 4, 8, 12], ["*", "N0", "N1"]),
        ("c", "x is 4", [2], None),  # gold equation not representable
        ("d", "5 cakes cost 3.14 each", [0, 3], ["*", "N0", "3.14"]),  # constant missing from the vocab
    ]
    rows, graphs = [], []
    for rid, text, slots, prefix in specs:
        tokens = text.split()
        qs = [Quantity(tokens[p], float(tokens[p].rstrip("%")), "integer", p) for p in slots]
        ex = Example(id=rid, lang="en", source="inline", tokens=tokens, quantities=qs, prefix=prefix,
                     answer=1.0, flag=None if prefix else "unparseable_equation")
        g = random_graph(rng, n_nodes=len(tokens) // 2 + 2, n_edges=3 * len(tokens), positions=len(tokens))
        graphs.append(g)
        rows.append(rows_to_table([to_row(ex, g)]).to_pylist()[0])  # as load_rows gives them
    return rows, graphs


VOCAB = Vocab.build([["Tom", "has", NUM, "apples", "and", "buys", "more", "."], ["Ann", "reads", "of", "pages"]],
                    constants=["1", "100"])


def test_tokens_lengths_and_quantities():
    rows, _ = make_rows()
    b = collate(rows, VOCAB)
    assert b.ids == ["a", "b", "c", "d"]
    assert b.lengths.tolist() == [len(r["tokens"]) for r in rows]
    assert b.tokens.shape == (4, max(len(r["tokens"]) for r in rows)) and b.tokens.dtype == torch.long
    num = VOCAB.word_id(NUM)
    for i, r in enumerate(rows):
        n = len(r["tokens"])
        assert (b.tokens[i, n:] == 0).all()
        for t, w in enumerate(r["tokens"]):
            expected = num if t in r["num_pos"] else VOCAB.word_id(w)
            assert b.tokens[i, t].item() == expected
    assert b.tokens[1, 13].item() == VOCAB.word_id(UNK)  # "zorks" is unknown; "7" at 12 is NUM
    assert b.num_pos.shape == b.num_mask.shape == b.num_values.shape == (4, 4)
    assert b.num_mask.tolist()[0] == [True, True, False, False]
    assert b.num_pos[1].tolist() == [2, 4, 8, 12]
    assert b.num_values[1].tolist() == pytest.approx([20, 150, 1, 7])
    assert b.num_values.dtype == torch.float32 and b.num_mask.dtype == torch.bool


@pytest.mark.parametrize("variant", sorted(GRAPH_VARIANTS))
def test_graph_of_each_problem_is_its_variant_shifted(variant):
    rows, graphs = make_rows()
    b = collate(rows, VOCAB, variant=variant)
    node_batch = b.node_batch.numpy()
    edge_problem = node_batch[b.edge_index[0].numpy()]
    assert (edge_problem == node_batch[b.edge_index[1].numpy()]).all()  # no edge crosses problems
    line = b.line_index.numpy()
    assert (edge_problem[line[0]] == edge_problem[line[1]]).all()
    for i, g in enumerate(graphs):
        want = select_variant(g, variant)
        nodes = np.nonzero(node_batch == i)[0]
        edges = np.nonzero(edge_problem == i)[0]
        n0, e0 = nodes[0], edges[0] if len(edges) else 0
        assert np.array_equal(nodes, np.arange(n0, n0 + g.num_nodes))
        assert np.array_equal(b.node_pos[nodes].numpy(), want.node_pos)
        assert np.array_equal(b.node_type[nodes].numpy(), want.node_type)
        assert np.array_equal(b.edge_index[0, edges].numpy() - n0, want.edge_src)
        assert np.array_equal(b.edge_index[1, edges].numpy() - n0, want.edge_dst)
        assert np.array_equal(b.edge_type[edges].numpy(), want.edge_type)
        lines = np.nonzero(edge_problem[line[0]] == i)[0]
        assert np.array_equal(line[0, lines] - e0, want.line_src)
        assert np.array_equal(line[1, lines] - e0, want.line_dst)


def test_variant_keeps_only_its_parts():
    rows, graphs = make_rows()
    for variant, parts in GRAPH_VARIANTS.items():
        b = collate(rows, VOCAB, variant=variant)
        keep = [GRAPH_PARTS.index(p) for p in parts]
        assert b.edge_index.shape[1] == sum(int(np.isin(g.edge_part, keep).sum()) for g in graphs)
        assert b.node_batch.shape[0] == sum(g.num_nodes for g in graphs)  # nodes are kept as they are
    with pytest.raises(ValueError, match="unknown graph variant"):
        collate(rows, VOCAB, variant="nope")


def test_targets_and_masks():
    rows, _ = make_rows()
    b = collate(rows, VOCAB)
    n_out = len(VOCAB.outputs)
    assert b.target.shape == b.target_mask.shape == (4, 3)
    assert b.target[0].tolist() == [VOCAB.output_id("+"), n_out + 0, n_out + 1]
    assert b.target_mask[0].tolist() == [True, True, True]
    assert not b.target_mask[2].any() and not b.target_mask[3].any()  # prefix None; unknown constant 3.14
    assert (b.target[~b.target_mask] == 0).all()
    only_bad = collate(rows[2:], VOCAB)
    assert only_bad.target.shape == (2, 1) and not only_bad.target_mask.any()


def test_max_quantities_fixes_q():
    rows, _ = make_rows()
    assert collate(rows, VOCAB, max_quantities=6).num_pos.shape == (4, 6)
    with pytest.raises(ValueError, match="max_quantities"):
        collate(rows, VOCAB, max_quantities=3)


def test_iter_batches_covers_every_row_once():
    rows, _ = make_rows()
    ids = [i for b in iter_batches(rows, VOCAB, batch_size=3, shuffle=True, seed=7) for i in b.ids]
    assert sorted(ids) == ["a", "b", "c", "d"]
    again = [i for b in iter_batches(rows, VOCAB, batch_size=3, shuffle=True, seed=7) for i in b.ids]
    assert ids == again
    assert [len(b) for b in iter_batches(rows, VOCAB, batch_size=3)] == [3, 1]


def test_batch_moves_to_a_device():
    rows, _ = make_rows()
    b = collate(rows, VOCAB).to("cpu")
    assert b.edge_index.device.type == "cpu" and len(b) == 4


def test_a_batch_is_checked_once_in_collate_and_not_again(monkeypatch):
    # The checks read values back (host syncs on a GPU): done once on the CPU, not in every forward.
    import dataclasses

    from hlgt.data.collate import Batch

    rows, _ = make_rows()
    batch = collate(rows, VOCAB)
    assert batch.checked and batch.to("cpu").checked
    assert not dataclasses.replace(batch, tokens=batch.tokens).checked  # changed: checked again when used
    broken = dataclasses.replace(batch, node_type=batch.node_type + 7)
    with pytest.raises(ValueError, match="node_type"):
        broken.check()
    bad_rows = [dict(rows[0], node_pos=[99] * len(rows[0]["node_pos"]))]
    with pytest.raises(ValueError, match="node_pos points outside"):
        collate(bad_rows, VOCAB)
    monkeypatch.setattr(Batch, "check", lambda self: pytest.fail("a checked batch was checked again"))
    from hlgt.config import Config
    from hlgt.model.solver import Solver

    cfg = Config.from_flat({"model.embedding_size": 8, "model.hidden_size": 16, "model.heads": 2, "model.layers": 1})
    Solver(cfg.model, VOCAB).encoder(batch)


@pytest.mark.parametrize("variant", sorted(GRAPH_VARIANTS))
def test_rows_encoded_once_collate_as_the_rows_do(variant):
    rows, _ = make_rows()  # with unknown words, an unrepresentable gold equation, a missing constant
    vocab = VOCAB
    want, got = collate(rows, vocab, variant), collate(encode(rows, vocab), vocab, variant)
    assert got.ids == want.ids
    assert len(tensors_of(got)) == len(tensors_of(want)) > 0
    assert all(torch.equal(a, b) for a, b in zip(tensors_of(got), tensors_of(want)))
    shuffled = [b.ids for b in iter_batches(encode(rows, vocab), vocab, 3, shuffle=True, seed=4, variant=variant)]
    assert shuffled == [b.ids for b in iter_batches(rows, vocab, 3, shuffle=True, seed=4, variant=variant)]
