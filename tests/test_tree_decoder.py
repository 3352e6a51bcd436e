"""The batched GTS decoder against straightforward per-problem references written here."""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from hlgt.model.tree_decoder import TreeDecoder
from hlgt.model.tree_layout import IGNORE, TreeSizes, tree_layout

N_OPS = 5


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def random_prefix(rng: random.Random, n_consts: int, n_nums: int, max_ops: int) -> list[int]:
    """A random complete prefix tree over op ids, constant ids and slot ids."""
    leaves = list(range(N_OPS, N_OPS + n_consts)) + [N_OPS + n_consts + i for i in range(n_nums)]
    n_ops = rng.randint(0, max_ops)

    def build(k):  # a tree with k operators
        if k == 0:
            return [rng.choice(leaves)]
        left = rng.randint(0, k - 1)
        return [rng.randrange(N_OPS)] + build(left) + build(k - 1 - left)

    return build(n_ops)


def make_batch(seed: int, B: int, H: int, n_consts: int, max_ops: int = 5, dtype=torch.float64):
    """Random decoder inputs: memory, masks, numbers, gold prefixes (padded with 0 = '+')."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    lengths = [rng.randint(3, 9) for _ in range(B)]
    nqs = [rng.randint(1 if n_consts == 0 else 0, min(4, n)) for n in lengths]
    T, Q = max(lengths), max(max(nqs), 1)
    memory = torch.randn(B, T, H, generator=g, dtype=dtype)
    mask = torch.arange(T)[None] < torch.tensor(lengths)[:, None]
    num_pos = torch.zeros(B, Q, dtype=torch.long)
    num_mask = torch.zeros(B, Q, dtype=torch.bool)
    for b, (n, q) in enumerate(zip(lengths, nqs)):
        num_pos[b, :q] = torch.tensor(sorted(rng.sample(range(n), q)))
        num_mask[b, :q] = True
    targets = [random_prefix(rng, n_consts, q, max_ops) for q in nqs]
    S = max(map(len, targets))
    target = torch.zeros(B, S, dtype=torch.long)
    target_mask = torch.zeros(B, S, dtype=torch.bool)
    for b, t in enumerate(targets):
        target[b, : len(t)] = torch.tensor(t)
        target_mask[b, : len(t)] = True
    problem = torch.randn(B, H, generator=g, dtype=dtype)
    return dict(memory=memory, mask=mask, problem=problem, num_pos=num_pos, num_mask=num_mask,
                target=target, target_mask=target_mask), targets, nqs, lengths


def select(inputs: dict, b: int, T: int, Q: int) -> dict:
    """Problem b alone, with its own (smaller) padding."""
    S = int(inputs["target_mask"][b].sum())
    return dict(memory=inputs["memory"][b : b + 1, :T], mask=inputs["mask"][b : b + 1, :T],
                problem=inputs["problem"][b : b + 1], num_pos=inputs["num_pos"][b : b + 1, :Q],
                num_mask=inputs["num_mask"][b : b + 1, :Q], target=inputs["target"][b : b + 1, :S],
                target_mask=inputs["target_mask"][b : b + 1, :S])


def decoder(H=16, E=8, C=2, seed=0, dtype=torch.float64) -> TreeDecoder:
    torch.manual_seed(seed)
    return TreeDecoder(H, E, N_OPS, C, dropout=0.5).to(dtype).eval()


# ---- a literal per-problem GTS (train_tree with Python stacks, layers applied as in models.py) ----
def gts_reference_nll(dec: TreeDecoder, memory, problem, nums, target) -> torch.Tensor:
    """Summed NLL of one problem. memory [T, H] real tokens only; nums [q, H]; target list of ids."""
    H = dec.hidden_size

    def lin(layer, x, lo, hi):  # one of GTS's separate layers = a slice of the stacked one
        return F.linear(x, layer.weight[lo:hi], layer.bias[lo:hi])

    def gate(layer, x):
        return torch.tanh(lin(layer, x, 0, H)) * torch.sigmoid(lin(layer, x, H, 2 * H))

    embedding_weight = torch.cat([dec.const_embedding, nums])  # [O, H]
    node_stack, embeddings_stack, left_child, nll = [problem], [], None, []
    for token in target:
        node = node_stack.pop()
        goal = gate(dec.goal_left, node) if left_child is None else gate(dec.goal_right, torch.cat([left_child, node]))
        energy_in = torch.cat([goal.expand(memory.size(0), H), memory], 1)  # TreeAttn: cat then Linear
        attn = torch.softmax(dec.attn_score(torch.tanh(dec.attn(energy_in))).squeeze(1), 0)
        context = attn @ memory
        leaf_input = torch.cat([goal, context])
        energy_in = torch.cat([leaf_input.expand(embedding_weight.size(0), 2 * H), embedding_weight], 1)  # Score
        num_score = dec.score_out(torch.tanh(dec.score(energy_in))).squeeze(1)
        logits = torch.cat([dec.ops(leaf_input), num_score])
        nll.append(-torch.log_softmax(logits, 0)[token])
        if token < N_OPS:
            label = dec.op_embedding.weight[token]
            x = torch.cat([goal, context, label])
            l = torch.tanh(lin(dec.generate, x, 0, H)) * torch.sigmoid(lin(dec.generate, x, H, 2 * H))
            r = torch.tanh(lin(dec.generate, x, 2 * H, 3 * H)) * torch.sigmoid(lin(dec.generate, x, 3 * H, 4 * H))
            node_stack += [r, l]
            embeddings_stack.append(("op", label))
        else:
            current = embedding_weight[token - N_OPS]
            while embeddings_stack and embeddings_stack[-1][0] == "tree":
                sub_tree = embeddings_stack.pop()[1]
                op = embeddings_stack.pop()[1]
                current = gate(dec.merge, torch.cat([op, sub_tree, current]))
            embeddings_stack.append(("tree", current))
        left_child = embeddings_stack[-1][1] if embeddings_stack[-1][0] == "tree" else None
    return torch.stack(nll).sum()


def reference_loss(dec, inputs, targets, nqs, lengths):
    total = sum(
        gts_reference_nll(dec, inputs["memory"][b, :n], inputs["problem"][b],
                          inputs["memory"][b, inputs["num_pos"][b, :q]], targets[b])
        for b, (q, n) in enumerate(zip(nqs, lengths))
    )
    return total / sum(map(len, targets))


def test_tree_layout_structure():
    # * + N0 N1 - N2 1   : parents, depths and children by hand
    target = torch.tensor([[2, 0, 7, 8, 1, 9, 5]])
    trees = tree_layout(target, torch.ones_like(target, dtype=torch.bool), N_OPS)
    assert trees.n_levels == 3
    assert trees.goal_starts == [0, 1, 3, 7]
    assert trees.goal_node.tolist() == [0, 1, 4, 2, 5, 3, 6]  # by depth, left children first
    assert trees.goal_n_left == [1, 1, 2]
    assert trees.sub_starts == [0, 0, 1, 4] and trees.sub_n_leaf == [0, 0, 3]  # the spine (*, -, 1) needs no merge


@pytest.mark.parametrize("bad", [[0, 7], [7, 8], [0, 7, 8, 9], [0, 0, 7, 8]])
def test_tree_layout_rejects_malformed_targets(bad):
    target = torch.tensor([bad])
    with pytest.raises(ValueError, match="not complete prefix"):
        tree_layout(target, torch.ones_like(target, dtype=torch.bool), N_OPS)


@pytest.mark.parametrize("n_consts", [0, 3])
def test_teacher_forced_loss_and_grads_equal_per_problem_reference(n_consts):
    dec = decoder(C=n_consts)
    inputs, targets, nqs, lengths = make_batch(1, B=12, H=16, n_consts=n_consts, max_ops=6)
    out = dec(**inputs)
    assert out.logits.shape == (sum(map(len, targets)), N_OPS + n_consts + inputs["num_pos"].size(1))
    loss = dec.loss(out)
    ref = reference_loss(dec, inputs, targets, nqs, lengths)
    assert abs(loss.item() - ref.item()) < 1e-5
    grads = torch.autograd.grad(loss, list(dec.parameters()), allow_unused=True)
    ref_grads = torch.autograd.grad(ref, list(dec.parameters()), allow_unused=True)
    for (name, _), g, rg in zip(dec.named_parameters(), grads, ref_grads):
        g = torch.zeros(1) if g is None else g
        rg = torch.zeros(1) if rg is None else rg
        assert torch.allclose(g, rg, atol=1e-8), name


def test_float32_loss_matches_reference():
    dec = decoder(C=2, dtype=torch.float32)
    inputs, targets, nqs, lengths = make_batch(5, B=8, H=16, n_consts=2, dtype=torch.float32)
    assert abs(dec.loss(dec(**inputs)).item() - reference_loss(dec, inputs, targets, nqs, lengths).item()) < 1e-5


def test_batched_equals_separate():
    dec = decoder(C=2)
    inputs, targets, nqs, lengths = make_batch(2, B=3, H=16, n_consts=2)
    out = dec(**inputs)
    trees = tree_layout(inputs["target"], inputs["target_mask"], N_OPS)
    batch_index, position = trees.goal_batch, trees.goal_node % inputs["target"].size(1)
    nll = F.cross_entropy(out.logits, out.gold, reduction="none")
    per_problem = torch.zeros(3, dtype=nll.dtype).index_add_(0, batch_index, nll)
    for b in range(3):
        alone = dec(**select(inputs, b, lengths[b], max(nqs[b], 1)))
        assert torch.allclose(per_problem[b], alone.logits.log_softmax(-1).gather(1, alone.gold[:, None]).sum().neg())
        rows = batch_index == b
        assert sorted(position[rows].tolist()) == list(range(len(targets[b])))


def test_a_padded_layout_gives_each_real_row_its_logits_and_position():
    # Targets padded to more tokens, each level's parts to more rows: the real rows keep their
    # logits, problems and target positions; the padding rows carry the ignored gold.
    dec = decoder(C=2)
    inputs, _, _, _ = make_batch(3, B=4, H=16, n_consts=2)
    out = dec(**inputs)
    S = inputs["target"].size(1)
    wide = {**inputs, "target": F.pad(inputs["target"], (0, 3)), "target_mask": F.pad(inputs["target_mask"], (0, 3))}
    sizes = tree_layout(inputs["target"], inputs["target_mask"], N_OPS).sizes()
    def more(n: int) -> int:  # a part no batch has (the deepest level's operators) stays empty
        return n + 2 if n else 0

    room = TreeSizes(tuple((more(a), more(b)) for a, b in sizes.goals), tuple(map(more, sizes.ops)),
                     tuple((more(a), more(b)) for a, b in sizes.subs))
    trees = tree_layout(inputs["target"], inputs["target_mask"], N_OPS).padded(room, N_OPS, (S, S + 3))
    padded = dec(**wide, trees=trees)
    real = padded.gold != IGNORE
    assert int(real.sum()) == len(out.gold) < len(padded.gold)

    def by_place(o, layout, width, rows):
        keys = (layout.goal_batch[rows] * 100 + layout.goal_node[rows] % width).tolist()
        order = sorted(range(len(keys)), key=keys.__getitem__)
        return [keys[i] for i in order], o.logits[rows][order], o.gold[rows][order]

    want = by_place(out, tree_layout(inputs["target"], inputs["target_mask"], N_OPS), S, slice(None))
    got = by_place(padded, trees, S + 3, real)
    assert got[0] == want[0] and torch.equal(got[2], want[2])
    torch.testing.assert_close(got[1], want[1])


def test_dropout_is_active_in_training_only():
    dec = decoder(C=2)
    inputs, *_ = make_batch(3, B=4, H=16, n_consts=2)
    dec.train()
    a, b = dec.loss(dec(**inputs)), dec.loss(dec(**inputs))
    assert a.item() != b.item()
    dec.eval()
    assert dec.loss(dec(**inputs)).item() == dec.loss(dec(**inputs)).item()


# ---- beam search ---------------------------------------------------------------------------------
def parses(tokens: list[int], n_consts: int, nq: int) -> bool:
    """A complete prefix tree over ops, constants and slots < nq."""
    need = 1
    for i, t in enumerate(tokens):
        if need == 0 or not 0 <= t < N_OPS + n_consts + nq:
            return False
        need += 1 if t < N_OPS else -1
    return need == 0 and len(tokens) > 0


def reference_beam(dec, inputs, b: int, K: int, max_len: int) -> list[int]:
    """Per-problem beam search with Python lists of beams (GTS's evaluate_tree, plus the masks)."""
    one = {k: v[b : b + 1] for k, v in inputs.items() if k not in ("target", "target_mask")}
    src = dec.sources(one["memory"], one["mask"], one["num_pos"], one["num_mask"])
    cands, valid = src.cands, ~src.cand_pad
    zero = torch.zeros(1, dtype=torch.long)
    beams = [(0.0, [one["problem"]], [], [])]  # score, node stack, embedding stack, out
    for _ in range(max_len):
        if all(not beam[1] for beam in beams):
            break
        expanded = []
        for score, nodes, trees, out in beams:
            if not nodes:
                expanded.append((score, nodes, trees, out))
                continue
            node = nodes[-1]
            left = trees[-1][1] if trees and trees[-1][0] == "tree" else None
            goal = dec.left_goal(node) if left is None else dec.right_goal(left, node)
            logits, context = dec.predict(goal, zero, src)
            logp = torch.log_softmax(logits, -1)[0]
            for token in range(logp.numel()):
                if token >= N_OPS and not valid[0, token - N_OPS]:
                    continue
                if token < N_OPS and len(out) + len(nodes) + 2 > max_len:
                    continue
                new_nodes, new_trees = nodes[:-1], list(trees)
                if token < N_OPS:
                    l, r = dec.child_nodes(goal, context, torch.tensor([token]))
                    new_nodes = new_nodes + [r, l]
                    new_trees.append(("op", token))
                else:
                    current = cands[:, token - N_OPS]
                    while new_trees and new_trees[-1][0] == "tree":
                        sub_tree = new_trees.pop()[1]
                        op = new_trees.pop()[1]
                        current = dec.merge_tree(torch.tensor([op]), sub_tree, current)
                    new_trees.append(("tree", current))
                expanded.append((score + logp[token].item(), new_nodes, new_trees, out + [token]))
        beams = sorted(expanded, key=lambda beam: beam[0], reverse=True)[:K]
    return max((beam for beam in beams if not beam[1]), key=lambda beam: beam[0])[3]


def reference_score(dec, inputs, b: int, tokens: list[int]) -> float:
    """The log-probability of one prefix, step by step as ``reference_beam`` scores its beams."""
    one = {k: v[b : b + 1] for k, v in inputs.items() if k not in ("target", "target_mask")}
    src = dec.sources(one["memory"], one["mask"], one["num_pos"], one["num_mask"])
    nodes, trees, score, zero = [one["problem"]], [], 0.0, torch.zeros(1, dtype=torch.long)
    for token in tokens:
        node = nodes.pop()
        left = trees[-1][1] if trees and trees[-1][0] == "tree" else None
        goal = dec.left_goal(node) if left is None else dec.right_goal(left, node)
        logits, context = dec.predict(goal, zero, src)
        score += torch.log_softmax(logits, -1)[0, token].item()
        if token < N_OPS:
            l, r = dec.child_nodes(goal, context, torch.tensor([token]))
            nodes += [r, l]
            trees.append(("op", token))
        else:
            current = src.cands[:, token - N_OPS]
            while trees and trees[-1][0] == "tree":
                sub_tree = trees.pop()[1]
                current = dec.merge_tree(torch.tensor([trees.pop()[1]]), sub_tree, current)
            trees.append(("tree", current))
    return score


@pytest.mark.parametrize("K", [1, 3, 5])
def test_beam_candidates_are_the_finished_beams_best_first_with_their_scores(K):
    dec = decoder(H=16, C=2, seed=5)
    inputs, _, nqs, _ = make_batch(7, B=10, H=16, n_consts=2)
    inputs["memory"] *= 2
    args = [inputs[k] for k in ("memory", "mask", "problem", "num_pos", "num_mask")]
    best, found = dec.beam_search(*args, beam_size=K), dec.beam_candidates(*args, beam_size=K)
    for b in range(10):
        assert 1 <= len(found[b]) <= K and found[b][0][0] == best[b]
        scores = [score for _, score in found[b]]
        assert scores == sorted(scores, reverse=True) and len({tuple(t) for t, _ in found[b]}) == len(found[b])
        for tokens, score in found[b]:
            assert parses(tokens, 2, nqs[b])
            assert score == pytest.approx(reference_score(dec, inputs, b, tokens), abs=1e-4)


def greedy(dec, inputs, b: int, max_len: int) -> list[int]:
    return reference_beam(dec, inputs, b, 1, max_len)


@pytest.mark.parametrize("n_consts", [0, 2])
def test_beam_search_outputs_parse(n_consts):
    # Random weights either stop at once or want operators forever; the short length limits cut
    # the latter at every length, so the masks and stacks meet many tree shapes.
    dec = decoder(H=16, C=n_consts, seed=3, dtype=torch.float32)
    with torch.no_grad():
        dec.ops.weight *= 20
        dec.ops.bias += 1.0
    lengths = set()
    for seed in range(3):
        inputs, _, nqs, _ = make_batch(10 + seed, B=40, H=16, n_consts=n_consts, dtype=torch.float32)
        inputs["memory"] *= 3
        for K, max_len in [(5, 45), (3, 7), (4, 12), (5, 20), (2, 1)]:
            out = dec.beam_search(*[inputs[k] for k in ("memory", "mask", "problem", "num_pos", "num_mask")],
                                  beam_size=K, max_len=max_len)
            assert len(out) == 40
            for tokens, nq in zip(out, nqs):
                assert parses(tokens, n_consts, nq), tokens
                assert len(tokens) <= max_len
                lengths.add(len(tokens))
    assert len(lengths) >= 4


def test_beam_search_forced_to_the_length_limit():
    dec = decoder(H=16, C=1, seed=4, dtype=torch.float32)
    with torch.no_grad():
        dec.ops.bias += 30.0  # the model wants operators everywhere: only the mask ends expressions
    inputs, _, nqs, _ = make_batch(4, B=8, H=16, n_consts=1, dtype=torch.float32)
    args = [inputs[k] for k in ("memory", "mask", "problem", "num_pos", "num_mask")]
    for max_len in (1, 2, 5, 9, 45):
        for tokens, nq in zip(dec.beam_search(*args, beam_size=3, max_len=max_len), nqs):
            assert parses(tokens, 1, nq) and len(tokens) == max_len - (max_len % 2 == 0)


def test_beam_search_without_any_leaf_returns_empty():
    dec = decoder(H=16, C=0, dtype=torch.float32)
    inputs, *_ = make_batch(6, B=2, H=16, n_consts=0, dtype=torch.float32)
    inputs["num_mask"][0] = False
    out = dec.beam_search(*[inputs[k] for k in ("memory", "mask", "problem", "num_pos", "num_mask")], beam_size=3)
    assert out[0] == [] and len(out[1]) > 0


@pytest.mark.parametrize("K,max_len", [(1, 45), (3, 45), (5, 9)])
def test_beam_search_equals_per_problem_reference(K, max_len):
    dec = decoder(H=16, C=2, seed=5)
    inputs, _, nqs, _ = make_batch(7, B=10, H=16, n_consts=2)
    inputs["memory"] *= 2
    out = dec.beam_search(*[inputs[k] for k in ("memory", "mask", "problem", "num_pos", "num_mask")],
                          beam_size=K, max_len=max_len)
    for b in range(10):
        assert out[b] == reference_beam(dec, inputs, b, K, max_len)


def test_beam_one_is_greedy_and_batch_independent():
    dec = decoder(H=16, C=2, seed=6)
    inputs, _, nqs, lengths = make_batch(8, B=6, H=16, n_consts=2)
    keys = ("memory", "mask", "problem", "num_pos", "num_mask")
    greedy_out = dec.beam_search(*[inputs[k] for k in keys], beam_size=1, max_len=15)
    beam_out = dec.beam_search(*[inputs[k] for k in keys], beam_size=4, max_len=15)
    for b in range(6):
        assert greedy_out[b] == greedy(dec, inputs, b, 15)
        alone = select(inputs, b, lengths[b], max(nqs[b], 1))
        assert dec.beam_search(*[alone[k] for k in keys], beam_size=4, max_len=15) == [beam_out[b]]


def test_overfits_with_a_learned_fake_encoder():
    """32 problems, memory = learned token embeddings: teacher forcing drives beam search to 100%."""
    torch.manual_seed(0)
    rng = random.Random(0)
    B, T, H, C = 32, 8, 32, 2
    words = torch.nn.Embedding(B * T, H)  # every problem has its own words: the memory tells them apart
    dec = TreeDecoder(H, 16, N_OPS, C, dropout=0.0)
    tokens = torch.arange(B * T).view(B, T)
    mask = torch.ones(B, T, dtype=torch.bool)
    num_pos = torch.tensor([sorted(rng.sample(range(T), 3)) for _ in range(B)])
    num_mask = torch.ones(B, 3, dtype=torch.bool)
    targets = [random_prefix(rng, C, 3, 4) for _ in range(B)]
    S = max(map(len, targets))
    target = torch.tensor([t + [0] * (S - len(t)) for t in targets])
    target_mask = torch.tensor([[i < len(t) for i in range(S)] for t in targets])
    opt = torch.optim.Adam(list(dec.parameters()) + list(words.parameters()), lr=1e-2)
    for step in range(400):
        memory = words(tokens)
        loss = dec.loss(dec(memory, mask, memory.mean(1), num_pos, num_mask, target, target_mask))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 1e-3:
            break
    dec.eval()
    with torch.no_grad():
        memory = words(tokens)
        out = dec.beam_search(memory, mask, memory.mean(1), num_pos, num_mask, beam_size=5)
    assert out == targets
